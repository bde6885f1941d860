#!/usr/bin/env python3
"""Reads a TSV of availability-contention/run.sh (or quota-worker.sh) and prints, per row, the
predicted and measured slowdown over the same round's 0-co-tenant row (`simulate`'s prediction
and `run`'s own), and the median |error| of the absolute prediction and of the slowdown alone."""
import csv
import statistics
import sys

rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
# `measured_median_ms` or `measured_mean_ms`, whichever the script was asked for.
measured = next(c for c in rows[0] if c.startswith("measured_") and c.endswith("_ms"))
base = {r["round"]: r for r in rows if r["cotenants"] == "0"}
print("round\tcotenants\tmeasured\tsimulate\terror\trun\terror")
summary = {}
for key in ("simulate", "run"):
    col = "simulate_ms" if key == "simulate" else "run_predicted_ms"
    summary[key] = (
        statistics.median(abs(float(r["error_" + key].split()[0])) for r in rows),
        statistics.median(
            abs(
                (float(r[col]) / float(base[r["round"]][col]))
                / (float(r[measured]) / float(base[r["round"]][measured]))
                - 1
            )
            * 100
            for r in rows
            if r["cotenants"] != "0"
        ),
    )
for r in rows:
    b = base[r["round"]]
    m = float(r[measured]) / float(b[measured])
    ps = float(r["simulate_ms"]) / float(b["simulate_ms"])
    pr = float(r["run_predicted_ms"]) / float(b["run_predicted_ms"])
    print(
        f"{r['round']}\t{r['cotenants']}\t{m:.2f}\t{ps:.2f}\t{(ps / m - 1) * 100:+.0f} %"
        f"\t{pr:.2f}\t{(pr / m - 1) * 100:+.0f} %"
    )
for key, (step, slow) in summary.items():
    print(f"{key}: median |error| of the step {step:.1f} %, of the slowdown {slow:.1f} %")

#!/usr/bin/env python3
"""Reads a TSV of availability-contention/run.sh (or quota-worker.sh) and prints, per row, the
predicted and measured slowdown over the same round's 0-co-tenant row (`run`'s own prediction),
and the median |error| of the absolute prediction and of the slowdown alone."""
import csv
import statistics
import sys

rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
base = {r["round"]: r for r in rows if r["cotenants"] == "0"}
abs_err, ratio_err = [], []
print("round\tcotenants\tpredicted_slowdown\tmeasured_slowdown\tslowdown_error")
for r in rows:
    b = base[r["round"]]
    p = float(r["run_predicted_ms"]) / float(b["run_predicted_ms"])
    m = float(r["measured_median_ms"]) / float(b["measured_median_ms"])
    abs_err.append(abs(float(r["error_run"].split()[0])))
    if r["cotenants"] != "0":
        ratio_err.append(abs(p / m - 1) * 100)
    print(f"{r['round']}\t{r['cotenants']}\t{p:.2f}\t{m:.2f}\t{(p / m - 1) * 100:+.0f} %")
print(f"median |error| of the step: {statistics.median(abs_err):.1f} %; "
      f"of the slowdown over 0 co-tenants: {statistics.median(ratio_err):.1f} %")

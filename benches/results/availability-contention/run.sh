#!/usr/bin/env bash
# Predicted vs measured step time of a placed graph under 0/1/2/4/8 CPU-bound co-tenants
# (`yes >/dev/null`): zoo MODEL (default lenet), batch 32, `local:cpu=2`, heft. One calibration first (cached
# whatever the load, TF_IAWARE_CALIBRATION_MIN_FREE=0); then ROUNDS rounds, the co-tenant
# counts interleaved (ascending, then descending), each: start the co-tenants, wait SETTLE_S,
# `devices --json` (availability, competing threads), `simulate --json` (predicted step),
# `run --steps STEPS --json` (its own prediction and the STAT — `median`, or `mean`, the
# throughput's figure — of the STEPS (20) timed steps), stop them. Prints one TSV line per
# (round, co-tenants).
# MEASURED=1: op timings of a `run --save-measurements` with no co-tenant (their availability
# recorded with them) price `simulate` and `run` instead of the calibration alone.
#
# Usage: benches/results/availability-contention/run.sh [TF_IAWARE_BINARY] > results.tsv
set -euo pipefail
STAT=${STAT:-median}
STEPS=${STEPS:-20}
MODEL=${MODEL:-lenet}
B=${1:-target/debug/tf-iaware}
B=$(realpath "$B")
ROUNDS=${ROUNDS:-2}
SETTLE_S=${SETTLE_S:-3}
WORK=$(mktemp -d)
export TF_IAWARE_CACHE_DIR=$WORK/cache
hogs=()
stop_hogs() { for p in "${hogs[@]}"; do kill "$p" 2>/dev/null || true; done; hogs=(); }
trap 'stop_hogs; rm -rf "$WORK"' EXIT
cd "$WORK"
"$B" model "$MODEL" --batch 32 --out model.pb 2>/dev/null
TF_IAWARE_CALIBRATION_MIN_FREE=0 "$B" devices --cluster local:cpu=2 --calibrate --json \
  2>/dev/null >calibration.json
measured=()
if [[ ${MEASURED:-0} == 1 ]]; then
  "$B" run --graph model.pb --cluster local:cpu=2 --strategy heft --steps 5 \
    --save-measurements m.json 2>/dev/null >/dev/null
  measured=(--measurements m.json)
fi
python3 - calibration.json >&2 <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print("calibrated at availability", [round(s[1], 3) for s in d["calibration"]["seen"]])
PY
printf 'round\tcotenants\tavailability\tcompeting\tsimulate_ms\trun_predicted_ms\tmeasured_%s_ms\terror_simulate\terror_run\n' "$STAT"
for ((r = 0; r < ROUNDS; r++)); do
  if ((r % 2 == 0)); then order="0 1 2 4 8"; else order="8 4 2 1 0"; fi
  for n in $order; do
    for ((k = 0; k < n; k++)); do yes >/dev/null & hogs+=($!); done
    sleep "$SETTLE_S"
    "$B" devices --cluster local:cpu=2 --json 2>/dev/null >devices.json
    "$B" simulate --graph model.pb --cluster local:cpu=2 --strategy heft "${measured[@]}" \
      --json 2>/dev/null >sim.json
    "$B" run --graph model.pb --cluster local:cpu=2 --strategy heft --steps "$STEPS" \
      "${measured[@]}" --json 2>/dev/null >run.json
    stop_hogs
    python3 - "$r" "$n" devices.json sim.json run.json "$STAT" <<'PY'
import json, sys
r, n = sys.argv[1], sys.argv[2]
dev, sim, run = (json.load(open(f)) for f in sys.argv[3:6])
# The live figures of CPU:0 as `devices` read them just before `simulate`.
cpu0 = next(d for d in dev["devices"] if d["name"].endswith("CPU:0"))
a, c = cpu0["availability"], cpu0["live"].get("competing_tasks") or 0.0
# `run` places with its own live reading and predicts too, at the instant it measures.
pred, own = sim["predicted_step_ms"], run["predicted_step_ms"]
meas = run["step_ms"][sys.argv[-1]]
err = lambda p: f"{(p - meas) / meas * 100:+.0f} %"
print(f"{r}\t{n}\t{a:.3f}\t{c:.1f}\t{pred:.2f}\t{own:.2f}\t{meas:.2f}\t{err(pred)}\t{err(own)}")
PY
  done
done

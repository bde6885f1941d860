#!/usr/bin/env bash
# Per-op prediction error with measurements (issue 26's target: median |error| ≤ 10 % on the zoo
# models and the Python fixture graphs, `local:cpu=2`). One `devices --calibrate` first; then per
# graph: `run --strategy round-robin --steps 3 --save-measurements m.json` (op timings of traced
# steps on a different placement), `run --strategy heft --steps 20 --json` (the median of 20
# timed steps), `simulate --strategy heft --measurements m.json --json` (the prediction) and
# `simulate --strategy heft --json` (calibrated only). Prints one TSV line per graph.
# MEASURE_WITH=heft: the op timings come from the placement that is predicted (default
# round-robin, a different one). B0=other/tf-iaware: a paired comparison of two builds — columns
# 3-4 are B0's measured-mode prediction of the same measurement file instead of the
# calibrated-only one.
#
# Usage: benches/results/prediction-quality/run.sh [TF_IAWARE_BINARY] > results.tsv
set -euo pipefail
B=${1:-target/debug/tf-iaware}
B=$(realpath "$B")
FIXTURES=$(realpath "$(dirname "$0")/../../../tests/fixtures")
CLUSTER=${CLUSTER:-local:cpu=2}
MEASURE_WITH=${MEASURE_WITH:-round-robin}
[[ -z ${B0:-} ]] || B0=$(realpath "$B0")
WORK=$(mktemp -d)
export TF_IAWARE_CACHE_DIR=$WORK/cache
trap '[[ -n ${KEEP:-} ]] || rm -rf "$WORK"' EXIT
cd "$WORK"
TF_IAWARE_CALIBRATION_MIN_FREE=0 "$B" devices --cluster "$CLUSTER" --calibrate --json \
  2>/dev/null >calibration.json
python3 - calibration.json >&2 <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print("calibrated at availability", [round(s[1], 3) for s in d["calibration"]["seen"]])
PY
graphs=()
for m in mlp lenet resnet20 mobilenet inception; do
  "$B" model "$m" --batch 32 --out "$m.pb" 2>/dev/null
  graphs+=("$WORK/$m.pb")
done
for f in tf1_cnn_adam tf1_mlp_momentum tf1_mlp_sparse; do
  cp "$FIXTURES/$f.pb" "$FIXTURES/$f.json" .
  graphs+=("$WORK/$f.pb")
done
if [[ -n ${B0:-} ]]; then
  printf 'graph\tmeasured_median_ms\tb0_ms\terror_b0\tnew_ms\terror_new\n'
else
  printf 'graph\tmeasured_median_ms\tcalibrated_ms\terror_calibrated\tmeasured_mode_ms\terror_measured\n'
fi
for g in "${graphs[@]}"; do
  name=$(basename "$g" .pb)
  # The one fixture with a dynamic batch runs at the batch its notebook used.
  batch=()
  [[ $name == tf1_mlp_sparse ]] && batch=(--batch 64)
  "$B" run --graph "$g" --cluster "$CLUSTER" --strategy "$MEASURE_WITH" --steps 3 "${batch[@]}" \
    --save-measurements m.json >/dev/null 2>&1
  "$B" run --graph "$g" --cluster "$CLUSTER" --strategy heft --steps 20 "${batch[@]}" --json \
    2>/dev/null >run.json
  if [[ -n ${B0:-} ]]; then
    "$B0" simulate --graph "$g" --cluster "$CLUSTER" --strategy heft "${batch[@]}" \
      --measurements m.json --json 2>/dev/null >cal.json
  else
    "$B" simulate --graph "$g" --cluster "$CLUSTER" --strategy heft "${batch[@]}" --json \
      2>/dev/null >cal.json
  fi
  "$B" simulate --graph "$g" --cluster "$CLUSTER" --strategy heft "${batch[@]}" \
    --measurements m.json --json 2>/dev/null >meas.json
  python3 - "$name" run.json cal.json meas.json <<'PY'
import json, sys
name = sys.argv[1]
run, cal, meas = (json.load(open(f)) for f in sys.argv[2:5])
m = run["step_ms"]["median"]
c, p = cal["predicted_step_ms"], meas["predicted_step_ms"]
err = lambda x: f"{(x - m) / m * 100:+.0f} %"
print(f"{name}\t{m:.2f}\t{c:.2f}\t{err(c)}\t{p:.2f}\t{err(p)}")
PY
done

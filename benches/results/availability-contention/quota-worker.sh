#!/usr/bin/env bash
# Predicted vs measured step time on a TF_CONFIG worker in a quota'd cgroup, under 0/1/2/4/8
# CPU-bound co-tenants (`yes >/dev/null`) *inside that cgroup*: zoo MODEL (default lenet), batch 32, heft (which
# puts everything on the one worker). One `tf-iaware worker` (with its metrics agent) runs in a
# cgroup-v1 `cpu` group of QUOTA cores; the driver runs outside it. One calibration first, with
# no co-tenant; then ROUNDS rounds, the counts interleaved (ascending, then descending), each:
# start the co-tenants in the cgroup, wait SETTLE_S (the agent smooths its run-queue reading over
# about 10 s), `devices --json` (the worker's availability as its agent reads it), `simulate
# --json` (predicted step), `run --steps STEPS --json` (its own prediction and the STAT —
# `median`, or `mean`, the throughput's figure, which under a quota counts the steps that wait
# out a throttled period — of the STEPS (20) timed steps), stop them. Prints one TSV line per (round, co-tenants). Needs root and cgroup v1.
# MEASURED=1: op timings of a `run --steps 3 --save-measurements` with no co-tenant (taken
# with the availability it read) go to every `simulate` and `run` (`--measurements`).
#
# Usage: benches/results/availability-contention/quota-worker.sh [TF_IAWARE_BINARY] > results.tsv
set -euo pipefail
STAT=${STAT:-median}
B=${1:-target/debug/tf-iaware}
B=$(realpath "$B")
ROUNDS=${ROUNDS:-2}
SETTLE_S=${SETTLE_S:-12}
QUOTA=${QUOTA:-1.0}
MODEL=${MODEL:-lenet}
STEPS=${STEPS:-20}
PORT=${PORT:-24611}
METRICS_PORT=${METRICS_PORT:-24612}
CG=/sys/fs/cgroup/cpu/tfia-quota-worker-$$
WORK=$(mktemp -d)
export TF_IAWARE_CACHE_DIR=$WORK/cache
hogs=()
worker=
stop_hogs() { for p in "${hogs[@]}"; do kill "$p" 2>/dev/null || true; done; hogs=(); }
cleanup() {
  stop_hogs
  [[ -n $worker ]] && kill "$worker" 2>/dev/null && wait "$worker" 2>/dev/null
  sleep 0.5
  rmdir "$CG" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
[[ -f /sys/fs/cgroup/cpu/cpu.cfs_quota_us ]] || { echo "needs cgroup v1 cpu" >&2; exit 2; }
mkdir "$CG"
echo 100000 >"$CG/cpu.cfs_period_us"
echo "$(awk -v q="$QUOTA" 'BEGIN { printf "%d", q * 100000 }')" >"$CG/cpu.cfs_quota_us"
cd "$WORK"
cat >tf_config.json <<EOF
{"cluster": {"worker": ["127.0.0.1:$PORT"]},
 "metrics": {"worker": ["127.0.0.1:$METRICS_PORT"]},
 "task": {"type": "worker", "index": 0}}
EOF
# The worker joins the cgroup before it execs, so every thread it starts is inside.
(echo "$BASHPID" >"$CG/cgroup.procs"; exec "$B" worker --tf-config tf_config.json) \
  >worker.log 2>&1 &
worker=$!
sleep 5
C=tf-config:$WORK/tf_config.json
"$B" model "$MODEL" --batch 32 --out model.pb 2>/dev/null
TF_IAWARE_CALIBRATION_MIN_FREE=0 "$B" devices --cluster "$C" --calibrate --json \
  2>/dev/null >calibration.json
python3 - calibration.json >&2 <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print("calibrated at availability", [round(s[1], 3) for s in d["calibration"]["seen"]])
PY
measured=()
if [[ ${MEASURED:-0} == 1 ]]; then
  "$B" run --graph model.pb --cluster "$C" --strategy heft --steps 3 \
    --save-measurements m.json 2>/dev/null >/dev/null
  measured=(--measurements m.json)
fi
printf 'round\tcotenants\tavailability\tcompeting\tsimulate_ms\trun_predicted_ms\tmeasured_%s_ms\terror_simulate\terror_run\n' "$STAT"
for ((r = 0; r < ROUNDS; r++)); do
  if ((r % 2 == 0)); then order="0 1 2 4 8"; else order="8 4 2 1 0"; fi
  for n in $order; do
    for ((k = 0; k < n; k++)); do
      (echo "$BASHPID" >"$CG/cgroup.procs"; exec yes) >/dev/null &
      hogs+=($!)
    done
    sleep "$SETTLE_S"
    "$B" devices --cluster "$C" --json 2>/dev/null >devices.json
    "$B" simulate --graph model.pb --cluster "$C" --strategy heft "${measured[@]}" \
      --json 2>/dev/null >sim.json
    "$B" run --graph model.pb --cluster "$C" --strategy heft --steps "$STEPS" \
      "${measured[@]}" --json \
      2>/dev/null >run.json
    stop_hogs
    python3 - "$r" "$n" devices.json sim.json run.json "$STAT" <<'PY'
import json, sys
r, n = sys.argv[1], sys.argv[2]
dev, sim, run = (json.load(open(f)) for f in sys.argv[3:6])
# The worker's CPU device as `devices` read it (through its agent) just before `simulate`.
cpu0 = next(d for d in dev["devices"] if "job:worker" in d["name"] and d["name"].endswith("CPU:0"))
live = cpu0.get("live") or {}
a, c = cpu0["availability"], live.get("competing_tasks") or 0.0
pred, own = sim["predicted_step_ms"], run["predicted_step_ms"]
meas = run["step_ms"][sys.argv[-1]]
err = lambda p: f"{(p - meas) / meas * 100:+.0f} %"
print(f"{r}\t{n}\t{a:.3f}\t{c:.1f}\t{pred:.2f}\t{own:.2f}\t{meas:.2f}\t{err(pred)}\t{err(own)}")
PY
  done
done

#!/bin/bash
# CPU time per step of each task, async-ps: TF2 ParameterServerStrategy (crosscheck.py --cpu)
# against tf-iaware `async-ps` on its own masters (bench, sampled by cpustat.py), interleaved
# TF, Rust, Rust, TF, each on a fresh emulated cluster. SCENARIO (default paper) may be any
# `--scenario` value, inline ones included; ORDER (default `tf rust rust tf`) the runs;
# TF_ARGS extra crosscheck.py options (e.g. `--steps-per-call 4`).
set -u
cd "$(dirname "$0")/../.."
BIN=${BIN:-target/release/tf-iaware}
PY=${PY:-python3}
SCENARIO=${SCENARIO:-paper}
SECONDS_=${WINDOW_S:-30}
OUT=${OUT:-/tmp/tf-iaware-cpu}; mkdir -p "$OUT"
here=benches/python
tf_round() {
  local r=$1
  rm -f "$OUT/cluster-$r.json"
  $BIN emulate --scenario "$SCENARIO" --chief --tf-config-out "$OUT/cluster-$r.json" > "$OUT/emulate-$r.log" 2>&1 &
  local pid=$!
  for _ in $(seq 60); do [ -s "$OUT/cluster-$r.json" ] && break; sleep 1; done
  sleep 2
  echo "TF round $r $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
  timeout 300 $PY $here/crosscheck.py --cluster "$OUT/cluster-$r.json" --seconds "$SECONDS_" --modes ps --cpu ${TF_ARGS:-} \
    --out "$OUT/tf-$r.json" 2>&1 | grep -v "^W0000\|^I0000" | tail -3
  kill -INT $pid; wait $pid 2>/dev/null
}
rust_round() {
  local r=$1
  echo "Rust round $r $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
  # One held-out evaluation, at the end: the bench stops at an evaluation past --max-train-s.
  timeout 400 $BIN bench --data digits --scenario "$SCENARIO" --model lenet --repeats 1 \
    --max-train-s "$SECONDS_" --eval-every "$SECONDS_" --target-accuracy 1.0 --strategies async-ps \
    --async-masters own --json "$OUT/rust-$r.json" > "$OUT/rust-$r.log" 2>&1 &
  local pid=$! bench=""
  # The cluster's owner is the bench itself, the child of `timeout`.
  for _ in $(seq 50); do bench=$(pgrep -P $pid) && break; sleep 0.1; done
  python3 $here/cpustat.py sample --owner "$bench" --interval 0.25 --out "$OUT/rust-$r.samples.jsonl"
  wait $pid || echo "bench exited $?"
  python3 $here/cpustat.py rust --samples "$OUT/rust-$r.samples.jsonl" --bench "$OUT/rust-$r.json" \
    --out "$OUT/rust-$r.cpu.json" && grep -h "images_per_sec" "$OUT/rust-$r.cpu.json"
}
echo "start $(date -u +%T) $(uptime)"
declare -A n=([tf]=0 [rust]=0)
for kind in ${ORDER:-tf rust rust tf}; do n[$kind]=$((n[$kind] + 1)); ${kind}_round ${n[$kind]}; done
echo "end $(date -u +%T) $(uptime)"

#!/bin/bash
# Interleaved cross-check of async-ps: TF2 ParameterServerStrategy vs tf-iaware own/shared masters.
set -u
cd "$(dirname "$0")/../.."
BIN=${BIN:-target/release/tf-iaware}
PY=${PY:-python3}
OUT=${OUT:-/tmp/tf-iaware-masters}; mkdir -p $OUT
tf_round() {
  local r=$1
  $BIN emulate --scenario paper --chief --tf-config-out $OUT/paper-$r.json > $OUT/emulate-$r.log 2>&1 &
  local pid=$!
  for i in $(seq 60); do [ -s $OUT/paper-$r.json ] && break; sleep 1; done
  sleep 2
  echo "TF round $r $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
  timeout 300 $PY benches/python/crosscheck.py --cluster $OUT/paper-$r.json --seconds 30 --modes ps --out $OUT/tf-ps-$r.json 2>&1 | grep -v "^W0000\|^I0000" | tail -5
  kill -INT $pid; wait $pid 2>/dev/null
}
rust_round() {
  local r=$1 m=$2
  echo "Rust $m round $r $(date -u +%T) load $(cut -d' ' -f1-3 /proc/loadavg)"
  timeout 400 $BIN bench --data digits --scenario paper --model lenet --repeats 1 --max-train-s 30 \
    --target-accuracy 1.0 --strategies async-ps --async-masters $m --json $OUT/rust-$m-$r.json 2>&1 | grep -E "^round|error|Error" | tail -3
}
for r in 1 2; do
  if [ $r = 1 ]; then tf_round $r; rust_round $r own; rust_round $r shared;
  else rust_round $r shared; rust_round $r own; tf_round $r; fi
done
echo "done $(date -u +%T)"

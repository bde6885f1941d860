#!/usr/bin/env bash
# Issue 26 item 3: model-parallel `heft` against `single-fastest` on `paper` (resnet20, global
# batch 64), the two contenders interleaved step by step in one bench run, three runs, each from
# a fresh calibration. Prints each run's table; the JSON has every step and the predictions.
#   usage: benches/results/heft-paper/run.sh BINARY [RUNS]
set -u
B=${1:?binary}
runs=${2:-3}
cd "$(dirname "$0")"
for run in $(seq 1 "$runs"); do
    uptime >"run-$run.uptime"
    TF_IAWARE_CACHE_DIR=$(mktemp -d) "$B" bench --strategies single-fastest,heft --repeats 1 \
        --recalibrate --json "run-$run.json" >"run-$run.out" 2>"run-$run.err"
    echo "run $run rc=$?"
done

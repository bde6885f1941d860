#!/usr/bin/env bash
# Worker-calibration stability: two `bench --recalibrate` runs per scenario (uniform, paper),
# interleaved, mlp, infra-aware only; the plans' shares are on stderr and in each JSON.
set -u
B=${1:?binary}
export TF_IAWARE_CACHE_DIR=$(mktemp -d)
for run in 1 2; do
  for s in uniform paper; do
    uptime >"$s-$run.uptime"
    "$B" bench --scenario "$s" --model mlp --strategies infra-aware --steps 2 --warmup 1 \
      --repeats 1 --recalibrate --json "$s-$run.json" >"$s-$run.out" 2>"$s-$run.err"
    echo "$s $run rc=$?"
  done
done

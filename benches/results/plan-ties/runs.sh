#!/usr/bin/env bash
# Plan stability on near-tied workers: two `bench --recalibrate` runs per scenario (uniform,
# paper), interleaved, mlp, infra-aware only, from a fresh calibration cache; the calibration
# (with each worker's step_rel_se) and the plan are in each JSON, the measured noise on stderr
# (-v). Adapted from ../worker-fit-bounds/runs.sh. Run it from this folder; RUNS="3 4" labels
# further rounds, SCENARIOS="workers=0.3,0.3" runs other clusters.
set -u
B=${1:?binary}
export TF_IAWARE_CACHE_DIR=$(mktemp -d)
for run in ${RUNS:-1 2}; do
  for s in ${SCENARIOS:-uniform paper}; do
    f=${s//[=,.]/_}  # a file name for an inline scenario such as workers=0.3,0.3
    uptime >"$f-$run.uptime"
    "$B" bench --scenario "$s" --model mlp --strategies infra-aware --steps 2 --warmup 1 \
      --repeats 1 --recalibrate --json "$f-$run.json" -v >"$f-$run.out" 2>"$f-$run.err"
    echo "$s $run rc=$?"
  done
done

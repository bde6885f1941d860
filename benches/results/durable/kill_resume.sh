#!/usr/bin/env bash
# The driver killed with SIGKILL at a random moment of a run to a target accuracy, then the same
# command started again: does the resumed run reach the target, how much is redone, what does
# the restart cost? Each round runs the job once uninterrupted and once killed-and-resumed, in
# turn, on one emulated cluster that outlives the drivers (as a real cluster would).
#
#   cargo build --release
#   benches/results/durable/kill_resume.sh [ROUNDS] [SCENARIO] [TARGET] [INTERVAL]
#
# Defaults: 3 rounds on `paper`, `replica-setter` (STRATEGY), held-out accuracy 0.7, a checkpoint
# every 10 updates, the kill at a uniformly random moment up to KILL_WITHIN (default 1.5) seconds
# after the first checkpoint.
# Prints one JSON line per round. Needs only python3 (standard library) beside the build.
set -euo pipefail
cd "$(dirname "$0")/../../.."
BIN=target/release/tf-iaware
ROUNDS=${1:-3}
SCENARIO=${2:-paper}
TARGET=${3:-0.7}
INTERVAL=${4:-10}
KILL_WITHIN=${KILL_WITHIN:-1.5}
STRATEGY=${STRATEGY:-replica-setter}
work=$(mktemp -d)
"$BIN" emulate --scenario "$SCENARIO" --tf-config-out "$work/cluster.json" >/dev/null 2>&1 &
emulate=$!
trap 'kill -INT $emulate 2>/dev/null; wait $emulate 2>/dev/null; rm -rf "$work"' EXIT
for _ in $(seq 600); do [ -s "$work/cluster.json" ] && break; sleep 0.2; done

train_args() { # the command line of a run writing to DIR
    args=(train --graph tests/fixtures/tf1_mlp_sparse.pb
        --data tests/fixtures/tf1_mlp_sparse_train.npz
        --held-out tests/fixtures/tf1_mlp_sparse_held_out.npz
        --cluster "tf-config:$work/cluster.json" --strategy "$STRATEGY" --batch 64
        --target-accuracy "$TARGET" --max-seconds 600 --eval-every 1 --seed "$seed"
        --checkpoint-dir "$1/ckpt" --checkpoint-steps "$INTERVAL" --logdir "$1/logs" --json)
}
newest() { ls "$1/ckpt" 2>/dev/null | sed -n 's/^ckpt-\([0-9]*\)$/\1/p' | sort -n | tail -1; }
now() { date +%s.%N; }

for round in $(seq "$ROUNDS"); do
    seed=$round
    # Uninterrupted.
    train_args "$work/whole-$round"
    t0=$(now); "$BIN" "${args[@]}" >"$work/whole.json" 2>/dev/null; t1=$(now)
    # Killed at a random moment after its first checkpoint, then resumed.
    dir="$work/killed-$round"
    train_args "$dir"
    t2=$(now)
    "$BIN" "${args[@]}" >/dev/null 2>&1 &
    driver=$!
    while [ -z "$(newest "$dir")" ] && kill -0 $driver 2>/dev/null; do sleep 0.05; done
    sleep "$(python3 -c "import random; print(random.uniform(0, $KILL_WITHIN))")"
    if ! kill -0 $driver 2>/dev/null; then
        echo "{\"round\": $round, \"note\": \"finished before the kill\"}"; continue
    fi
    kill -KILL $driver; wait $driver 2>/dev/null || true
    t3=$(now)
    killed_at=$(newest "$dir")
    "$BIN" "${args[@]}" >"$work/resumed.json" 2>/dev/null; t4=$(now)
    python3 - "$work/whole.json" "$work/resumed.json" "$t0" "$t1" "$t2" "$t3" "$t4" \
        "$killed_at" "$round" "$INTERVAL" <<'PY'
import json, sys
whole, resumed = (json.load(open(p)) for p in sys.argv[1:3])
t0, t1, t2, t3, t4 = map(float, sys.argv[3:8])
killed_at, rnd, interval = int(sys.argv[8]), int(sys.argv[9]), int(sys.argv[10])
r = resumed["resumed_from"] or {}
print(json.dumps({
    "round": rnd,
    "interval_updates": interval,
    "whole": {"reached": whole["reached"], "time_to_target_s": whole["time_to_target_s"],
              "updates": whole["updates"], "wall_s": round(t1 - t0, 2)},
    "killed": {"after_s": round(t3 - t2, 2), "newest_checkpoint": killed_at},
    "resumed": {"reached": resumed["reached"], "time_to_target_s": resumed["time_to_target_s"],
                "from_step": r.get("step"), "updates": resumed["updates"],
                "restart_s": round(resumed["setup_seconds"] + resumed["startup_seconds"], 2),
                "restore_s": r.get("restore_seconds"), "wall_s": round(t4 - t3, 2)},
    "time_lost_s": round((t4 - t2) - (t1 - t0), 2),
}))
PY
done

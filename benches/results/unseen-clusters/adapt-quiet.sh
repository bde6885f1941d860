#!/usr/bin/env bash
# `train --adapt` on an emulated cluster where nothing changes, for SECONDS of training: how many
# live re-plans (and LB-BSP re-sizes) it made, and how many moves it declined.
#
#   SCENARIO=uniform SECONDS_=60 benches/results/unseen-clusters/adapt-quiet.sh target/debug/tf-iaware
set -euo pipefail
BIN=${1:-target/debug/tf-iaware}
SCENARIO=${SCENARIO:-uniform}
SECONDS_=${SECONDS_:-60}
G=tests/fixtures/tf1_mlp_sparse
RUST_LOG=warn "$BIN" train --graph "$G.pb" --data "${G}_train.npz" --cluster "emulated:$SCENARIO" \
    --strategy infra-aware --adapt --max-seconds "$SECONDS_" --epochs 100000 --json |
python3 -c '
import json, sys
r = json.load(sys.stdin)
print(json.dumps({"scenario": sys.argv[1], "train_seconds": round(r["train_seconds"], 1),
    "updates": r["updates"], "replans": len(r["replans"]),
    "replan_triggers": [x["trigger"] for x in r["replans"]],
    "replans_declined": r["replans_declined"], "resized": len(r["resized"]),
    "shares_first": [x["batch"] for x in r["first_plan"]["replicas"]],
    "shares_last": [x["batch"] for x in r["plan"]["replicas"]]}))' "$SCENARIO"

#!/usr/bin/env bash
# Wall seconds to a held-out target from the command's start (setup included) and training
# seconds, for every data-parallel strategy through `tf-iaware train`, on an emulated cluster;
# infra-aware with a cold worker-calibration cache (learning from its training steps, or
# calibrating first) and with a warm one. Contenders take turns within a round, the order
# reversed every other round. One JSON line per run on stdout.
#
#   SCENARIO=paper ROUNDS=3 TARGET=0.8 benches/results/unseen-clusters/wall-to-target.sh target/debug/tf-iaware
#
# CONFIGS="replica-setter learn cold;infra-aware learn cold" runs only those contenders
# ("STRATEGY POLICY CACHE", `;` between them).
set -euo pipefail
BIN=${1:-target/debug/tf-iaware}
SCENARIO=${SCENARIO:-paper}
ROUNDS=${ROUNDS:-3}
TARGET=${TARGET:-0.8}
G=${GRAPH:-tests/fixtures/tf1_mlp_sparse}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
warm="$work/warm"
mkdir -p "$warm"

train() { # strategy policy cache-dir
    TF_IAWARE_CACHE_DIR="$3" RUST_LOG=warn "$BIN" train --graph "$G.pb" --data "${G}_train.npz" \
        --held-out "${G}_held_out.npz" --cluster "emulated:$SCENARIO" --strategy "$1" \
        --calibrate "$2" --epochs 200 --target-accuracy "$TARGET" --eval-every 0.5 --json
}

configs=("replica-setter learn cold" "async-ps learn cold" "sync-backup learn cold"
         "infra-aware learn cold" "infra-aware measure cold" "infra-aware learn warm"
         "infra-aware-async learn cold")
if [[ -n ${CONFIGS:-} ]]; then IFS=';' read -r -a configs <<<"$CONFIGS"; fi

# The warm cache: one calibration of this cluster's workers, not counted.
if [[ " ${configs[*]} " == *" warm "* ]]; then
    train infra-aware measure "$warm" >/dev/null 2>"$work/prime.err" || { cat "$work/prime.err" >&2; exit 1; }
fi
for round in $(seq 1 "$ROUNDS"); do
    order=("${configs[@]}")
    if (( round % 2 == 0 )); then
        order=(); for (( i=${#configs[@]}-1; i>=0; i-- )); do order+=("${configs[$i]}"); done
    fi
    for c in "${order[@]}"; do
        read -r strategy policy cache <<<"$c"
        dir="$warm"
        if [[ $cache == cold ]]; then dir=$(mktemp -d -p "$work"); fi
        start=$(date +%s.%N)
        if ! train "$strategy" "$policy" "$dir" >"$work/run.json" 2>"$work/run.err"; then
            echo "{\"round\":$round,\"strategy\":\"$strategy\",\"policy\":\"$policy\",\"cache\":\"$cache\",\"error\":$(python3 -c 'import json,sys;print(json.dumps(open(sys.argv[1]).read()[-400:]))' "$work/run.err")}"
            continue
        fi
        end=$(date +%s.%N)
        python3 - "$work/run.json" "$round" "$strategy" "$policy" "$cache" "$start" "$end" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(json.dumps({
    "round": int(sys.argv[2]), "strategy": sys.argv[3], "policy": sys.argv[4], "cache": sys.argv[5],
    "reached": r["reached"], "setup_s": round(r["setup_seconds"], 2),
    "startup_s": round(r["startup_seconds"], 2),
    "train_to_target_s": r["time_to_target_s"],
    "wall_to_target_s": r.get("wall_to_target_from_start_s"),
    "command_s": round(float(sys.argv[7]) - float(sys.argv[6]), 2),
    "shares_first": [x["batch"] for x in r["first_plan"]["replicas"]],
    "shares_last": [x["batch"] for x in r["plan"]["replicas"]],
    "resized": len(r["resized"]), "updates": r["updates"],
}))
PY
    done
done

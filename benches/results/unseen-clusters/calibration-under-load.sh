#!/usr/bin/env bash
# Two identical emulated workers (1 core each) calibrated from a cold cache with 0, 1, 2 and 4
# CPU-bound processes on the host (outside the workers' cgroups): each worker's fitted
# samples/s and the ratio of the two. One JSON line per calibration.
#
#   ROUNDS=2 MODEL=mlp benches/results/unseen-clusters/calibration-under-load.sh target/debug/tf-iaware
set -euo pipefail
BIN=${1:-target/debug/tf-iaware}
ROUNDS=${ROUNDS:-2}
MODEL=${MODEL:-mlp}
work=$(mktemp -d)
hogs=()
stop_hogs() { kill "${hogs[@]}" 2>/dev/null || true; wait "${hogs[@]}" 2>/dev/null || true; hogs=(); }
trap 'stop_hogs; rm -rf "$work"' EXIT
for round in $(seq 1 "$ROUNDS"); do
    for n in 0 1 2 4; do
        for _ in $(seq 1 "$n"); do (while :; do :; done) & hogs+=($!); done
        sleep 1
        dir=$(mktemp -d -p "$work")
        TF_IAWARE_CACHE_DIR="$dir" RUST_LOG=warn "$BIN" run --model "$MODEL" \
            --cluster emulated:workers=1,1 --parallel data --strategy infra-aware --steps 1 \
            --batch 64 --checkpoint-every 0 --json >"$work/run.json" 2>"$work/run.err" ||
            { tail -5 "$work/run.err" >&2; stop_hogs; continue; }
        stop_hogs
        python3 - "$work/run.json" "$round" "$n" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
cal = r.get("calibration") or []
rates = [c["samples_per_sec"] for c in cal]
print(json.dumps({
    "round": int(sys.argv[2]), "host_hogs": int(sys.argv[3]),
    "samples_per_sec": [round(x, 1) for x in rates],
    "fixed_ms": [round(c["fixed_ms"], 2) for c in cal],
    "availability": [round(c.get("availability") or 1.0, 3) for c in cal],
    "ratio": round(max(rates) / min(rates), 3) if len(rates) == 2 and min(rates) > 0 else None,
    # What every later plan uses: the figures divided by the availability they were read at.
    "capability_ratio": (lambda c: round(max(c) / min(c), 3) if len(c) == 2 and min(c) > 0 else None)(
        [x["samples_per_sec"] / (x.get("availability") or 1.0) for x in cal]),
}))
PY
    done
done

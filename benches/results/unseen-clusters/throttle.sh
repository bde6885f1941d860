#!/usr/bin/env bash
# One worker throttled for 20 s in the middle of a run, with and without `--adapt`: updates in
# the run, live re-plans, and how often work moved back to the throttled worker after the
# throttle ended. `train` on emulated `uniform` (four 0.3-core workers), infra-aware, 50 s of
# training; 15 s after training starts, the busiest worker (by CPU over the next 2 s) gets a
# 0.05-core quota (1 ms per 20 ms) for 20 s, then its own quota back. The two variants alternate, ROUNDS each.
# Run as root (it writes the emulated workers' cgroups).
#
#   ROUNDS=3 benches/results/unseen-clusters/throttle.sh target/debug/tf-iaware > throttle.jsonl
set -euo pipefail
BIN=${1:-target/debug/tf-iaware}
ROUNDS=${ROUNDS:-3}
G=tests/fixtures/tf1_mlp_sparse
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# CPU seconds × 100 (ticks) used so far by the processes of cgroup folder $1.
ticks() {
    local t=0 p
    for p in $(cat "$1/cgroup.procs"); do
        t=$((t + $(awk '{print $14 + $15}' /proc/$p/stat 2>/dev/null || echo 0)))
    done
    echo $t
}

one() {
    local adapt=$1 out=$work/run.json err=$work/run.err
    RUST_LOG=warn "$BIN" train --graph "$G.pb" --data "${G}_train.npz" --cluster emulated:uniform \
        --strategy infra-aware $adapt --max-seconds 50 --epochs 100000 --json >"$out" 2>"$err" &
    local driver=$!
    until grep -q "shares" "$err" 2>/dev/null; do sleep 0.2; done
    sleep 13
    local groups=(/sys/fs/cgroup/cpu/tf-iaware-$driver-*-worker*/tf) before=() g i best=0 most=-1
    for g in "${groups[@]}"; do before+=("$(ticks "$g")"); done
    sleep 2
    for i in "${!groups[@]}"; do
        local used=$(($(ticks "${groups[$i]}") - ${before[$i]}))
        if [ $used -gt $most ]; then most=$used; best=$i; fi
    done
    # The worker's own group (`…-workerK/tf`, inside its node's quota, beside the node's
    # co-tenant group): a parent's quota cannot go below a child's.
    local target=${groups[$best]} quota period
    quota=$(cat "$target/cpu.cfs_quota_us")
    period=$(cat "$target/cpu.cfs_period_us")
    local t0=$(date +%s%3N)
    echo 20000 > "$target/cpu.cfs_period_us"
    echo 1000 > "$target/cpu.cfs_quota_us"
    sleep 20
    echo "$quota" > "$target/cpu.cfs_quota_us"
    echo "$period" > "$target/cpu.cfs_period_us"
    local t1=$(date +%s%3N)
    wait $driver
    local node=${target%/tf}
    python3 - "$out" "$adapt" "${node##*-}" "$t0" "$t1" <<'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
worker = "task:" + sys.argv[3].removeprefix("worker") + "/"
t0, t1 = int(sys.argv[4]), int(sys.argv[5])
shares = lambda s: {d: b for d, b in s}
# Live re-plans (adapt) that gave the throttled worker more work than it had.
back = 0
prev = {x["device"]: x["batch"] for x in r["first_plan"]["replicas"]}
for p in r["replans"]:
    now = shares(p["shares"])
    mine = lambda s: sum(b for d, b in s.items() if worker in d)
    if mine(now) > mine(prev):
        back += 1
    prev = now
print(json.dumps({"adapt": sys.argv[2] == "--adapt", "throttled": sys.argv[3],
    "updates": r["updates"], "train_seconds": round(r["train_seconds"], 1),
    "replans": [[p["trigger"], p["before_step"], [[d.split("/")[3], round(f, 2)] for d, f in p["moved"]], [b for _, b in p["shares"]]] for p in r["replans"]],
    "replans_declined": r["replans_declined"], "resized": r["resized"],
    "replans_giving_it_more": back}))
EOF
}

if [ -n "${ONLY:-}" ]; then one "$ONLY"; exit; fi
for round in $(seq "$ROUNDS"); do
    if [ $((round % 2)) = 1 ]; then one --adapt; one ""; else one ""; one --adapt; fi
done

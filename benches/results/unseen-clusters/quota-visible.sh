#!/usr/bin/env bash
# A worker of a hand-made TF_CONFIG cluster (1 ps + 2 workers on 127.0.0.1, `tf-iaware worker`
# each) is moved into a 0.15-core cgroup made by hand (v1 cpu.cfs_quota_us, or v2 cpu.max) while
# it runs: how soon `devices` shows it, and what an uncalibrated `heft` does with it.
# Needs root and a writable cgroup cpu controller.
#
#   benches/results/unseen-clusters/quota-visible.sh target/debug/tf-iaware
set -euo pipefail
BIN=${1:-target/debug/tf-iaware}
work=$(mktemp -d)
base=$((23000 + RANDOM % 2000))
cat >"$work/cluster.json" <<JSON
{"cluster": {"ps": ["127.0.0.1:$base"],
             "worker": ["127.0.0.1:$((base + 1))", "127.0.0.1:$((base + 2))"]},
 "metrics": {"ps": ["127.0.0.1:$((base + 11))"],
             "worker": ["127.0.0.1:$((base + 12))", "127.0.0.1:$((base + 13))"]}}
JSON
pids=()
for t in "ps 0" "worker 0" "worker 1"; do
    read -r job task <<<"$t"
    RUST_LOG=warn "$BIN" worker --tf-config "$work/cluster.json" --job "$job" --task "$task" \
        >"$work/$job$task.out" 2>&1 &
    pids+=($!)
done
if [[ -d /sys/fs/cgroup/cpu && -f /sys/fs/cgroup/cpu/cpu.cfs_quota_us ]]; then
    cg=/sys/fs/cgroup/cpu/handmade-$$
    mkdir "$cg"
    echo 100000 >"$cg/cpu.cfs_period_us"
    echo 15000 >"$cg/cpu.cfs_quota_us"
else
    cg=/sys/fs/cgroup/handmade-$$
    mkdir "$cg"
    echo "15000 100000" >"$cg/cpu.max"
fi
cleanup() {
    kill "${pids[@]}" 2>/dev/null || true
    wait 2>/dev/null || true
    rmdir "$cg" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
sleep 4
avail() { # the worker-1 CPU device's availability, allotment and hard share
    "$BIN" devices --cluster "tf-config:$work/cluster.json" --json 2>/dev/null | python3 -c '
import json, sys
for d in json.load(sys.stdin)["devices"]:
    if "/job:worker/replica:0/task:1/device:CPU:0" == d["name"]:
        l = d["live"]
        print("availability %.3f allotment %s hard_share %s" % (d["availability"], l.get("allotment"), l.get("hard_share")))'
}
echo "before: $(avail)"
moved=$(date +%s.%N)
# Every thread of the worker process (a v1 cgroup moves one task per write).
for t in /proc/"${pids[2]}"/task/*; do echo "${t##*/}" >"$cg/tasks" 2>/dev/null || echo "${t##*/}" >"$cg/cgroup.threads"; done 2>/dev/null || echo "${pids[2]}" >"$cg/cgroup.procs"
for i in $(seq 1 8); do
    sleep 0.5
    printf '%5.1f s after the move: %s\n' "$(echo "$(date +%s.%N) - $moved" | bc)" "$(avail)"
done
"$BIN" model lenet --out "$work/lenet.pb" >/dev/null
echo "uncalibrated heft on lenet:"
"$BIN" place --graph "$work/lenet.pb" --cluster "tf-config:$work/cluster.json" --strategy heft --json 2>/dev/null |
    python3 -c 'import json,sys; r=json.load(sys.stdin); print({d: v["ops"] for d, v in r["devices"].items()} if isinstance(r["devices"], dict) else [(d["device"], d["ops"]) for d in r["devices"]])'

#!/usr/bin/env bash
# Issue 36 measurements: what TensorFlow servers we start listen on, and what a SIGKILLed
# driver of an emulated cluster leaves behind. Run from the repository root after
# `cargo build --bin tf-iaware`; writes listeners.txt and kills.tsv next to this script.
#   benches/results/reliability-36/measure.sh [KILLS]   (default 10)
set -euo pipefail
cd "$(dirname "$0")/../../.."
out=benches/results/reliability-36
bin=${TF_IAWARE_BIN:-target/debug/tf-iaware}
kills=${1:-10}
fx=tests/fixtures
export RUST_LOG=warn TF_CPP_MIN_LOG_LEVEL=3

# The listening sockets (ss -ltnp) of the processes in $@.
listeners() {
    local pids="$*" pattern
    pattern=$(printf 'pid=%s,|' $pids)
    ss -ltnp | awk 'NR == 1' 
    ss -ltnp | grep -E "${pattern%|}" || true
}

# A driver: train on emulated:paper until killed. Prints its pid once training has begun.
start_driver() {
    local log=$1
    "$bin" train --graph $fx/tf1_mlp_sparse.pb --data $fx/tf1_mlp_sparse_train.npz \
        --cluster emulated:paper --strategy replica-setter --batch 64 \
        --steps 1000000 --max-seconds 600 >/dev/null 2>"$log" &
    local pid=$!
    for _ in $(seq 600); do
        grep -q "on emulated:paper: shares" "$log" 2>/dev/null && break
        kill -0 $pid 2>/dev/null || { echo "driver ended early:" >&2; cat "$log" >&2; exit 1; }
        sleep 0.1
    done
    echo $pid
}

# Children of $1 that are emulated-cluster tasks or hogs (not its reaper).
tasks_of() {
    for c in $(pgrep -P "$1"); do
        grep -qa "reap" /proc/$c/cmdline 2>/dev/null || echo $c
    done
}

alive() { [ -e /proc/$1 ] && ! grep -q '^State:.*[ZX]' /proc/$1/status 2>/dev/null; }

# What is left of driver $1 (tasks $2…): processes, folders, cgroups, the reaper.
left() {
    local driver=$1; shift
    local procs=0 folders=0 groups=0 reapers=0 p f
    for p in "$@"; do alive $p && procs=$((procs + 1)); done
    for f in "${TMPDIR:-/tmp}"/tf-iaware-emulated-*/owner.pid; do
        [ -f "$f" ] && [ "$(cat "$f")" = "$driver" ] && folders=$((folders + 1))
    done
    for f in /sys/fs/cgroup/cpu/tf-iaware-$driver-* /sys/fs/cgroup/tf-iaware-$driver-*; do
        [ -d "$f" ] && groups=$((groups + 1))
    done
    reapers=$(pgrep -f "reap --owner $driver$" | wc -l)
    echo "$procs $folders $groups $reapers"
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

{
    echo "# $(date -u +%FT%TZ) commit $(git rev-parse --short HEAD)"
    echo "## train --cluster emulated:paper: the driver, its tasks and hogs"
    driver=$(start_driver "$tmp/listen.log")
    tasks=$(tasks_of $driver)
    echo "driver $driver, tasks and hogs: $(echo $tasks)"
    listeners $driver $tasks
    kill -INT $driver; wait $driver 2>/dev/null || true
    echo
    echo "## tf-iaware worker, TF_CONFIG task address 127.0.0.1:PORT"
    port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
    echo "{\"cluster\": {\"worker\": [\"127.0.0.1:$port\"]}}" >"$tmp/tf.json"
    "$bin" worker --tf-config "$tmp/tf.json" --job worker --task 0 >"$tmp/worker.out" 2>/dev/null &
    worker=$!
    for _ in $(seq 100); do grep -q task= "$tmp/worker.out" && break; sleep 0.1; done
    listeners $worker
    kill -TERM $worker; wait $worker 2>/dev/null || true
} | tee $out/listeners.txt

printf 'kill\tdriver\ttasks\tcgroups_before\tgone_after_s\tprocesses_left\tfolders_left\tcgroups_left\treapers_left\n' \
    | tee $out/kills.tsv
for k in $(seq "$kills"); do
    driver=$(start_driver "$tmp/kill$k.log")
    sleep 2
    tasks=$(tasks_of $driver)
    read -r _ _ before _ <<<"$(left $driver $tasks)"
    kill -KILL $driver
    wait $driver 2>/dev/null || true
    t0=$(date +%s.%N)
    gone=timeout
    for _ in $(seq 150); do
        if [ "$(left $driver $tasks)" = "0 0 0 0" ]; then
            gone=$(echo "$(date +%s.%N) - $t0" | bc | xargs printf '%.2f'); break
        fi
        sleep 0.1
    done
    sleep 5
    read -r p f g r <<<"$(left $driver $tasks)"
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' $k $driver "$(echo $tasks | wc -w)" $before \
        $gone $p $f $g $r | tee -a $out/kills.tsv
done

#!/usr/bin/env bash
# Before/after of issue 25's last two items (`Analyzed` without a second graph, `Placement` by id)
# on the whole `simulate` command: analysis, placement, report and simulation of resnet20 on a
# synthetic cluster of 256 workers. The two binaries run in turn (A B A B …), RUNS each after one
# warm-up; prints each run's wall and CPU seconds (GNU time) and checks the reports are equal.
#   usage: run.sh BEFORE_BINARY AFTER_BINARY [STRATEGY] [RUNS]
set -eu
before=${1:?before binary}
after=${2:?after binary}
strategy=${3:-heft}
runs=${4:-9}
graph=$(mktemp -d)/r20.pb
"$after" model resnet20 --out "$graph" 2>/dev/null
args=(simulate --graph "$graph" --cluster synthetic:workers=256:ps=8:seed=7 --strategy "$strategy" --json)
for b in "$before" "$after"; do
    "$b" "${args[@]}" 2>/dev/null | python3 -c 'import json,sys; d=json.load(sys.stdin); d.pop("placement_ms"); print(json.dumps(d, sort_keys=True))' >"$graph.$(basename "$b").json"
done
cmp -s "$graph.$(basename "$before").json" "$graph.$(basename "$after").json" && echo "reports equal (placement_ms aside)"
for i in $(seq 0 "$runs"); do
    for b in "$before" "$after"; do
        /usr/bin/time -f "$i $(basename "$b") wall %e user %U sys %S maxrss_kib %M" "$b" "${args[@]}" >/dev/null 2>>"$graph.time" || true
    done
done
grep -E '^[0-9]+ ' "$graph.time" | grep -v '^0 '

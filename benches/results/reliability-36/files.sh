#!/usr/bin/env bash
# Issue 36 measurements, second part: two runs racing on one checkpoint folder, a full log
# disk, a decompression bomb in a 1 GB memory cgroup, and the peak memory of a large .npz.
# Run as root from the repository root after `cargo build --bin tf-iaware`; writes race.tsv,
# full-disk.txt and memory.tsv next to this script.
#   benches/results/reliability-36/files.sh [TRIES]   (default 20)
set -euo pipefail
cd "$(dirname "$0")/../../.."
out=benches/results/reliability-36
bin=$(realpath "${TF_IAWARE_BIN:-target/debug/tf-iaware}")
tries=${1:-20}
fx=$(realpath tests/fixtures)
export RUST_LOG=warn TF_CPP_MIN_LOG_LEVEL=3
work=$(mktemp -d)
trap 'umount "$work/full" 2>/dev/null || true; rm -rf "$work"' EXIT
train=("$bin" train --graph "$fx/tf1_mlp_sparse.pb" --data "$fx/tf1_mlp_sparse_train.npz"
    --cluster emulated:workers=1 --strategy replica-setter --batch 8)

# The global step of the newest checkpoint in folder $1 (0 when none).
last_step() {
    local newest
    newest=$(ls "$1" 2>/dev/null | grep -E '^ckpt-[0-9]+$' | sort -t- -k2 -n | tail -1)
    [ -n "$newest" ] || { echo 0; return; }
    python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["global_step"])' \
        "$1/$newest/train_state.json"
}

# --- Two runs on one folder, started together ------------------------------------------------
echo -e "try\trc_a\trc_b\trefused\tlocked_message\tlast_step\tlost" > $out/race.tsv
for t in $(seq "$tries"); do
    ck=$work/race-$t
    "${train[@]}" --steps 300 --checkpoint-dir "$ck" --checkpoint-steps 50 \
        >/dev/null 2>"$work/a.err" & a=$!
    "${train[@]}" --steps 300 --checkpoint-dir "$ck" --checkpoint-steps 50 \
        >/dev/null 2>"$work/b.err" & b=$!
    set +e; wait $a; ra=$?; wait $b; rb=$?; set -e
    refused=0; msg=no
    for f in a b; do
        grep -q "is in use by" "$work/$f.err" && { refused=$((refused + 1)); msg=yes; }
    done
    step=$(last_step "$ck")
    # Lost work: a run that ended 0 without its 300 updates in the folder, or any other failure.
    lost=0
    [ "$step" = 300 ] || lost=1
    for rc in $ra $rb; do [ "$rc" = 0 ] || [ "$rc" = 1 ] || lost=1; done
    [ $((ra + rb)) = 1 ] || lost=1
    echo -e "$t\t$ra\t$rb\t$refused\t$msg\t$step\t$lost" >> $out/race.tsv
done
cat $out/race.tsv

# --- A full log disk -------------------------------------------------------------------------
mkdir -p "$work/full"
mount -t tmpfs -o size=1m tmpfs "$work/full"
dd if=/dev/zero of="$work/full/filler" bs=4k 2>/dev/null || true
set +e
"${train[@]}" --steps 2000 --logdir "$work/full/logs" --checkpoint-dir "$work/full-ck" \
    --json >"$work/full.json" 2>"$work/full.err"
rc=$?
set -e
{
    echo "rc: $rc"
    echo "log disk free: $(df --output=avail -B1 "$work/full" | tail -1) bytes"
    echo "stderr:"; grep -v '^\s*$' "$work/full.err" | grep -iv "oneDNN\|absl" | head -5
    echo "report: $(python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print({k: r.get(k) for k in ("updates", "events_lost", "stopped_by")})' "$work/full.json" 2>&1)"
    echo "final checkpoint step: $(last_step "$work/full-ck")"
} | tee $out/full-disk.txt
umount "$work/full"

# --- Memory: a bomb in a 1 GB cgroup, a large .npz held once ---------------------------------
# x: ROWS × 32 float32 zeros, y: ROWS int64 zeros; deflated (a bomb) or stored (np.savez).
make_npz() {
    python3 - "$1" "$2" "$3" <<'EOF'
import struct, sys, zipfile
path, rows, method = sys.argv[1], int(sys.argv[2]), sys.argv[3]
comp = zipfile.ZIP_DEFLATED if method == "deflated" else zipfile.ZIP_STORED
def header(descr, shape):
    d = "{'descr': '%s', 'fortran_order': False, 'shape': %s, }" % (descr, shape)
    d += " " * ((64 - (10 + len(d) + 1) % 64) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(d)) + d.encode()
with zipfile.ZipFile(path, "w", comp, compresslevel=1 if comp == zipfile.ZIP_DEFLATED else None) as z:
    for name, descr, shape, size in (("x", "<f4", "(%d, 32)" % rows, rows * 128),
                                     ("y", "<i8", "(%d,)" % rows, rows * 8)):
        with z.open(name + ".npy", "w", force_zip64=True) as f:
            f.write(header(descr, shape))
            chunk = bytes(1 << 20)
            while size > 0:
                f.write(chunk[:min(size, len(chunk))]); size -= len(chunk)
EOF
}

# Runs "${train[@]}" --data $2 --steps 1 inside a memory cgroup of $1 bytes (0: none);
# prints rc, peak RSS (kB, getrusage), the cgroup's peak usage (bytes) and the error line.
in_cgroup() {
    local limit=$1 data=$2 cg=/sys/fs/cgroup/memory/tf-iaware-measure-$$ peak=-
    if [ "$limit" != 0 ]; then
        mkdir -p $cg && echo "$limit" > $cg/memory.limit_in_bytes
    fi
    set +e
    python3 - "$cg" "$limit" "${train[@]/--data/--unused}" --data "$data" --steps 1 \
        > "$work/mem.out" 2>"$work/mem.err" <<'EOF'
import os, resource, subprocess, sys
cg, limit, cmd = sys.argv[1], sys.argv[2], sys.argv[3:]
# Drop the fixture's --data (renamed --unused) and its value.
i = cmd.index("--unused"); del cmd[i:i + 2]
def enter():
    if limit != "0":
        open(cg + "/cgroup.procs", "w").write(str(os.getpid()))
p = subprocess.run(cmd, preexec_fn=enter, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
err = [l for l in p.stderr.splitlines() if l.startswith("error")]
print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, (err or ["-"])[0])
EOF
    set -e
    [ "$limit" != 0 ] && peak=$(cat $cg/memory.max_usage_in_bytes) && rmdir $cg
    read -r rc rss msg < "$work/mem.out" || { cat "$work/mem.err"; return 1; }
    echo -e "$rc\t$rss\t$peak\t$msg"
}

echo -e "case\tfile_bytes\tvalue_bytes\tcgroup_limit\trc\tpeak_rss_kB\tcgroup_peak_bytes\terror" > $out/memory.tsv
make_npz "$work/bomb.npz" 16777216 deflated        # 2 GiB + 128 MiB of zeros
echo -e "bomb (deflated)\t$(stat -c %s "$work/bomb.npz")\t$((16777216 * 136))\t1073741824\t$(in_cgroup 1073741824 "$work/bomb.npz")" >> $out/memory.tsv
make_npz "$work/large.npz" 2000000 stored          # 272 MB of values, np.savez layout
echo -e "large (stored)\t$(stat -c %s "$work/large.npz")\t$((2000000 * 136))\t1073741824\t$(in_cgroup 1073741824 "$work/large.npz")" >> $out/memory.tsv
echo -e "large (stored)\t$(stat -c %s "$work/large.npz")\t$((2000000 * 136))\tnone\t$(in_cgroup 0 "$work/large.npz")" >> $out/memory.tsv
echo -e "fixture (small)\t$(stat -c %s "$fx/tf1_mlp_sparse_train.npz")\t-\tnone\t$(in_cgroup 0 "$fx/tf1_mlp_sparse_train.npz")" >> $out/memory.tsv
column -t -s $'\t' $out/memory.tsv

#!/usr/bin/env bash
# Interleaved A/B timing of tf-iaware-core at two commits (default: before and after the house
# refactor of issue 25): copies each commit's tf-iaware-core into a scratch folder as a
# standalone crate (versions 0.1.0-a / 0.1.0-b, so both link into one binary), builds the
# harness here in release mode and runs ROUNDS rounds.
#   usage: benches/results/house-refactor-ab/run.sh [BEFORE] [AFTER] [ROUNDS]
set -euo pipefail
before=${1:-6720efe}
after=${2:-HEAD}
rounds=${3:-41}
here=$(cd "$(dirname "$0")" && pwd)
repo=$(git -C "$here" rev-parse --show-toplevel)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for v in a b; do
    commit=$before
    [ "$v" = b ] && commit=$after
    mkdir -p "$work/$v"
    git -C "$repo" archive "$commit" tf-iaware-core | tar -x -C "$work/$v"
    python3 - "$work/$v/tf-iaware-core/Cargo.toml" "$v" <<'PY'
import sys
p, v = sys.argv[1], sys.argv[2]
s = open(p).read()
s = "\n".join(l for l in s.split("\n") if not l.startswith(("rust-version", "license")))
s = s.replace("version.workspace = true", f'version = "0.1.0-{v}"')
s = s.replace("edition.workspace = true", 'edition = "2021"')
deps = {"prost": '"0.13"', "thiserror": '"2"', "crc": '"3"',
        "serde": '{ version = "1", features = ["derive"] }', "serde_json": '"1"', "log": '"0.4"',
        "rand": '"0.8"', "rand_distr": '"0.4"',
        "procfs-core": '{ version = "0.17", default-features = false }', "libc": '"0.2"'}
for k, val in deps.items():
    s = s.replace(f"{k}.workspace = true", f"{k} = {val}")
s = s[: s.index("[dev-dependencies]")] + "\n[workspace]\n"
open(p, "w").write(s)
PY
done
cp -r "$here/harness" "$work/harness"
cd "$work/harness"
cargo build --release --quiet
uptime
./target/release/house2-ab "$rounds"

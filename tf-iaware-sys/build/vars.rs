//! Every environment variable the build script reads, in one table. Each is read through [`get`],
//! which also tells cargo to rerun the script when it changes.

/// Directory that holds `libtensorflow_cc.so.2` or `libtensorflow.so.2` (step 1 of discovery).
pub const LIB_DIR: &str = "TF_IAWARE_LIB_DIR";
/// Any value: skip pkg-config (step 2).
pub const NO_PKG_CONFIG: &str = "TF_IAWARE_NO_PKG_CONFIG";
/// Any value: skip the installed Python package (step 3).
pub const NO_PYTHON: &str = "TF_IAWARE_NO_PYTHON";
/// Python interpreter used to locate an installed package and to run `pip download` (default `python3`).
pub const PYTHON: &str = "TF_IAWARE_PYTHON";
/// Root of the per-user cache (default `$XDG_CACHE_HOME/tf-iaware`, else `$HOME/.cache/tf-iaware`).
pub const CACHE_DIR: &str = "TF_IAWARE_CACHE_DIR";
/// Any value but `0`/`false`: never download (step 4 only reuses the cache or a local wheel).
pub const OFFLINE: &str = "TF_IAWARE_OFFLINE";
/// Cargo's offline setting (`net.offline`) when given in the environment, honoured like [`OFFLINE`].
/// Cargo does not pass its `--offline` flag or a config-file `net.offline` to build scripts, so
/// only this variable (or [`OFFLINE`]) reaches the script.
pub const CARGO_NET_OFFLINE: &str = "CARGO_NET_OFFLINE";
/// Path to an already downloaded wheel to extract instead of downloading (still checksummed).
pub const WHEEL: &str = "TF_IAWARE_WHEEL";
/// `cpu` (default, `tensorflow-cpu` wheel) or `gpu` (`tensorflow` wheel with CUDA kernels).
pub const VARIANT: &str = "TF_IAWARE_VARIANT";
/// SHA-256 to expect instead of the pinned one (required for the `gpu` variant, which is not pinned).
pub const WHEEL_SHA256: &str = "TF_IAWARE_WHEEL_SHA256";
/// Any value but `0`/`false`: find, fetch and link nothing (for `cargo check`/`cargo doc`/IDEs on
/// machines without libtensorflow). A final link then fails with a library name that says so.
pub const NO_LINK: &str = "TF_IAWARE_NO_LINK";
/// Set by docs.rs builds: treated as [`NO_LINK`].
pub const DOCS_RS: &str = "DOCS_RS";
/// Set by cargo when the crate's `download` feature is on (read with [`cargo_set`]).
pub const FEATURE_DOWNLOAD: &str = "CARGO_FEATURE_DOWNLOAD";
/// Set by cargo: this script's output folder (the deferred link error's explanation goes there).
pub const OUT_DIR: &str = "OUT_DIR";
/// Standard locations the cache default is derived from.
pub const XDG_CACHE_HOME: &str = "XDG_CACHE_HOME";
pub const HOME: &str = "HOME";

/// Reads `name`, registering it with cargo; empty values count as unset.
pub fn get(name: &str) -> Option<String> {
    println!("cargo:rerun-if-env-changed={name}");
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// Whether cargo set `name` for this run (features, cfgs): no rerun line, since cargo reruns the
/// script itself when they change.
pub fn cargo_set(name: &str) -> bool {
    std::env::var_os(name).is_some()
}

/// A folder cargo set for this run (`OUT_DIR`); no rerun line.
pub fn cargo_path(name: &str) -> Option<std::path::PathBuf> {
    std::env::var_os(name).map(Into::into)
}

/// Reads a switch: set and not `0`/`false`/`no`.
pub fn flag(name: &str) -> bool {
    get(name).is_some_and(|v| !matches!(v.to_ascii_lowercase().as_str(), "0" | "false" | "no"))
}

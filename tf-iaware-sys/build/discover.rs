//! Discovery steps 1–3: an explicit directory, pkg-config, an installed Python package.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::vars;

/// Shared objects that export the TensorFlow C API, in order of preference.
pub const LIB_FILES: [&str; 3] = [
    "libtensorflow_cc.so.2",
    "libtensorflow.so.2",
    "libtensorflow.so",
];

/// A libtensorflow that can be linked.
pub struct Found {
    /// Directory of the shared object (becomes the rpath).
    pub dir: PathBuf,
    /// File name passed verbatim to the linker.
    pub file: &'static str,
    /// `libtensorflow_framework.so.2` beside it, when present: parts of the C API (tensors,
    /// shape handles) are exported from there and must be linked too.
    pub framework: Option<&'static str>,
    /// Which discovery step found it, for the build log and `tf-iaware devices`.
    pub source: String,
}

/// The framework library that accompanies the C-API library.
pub const FRAMEWORK_FILES: [&str; 2] =
    ["libtensorflow_framework.so.2", "libtensorflow_framework.so"];

/// Looks for a C-API shared object in `dir`.
pub fn in_dir(dir: &Path, source: impl Into<String>) -> Option<Found> {
    LIB_FILES
        .iter()
        .find(|f| dir.join(f).is_file())
        .map(|f| Found {
            dir: dir.to_path_buf(),
            file: f,
            framework: FRAMEWORK_FILES
                .iter()
                .find(|f| dir.join(f).is_file())
                .copied(),
            source: source.into(),
        })
}

/// Step 1: `TF_IAWARE_LIB_DIR`. A set but wrong directory is an error, not a fall-through:
/// the user asked for that library.
pub fn explicit_dir() -> Result<Option<Found>, String> {
    let Some(dir) = vars::get(vars::LIB_DIR) else {
        return Ok(None);
    };
    let dir = PathBuf::from(dir);
    match in_dir(&dir, format!("{}={}", vars::LIB_DIR, dir.display())) {
        Some(found) => Ok(Some(found)),
        None => Err(format!(
            "{} is set to {} but that directory holds none of {:?}",
            vars::LIB_DIR,
            dir.display(),
            LIB_FILES
        )),
    }
}

/// Step 2: pkg-config package `tensorflow`.
pub fn pkg_config(notes: &mut Vec<String>) -> Option<Found> {
    match pkg_config::Config::new()
        .cargo_metadata(false)
        .env_metadata(true)
        .probe("tensorflow")
    {
        Ok(lib) => {
            let found = lib
                .link_paths
                .iter()
                .find_map(|d| in_dir(d, "pkg-config tensorflow"));
            if found.is_none() {
                notes.push(format!(
                    "pkg-config: `tensorflow` found but none of {:?} in {:?}",
                    LIB_FILES, lib.link_paths
                ));
            }
            found
        }
        Err(e) => {
            let text = e.to_string();
            let first = text.lines().map(str::trim).find(|l| !l.is_empty());
            let first = first.unwrap_or("no message");
            notes.push(format!("pkg-config: no `tensorflow` package ({first})"));
            None
        }
    }
}

/// Step 3: an installed `tensorflow` / `tensorflow-cpu` Python package, located with
/// `importlib.util.find_spec` (which finds a top-level package without importing it) and accepted
/// only at the version the code expects (read from its `.dist-info`).
pub fn python_package(expected_version: &str, notes: &mut Vec<String>) -> Option<Found> {
    let python = vars::get(vars::PYTHON).unwrap_or_else(|| "python3".into());
    let script = "import importlib.util as u\n\
                  s = u.find_spec('tensorflow')\n\
                  print(s.submodule_search_locations[0] if s and s.submodule_search_locations else '')";
    let out = match Command::new(&python).args(["-c", script]).output() {
        Ok(out) if out.status.success() => out,
        Ok(out) => {
            notes.push(format!(
                "python: `{python}` failed: {}",
                String::from_utf8_lossy(&out.stderr).trim()
            ));
            return None;
        }
        Err(e) => {
            notes.push(format!("python: cannot run `{python}`: {e}"));
            return None;
        }
    };
    let pkg = String::from_utf8_lossy(&out.stdout).trim().to_string();
    if pkg.is_empty() {
        notes.push(format!(
            "python: no `tensorflow` package importable by `{python}`"
        ));
        return None;
    }
    let pkg = PathBuf::from(pkg);
    let version = pkg.parent().and_then(dist_info_version);
    match version.as_deref() {
        Some(v) if v == expected_version => {}
        other => {
            notes.push(format!(
                "python: {} is version {} but {expected_version} is expected",
                pkg.display(),
                other.unwrap_or("unknown")
            ));
            return None;
        }
    }
    let found = in_dir(&pkg, format!("python package at {}", pkg.display()));
    if found.is_none() {
        notes.push(format!(
            "python: {} holds none of {:?}",
            pkg.display(),
            LIB_FILES
        ));
    }
    found
}

/// Version of the TensorFlow distribution installed in `site` (site-packages), from the
/// `Version:` line of its `METADATA`.
fn dist_info_version(site: &Path) -> Option<String> {
    let entries = std::fs::read_dir(site).ok()?;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        let is_tf = ["tensorflow-", "tensorflow_cpu-", "tensorflow_gpu-"]
            .iter()
            .any(|p| name.starts_with(p));
        if !is_tf || !name.ends_with(".dist-info") {
            continue;
        }
        let meta = std::fs::read_to_string(entry.path().join("METADATA")).ok()?;
        return meta
            .lines()
            .find_map(|l| l.strip_prefix("Version:"))
            .map(|v| v.trim().to_string());
    }
    None
}

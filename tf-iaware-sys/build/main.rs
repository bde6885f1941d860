//! Build script of tf-iaware-sys: finds libtensorflow 2.21 and links it for the whole workspace.
//!
//! Discovery order (first hit wins; see docs/src/guide/libtensorflow.md):
//! 1. `TF_IAWARE_LIB_DIR` — a directory with `libtensorflow_cc.so.2` or `libtensorflow.so.2`;
//! 2. pkg-config `tensorflow`;
//! 3. an installed Python `tensorflow`/`tensorflow-cpu` 2.21.0 package (found without importing it);
//! 4. the pinned, checksummed `tensorflow-cpu==2.21.0` wheel, cached per user; downloaded only with
//!    the `download` feature (default) and not offline (`TF_IAWARE_OFFLINE`, `CARGO_NET_OFFLINE`).
//!
//! Outputs: link lines for every dependent's final link, `DEP_TF_IAWARE_LIBDIR` for crates that add
//! an rpath, and `TF_IAWARE_LIBDIR`/`TF_IAWARE_LIB_SOURCE` compiled into the crate. When nothing is
//! found the script still succeeds (so `cargo check`/`cargo doc` work) and the error is deferred to
//! the first final link, with the full explanation in cargo warnings and in `OUT_DIR` (`defer.rs`).

mod defer;
mod discover;
mod fetch;
mod plan;
mod vars;

use std::path::{Path, PathBuf};

use defer::{Cause, Facts, Rerun};
use discover::Found;
use plan::{Plan, Step, Switches};

fn main() {
    println!("cargo:rerun-if-changed=build");
    let plan = plan::plan(&switches());
    if plan == Plan::NotLinked {
        return not_linked();
    }
    let mut notes = Vec::new();
    match find(&plan, &mut notes) {
        Ok(Some(found)) => link(&found),
        Ok(None) => {
            let cause = Cause::NothingFound {
                download_blocked: plan.download_blocked(),
            };
            deferred(&cause, &notes, None);
        }
        Err((step, reason)) => deferred(&Cause::Failed(reason), &notes, watch_after(step)),
    }
}

/// Links the library found for every final link of the workspace.
fn link(found: &Found) {
    let dir = found.dir.display();
    println!("cargo:rerun-if-changed={dir}/{}", found.file);
    println!("cargo:rustc-link-search=native={dir}");
    println!("cargo:rustc-link-lib=dylib:+verbatim={}", found.file);
    if let Some(framework) = found.framework {
        println!("cargo:rerun-if-changed={dir}/{framework}");
        println!("cargo:rustc-link-lib=dylib:+verbatim={framework}");
    }
    // Test binaries of this crate find the library without LD_LIBRARY_PATH.
    println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    println!("cargo:libdir={dir}");
    constants(&dir.to_string(), found.file, &found.source);
}

/// The constants compiled into the crate (`LIB_DIR`, `LIB_FILE`, `LIB_SOURCE`, `EXPECTED_VERSION`).
fn constants(dir: &str, file: &str, source: &str) {
    println!("cargo:rustc-env=TF_IAWARE_LIBDIR={dir}");
    println!("cargo:rustc-env=TF_IAWARE_LIB_FILE={file}");
    println!("cargo:rustc-env=TF_IAWARE_LIB_SOURCE={source}");
    println!(
        "cargo:rustc-env=TF_IAWARE_EXPECTED_VERSION={}",
        fetch::TF_VERSION
    );
}

/// `cargo check`/`cargo doc` without libtensorflow: nothing is found or fetched, the constants
/// compile, and the error is deferred to a final link (ort's way): its `-l` names the switch.
fn not_linked() {
    println!("cargo:rustc-link-lib=dylib=tensorflow_not_linked_because_TF_IAWARE_NO_LINK_or_DOCS_RS_is_set");
    let source = format!("not linked ({} or {} set)", vars::NO_LINK, vars::DOCS_RS);
    constants("", "", &source);
}

/// Nothing to link: the constants of [`not_linked`], the explanation as cargo warnings and in
/// `OUT_DIR`, and a library path that cannot exist, so the first final link fails naming it.
fn deferred(cause: &Cause, notes: &[String], watch: Option<PathBuf>) {
    let rerun = match &watch {
        None => Rerun::OnVariables,
        Some(path) => {
            // A path that does not exist makes cargo run the script again on every build.
            println!("cargo:rerun-if-changed={}", path.display());
            if path.exists() {
                Rerun::OnChangeOf(path.clone())
            } else {
                Rerun::EveryBuild
            }
        }
    };
    let wheel_file = fetch::wheel_file_name();
    let text = defer::explanation(&Facts {
        version: fetch::TF_VERSION,
        wheel_file: &wheel_file,
        cause,
        notes,
        rerun: &rerun,
    });
    let why = vars::cargo_path(vars::OUT_DIR)
        .map(|dir| dir.join(defer::WHY_FILE))
        .filter(|file| std::fs::write(file, &text).is_ok());
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        println!("cargo:warning={line}");
    }
    if let Some(file) = &why {
        println!(
            "cargo:warning=This explanation is also in {}",
            file.display()
        );
    }
    let path = defer::link_path(why.as_deref(), fetch::TF_VERSION, cause);
    println!("cargo:rustc-link-lib=dylib:+verbatim={}", path.display());
    constants("", "", &format!("not found: {}", cause.reason()));
}

/// What a fix of a failed step changes, watched with `cargo:rerun-if-changed`: the directory or
/// wheel the user named, or the cache entry a download would complete.
fn watch_after(step: Step) -> Option<PathBuf> {
    match step {
        Step::LibDir => vars::get(vars::LIB_DIR).map(PathBuf::from),
        Step::LocalWheel => vars::get(vars::WHEEL).map(PathBuf::from),
        Step::Cache | Step::Download => fetch::Cache::locate().ok().map(|c| c.complete_marker()),
        Step::PkgConfig | Step::Python => None,
    }
}

/// Reads every switch the plan depends on (each registered with `cargo:rerun-if-env-changed`).
fn switches() -> Switches {
    Switches {
        no_link: vars::flag(vars::NO_LINK),
        docs_rs: vars::get(vars::DOCS_RS).is_some(),
        no_pkg_config: vars::flag(vars::NO_PKG_CONFIG),
        no_python: vars::flag(vars::NO_PYTHON),
        local_wheel: vars::get(vars::WHEEL).is_some(),
        download_feature: vars::cargo_set(vars::FEATURE_DOWNLOAD),
        offline: vars::flag(vars::OFFLINE),
        cargo_offline: vars::flag(vars::CARGO_NET_OFFLINE),
    }
}

/// Runs the planned steps in order and notes the skipped ones in their place; the first hit wins,
/// `None` when every step found nothing. A step that goes wrong (as opposed to finding nothing)
/// ends the search with its error: the user asked for that library or that download.
fn find(plan: &Plan, notes: &mut Vec<String>) -> Result<Option<Found>, (Step, String)> {
    let Plan::Search { steps, skipped } = plan else {
        return Ok(None);
    };
    for step in Step::ALL {
        for &(_, why) in skipped.iter().filter(|(s, _)| *s == step) {
            notes.push(plan::skip_note(step, why));
        }
        if !steps.contains(&step) {
            continue;
        }
        let hit = run(step, notes).map_err(|e| (step, e))?;
        if hit.is_some() {
            return Ok(hit);
        }
    }
    Ok(None)
}

/// One discovery step.
fn run(step: Step, notes: &mut Vec<String>) -> Result<Option<Found>, String> {
    Ok(match step {
        Step::LibDir => discover::explicit_dir()?,
        Step::PkgConfig => discover::pkg_config(notes),
        Step::Python => discover::python_package(fetch::TF_VERSION, notes),
        Step::Cache => fetch::Cache::locate()?.cached(notes),
        Step::LocalWheel => {
            let wheel = vars::get(vars::WHEEL)
                .map(PathBuf::from)
                .ok_or_else(|| format!("{} is unset", vars::WHEEL))?;
            Some(fetch::Cache::locate()?.install(Some(Path::new(&wheel)))?)
        }
        Step::Download => Some(fetch::Cache::locate()?.install(None)?),
    })
}

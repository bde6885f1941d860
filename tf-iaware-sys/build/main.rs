//! Build script of tf-iaware-sys: finds libtensorflow 2.21 and links it for the whole workspace.
//!
//! Discovery order (first hit wins; see the README):
//! 1. `TF_IAWARE_LIB_DIR` — a directory with `libtensorflow_cc.so.2` or `libtensorflow.so.2`;
//! 2. pkg-config `tensorflow`;
//! 3. an installed Python `tensorflow`/`tensorflow-cpu` 2.21.0 package (found without importing it);
//! 4. the pinned, checksummed `tensorflow-cpu==2.21.0` wheel, cached per user; downloaded only with
//!    the `download` feature (default) and not offline (`TF_IAWARE_OFFLINE`, `--offline`).
//!
//! Outputs: link lines for every dependent's final link, `DEP_TF_IAWARE_LIBDIR` for crates that add
//! an rpath, and `TF_IAWARE_LIBDIR`/`TF_IAWARE_LIB_SOURCE` compiled into the crate.

mod discover;
mod fetch;
mod plan;
mod vars;

use std::path::PathBuf;

use discover::Found;
use plan::{Plan, Step, Switches};

fn main() {
    println!("cargo:rerun-if-changed=build");
    let plan = plan::plan(&switches());
    if plan == Plan::NotLinked {
        return not_linked();
    }
    let mut notes = Vec::new();
    let found = match find(&plan, &mut notes) {
        Ok(Some(found)) => found,
        Ok(None) => fail(&nothing_found(&plan), &notes),
        Err(reason) => fail(&reason, &notes),
    };
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
    println!("cargo:rustc-env=TF_IAWARE_LIBDIR={dir}");
    println!("cargo:rustc-env=TF_IAWARE_LIB_FILE={}", found.file);
    println!("cargo:rustc-env=TF_IAWARE_LIB_SOURCE={}", found.source);
    println!(
        "cargo:rustc-env=TF_IAWARE_EXPECTED_VERSION={}",
        fetch::TF_VERSION
    );
}

/// `cargo check`/`cargo doc` without libtensorflow: nothing is found or fetched, the constants
/// compile, and the error is deferred to a final link (ort's way): its `-l` names the switch.
fn not_linked() {
    println!("cargo:rustc-link-lib=dylib=tensorflow_not_linked_because_TF_IAWARE_NO_LINK_or_DOCS_RS_is_set");
    println!("cargo:rustc-env=TF_IAWARE_LIBDIR=");
    println!("cargo:rustc-env=TF_IAWARE_LIB_FILE=");
    println!(
        "cargo:rustc-env=TF_IAWARE_LIB_SOURCE=not linked ({} or {} set)",
        vars::NO_LINK,
        vars::DOCS_RS
    );
    println!(
        "cargo:rustc-env=TF_IAWARE_EXPECTED_VERSION={}",
        fetch::TF_VERSION
    );
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
fn find(plan: &Plan, notes: &mut Vec<String>) -> Result<Option<Found>, String> {
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
        let hit = match step {
            Step::LibDir => discover::explicit_dir()?,
            Step::PkgConfig => discover::pkg_config(notes),
            Step::Python => discover::python_package(fetch::TF_VERSION, notes),
            Step::Cache => fetch::Cache::locate()?.cached(notes),
            Step::LocalWheel => {
                let wheel = vars::get(vars::WHEEL)
                    .map(PathBuf::from)
                    .ok_or_else(|| format!("{} is unset", vars::WHEEL))?;
                Some(fetch::Cache::locate()?.install(Some(&wheel))?)
            }
            Step::Download => Some(fetch::Cache::locate()?.install(None)?),
        };
        if hit.is_some() {
            return Ok(hit);
        }
    }
    Ok(None)
}

/// The reason when every planned step found nothing (the download, which either finds or fails,
/// was then left out).
fn nothing_found(plan: &Plan) -> String {
    let blocked: Vec<String> = plan.download_blocked().iter().map(|w| w.reason()).collect();
    format!("nothing found, and no download: {}", blocked.join("; "))
}

fn fail(reason: &str, notes: &[String]) -> ! {
    eprintln!(
        "\nerror: tf-iaware-sys could not find libtensorflow {v}: {reason}\n\
         What was tried:\n{tried}\n\
         Ways out (any one):\n  \
         - set {lib}=/path/to/dir holding libtensorflow_cc.so.2 or libtensorflow.so.2 (version {v});\n  \
         - install a pkg-config file `tensorflow.pc` for libtensorflow {v};\n  \
         - `python3 -m pip install tensorflow-cpu=={v}` (or point {py} at a Python that has it);\n  \
         - allow the download (the `download` feature, unset {off}, no `--offline`) so the pinned wheel is fetched with pip;\n  \
         - set {wheel}=/path/to/tensorflow_cpu-{v}-cp311-cp311-manylinux_2_27_x86_64.whl.\n",
        v = fetch::TF_VERSION,
        tried = notes.iter().map(|n| format!("  - {n}\n")).collect::<String>(),
        lib = vars::LIB_DIR,
        py = vars::PYTHON,
        off = vars::OFFLINE,
        wheel = vars::WHEEL,
    );
    std::process::exit(1);
}

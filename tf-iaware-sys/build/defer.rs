//! The deferred link error (ort-sys's way). When no libtensorflow is found the build script still
//! succeeds, so `cargo check`, `cargo doc` and IDEs work; the explanation goes to cargo warnings and
//! to a file in `OUT_DIR`, and the crate links a library path that cannot exist — under that file —
//! so the first final link fails with a message that names the problem, the main ways out and the
//! file. Everything here is text; `main` does the writing.

use std::path::{Path, PathBuf};

use crate::plan::Skip;
use crate::vars;

/// Name of the explanation file in `OUT_DIR`.
pub const WHY_FILE: &str = "why-libtensorflow-not-found.txt";

/// Why nothing was linked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cause {
    /// Every planned step found nothing, and the download was left out for these reasons.
    NothingFound { download_blocked: Vec<Skip> },
    /// A step went wrong: a wrong `TF_IAWARE_LIB_DIR`, a bad wheel, a failed download.
    Failed(String),
}

/// When the build script runs again, so the explanation can say what a fix must touch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rerun {
    /// When a variable or feature changes (nothing found: the user's set-up is as chosen).
    OnVariables,
    /// When this file or folder changes (the one a failed step read).
    OnChangeOf(PathBuf),
    /// On every build (a failed download: the path it would complete is missing).
    EveryBuild,
}

/// What the explanation is made of.
pub struct Facts<'a> {
    /// TensorFlow version expected, e.g. `2.21.0`.
    pub version: &'a str,
    /// File name of the pinned wheel, for the `TF_IAWARE_WHEEL` way out.
    pub wheel_file: &'a str,
    pub cause: &'a Cause,
    /// What was tried, one line each.
    pub notes: &'a [String],
    /// When the build script runs again.
    pub rerun: &'a Rerun,
}

impl Cause {
    /// One line: the reason in the explanation's first line and in `TF_IAWARE_LIB_SOURCE`.
    pub fn reason(&self) -> String {
        match self {
            Cause::NothingFound { download_blocked } if download_blocked.is_empty() => {
                "nothing found".into()
            }
            Cause::NothingFound { download_blocked } => {
                let why: Vec<String> = download_blocked.iter().map(|w| w.reason()).collect();
                format!("nothing found, and no download: {}", why.join("; "))
            }
            Cause::Failed(reason) => reason.split_whitespace().collect::<Vec<_>>().join(" "),
        }
    }
}

/// The full explanation: the reason, what was tried, every way out, when the script runs again.
pub fn explanation(f: &Facts) -> String {
    let v = f.version;
    let tried: String = f.notes.iter().map(|n| format!("  - {n}\n")).collect();
    let tried = if tried.is_empty() {
        "  - nothing else\n".to_string()
    } else {
        tried
    };
    let rerun = match f.rerun {
        Rerun::EveryBuild => {
            "The build script runs again on every build until the library is found.".to_string()
        }
        Rerun::OnChangeOf(path) => format!(
            "The build script runs again when {} or a TF_IAWARE_* variable changes.",
            path.display()
        ),
        Rerun::OnVariables => {
            "The build script runs again when a TF_IAWARE_* variable or the crate's features \
             change; after a `pip install` or a new `tensorflow.pc`, run \
             `cargo clean -p tf-iaware-sys`."
                .to_string()
        }
    };
    format!(
        "tf-iaware-sys could not find libtensorflow {v}: {reason}\n\
         The build goes on so that `cargo check` and `cargo doc` work; the first final link fails.\n\
         What was tried:\n{tried}\
         Ways out (any one):\n  \
         - set {lib}=/path/to/dir holding libtensorflow_cc.so.2 or libtensorflow.so.2 (version {v});\n  \
         - install a pkg-config file `tensorflow.pc` for libtensorflow {v} (and leave {no_pc} unset);\n  \
         - `python3 -m pip install tensorflow-cpu=={v}`, or point {py} at a Python that has it (and \
         leave {no_py} unset);\n  \
         - allow the download, so the pinned wheel is fetched with pip once per user: keep the \
         `download` feature (on by default; off with `--no-default-features`) and leave {off} and \
         {cargo_off} unset;\n  \
         - set {wheel}=/path/to/{wheel_file} (a wheel you already have: checksummed, no network);\n  \
         - only checking or documenting: set {no_link}=1 and nothing is looked for (links still fail).\n\
         {rerun}\n",
        reason = f.cause.reason(),
        lib = vars::LIB_DIR,
        no_pc = vars::NO_PKG_CONFIG,
        py = vars::PYTHON,
        no_py = vars::NO_PYTHON,
        off = vars::OFFLINE,
        cargo_off = vars::CARGO_NET_OFFLINE,
        wheel = vars::WHEEL,
        wheel_file = f.wheel_file,
        no_link = vars::NO_LINK,
    )
}

/// The last part of the library path the link fails on: the problem and the main ways out, in
/// characters that a linker argument and rustc's `-l NAME` syntax both keep as they are.
pub fn link_name(version: &str, cause: &Cause) -> String {
    let hint = match cause {
        Cause::NothingFound { download_blocked } => {
            let mut allow: Vec<&str> = download_blocked
                .iter()
                .map(|w| match w {
                    Skip::FeatureOff => "enable-feature-download",
                    Skip::Offline => "unset-TF_IAWARE_OFFLINE",
                    Skip::CargoOffline => "unset-CARGO_NET_OFFLINE",
                    Skip::NoPkgConfig | Skip::NoPython => "",
                })
                .filter(|h| !h.is_empty())
                .collect();
            let install = format!("install-tensorflow-cpu-{version}");
            if allow.is_empty() {
                allow.push(&install);
            }
            format!("set-{}--or-{}", vars::LIB_DIR, allow.join("-and-"))
        }
        Cause::Failed(_) => "the-error-is".into(),
    };
    format!("NOT-FOUND-libtensorflow-{version}--{hint}--every-way-out-in-the-txt-file-above")
}

/// The path given to the linker: `link_name` under the explanation file, which is a file, so the
/// path can never exist. A folder whose path rustc would misread (`:` separates a rename in `-l`)
/// gives the bare name instead.
pub fn link_path(why_file: Option<&Path>, version: &str, cause: &Cause) -> PathBuf {
    let name = link_name(version, cause);
    match why_file {
        Some(file) if !file.to_string_lossy().contains([':', '=', '\n']) => file.join(name),
        _ => PathBuf::from(name),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WHEEL: &str = "tensorflow_cpu-2.21.0-cp311-cp311-manylinux_2_27_x86_64.whl";

    fn facts<'a>(cause: &'a Cause, notes: &'a [String], rerun: &'a Rerun) -> Facts<'a> {
        Facts {
            version: "2.21.0",
            wheel_file: WHEEL,
            cause,
            notes,
            rerun,
        }
    }

    #[test]
    fn the_explanation_names_the_reason_what_was_tried_and_every_way_out() {
        let cause = Cause::NothingFound {
            download_blocked: vec![Skip::FeatureOff, Skip::Offline],
        };
        let notes = ["python: no `tensorflow` package importable by `python3`".to_string()];
        let text = explanation(&facts(&cause, &notes, &Rerun::OnVariables));
        assert!(text.starts_with(
            "tf-iaware-sys could not find libtensorflow 2.21.0: nothing found, and no download: \
             the `download` feature of tf-iaware-sys is off; TF_IAWARE_OFFLINE is set\n"
        ));
        assert!(text.contains("  - python: no `tensorflow` package"));
        for way_out in [
            "TF_IAWARE_LIB_DIR=",
            "tensorflow.pc",
            "pip install tensorflow-cpu==2.21.0",
            "TF_IAWARE_PYTHON",
            "`download` feature",
            "--no-default-features",
            "TF_IAWARE_OFFLINE",
            "CARGO_NET_OFFLINE",
            WHEEL,
            "TF_IAWARE_NO_LINK=1",
        ] {
            assert!(text.contains(way_out), "{way_out} missing from\n{text}");
        }
        assert!(text.contains("cargo clean -p tf-iaware-sys"));
        let retried = explanation(&facts(&cause, &notes, &Rerun::EveryBuild));
        assert!(retried.contains("runs again on every build"));
        let watched = explanation(&facts(&cause, &notes, &Rerun::OnChangeOf("/x/y".into())));
        assert!(watched.contains("runs again when /x/y or a TF_IAWARE_* variable changes"));
    }

    #[test]
    fn a_failure_is_one_line_wherever_it_came_from() {
        let cause = Cause::Failed("`python3 -m pip download` failed\n  (exit status: 1)".into());
        assert_eq!(
            cause.reason(),
            "`python3 -m pip download` failed (exit status: 1)"
        );
        let text = explanation(&facts(&cause, &[], &Rerun::EveryBuild));
        assert!(text.contains("  - nothing else\n"));
    }

    #[test]
    fn the_link_name_says_what_to_do_for_each_cause() {
        let name = |blocked: Vec<Skip>| {
            link_name(
                "2.21.0",
                &Cause::NothingFound {
                    download_blocked: blocked,
                },
            )
        };
        assert_eq!(
            name(vec![Skip::FeatureOff]),
            "NOT-FOUND-libtensorflow-2.21.0--set-TF_IAWARE_LIB_DIR--or-enable-feature-download\
             --every-way-out-in-the-txt-file-above"
        );
        assert!(name(vec![Skip::Offline, Skip::CargoOffline])
            .contains("--or-unset-TF_IAWARE_OFFLINE-and-unset-CARGO_NET_OFFLINE--"));
        assert!(name(vec![]).contains("--or-install-tensorflow-cpu-2.21.0--"));
        let failed = link_name("2.21.0", &Cause::Failed("x".into()));
        assert!(failed.contains("--the-error-is--every-way-out-in-the-txt-file-above"));
    }

    #[test]
    fn link_names_are_one_path_component_that_rustc_and_the_linker_keep() {
        let causes = [
            Cause::NothingFound {
                download_blocked: vec![Skip::FeatureOff, Skip::Offline, Skip::CargoOffline],
            },
            Cause::Failed("a: b = c/d".into()),
        ];
        for cause in &causes {
            let name = link_name("2.21.0", cause);
            assert!(name.len() < 255, "{name}");
            assert!(
                name.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c)),
                "{name}"
            );
        }
    }

    #[test]
    fn the_link_path_lies_under_the_explanation_file_unless_rustc_would_misread_it() {
        let cause = Cause::Failed("x".into());
        let file = Path::new("/t/out").join(WHY_FILE);
        let path = link_path(Some(&file), "2.21.0", &cause);
        assert_eq!(path.parent(), Some(file.as_path()));
        let odd = Path::new("/t:1/out").join(WHY_FILE);
        assert_eq!(
            link_path(Some(&odd), "2.21.0", &cause),
            PathBuf::from(link_name("2.21.0", &cause))
        );
        assert_eq!(
            link_path(None, "2.21.0", &cause),
            PathBuf::from(link_name("2.21.0", &cause))
        );
    }
}

//! Which discovery steps run, and why the others do not — decided from the switches alone, with no
//! I/O, so the order and the effect of every switch are unit-tested (`tests/build_logic.rs`).

use crate::vars;

/// The switches that decide the plan, read once from the environment by `main`.
#[derive(Clone, Debug, Default)]
pub struct Switches {
    /// `TF_IAWARE_NO_LINK`: find, fetch and link nothing.
    pub no_link: bool,
    /// `DOCS_RS`: a docs.rs build, treated as `no_link`.
    pub docs_rs: bool,
    /// `TF_IAWARE_NO_PKG_CONFIG`: skip step 2.
    pub no_pkg_config: bool,
    /// `TF_IAWARE_NO_PYTHON`: skip step 3.
    pub no_python: bool,
    /// `TF_IAWARE_WHEEL` is set: step 4 extracts that wheel instead of downloading one.
    pub local_wheel: bool,
    /// The crate's `download` feature (`CARGO_FEATURE_DOWNLOAD`).
    pub download_feature: bool,
    /// `TF_IAWARE_OFFLINE`.
    pub offline: bool,
    /// `CARGO_NET_OFFLINE` (cargo's `net.offline` set in the environment).
    pub cargo_offline: bool,
}

/// One discovery step; [`Step::ALL`] lists them in the order they are tried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// 1. `TF_IAWARE_LIB_DIR` (nothing to do when unset).
    LibDir,
    /// 2. pkg-config `tensorflow`.
    PkgConfig,
    /// 3. An installed Python `tensorflow`/`tensorflow-cpu` package.
    Python,
    /// 4a. A finished extract of the pinned wheel in the per-user cache (no network).
    Cache,
    /// 4b. The wheel named by `TF_IAWARE_WHEEL`, checksummed and extracted into the cache.
    LocalWheel,
    /// 4c. The pinned wheel fetched with `pip download`, checksummed and extracted into the cache.
    Download,
}

/// Why a step is not tried.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Skip {
    /// `TF_IAWARE_NO_PKG_CONFIG` is set.
    NoPkgConfig,
    /// `TF_IAWARE_NO_PYTHON` is set.
    NoPython,
    /// The `download` feature is off.
    FeatureOff,
    /// `TF_IAWARE_OFFLINE` is set.
    Offline,
    /// `CARGO_NET_OFFLINE` is set.
    CargoOffline,
}

/// What the build script does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Plan {
    /// Look for nothing and link nothing (`TF_IAWARE_NO_LINK` or `DOCS_RS`).
    NotLinked,
    /// Try `steps` in order, first hit wins; `skipped` lists the steps left out and why (a step
    /// may appear once per reason).
    Search {
        steps: Vec<Step>,
        skipped: Vec<(Step, Skip)>,
    },
}

impl Plan {
    /// Why the download (step 4c) is left out; empty when it is tried or a local wheel replaces it.
    pub fn download_blocked(&self) -> Vec<Skip> {
        match self {
            Plan::NotLinked => Vec::new(),
            Plan::Search { skipped, .. } => skipped
                .iter()
                .filter(|(step, _)| *step == Step::Download)
                .map(|(_, why)| *why)
                .collect(),
        }
    }
}

impl Step {
    /// Every step, in discovery order.
    pub const ALL: [Step; 6] = [
        Step::LibDir,
        Step::PkgConfig,
        Step::Python,
        Step::Cache,
        Step::LocalWheel,
        Step::Download,
    ];

    /// Short name used in the notes of what was tried.
    pub fn label(self) -> &'static str {
        match self {
            Step::LibDir => vars::LIB_DIR,
            Step::PkgConfig => "pkg-config",
            Step::Python => "python",
            Step::Cache => "cache",
            Step::LocalWheel => vars::WHEEL,
            Step::Download => "download",
        }
    }
}

impl Skip {
    /// The reason, as the notes and the deferred link error spell it.
    pub fn reason(self) -> String {
        match self {
            Skip::NoPkgConfig => format!("{} is set", vars::NO_PKG_CONFIG),
            Skip::NoPython => format!("{} is set", vars::NO_PYTHON),
            Skip::FeatureOff => "the `download` feature of tf-iaware-sys is off".into(),
            Skip::Offline => format!("{} is set", vars::OFFLINE),
            Skip::CargoOffline => format!("{} is set", vars::CARGO_NET_OFFLINE),
        }
    }
}

/// The note for a step left out, e.g. `pkg-config: skipped (TF_IAWARE_NO_PKG_CONFIG is set)`.
pub fn skip_note(step: Step, why: Skip) -> String {
    format!("{}: skipped ({})", step.label(), why.reason())
}

/// Decides the plan. A local wheel replaces the download (it is not a download, so neither the
/// feature nor offline mode blocks it); the cache is always read, since reading it needs no network.
pub fn plan(s: &Switches) -> Plan {
    if s.no_link || s.docs_rs {
        return Plan::NotLinked;
    }
    let mut steps = vec![Step::LibDir];
    let mut skipped = Vec::new();
    let mut step_unless = |step: Step, skip: Option<Skip>| match skip {
        Some(why) => skipped.push((step, why)),
        None => steps.push(step),
    };
    step_unless(
        Step::PkgConfig,
        s.no_pkg_config.then_some(Skip::NoPkgConfig),
    );
    step_unless(Step::Python, s.no_python.then_some(Skip::NoPython));
    step_unless(Step::Cache, None);
    if s.local_wheel {
        step_unless(Step::LocalWheel, None);
    } else {
        let blocked = [
            (!s.download_feature).then_some(Skip::FeatureOff),
            s.offline.then_some(Skip::Offline),
            s.cargo_offline.then_some(Skip::CargoOffline),
        ];
        if blocked.iter().all(Option::is_none) {
            step_unless(Step::Download, None);
        }
        for why in blocked.into_iter().flatten() {
            step_unless(Step::Download, Some(why));
        }
    }
    Plan::Search { steps, skipped }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn online() -> Switches {
        Switches {
            download_feature: true,
            ..Switches::default()
        }
    }

    fn steps(s: &Switches) -> Vec<Step> {
        match plan(s) {
            Plan::Search { steps, .. } => steps,
            Plan::NotLinked => panic!("expected a search for {s:?}"),
        }
    }

    #[test]
    fn default_build_tries_every_step_in_order() {
        use Step::*;
        assert_eq!(
            steps(&online()),
            [LibDir, PkgConfig, Python, Cache, Download]
        );
        assert!(plan(&online()).download_blocked().is_empty());
    }

    #[test]
    fn steps_tried_and_skipped_follow_the_discovery_order() {
        let position = |step: &Step| Step::ALL.iter().position(|s| s == step);
        for bits in 0u8..64 {
            let s = Switches {
                no_pkg_config: bits & 1 != 0,
                no_python: bits & 2 != 0,
                local_wheel: bits & 4 != 0,
                download_feature: bits & 8 != 0,
                offline: bits & 16 != 0,
                cargo_offline: bits & 32 != 0,
                ..Switches::default()
            };
            let Plan::Search { steps, skipped } = plan(&s) else {
                panic!("expected a search for {s:?}");
            };
            let tried: Vec<_> = steps.iter().map(position).collect();
            assert!(tried.windows(2).all(|w| w[0] < w[1]), "{s:?}: {steps:?}");
            for (step, _) in &skipped {
                assert!(
                    !steps.contains(step),
                    "{s:?}: {step:?} both tried and skipped"
                );
            }
            assert_eq!(steps[0], Step::LibDir, "{s:?}");
            assert!(steps.contains(&Step::Cache), "{s:?}");
        }
    }

    #[test]
    fn no_link_and_docs_rs_look_for_nothing_whatever_else_is_set() {
        for s in [
            Switches {
                no_link: true,
                ..online()
            },
            Switches {
                docs_rs: true,
                ..online()
            },
            Switches {
                docs_rs: true,
                local_wheel: true,
                download_feature: false,
                ..online()
            },
        ] {
            assert_eq!(plan(&s), Plan::NotLinked, "{s:?}");
        }
    }

    #[test]
    fn each_reason_that_blocks_the_download_is_named_and_the_cache_is_still_read() {
        let cases = [
            (
                Switches {
                    download_feature: false,
                    ..online()
                },
                vec![Skip::FeatureOff],
            ),
            (
                Switches {
                    offline: true,
                    ..online()
                },
                vec![Skip::Offline],
            ),
            (
                Switches {
                    cargo_offline: true,
                    ..online()
                },
                vec![Skip::CargoOffline],
            ),
            (
                Switches {
                    download_feature: false,
                    offline: true,
                    cargo_offline: true,
                    ..online()
                },
                vec![Skip::FeatureOff, Skip::Offline, Skip::CargoOffline],
            ),
        ];
        for (s, why) in cases {
            let p = plan(&s);
            assert_eq!(p.download_blocked(), why, "{s:?}");
            let steps = steps(&s);
            assert!(!steps.contains(&Step::Download), "{s:?}");
            assert_eq!(steps.last(), Some(&Step::Cache), "{s:?}");
        }
    }

    #[test]
    fn a_local_wheel_replaces_the_download_even_offline_or_without_the_feature() {
        for s in [
            Switches {
                local_wheel: true,
                ..online()
            },
            Switches {
                local_wheel: true,
                download_feature: false,
                offline: true,
                cargo_offline: true,
                ..online()
            },
        ] {
            let p = plan(&s);
            assert_eq!(steps(&s).last(), Some(&Step::LocalWheel), "{s:?}");
            assert!(!steps(&s).contains(&Step::Download), "{s:?}");
            assert!(p.download_blocked().is_empty(), "{s:?}");
        }
    }

    #[test]
    fn skip_switches_drop_only_their_step() {
        use Step::*;
        let s = Switches {
            no_pkg_config: true,
            no_python: true,
            ..online()
        };
        assert_eq!(steps(&s), [LibDir, Cache, Download]);
        let Plan::Search { skipped, .. } = plan(&s) else {
            panic!("expected a search");
        };
        assert_eq!(
            skipped,
            [(PkgConfig, Skip::NoPkgConfig), (Python, Skip::NoPython)]
        );
        assert_eq!(
            skip_note(PkgConfig, Skip::NoPkgConfig),
            "pkg-config: skipped (TF_IAWARE_NO_PKG_CONFIG is set)"
        );
    }
}

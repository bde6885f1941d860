//! `--cluster` spec strings (docs/src/guide/cluster-specs.md): `local`, `local:cpu=N`, `tf-config`,
//! `tf-config:PATH`, `emulated:SCENARIO`, `synthetic:workers=N:…` (see
//! `synthetic`).

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use crate::error::{Error, Result};
use crate::limits::MAX_LOCAL_CPUS;

/// A parsed `--cluster` value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClusterSpec {
    /// In-process devices as TensorFlow creates them (CPU:0 and any GPUs).
    Local,
    /// `N` CPU devices in one process (ConfigProto `device_count`).
    LocalCpu(usize),
    /// A TF_CONFIG cluster: from the `TF_CONFIG` environment variable (`None`) or a file.
    TfConfig(Option<PathBuf>),
    /// Local worker processes with unequal, shaped capacity; the scenario text.
    Emulated(String),
    /// Many heterogeneous workers drawn from distributions, for the simulator and the planners
    /// only (nothing runs); the text after `synthetic:`, checked by
    /// [`SyntheticSpec::parse`](super::SyntheticSpec::parse).
    Synthetic(String),
}

impl ClusterSpec {
    /// Parses a spec string.
    ///
    /// # Errors
    /// [`Error::ClusterSpec`] naming the string and what is wrong with it.
    pub fn parse(spec: &str) -> Result<ClusterSpec> {
        let bad = |reason: String| Error::ClusterSpec {
            spec: spec.into(),
            reason,
        };
        let (kind, arg) = match spec.split_once(':') {
            Some((k, a)) => (k, Some(a)),
            None => (spec, None),
        };
        match (kind, arg) {
            ("local", None) => Ok(ClusterSpec::Local),
            ("local", Some(arg)) => {
                let n = arg
                    .strip_prefix("cpu=")
                    .ok_or_else(|| bad(format!("expected `local:cpu=N`, got `local:{arg}`")))?;
                let n: usize = n
                    .parse()
                    .map_err(|_| bad(format!("`{n}` is not a whole number of CPU devices")))?;
                if n == 0 || n > MAX_LOCAL_CPUS {
                    return Err(bad(format!(
                        "cpu={n}: the number of CPU devices must be 1..={MAX_LOCAL_CPUS}"
                    )));
                }
                Ok(ClusterSpec::LocalCpu(n))
            }
            ("tf-config", None) => Ok(ClusterSpec::TfConfig(None)),
            ("tf-config", Some("")) => {
                Err(bad("`tf-config:` needs a file path after the colon".into()))
            }
            ("tf-config", Some(path)) => Ok(ClusterSpec::TfConfig(Some(PathBuf::from(path)))),
            ("emulated", Some(s)) if !s.is_empty() => Ok(ClusterSpec::Emulated(s.into())),
            ("synthetic", Some(s)) => {
                super::SyntheticSpec::parse(spec)?;
                Ok(ClusterSpec::Synthetic(s.into()))
            }
            ("synthetic", None) => Err(bad(
                "`synthetic` needs fields, e.g. synthetic:workers=1000:ps=16:avail=beta(2,2)".into(),
            )),
            ("emulated", _) => Err(bad(
                "`emulated:` needs a scenario name or an inline description".into(),
            )),
            _ => Err(bad(
                "expected one of local, local:cpu=N, tf-config, tf-config:PATH, emulated:SCENARIO, \
                 synthetic:workers=N:…"
                    .into(),
            )),
        }
    }
}

impl FromStr for ClusterSpec {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        ClusterSpec::parse(s)
    }
}

impl fmt::Display for ClusterSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClusterSpec::Local => write!(f, "local"),
            ClusterSpec::LocalCpu(n) => write!(f, "local:cpu={n}"),
            ClusterSpec::TfConfig(None) => write!(f, "tf-config"),
            ClusterSpec::TfConfig(Some(p)) => write!(f, "tf-config:{}", p.display()),
            ClusterSpec::Emulated(s) => write!(f, "emulated:{s}"),
            ClusterSpec::Synthetic(s) => write!(f, "synthetic:{s}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_form_and_round_trips() {
        for s in [
            "local",
            "local:cpu=4",
            "tf-config",
            "tf-config:/tmp/tf.json",
            "emulated:paper",
            "synthetic:workers=8:ps=2:avail=beta(2,2)",
        ] {
            assert_eq!(ClusterSpec::parse(s).unwrap().to_string(), s);
        }
        assert_eq!(
            ClusterSpec::parse("local:cpu=4").unwrap(),
            ClusterSpec::LocalCpu(4)
        );
    }

    #[test]
    fn rejects_bad_specs_with_the_reason() {
        for (s, needle) in [
            ("local:cpu=0", "1..="),
            ("local:cpu=x", "not a whole number"),
            ("local:gpu=1", "local:cpu=N"),
            ("tf-config:", "file path"),
            ("emulated", "scenario"),
            ("synthetic", "needs fields"),
            ("synthetic:workers=8:cap=normal(1,1)", "field `cap`"),
            ("cloud", "expected one of"),
            ("", "expected one of"),
        ] {
            let err = ClusterSpec::parse(s).unwrap_err().to_string();
            assert!(err.contains(needle), "{s}: {err}");
        }
    }
}

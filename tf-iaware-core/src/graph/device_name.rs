//! TensorFlow device names (`/job:worker/replica:0/task:1/device:CPU:0`), parsed as
//! `DeviceNameUtils` does: full names, partial specs and the legacy `/cpu:0` form.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::device_type::DeviceType;
use crate::error::{Error, Result};

/// A possibly partial device specification; `None` fields are unspecified (match anything).
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DeviceName {
    /// Job name (`/job:…`).
    pub job: Option<String>,
    /// Replica number (`/replica:…`).
    pub replica: Option<u32>,
    /// Task number (`/task:…`).
    pub task: Option<u32>,
    /// Type (`CPU`, `GPU`).
    pub device_type: Option<DeviceType>,
    /// Device number within its type (`/device:CPU:…`).
    pub id: Option<u32>,
}

/// What TensorFlow accepts as a job name, in words ([`is_job_name`]).
pub const JOB_NAME_RULE: &str =
    "a job name must start with an ASCII letter and hold only ASCII letters, digits and '_'";

/// Whether `name` is a job name TensorFlow accepts: `[A-Za-z][A-Za-z0-9_]*`, the grammar of its
/// device names (`DeviceNameUtils`). TensorFlow aborts the process on a server whose job name
/// breaks it, so TF_CONFIG and device strings are checked against it first.
pub fn is_job_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

impl DeviceName {
    /// Parses a device string. The empty string is the empty spec (no constraint).
    ///
    /// # Errors
    /// [`Error::MalformedDevice`] naming the string and the part that is wrong.
    pub fn parse(s: &str) -> Result<DeviceName> {
        let bad = |reason: &str| Error::MalformedDevice {
            device: s.to_string(),
            reason: reason.into(),
        };
        let mut name = DeviceName::default();
        if s.is_empty() {
            return Ok(name);
        }
        let body = s
            .strip_prefix('/')
            .ok_or_else(|| bad("must start with '/'"))?;
        for part in body.split('/') {
            let (key, value) = part
                .split_once(':')
                .ok_or_else(|| bad("each part is key:value"))?;
            let num = |v: &str| -> Result<Option<u32>> {
                if v == "*" {
                    Ok(None)
                } else {
                    v.parse()
                        .map(Some)
                        .map_err(|_| bad(&format!("`{v}` is not a number")))
                }
            };
            match key {
                "job" => {
                    if !is_job_name(value) {
                        return Err(bad(JOB_NAME_RULE));
                    }
                    name.job = Some(value.to_string());
                }
                "replica" => name.replica = num(value)?,
                "task" => name.task = num(value)?,
                "device" => {
                    let (ty, id) = value.split_once(':').unwrap_or((value, "*"));
                    if ty.is_empty() || !ty.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                        return Err(bad("device type must be letters, digits or '_'"));
                    }
                    name.device_type = Some(DeviceType::parse(ty));
                    name.id = num(id)?;
                }
                legacy
                    if legacy.eq_ignore_ascii_case("cpu") || legacy.eq_ignore_ascii_case("gpu") =>
                {
                    name.device_type = Some(DeviceType::parse(legacy));
                    name.id = num(value)?;
                }
                other => return Err(bad(&format!("unknown part `{other}`"))),
            }
        }
        Ok(name)
    }

    /// Whether every field this spec sets equals `full`'s.
    pub fn matches(&self, full: &DeviceName) -> bool {
        fn ok<T: PartialEq>(a: &Option<T>, b: &Option<T>) -> bool {
            a.is_none() || a == b
        }
        ok(&self.job, &full.job)
            && ok(&self.replica, &full.replica)
            && ok(&self.task, &full.task)
            && ok(&self.device_type, &full.device_type)
            && ok(&self.id, &full.id)
    }

    /// Whether every field is set (a concrete device).
    pub fn is_full(&self) -> bool {
        self.job.is_some()
            && self.replica.is_some()
            && self.task.is_some()
            && self.device_type.is_some()
            && self.id.is_some()
    }
}

impl fmt::Display for DeviceName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(job) = &self.job {
            write!(f, "/job:{job}")?;
        }
        if let Some(r) = self.replica {
            write!(f, "/replica:{r}")?;
        }
        if let Some(t) = self.task {
            write!(f, "/task:{t}")?;
        }
        if let Some(ty) = &self.device_type {
            match self.id {
                Some(id) => write!(f, "/device:{ty}:{id}")?,
                None => write!(f, "/device:{ty}:*")?,
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_full_partial_and_legacy_names() {
        let full = DeviceName::parse("/job:localhost/replica:0/task:0/device:CPU:3").unwrap();
        assert!(full.is_full());
        assert_eq!(
            full.to_string(),
            "/job:localhost/replica:0/task:0/device:CPU:3"
        );
        let partial = DeviceName::parse("/device:cpu:3").unwrap();
        assert!(partial.matches(&full));
        assert!(DeviceName::parse("/cpu:3").unwrap().matches(&full));
        assert!(!DeviceName::parse("/gpu:0").unwrap().matches(&full));
        assert!(DeviceName::parse("/job:localhost").unwrap().matches(&full));
        assert_eq!(DeviceName::parse("").unwrap(), DeviceName::default());
    }

    #[test]
    fn rejects_malformed_names() {
        for bad in [
            "cpu:0",
            "/job:",
            "/device:CPU:x",
            "/task:one",
            "/foo:1",
            "/job:a b",
            "//",
        ] {
            let err = DeviceName::parse(bad).unwrap_err();
            assert!(matches!(err, Error::MalformedDevice { .. }), "{bad}: {err}");
        }
    }
}

//! [`LiveStatus`]: what the monitor last said about one device (where the figures come from, how
//! old they are, the shares its availability is made of); [`live`](super::live) derives them
//! from a monitor snapshot.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Where a device's live figures come from.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "String", from = "String")]
pub enum LiveSource {
    /// No reading yet: nominal figures (availability 1, memory as TensorFlow reports).
    #[default]
    Nominal,
    /// This process's own sampler (`local`, `local:cpu=N`).
    LocalSampler,
    /// The metrics agent (or exporter) of the device's task at this address.
    Agent(String),
    /// The last reading failed or is too old: the figures are the last known ones.
    Stale,
}

impl fmt::Display for LiveSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LiveSource::Nominal => write!(f, "nominal"),
            LiveSource::LocalSampler => write!(f, "local-sampler"),
            LiveSource::Agent(a) => write!(f, "agent:{a}"),
            LiveSource::Stale => write!(f, "stale"),
        }
    }
}

impl From<LiveSource> for String {
    fn from(s: LiveSource) -> String {
        s.to_string()
    }
}

impl From<String> for LiveSource {
    fn from(s: String) -> LiveSource {
        match s.as_str() {
            "local-sampler" => LiveSource::LocalSampler,
            "stale" => LiveSource::Stale,
            other => match other.strip_prefix("agent:") {
                Some(a) => LiveSource::Agent(a.to_string()),
                None => LiveSource::Nominal,
            },
        }
    }
}

/// What the monitor last said about one device, beside its [`availability`](super::Device::availability).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct LiveStatus {
    /// Where the figures come from.
    pub source: LiveSource,
    /// Age of the reading when it was applied, ms (`None`: never read).
    #[serde(default)]
    pub age_ms: Option<u64>,
    /// Unix time the reading was taken, ms.
    #[serde(default)]
    pub taken_unix_ms: Option<u64>,
    /// Memory the device could still allocate, bytes (CPU: what the task's cgroup and the host
    /// leave; GPU: NVML free memory).
    #[serde(default)]
    pub free_memory_bytes: Option<u64>,
    /// What co-tenants take of the device: cores of the allotment (CPU), or the share of the
    /// GPU used by other processes (0–1).
    #[serde(default)]
    pub cotenant_load: Option<f64>,
    /// The resources availability is a share of: cores (CPU), 1 (GPU).
    #[serde(default)]
    pub allotment: Option<f64>,
    /// Free share of the allotment (cores no one else used over the last interval), 0–1 (see
    /// [`live`](super::live)).
    #[serde(default)]
    pub free_fraction: Option<f64>,
    /// Share of the allotment the process's own hard cap leaves it (`h`, 0–1; 1 for a GPU).
    #[serde(default)]
    pub hard_share: Option<f64>,
    /// Share of what the hard cap leaves that the process gets under contention (`s`, 0–1).
    #[serde(default)]
    pub contention_share: Option<f64>,
    /// Runnable threads competing with the process for its CPUs and its cgroup's quota (CPU;
    /// `n + k` of [`live`](super::live)), count.
    #[serde(default)]
    pub competing_tasks: Option<f64>,
    /// Hardware fingerprint of the device as the reading describes it (CPU model when known,
    /// logical cores, allotment; GPU name): calibrations are only reused on equal hardware.
    #[serde(default)]
    pub hardware: Option<String>,
    /// Why the figures are not current (unreachable agent, old reading), naming the task.
    #[serde(default)]
    pub warning: Option<String>,
}

impl LiveStatus {
    /// Whether a live reading (fresh or stale) has ever been applied.
    pub fn has_reading(&self) -> bool {
        self.taken_unix_ms.is_some()
    }

    /// Free share of what the hard cap leaves (`f` of [`live`](super::live), 0–1): how much
    /// co-tenants contend for the device (`None`: no reading).
    pub fn contention_free(&self) -> Option<f64> {
        let f = self.free_fraction?;
        Some((f / self.hard_share.unwrap_or(1.0).max(1e-9)).clamp(0.0, 1.0))
    }
}

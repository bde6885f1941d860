//! Calibration through TensorFlow itself, cached as a [`CalibrationProfile`] (with the TensorFlow
//! version and host) until it is stale. Three measurements per cluster:
//!
//! 1. **compute rate** — a MatMul micro-benchmark of known FLOPs pinned to each device, fitted to a
//!    sustained FLOP/s;
//! 2. **op types** — the calibration network trained op by op
//!    (FULL_TRACE step stats) on each device at two batch sizes: per op type a line
//!    `work = intercept + slope × size` ([`OpCostFitter`]); then the device's per-op overhead
//!    (the executor's own time between ops) is the one with which the simulator reproduces the
//!    network's measured step time;
//! 3. **links** — tensors of three sizes produced on one device and consumed on another, timed
//!    against the same consumer on the producing device: `latency + bytes / bandwidth` per
//!    ordered device pair.
//!
//! Files: `compute.rs` (MatMul rates), `network.rs` (op types and overhead), `links.rs`,
//! `replicas.rs` (device speeds from whole-replica timings of the data-parallel calibration) and
//! `workers.rs` (the data-parallel worker calibration's cache).
//!
//! **Capability, not a snapshot of load.** The figures are measured at the availability the
//! monitor reported for each device when the calibration started
//! ([`Device::availability`](crate::cluster::Device::availability), set by
//! `cluster::connect`) and stored divided by it, so a later run
//! multiplies them by *its* live availability. A calibration during which co-tenants took more
//! than `1 − min_free_fraction` of some device is flagged ([`CalibrationProfile::under_load`]) and
//! not cached (`calibrate_and_cache`). The cache lives per user
//! ([`cache_dir`]); [`list_cached`] lists it, `invalidate` drops a cluster's profile.

mod compute;
mod links;
mod network;
mod replicas;
mod workers;

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

pub use crate::runtime::data_parallel::WorkerProbe;
pub use links::{calibrate_links, LINK_BYTES};
pub use replicas::scale_to_replicas;
pub use workers::{
    cached_workers, calibrate_workers_cached, invalidate_workers, WorkerCalibration,
};

use crate::cluster::model::{capability, CalibrationProfile};
use crate::cluster::Cluster;
use crate::config::SessionConfig;
use crate::cost::OpCostFitter;
use crate::error::{Error, Result};
use crate::models::calibration;

/// Timed runs per size (the median counts), after one warm-up run.
const RUNS: usize = 5;
/// A cached profile older than this is recalibrated, seconds (7 days).
pub(crate) const MAX_AGE_S: u64 = 7 * 24 * 3600;

fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map_or_else(|_| "unknown".into(), |h| h.trim().to_string())
}

/// Calibrates every device of `cluster` (compute rate, op-type costs, per-op overhead) and its
/// links; see the module documentation.
///
/// # Errors
/// [`Error::TensorFlow`] if a benchmark cannot run; [`Error::Calibration`] if the times do not fit.
pub(crate) fn calibrate(cluster: &Cluster, config: &SessionConfig) -> Result<CalibrationProfile> {
    let mut profile = CalibrationProfile::new(&crate::tf::version(), &host(), now_s());
    for device in &cluster.devices {
        let samples = compute::time_matmuls(cluster, config, &device.name)?;
        let fit = match profile.add_device_samples(&device.name, &samples) {
            Ok(fit) => fit,
            // A busy host can hide the slope in one round of timings: time once more, and
            // fit both rounds together.
            Err(Error::Calibration { .. }) => {
                log::info!("calibration: {}: timing the MatMuls again", device.name);
                let mut more = compute::time_matmuls(cluster, config, &device.name)?;
                more.extend(samples);
                profile.add_device_samples(&device.name, &more)?
            }
            Err(e) => return Err(e),
        };
        // Capability: what was measured, divided by the share of the device we had.
        let a = device
            .availability
            .clamp(crate::cluster::model::MIN_AVAILABILITY, 1.0);
        if let Some(d) = profile.devices.iter_mut().find(|d| d.name == device.name) {
            d.peak_flops = d.peak_flops.map(|f| capability(f, a));
            d.availability = Some(a);
            d.free_fraction = device.live.free_fraction;
            d.hardware = device.live.hardware.clone();
        }
        log::info!(
            "calibration: {}: {:.2} GFLOP/s measured at availability {a:.2} ({:.2} GFLOP/s capability)",
            device.name,
            fit.peak_flops / 1e9,
            fit.peak_flops / a / 1e9
        );
    }
    // The MatMul fit's intercept is the cost of a whole `Session::run` (a round trip through the
    // executor), not of one op inside a step; the network below measures that.
    for d in &mut profile.devices {
        d.op_overhead = None;
    }
    // Op types are fitted against the calibrated rates, so their work scales with them.
    let mut calibrated = cluster.clone();
    profile.apply(&mut calibrated)?;
    let mut fitter = OpCostFitter::new();
    let mut runs = Vec::new();
    for device in &cluster.devices {
        for batch in calibration::BATCHES {
            runs.push(network::time_network(
                &calibrated,
                config,
                &device.name,
                batch,
                &mut fitter,
            )?);
        }
    }
    profile.op_costs = fitter.fit();
    log::info!(
        "calibration: {} op-type cost lines from {} timed ops",
        profile.op_costs.len(),
        fitter.summary().ops_measured
    );
    // The executor's own time between ops: the per-op overhead that makes the simulator
    // reproduce the measured steps of the calibration network — one figure per host and device
    // type (one executor runs them all), the median over their runs.
    let mut with_costs = calibrated.clone();
    with_costs.op_costs = profile.op_costs.clone();
    let gaps = runs
        .iter()
        .map(|r| r.overhead_to_match(&with_costs))
        .collect::<Result<Vec<f64>>>()?;
    let kind = |name: &str| {
        cluster
            .devices
            .iter()
            .find(|d| d.name == name)
            .map(|d| (d.host.clone(), d.device_type.clone()))
    };
    for device in &cluster.devices {
        let mine = kind(&device.name);
        let mut same: Vec<f64> = runs
            .iter()
            .zip(&gaps)
            .filter(|(r, _)| kind(&r.device) == mine)
            .map(|(_, &g)| g)
            .collect();
        same.sort_by(f64::total_cmp);
        let gap = same.get(same.len() / 2).copied().unwrap_or(0.0);
        if let Some(d) = profile.devices.iter_mut().find(|d| d.name == device.name) {
            d.op_overhead = Some(gap);
        }
        log::info!(
            "calibration: {}: {:.1} µs executor overhead per op",
            device.name,
            gap * 1e6
        );
    }
    calibrate_links(&calibrated, config, &LINK_BYTES, &mut profile)?;
    Ok(profile)
}

/// Contended share of a device (of what its hard cap leaves) below which a calibration counts
/// as taken under heavy co-tenant load (and is not cached): a quarter was lost to others.
pub(crate) const MIN_FREE_FRACTION: f64 = 0.75;

/// Environment variable that overrides [`MIN_FREE_FRACTION`] (a number in 0–1; 0 caches
/// whatever the load).
pub(crate) const MIN_FREE_FRACTION_ENV: &str = "TF_IAWARE_CALIBRATION_MIN_FREE";

/// The per-user cache folder: `$TF_IAWARE_CACHE_DIR`, else `$XDG_CACHE_HOME/tf-iaware`, else
/// `~/.cache/tf-iaware`; profiles are in its `calibration/` folder.
pub fn cache_dir() -> PathBuf {
    std::env::var_os("TF_IAWARE_CACHE_DIR")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("XDG_CACHE_HOME").map(|x| PathBuf::from(x).join("tf-iaware")))
        .or_else(|| std::env::var_os("HOME").map(|x| PathBuf::from(x).join(".cache/tf-iaware")))
        .unwrap_or_else(|| PathBuf::from(".tf-iaware-cache"))
}

/// Where the profile of `cluster` is cached: [`cache_dir`]`/calibration/<host>-<hash>.json`,
/// the hash over the TensorFlow version and the device names. The hardware fingerprint of each
/// device is checked when the profile is read (`apply_cached_status`).
pub fn profile_path(cluster: &Cluster) -> PathBuf {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    crate::tf::version().hash(&mut h);
    cluster
        .devices
        .iter()
        .map(|d| &d.name)
        .collect::<Vec<_>>()
        .hash(&mut h);
    cache_dir()
        .join("calibration")
        .join(format!("{}-{:016x}.json", host(), h.finish()))
}

/// Why `apply_cached_status` did or did not use a cached profile.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CacheStatus {
    /// Whether the cached capabilities were applied.
    pub hit: bool,
    /// The cache file looked at.
    pub path: PathBuf,
    /// Why it was not used (`None` on a hit).
    pub reason: Option<String>,
    /// When the profile was taken, seconds since the Unix epoch (when there is one).
    pub created_unix_s: Option<u64>,
}

/// Applies the cached capabilities of `cluster` when the profile is fresh: same TensorFlow
/// version, host and format, younger than [`MAX_AGE_S`], and taken on the same hardware (each
/// device's fingerprint, where both the profile and the live reading know it). Availability is
/// left as read live.
///
/// # Errors
/// [`Error::Json`] for a cached file that is not a profile; errors of [`CalibrationProfile::apply`].
pub(crate) fn apply_cached_status(cluster: &mut Cluster) -> Result<CacheStatus> {
    let path = profile_path(cluster);
    let miss = |reason: String, created: Option<u64>| CacheStatus {
        hit: false,
        path: path.clone(),
        reason: Some(reason),
        created_unix_s: created,
    };
    let Ok(text) = std::fs::read_to_string(&path) else {
        return Ok(miss("no cached profile".into(), None));
    };
    let profile = CalibrationProfile::from_json(&text, &path.display().to_string())?;
    let created = Some(profile.created_unix_s);
    if profile.is_stale(now_s(), MAX_AGE_S, &crate::tf::version(), &host()) {
        return Ok(miss(
            format!(
                "stale (format {}, TensorFlow {}, host {}, taken at {})",
                profile.format, profile.tf_version, profile.host, profile.created_unix_s
            ),
            created,
        ));
    }
    if profile.under_load {
        return Ok(miss("taken under heavy co-tenant load".into(), created));
    }
    let changed = profile.hardware_changes(cluster);
    if !changed.is_empty() {
        return Ok(miss(
            format!("hardware changed: {}", changed.join("; ")),
            created,
        ));
    }
    profile.apply(cluster)?;
    Ok(CacheStatus {
        hit: true,
        path,
        reason: None,
        created_unix_s: created,
    })
}

/// How `calibrate_and_cache` treats load.
#[derive(Clone, Debug, PartialEq)]
pub struct CalibrateOptions {
    /// Refuse to cache when some device had less than this free share of its allotment
    /// (default: `MIN_FREE_FRACTION_ENV` if set, else `MIN_FREE_FRACTION`).
    pub min_free_fraction: f64,
}

impl Default for CalibrateOptions {
    fn default() -> Self {
        let env = std::env::var(MIN_FREE_FRACTION_ENV)
            .ok()
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|v| (0.0..=1.0).contains(v));
        CalibrateOptions {
            min_free_fraction: env.unwrap_or(MIN_FREE_FRACTION),
        }
    }
}

/// What `calibrate_and_cache` did.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CalibrationOutcome {
    /// The cache file written (`None`: not cached, see `warning`).
    pub cached: Option<PathBuf>,
    /// Why the profile was not cached.
    pub warning: Option<String>,
    /// Per device: availability and free share of its allotment seen while calibrating.
    pub seen: Vec<(String, f64, Option<f64>)>,
    /// Seconds the calibration took.
    pub seconds: f64,
}

/// Devices co-tenants contend for so much that they get less than `min_free` of what their
/// hard cap leaves (the contended share, see
/// [`LiveStatus::contention_share`](crate::cluster::LiveStatus::contention_share)), as
/// `name (share)`. A hard quota alone is exact and normalises exactly; contention is only
/// modelled, so a calibration under it is not trusted.
fn loaded_devices(cluster: &Cluster, min_free: f64) -> Vec<String> {
    cluster
        .devices
        .iter()
        .filter_map(|d| {
            let f = d.live.contention_share?;
            (f < min_free).then(|| format!("{} ({:.0} % of its share)", d.name, f * 100.0))
        })
        .collect()
}

/// Calibrates `cluster` (at its current live availability), applies the profile, and caches it
/// unless co-tenants took more than `1 − options.min_free_fraction` of some device: then the
/// profile is flagged [`CalibrationProfile::under_load`], used for this run only, and the
/// outcome says why.
///
/// # Errors
/// As [`calibrate`]; [`Error::Io`] if the cache cannot be written.
pub(crate) fn calibrate_and_cache(
    cluster: &mut Cluster,
    config: &SessionConfig,
    options: &CalibrateOptions,
) -> Result<CalibrationOutcome> {
    let started = std::time::Instant::now();
    let mut profile = calibrate(cluster, config)?;
    let loaded = loaded_devices(cluster, options.min_free_fraction);
    profile.under_load = !loaded.is_empty();
    let seen = cluster
        .devices
        .iter()
        .map(|d| (d.name.clone(), d.availability, d.live.free_fraction))
        .collect();
    profile.apply(cluster)?;
    let seconds = started.elapsed().as_secs_f64();
    if profile.under_load {
        let warning = format!(
            "calibration ran under heavy co-tenant load ({}; less than {:.0} % free): used for \
             this run, not cached — calibrate again when the machine is quieter, or set {}=0 to \
             cache anyway",
            loaded.join(", "),
            options.min_free_fraction * 100.0,
            MIN_FREE_FRACTION_ENV
        );
        log::warn!("{warning}");
        return Ok(CalibrationOutcome {
            cached: None,
            warning: Some(warning),
            seen,
            seconds,
        });
    }
    let path = profile_path(cluster);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    }
    crate::data::io::write_atomic(&path, profile.to_json()?.as_bytes(), "calibration cache")?;
    Ok(CalibrationOutcome {
        cached: Some(path),
        warning: None,
        seen,
        seconds,
    })
}

/// One cached profile, as [`list_cached`] shows it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CachedProfile {
    /// The file.
    pub path: PathBuf,
    /// Host it was taken on.
    pub host: String,
    /// TensorFlow version that ran it.
    pub tf_version: String,
    /// Profile format ([`PROFILE_FORMAT`](crate::cluster::model::PROFILE_FORMAT) for current ones).
    pub format: u32,
    /// When, seconds since the Unix epoch.
    pub created_unix_s: u64,
    /// Whether it would be reused now (same host, TensorFlow, format; not too old).
    pub fresh: bool,
    /// Devices it describes.
    pub devices: Vec<String>,
    /// Why the file could not be read, if it could not.
    pub error: Option<String>,
}

/// Every profile in the per-user cache, oldest first.
///
/// # Errors
/// [`Error::Io`] if the cache folder exists but cannot be listed.
pub fn list_cached() -> Result<Vec<CachedProfile>> {
    let dir = cache_dir().join("calibration");
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(&dir, e)),
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().and_then(|e| e.to_str()) != Some("json") {
            continue;
        }
        out.push(read_listing(&path));
    }
    out.sort_by_key(|p| p.created_unix_s);
    Ok(out)
}

fn read_listing(path: &Path) -> CachedProfile {
    let parsed = std::fs::read_to_string(path)
        .map_err(|e| e.to_string())
        .and_then(|t| {
            CalibrationProfile::from_json(&t, &path.display().to_string())
                .map_err(|e| e.to_string())
        });
    match parsed {
        Ok(p) => CachedProfile {
            path: path.to_path_buf(),
            fresh: !p.is_stale(now_s(), MAX_AGE_S, &crate::tf::version(), &host()) && !p.under_load,
            host: p.host,
            tf_version: p.tf_version,
            format: p.format,
            created_unix_s: p.created_unix_s,
            devices: p.devices.into_iter().map(|d| d.name).collect(),
            error: None,
        },
        Err(e) => CachedProfile {
            path: path.to_path_buf(),
            host: String::new(),
            tf_version: String::new(),
            format: 0,
            created_unix_s: 0,
            fresh: false,
            devices: Vec::new(),
            error: Some(e),
        },
    }
}

/// Removes the cached profile of `cluster`; returns whether there was one.
///
/// # Errors
/// [`Error::Io`] if it exists but cannot be removed.
pub(crate) fn invalidate(cluster: &Cluster) -> Result<bool> {
    let path = profile_path(cluster);
    match std::fs::remove_file(&path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(Error::io(&path, e)),
    }
}

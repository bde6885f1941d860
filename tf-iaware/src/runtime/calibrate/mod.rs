//! Calibration through TensorFlow itself, cached as a [`CalibrationProfile`] (with the TensorFlow
//! version and host) until it is stale. Three measurements per cluster:
//!
//! 1. **compute rate** — a MatMul micro-benchmark of known FLOPs pinned to each device, fitted to a
//!    sustained FLOP/s;
//! 2. **op types** — the [calibration network](crate::models::calibration) trained op by op
//!    (FULL_TRACE step stats) on each device at two batch sizes: per op type a line
//!    `work = intercept + slope × size` ([`OpCostFitter`]); then the device's per-op overhead
//!    (the executor's own time between ops) is the one with which the simulator reproduces the
//!    network's measured step time;
//! 3. **links** — tensors of three sizes produced on one device and consumed on another, timed
//!    against the same consumer on the producing device: `latency + bytes / bandwidth` per
//!    ordered device pair.
//!
//! Files: `compute.rs` (MatMul rates), `network.rs` (op types and overhead), `links.rs`, and
//! `replicas.rs` (device speeds from whole-replica timings of the data-parallel calibration).

mod compute;
mod links;
mod network;
mod replicas;

use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

pub use links::{calibrate_links, LINK_BYTES};
pub use replicas::scale_to_replicas;

use super::config::SessionConfig;
use crate::cluster::model::CalibrationProfile;
use crate::cluster::Cluster;
use crate::cost::OpCostFitter;
use crate::error::{Error, Result};
use crate::models::calibration;

/// Timed runs per size (the median counts), after one warm-up run.
const RUNS: usize = 5;
/// A cached profile older than this is recalibrated, seconds (7 days).
pub const MAX_AGE_S: u64 = 7 * 24 * 3600;

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
pub fn calibrate(cluster: &Cluster, config: &SessionConfig) -> Result<CalibrationProfile> {
    let mut profile = CalibrationProfile::new(&crate::tf::version(), &host(), now_s());
    for device in &cluster.devices {
        let samples = compute::time_matmuls(cluster, config, &device.name)?;
        let fit = profile.add_device_samples(&device.name, &samples)?;
        log::info!(
            "calibration: {}: {:.2} GFLOP/s",
            device.name,
            fit.peak_flops / 1e9
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
            .map(|d| (d.host.clone(), d.device_type.to_ascii_uppercase()))
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

/// Where the profile of `cluster` is cached: `$TF_IAWARE_CACHE_DIR` (or `$XDG_CACHE_HOME/tf-iaware`,
/// or `~/.cache/tf-iaware`)`/calibration/<host>-<hash of the device names>.json`.
pub fn profile_path(cluster: &Cluster) -> PathBuf {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    cluster
        .devices
        .iter()
        .map(|d| &d.name)
        .collect::<Vec<_>>()
        .hash(&mut h);
    let root = std::env::var_os("TF_IAWARE_CACHE_DIR")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("XDG_CACHE_HOME").map(|x| PathBuf::from(x).join("tf-iaware")))
        .or_else(|| std::env::var_os("HOME").map(|x| PathBuf::from(x).join(".cache/tf-iaware")))
        .unwrap_or_else(|| PathBuf::from(".tf-iaware-cache"));
    root.join("calibration")
        .join(format!("{}-{:016x}.json", host(), h.finish()))
}

/// Applies the cached profile of `cluster` if there is a fresh one (same TensorFlow version and
/// host, younger than [`MAX_AGE_S`]); returns whether it did.
///
/// # Errors
/// [`Error::Json`] for a cached file that is not a profile; errors of [`CalibrationProfile::apply`].
pub fn apply_cached(cluster: &mut Cluster) -> Result<bool> {
    let path = profile_path(cluster);
    let Ok(text) = std::fs::read_to_string(&path) else {
        return Ok(false);
    };
    let profile = CalibrationProfile::from_json(&text, &path.display().to_string())?;
    if profile.is_stale(now_s(), MAX_AGE_S, &crate::tf::version(), &host()) {
        return Ok(false);
    }
    profile.apply(cluster)?;
    Ok(true)
}

/// Calibrates `cluster`, stores the profile in its cache file and applies it.
///
/// # Errors
/// As [`calibrate`]; [`Error::Io`] if the cache cannot be written.
pub fn calibrate_and_store(cluster: &mut Cluster, config: &SessionConfig) -> Result<PathBuf> {
    let profile = calibrate(cluster, config)?;
    let path = profile_path(cluster);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    }
    std::fs::write(&path, profile.to_json()?).map_err(|e| Error::io(&path, e))?;
    profile.apply(cluster)?;
    Ok(path)
}

//! Calibration through TensorFlow itself: a MatMul micro-benchmark of known FLOPs pinned to each
//! device, timed through a session, fitted to a sustained FLOP/s and a per-op overhead, and
//! cached as a [`CalibrationProfile`] (with the TensorFlow version and host) until it is stale.

use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use tensorflow::DataType;

use super::config::SessionConfig;
use super::session::PlacedSession;
use crate::apply;
use crate::cluster::model::CalibrationProfile;
use crate::cluster::Cluster;
use crate::error::{Error, Result};
use crate::graph::analyze::analyze_graph;
use crate::models::builder::Net;
use crate::placer::Placement;

/// Square MatMul sizes timed on every device.
const SIZES: [i64; 3] = [128, 256, 512];
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

/// Times `SIZES` MatMuls on every device of `cluster` and fits each device's sustained FLOP/s.
/// Per-op overheads and links keep their nominal figures.
///
/// # Errors
/// [`Error::TensorFlow`] if a benchmark cannot run; [`Error::Calibration`] if the times do not fit.
pub fn calibrate(cluster: &Cluster, config: &SessionConfig) -> Result<CalibrationProfile> {
    let mut profile = CalibrationProfile::new(&crate::tf::version(), &host(), now_s());
    for device in &cluster.devices {
        let samples = time_matmuls(cluster, config, &device.name)?;
        let fit = profile.add_device_samples(&device.name, &samples)?;
        log::info!(
            "calibration: {}: {:.2} GFLOP/s",
            device.name,
            fit.peak_flops / 1e9
        );
    }
    // The fit's intercept is the cost of a whole `Session::run` (a round trip through the
    // executor), not of one op inside a step: keep the per-op overhead the cluster model has.
    for d in &mut profile.devices {
        d.op_overhead = None;
    }
    Ok(profile)
}

/// (FLOPs, seconds) of one MatMul per size on `device`.
fn time_matmuls(
    cluster: &Cluster,
    config: &SessionConfig,
    device: &str,
) -> Result<Vec<(f64, f64)>> {
    let mut net = Net::new(7);
    let sums = net.on_device(Some(device.to_string()), |n| {
        let mut sums = Vec::new();
        for size in SIZES {
            let a = n.synthetic_input(&format!("calibration_{size}/a"), &[size, size], false)?;
            let b = n.synthetic_input(&format!("calibration_{size}/b"), &[size, size], false)?;
            let c = n.op(
                "MatMul",
                &format!("calibration_{size}/matmul"),
                &[a, b],
                |d| {
                    d.set_attr_type("T", DataType::Float)?;
                    d.set_attr_bool("transpose_a", false)?;
                    Ok(d.set_attr_bool("transpose_b", false)?)
                },
            )?;
            // Fetch one element, so the timing is the MatMul's, not a transfer's.
            let c = tensorflow::Output {
                operation: c,
                index: 0,
            };
            let begin = n.const_i32(&format!("calibration_{size}/begin"), &[0, 0])?;
            let one = n.const_i32(&format!("calibration_{size}/size"), &[1, 1])?;
            sums.push(n.op(
                "Slice",
                &format!("calibration_{size}/corner"),
                &[c, begin, one],
                |d| {
                    d.set_attr_type("T", DataType::Float)?;
                    Ok(d.set_attr_type("Index", DataType::Int32)?)
                },
            )?);
        }
        Ok(sums)
    })?;
    net.on_device(Some(device.to_string()), |n| n.init_op())?;
    let analyzed = analyze_graph(net.graph())?;
    let placement = Placement {
        strategy: "calibration".into(),
        devices: net.placement().clone(),
    };
    let placed = apply::apply(&analyzed.graph_def, &analyzed.op_graph, cluster, &placement)?;
    let session = PlacedSession::new(placed.graph, config)?;
    session.run(&[], &[session.op("init", "calibration")?], &[], false)?;
    let mut out = Vec::with_capacity(SIZES.len());
    for (size, op) in SIZES.iter().zip(sums) {
        session.run(&[], &[], std::slice::from_ref(&op), false)?;
        let mut times: Vec<f64> = (0..RUNS)
            .map(|_| {
                session
                    .run(&[], &[], std::slice::from_ref(&op), false)
                    .map(|r| r.wall.as_secs_f64())
            })
            .collect::<Result<_>>()?;
        times.sort_by(f64::total_cmp);
        out.push((2.0 * (*size as f64).powi(3), times[RUNS / 2]));
    }
    Ok(out)
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

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
//! Files: `compute.rs` (MatMul rates), `network.rs` (op types and overhead), `links.rs`, and
//! `replicas.rs` (device speeds from whole-replica timings of the data-parallel calibration).
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

use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

pub use crate::runtime::data_parallel::WorkerProbe;
pub use links::{calibrate_links, LINK_BYTES};
pub use replicas::scale_to_replicas;

use crate::cluster::model::{capability, CalibrationProfile};
use crate::cluster::{Cluster, DeviceType};
use crate::config::SessionConfig;
use crate::cost::OpCostFitter;
use crate::error::{Error, Result};
use crate::models::calibration;
use crate::runtime::replicated::Workload;

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
        let fit = profile.add_device_samples(&device.name, &samples)?;
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

// ----- Data-parallel worker calibration cache ---------------------------------------------------

/// Version of [`WorkerProfile`]: 3 is probed interleaved with equal workers pooled
/// ([`calibrate_workers`](super::data_parallel::calibrate_workers)); 4 also records each
/// worker's measured noise ([`WorkerCapacity::step_rel_se`](crate::parallel::WorkerCapacity::step_rel_se),
/// which settles near-tied plans); 5 times workers at the shares a plan can give them too
/// ([`WorkerProbe::global_batch`]). Earlier ones are stale.
const WORKER_PROFILE_FORMAT: u32 = 5;

/// A cached data-parallel calibration: each worker's figures, measured at the availability they
/// record ([`WorkerCapacity::availability`](crate::parallel::WorkerCapacity::availability)), with
/// the hardware fingerprint of its device.
#[derive(Clone, Debug, PartialEq, Serialize, serde::Deserialize)]
pub(crate) struct WorkerProfile {
    /// [`WORKER_PROFILE_FORMAT`] when written.
    pub format: u32,
    /// TensorFlow version that ran the steps.
    pub tf_version: String,
    /// Zoo model trained.
    pub model: String,
    /// Largest probe batch.
    pub probe_batch: usize,
    /// The global batch whose shares were probed too ([`WorkerProbe::global_batch`]).
    #[serde(default)]
    pub global_batch: Option<usize>,
    /// When, seconds since the Unix epoch.
    pub created_unix_s: u64,
    /// Per worker: figures and hardware fingerprint when calibrated.
    pub workers: Vec<(crate::parallel::WorkerCapacity, Option<String>)>,
}

/// What [`calibrate_workers_cached`] did.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WorkerCalibration {
    /// The figures (calibrated now, or from the cache), at the availability each records.
    pub capacity: Vec<crate::parallel::WorkerCapacity>,
    /// Whether they came from the cache.
    pub cache_hit: bool,
    /// The cache file.
    pub path: PathBuf,
    /// Why the cache was not used or not written.
    pub note: Option<String>,
    /// Seconds spent (calibrating, or reading the cache).
    pub seconds: f64,
}

/// `10.0.0.1:2222` → `10.0.0.1`.
fn machine_of(host: &str) -> &str {
    match host.rsplit_once(':') {
        Some((m, p)) if p.chars().all(|c| c.is_ascii_digit()) && !m.contains(':') => m,
        _ => host,
    }
}

/// Where the worker calibration of `model` on `workers` (with ps `ps`) is cached:
/// [`cache_dir`]`/workers/<hash>.json`, the hash over the TensorFlow version, model, probe
/// batch, and each worker's and the ps's device name and machine (not port: an emulated
/// cluster's ports change from run to run).
pub(crate) fn workers_profile_path(
    workload: impl Into<Workload>,
    probe: WorkerProbe,
    cluster: &Cluster,
    workers: &[String],
    ps: &str,
) -> PathBuf {
    use std::hash::{Hash, Hasher};
    let workload = workload.into();
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (
        crate::tf::version(),
        workload.cache_key(),
        probe.batch,
        probe.global_batch,
    )
        .hash(&mut h);
    for w in workers
        .iter()
        .map(String::as_str)
        .chain(std::iter::once(ps))
    {
        let machine = cluster
            .index_of(w)
            .map_or("", |i| machine_of(&cluster.devices[i].host));
        (w, machine).hash(&mut h);
    }
    cache_dir().join("workers").join(format!(
        "{}-{:016x}.json",
        workload.name().replace(['/', '.'], "_"),
        h.finish()
    ))
}

/// Removes the cached worker calibration of `workers_profile_path`; returns whether there was one.
///
/// # Errors
/// [`Error::Io`] if it exists but cannot be removed.
pub fn invalidate_workers(
    workload: impl Into<Workload>,
    probe: WorkerProbe,
    cluster: &Cluster,
    workers: &[String],
    ps: &str,
) -> Result<bool> {
    let path = workers_profile_path(workload, probe, cluster, workers, ps);
    match std::fs::remove_file(&path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(Error::io(&path, e)),
    }
}

/// Caps each CPU worker's calibrated throughput at what its cores can do — its allotment
/// (cores) × [`MAX_CPU_CORE_FLOPS`](crate::cluster::calibration::MAX_CPU_CORE_FLOPS) ÷ the
/// workload's FLOPs per sample — keeping its step time at `probe_batch`
/// ([`bound_step_line`](crate::cluster::calibration::bound_step_line)). Workers whose cores or
/// the workload's FLOPs are unknown are left as they are.
fn bound_by_cores(
    capacity: &mut [crate::parallel::WorkerCapacity],
    workload: &Workload,
    cluster: &Cluster,
    probe_batch: usize,
) {
    use crate::cluster::calibration::{bound_step_line, StepLine, MAX_CPU_CORE_FLOPS};
    let per_sample = match workload.flops_per_sample() {
        Ok(f) if f > 0.0 => f,
        Ok(_) => return,
        Err(e) => {
            log::info!("worker calibration: no throughput bound ({e})");
            return;
        }
    };
    for c in capacity {
        let Some(d) = cluster.index_of(&c.device).map(|i| &cluster.devices[i]) else {
            continue;
        };
        let Some(cores) = d
            .live
            .allotment
            .filter(|_| d.device_type == DeviceType::Cpu)
        else {
            continue;
        };
        let max = cores * MAX_CPU_CORE_FLOPS / per_sample;
        let line = StepLine {
            fixed_ms: c.fixed_ms,
            samples_per_sec: c.samples_per_sec,
            at_bound: false,
        };
        let bounded = bound_step_line(line, max, probe_batch);
        if bounded != line {
            log::info!(
                "calibration: {}: {:.0} samples/s is more than {cores:.2} cores can do \
                 ({per_sample:.3e} FLOP per sample); capped at {max:.0} samples/s + {:.1} ms",
                c.device,
                c.samples_per_sec,
                bounded.fixed_ms
            );
            c.samples_per_sec = bounded.samples_per_sec;
            c.fixed_ms = bounded.fixed_ms;
        }
    }
}

/// [`calibrate_workers`](super::data_parallel::calibrate_workers), through the per-user cache:
/// a fresh profile (same TensorFlow version and format, younger than `MAX_AGE_S`, each
/// worker's hardware fingerprint unchanged where known) is reused without running anything —
/// plans then rescale it to the availability now
/// ([`live_capacities`](crate::parallel::live_capacities)). A new calibration is cached unless
/// co-tenants contended for some worker (as `calibrate_and_cache`).
///
/// # Errors
/// As [`calibrate_workers`](super::data_parallel::calibrate_workers); [`Error::Io`] if the
/// cache cannot be written; [`Error::Json`] for a cache file that is not a profile.
pub fn calibrate_workers_cached(
    workload: impl Into<Workload>,
    workers: &[String],
    ps: &str,
    cluster: &Cluster,
    config: &SessionConfig,
    probe: WorkerProbe,
    options: &CalibrateOptions,
) -> Result<WorkerCalibration> {
    let probe_batch = probe.batch;
    let started = std::time::Instant::now();
    let workload = workload.into();
    let path = workers_profile_path(&workload, probe, cluster, workers, ps);
    let hardware = |w: &str| {
        cluster
            .index_of(w)
            .and_then(|i| cluster.devices[i].live.hardware.clone())
    };
    let mut note = None;
    if let Ok(text) = std::fs::read_to_string(&path) {
        let p: WorkerProfile = serde_json::from_str(&text).map_err(|source| Error::Json {
            what: format!("worker calibration {}", path.display()),
            source,
        })?;
        let age = now_s().saturating_sub(p.created_unix_s);
        let same_hw = p
            .workers
            .iter()
            .all(|(c, hw)| match (hw, hardware(&c.device)) {
                (Some(a), Some(b)) => *a == b,
                _ => true,
            });
        let names: Vec<&str> = p.workers.iter().map(|(c, _)| c.device.as_str()).collect();
        let same_workers = names == workers.iter().map(String::as_str).collect::<Vec<_>>();
        if p.format >= WORKER_PROFILE_FORMAT
            && p.tf_version == crate::tf::version()
            && age <= MAX_AGE_S
            && now_s() >= p.created_unix_s
            && same_hw
            && same_workers
        {
            return Ok(WorkerCalibration {
                capacity: p.workers.into_iter().map(|(c, _)| c).collect(),
                cache_hit: true,
                path,
                note: None,
                seconds: started.elapsed().as_secs_f64(),
            });
        }
        note = Some(if same_hw {
            "cached worker calibration is stale".to_string()
        } else {
            "a worker's hardware changed since it was calibrated".to_string()
        });
    }
    let mut capacity =
        super::data_parallel::calibrate_workers(&workload, workers, ps, cluster, config, probe)?;
    bound_by_cores(&mut capacity, &workload, cluster, probe_batch);
    let loaded: Vec<String> = loaded_devices(cluster, options.min_free_fraction)
        .into_iter()
        .filter(|d| workers.iter().any(|w| d.starts_with(w.as_str())))
        .collect();
    if !loaded.is_empty() {
        let why = format!(
            "worker calibration ran under heavy co-tenant load ({}): used for this run, not cached",
            loaded.join(", ")
        );
        log::warn!("{why}");
        return Ok(WorkerCalibration {
            capacity,
            cache_hit: false,
            path,
            note: Some(why),
            seconds: started.elapsed().as_secs_f64(),
        });
    }
    let profile = WorkerProfile {
        format: WORKER_PROFILE_FORMAT,
        tf_version: crate::tf::version(),
        model: workload.cache_key(),
        probe_batch,
        global_batch: probe.global_batch,
        created_unix_s: now_s(),
        workers: capacity
            .iter()
            .map(|c| (c.clone(), hardware(&c.device)))
            .collect(),
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    }
    let text = serde_json::to_string_pretty(&profile).map_err(|source| Error::Json {
        what: "worker calibration".into(),
        source,
    })?;
    crate::data::io::write_atomic(&path, text.as_bytes(), "calibration cache")?;
    Ok(WorkerCalibration {
        capacity,
        cache_hit: false,
        path,
        note,
        seconds: started.elapsed().as_secs_f64(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::Device;
    use crate::parallel::WorkerCapacity;

    #[test]
    fn a_throughput_beyond_the_workers_cores_is_capped_at_the_probe_batch() {
        let mut d = Device::nominal(
            "/job:worker/replica:0/task:0/device:CPU:0",
            "CPU",
            None,
            "h",
        );
        d.live.allotment = Some(0.5);
        let mut gpu = Device::nominal(
            "/job:worker/replica:0/task:1/device:GPU:0",
            "GPU",
            None,
            "h",
        );
        gpu.live.allotment = Some(1.0);
        let cluster = Cluster::new(vec![d.clone(), gpu.clone()]);
        let degenerate = |dev: &Device| WorkerCapacity {
            fixed_ms: 9.0,
            ..WorkerCapacity::rate(&dev.name, 1e9)
        };
        let mut caps = vec![degenerate(&d), degenerate(&gpu)];
        let workload = Workload::from("mlp");
        let per_sample = workload.flops_per_sample().unwrap();
        bound_by_cores(&mut caps, &workload, &cluster, 12);
        let max = 0.5 * crate::cluster::calibration::MAX_CPU_CORE_FLOPS / per_sample;
        assert!((caps[0].samples_per_sec - max).abs() < 1e-6, "{caps:?}");
        let step = |c: &WorkerCapacity| c.step_ms(12);
        assert!((step(&caps[0]) - step(&degenerate(&d))).abs() < 1e-9);
        assert_eq!(caps[1], degenerate(&gpu), "no CPU-core bound on a GPU");
    }
}

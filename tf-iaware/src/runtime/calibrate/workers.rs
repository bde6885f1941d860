//! The data-parallel worker calibration, through the per-user cache: where a calibration of a
//! job's workers is cached, when a cached one is fresh, and the figures capped at what each
//! worker's cores can do.

use std::path::PathBuf;

use serde::Serialize;

use super::{cache_dir, loaded_devices, now_s, CalibrateOptions, WorkerProbe, MAX_AGE_S};
use crate::cluster::{Cluster, DeviceType};
use crate::config::SessionConfig;
use crate::error::{Error, Result};
use crate::runtime::replicated::Workload;

/// Version of [`WorkerProfile`]: 3 is probed interleaved with equal workers pooled
/// ([`calibrate_workers`](crate::runtime::data_parallel::calibrate_workers)); 4 also records each
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

/// The cached worker calibration of `workload` on `workers` when it is fresh (as
/// [`calibrate_workers_cached`] would reuse it), without running anything: `Ok(Some(..))` on a
/// hit, `Ok(None)` without a fresh one.
///
/// # Errors
/// [`Error::Json`] for a cache file that is not a profile.
pub fn cached_workers(
    workload: impl Into<Workload>,
    workers: &[String],
    ps: &str,
    cluster: &Cluster,
    probe: WorkerProbe,
) -> Result<Option<WorkerCalibration>> {
    let started = std::time::Instant::now();
    let (path, cached) = read_workers_cache(&workload.into(), workers, ps, cluster, probe)?;
    Ok(cached.ok().map(|capacity| WorkerCalibration {
        capacity,
        cache_hit: true,
        path,
        note: None,
        seconds: started.elapsed().as_secs_f64(),
    }))
}

/// The cache file of a worker calibration and its figures when fresh (same TensorFlow version
/// and format, younger than `MAX_AGE_S`, the same workers, each worker's hardware fingerprint
/// unchanged where known), else why not (`None`: no file).
type CacheRead = (
    PathBuf,
    std::result::Result<Vec<crate::parallel::WorkerCapacity>, Option<String>>,
);

fn read_workers_cache(
    workload: &Workload,
    workers: &[String],
    ps: &str,
    cluster: &Cluster,
    probe: WorkerProbe,
) -> Result<CacheRead> {
    let path = workers_profile_path(workload, probe, cluster, workers, ps);
    let hardware = |w: &str| {
        cluster
            .index_of(w)
            .and_then(|i| cluster.devices[i].live.hardware.clone())
    };
    let Ok(bytes) =
        crate::data::io::read_bytes_capped(&path, MAX_PROFILE_BYTES, "worker calibration")
    else {
        return Ok((path, Err(None)));
    };
    let text = String::from_utf8_lossy(&bytes);
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
        return Ok((path, Ok(p.workers.into_iter().map(|(c, _)| c).collect())));
    }
    let why = if same_hw {
        "cached worker calibration is stale"
    } else {
        "a worker's hardware changed since it was calibrated"
    };
    Ok((path, Err(Some(why.to_string()))))
}

/// Largest worker calibration file read from the cache, bytes.
const MAX_PROFILE_BYTES: u64 = 4 << 20;

/// [`calibrate_workers`](crate::runtime::data_parallel::calibrate_workers), through the per-user cache:
/// a fresh profile (same TensorFlow version and format, younger than `MAX_AGE_S`, each
/// worker's hardware fingerprint unchanged where known) is reused without running anything —
/// plans then rescale it to the availability now
/// ([`live_capacities`](crate::parallel::live_capacities)). A new calibration is cached unless
/// co-tenants contended for some worker (as `calibrate_and_cache`).
///
/// # Errors
/// As [`calibrate_workers`](crate::runtime::data_parallel::calibrate_workers); [`Error::Io`] if the
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
    let (path, cached) = read_workers_cache(&workload, workers, ps, cluster, probe)?;
    let note = match cached {
        Ok(capacity) => {
            return Ok(WorkerCalibration {
                capacity,
                cache_hit: true,
                path,
                note: None,
                seconds: started.elapsed().as_secs_f64(),
            })
        }
        Err(note) => note,
    };
    let hardware = |w: &str| {
        cluster
            .index_of(w)
            .and_then(|i| cluster.devices[i].live.hardware.clone())
    };
    let mut capacity = crate::runtime::data_parallel::calibrate_workers(
        &workload, workers, ps, cluster, config, probe,
    )?;
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
mod tests;

//! Calibrating each worker's throughput by training on it alone, through TensorFlow itself.

use super::prepare;
use crate::cluster::Cluster;
use crate::config::SessionConfig;
use crate::error::Result;
use crate::parallel::{noise, DataParallelPlan, Replica, WorkerCapacity};
use crate::runtime::replicated::Workload;
use crate::runtime::train::Trainer;

/// Calibrates each worker through TensorFlow itself: trains model `name` on it alone (variables
/// on `ps`) with `probe_batch / 4`, `probe_batch / 2` and `probe_batch` samples — two warm-up
/// steps, then at least three timed steps and `min_seconds` of steps at each, the median
/// counting — and fits a fixed per-step cost and a marginal throughput
/// ([`WorkerCapacity::fit`]).
///
/// Only one worker steps at a time, so they do not disturb each other, but their probes are
/// **interleaved**: one step of each (worker, batch) in turn, round after round, so a change of
/// load on a shared machine (a build starting halfway through) falls on every worker alike
/// instead of on whichever was being probed. Workers whose probe steps cannot be told apart
/// in the noise measured among them get one figure ([`noise::fit_probes`]).
///
/// # Errors
/// As [`train`](super::train).
pub fn calibrate_workers(
    workload: impl Into<Workload>,
    workers: &[String],
    ps: &str,
    cluster: &Cluster,
    config: &SessionConfig,
    probe_batch: usize,
    min_seconds: f64,
) -> Result<Vec<WorkerCapacity>> {
    let workload = workload.into();
    let vars = workload.variables()?;
    let sizes = [
        (probe_batch / 4).max(1),
        (probe_batch / 2).max(2),
        probe_batch.max(3),
    ];
    /// One (worker, batch) probe: its session, the step times so far (ms) and their sum (s).
    struct Slot {
        worker: usize,
        batch: usize,
        trainer: Trainer,
        times: Vec<f64>,
        busy_s: f64,
    }
    let mut slots = Vec::with_capacity(workers.len() * sizes.len());
    for (worker, w) in workers.iter().enumerate() {
        for batch in sizes {
            let plan = DataParallelPlan {
                strategy: "calibration".into(),
                replicas: vec![Replica {
                    device: w.clone(),
                    batch,
                }],
                variable_devices: vars
                    .iter()
                    .map(|v| (v.name.clone(), ps.to_string()))
                    .collect(),
                global_device: ps.to_string(),
                predicted_step_ms: None,
            };
            let (trainer, _, _) = prepare(&workload, &plan, cluster, config, 1)?;
            trainer.init()?;
            trainer.time_step()?;
            trainer.time_step()?;
            slots.push(Slot {
                worker,
                batch,
                trainer,
                times: Vec::new(),
                busy_s: 0.0,
            });
        }
    }
    let done = |s: &Slot| s.times.len() >= 3 && (s.busy_s >= min_seconds || s.times.len() >= 50);
    while !slots.iter().all(done) {
        for slot in slots.iter_mut().filter(|s| !done(s)) {
            let ms = slot.trainer.time_step()?;
            slot.times.push(ms);
            slot.busy_s += ms / 1e3;
        }
    }
    let probes: Vec<noise::Probe> = workers
        .iter()
        .enumerate()
        .map(|(i, w)| noise::Probe {
            device: w.clone(),
            step_ms: slots
                .iter()
                .filter(|s| s.worker == i)
                .map(|s| (s.batch, s.times.clone()))
                .collect(),
        })
        .collect();
    let fit = noise::fit_probes(&probes);
    log::info!(
        "calibration: step-time noise {} ; workers pooled as equal: {:?}",
        fit.spread
            .map_or("unknown".to_string(), |s| format!("{:.0} %", s * 100.0)),
        fit.pooled
    );
    let mut out = fit.capacity;
    for capacity in &mut out {
        // The figures hold at the availability the worker had while it was timed.
        capacity.availability = cluster
            .index_of(&capacity.device)
            .map(|i| cluster.devices[i].availability);
        log::info!(
            "calibration: {}: {:.1} samples/s + {:.0} ms per step",
            capacity.device,
            capacity.samples_per_sec,
            capacity.fixed_ms
        );
    }
    Ok(out)
}

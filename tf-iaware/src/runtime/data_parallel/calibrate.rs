//! Calibrating each worker's throughput by training on it alone, through TensorFlow itself.

use super::prepare;
use crate::cluster::Cluster;
use crate::config::SessionConfig;
use crate::error::Result;
use crate::parallel::{noise, DataParallelPlan, Replica, WorkerCapacity};
use crate::runtime::replicated::Workload;
use crate::runtime::train::Trainer;

/// How [`calibrate_workers`] probes each worker (and
/// [`calibrate_workers_cached`](crate::runtime::calibrate::calibrate_workers_cached), when no
/// cached profile is fresh).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WorkerProbe {
    /// The largest probe step, samples (steps of a quarter and a half of it are timed too); part
    /// of the cache key.
    pub batch: usize,
    /// Least time of timed steps at each probe batch, seconds.
    pub min_seconds: f64,
    /// The global batch plans will split: with it, workers are timed once more at the largest
    /// share a plan could give them ([`noise::operating_batches`]); part of the cache key.
    pub global_batch: Option<usize>,
}

impl From<crate::parallel::ProbeSize> for WorkerProbe {
    /// The planner's probe ([`DataParallelPlanner::probe`](crate::parallel::DataParallelPlanner::probe)),
    /// at least one second of timed steps at each batch.
    fn from(p: crate::parallel::ProbeSize) -> Self {
        WorkerProbe {
            batch: p.batch,
            min_seconds: 1.0,
            global_batch: Some(p.global_batch),
        }
    }
}

/// Calibrates each worker through TensorFlow itself: trains model `name` on it alone (variables
/// on `ps`) with `probe.batch / 4`, `probe.batch / 2` and `probe.batch` samples — two warm-up
/// steps, then at least three timed steps and `probe.min_seconds` of steps at each, the median
/// counting — and fits a fixed per-step cost and a marginal throughput
/// ([`WorkerCapacity::fit`]). With `probe.global_batch`, each worker that a plan could give a
/// share well past the probes is then timed once more at that share
/// ([`noise::operating_batches`]; of workers pooled as equal, the first only), as many steps
/// as at its largest small probe, and fitted again over every probe, so that plans read their
/// shares between measured points rather than extrapolated from small steps.
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
    probe: WorkerProbe,
) -> Result<Vec<WorkerCapacity>> {
    let workload = workload.into();
    let vars = workload.variables()?;
    let p = probe.batch;
    let sizes = [(p / 4).max(1), (p / 2).max(2), p.max(3)];
    let open = |worker: usize, batch: usize, min_steps: usize| -> Result<Slot> {
        let plan = DataParallelPlan {
            strategy: "calibration".into(),
            replicas: vec![Replica {
                device: workers[worker].clone(),
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
        Ok(Slot {
            worker,
            batch,
            trainer,
            times: Vec::new(),
            busy_s: 0.0,
            min_steps,
        })
    };
    let mut slots = Vec::with_capacity(workers.len() * (sizes.len() + 1));
    for worker in 0..workers.len() {
        for batch in sizes {
            slots.push(open(worker, batch, 3)?);
        }
    }
    run_rounds(&mut slots, probe.min_seconds)?;
    let mut fit = noise::fit_probes(&probes_of(workers, &slots));
    if let Some(global) = probe.global_batch {
        let mut extra = Vec::new();
        for (worker, batch, steps) in operating_probes(&fit, workers, global, sizes[2], &slots) {
            extra.push(open(worker, batch, steps)?);
        }
        if !extra.is_empty() {
            log::info!(
                "calibration: timing {} at the shares a plan can give them: {:?}",
                extra.len(),
                extra
                    .iter()
                    .map(|s| (s.worker, s.batch))
                    .collect::<Vec<_>>()
            );
            run_rounds(&mut extra, probe.min_seconds)?;
            slots.extend(extra);
            fit = noise::fit_probes(&probes_of(workers, &slots));
        }
    }
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
    }
    // Workers pooled as one figure were measured alike: one availability normalises them.
    noise::pool_availability(&mut out, &fit.pooled);
    for capacity in &out {
        log::info!(
            "calibration: {}: {:.1} samples/s + {:.0} ms per step",
            capacity.device,
            capacity.samples_per_sec,
            capacity.fixed_ms
        );
    }
    Ok(out)
}

/// The operating probes after a first fit (`fit` of `slots`, the largest small probe `wide`
/// samples): (worker, batch, least steps) for each worker that a plan could give a share well
/// past the probes ([`noise::operating_batches`]), the first of each pooled group standing for
/// all of it, as many steps as its largest small probe took so that its figures are known as
/// well as before (the tie test of near-equal plans reads that count).
fn operating_probes(
    fit: &noise::ProbeFit,
    workers: &[String],
    global: usize,
    wide: usize,
    slots: &[Slot],
) -> Vec<(usize, usize, usize)> {
    let first: Vec<WorkerCapacity> = workers
        .iter()
        .map(|w| {
            fit.capacity
                .iter()
                .find(|c| &c.device == w)
                .cloned()
                .unwrap_or_else(|| WorkerCapacity::rate(w, 0.0))
        })
        .collect();
    // Workers pooled as one figure are one device measured several times.
    let represented: Vec<&str> = fit
        .pooled
        .iter()
        .flat_map(|group| {
            let first = group.iter().min().copied();
            group.iter().filter(move |&&i| Some(i) != first)
        })
        .map(|&i| fit.capacity[i].device.as_str())
        .collect();
    noise::operating_batches(&first, global, wide)
        .into_iter()
        .enumerate()
        .filter(|(worker, _)| !represented.contains(&workers[*worker].as_str()))
        .filter_map(|(worker, batch)| {
            let steps = slots
                .iter()
                .filter(|s| s.worker == worker && s.batch == wide)
                .map(|s| s.times.len())
                .max()
                .unwrap_or(3);
            Some((worker, batch?, steps))
        })
        .collect()
}

/// One (worker, batch) probe: its session, the step times so far (ms) and their sum (s).
struct Slot {
    worker: usize,
    batch: usize,
    trainer: Trainer,
    times: Vec<f64>,
    busy_s: f64,
    /// Least number of timed steps (at least 3).
    min_steps: usize,
}

/// Times one step of each unfinished slot in turn, round after round, until every slot has its
/// least number of steps (at least three) and `min_seconds` of them (or 50 steps).
fn run_rounds(slots: &mut [Slot], min_seconds: f64) -> Result<()> {
    let done = |s: &Slot| {
        s.times.len() >= s.min_steps.clamp(3, 50)
            && (s.busy_s >= min_seconds || s.times.len() >= 50)
    };
    while !slots.iter().all(done) {
        for slot in slots.iter_mut().filter(|s| !done(s)) {
            let ms = slot.trainer.time_step()?;
            slot.times.push(ms);
            slot.busy_s += ms / 1e3;
        }
    }
    Ok(())
}

/// Each worker's probes: the step times of its slots, by batch.
fn probes_of(workers: &[String], slots: &[Slot]) -> Vec<noise::Probe> {
    workers
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
        .collect()
}

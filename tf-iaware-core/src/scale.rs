//! The scale study: how the planners' cost and quality grow with the cluster and the graph, by
//! simulation only (synthetic clusters, synthetic layered DAGs; no TensorFlow, no workers).
//!
//! - Data-parallel strategies ([`DataParallelStrategy`]) over
//!   synthetic clusters of each worker count: time to plan, the simulated step in the
//!   planner's [`crate::sim::data_parallel::DpMode`] (synchronous, backup workers, or asynchronous — there the time to
//!   process one global batch of samples), its lower bound under that mode, the images per
//!   second applied and the share of workers given a replica.
//! - Per-op strategies (HEFT, ETF, …) over layered DAGs of each op count on a fixed number of
//!   devices, and over a fixed graph on each device count: time to place, the simulated step
//!   ([`simulate`](crate::sim::simulate)), its [`lower_bound`](crate::sim::lower_bound) and the share of
//!   devices given an op.
//!
//! `growth` fits `time ∝ size^e` to each planner's sweep (least squares on logs).

use std::fmt;
use std::str::FromStr;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::cluster::{SyntheticCluster, SyntheticSpec};
use crate::cost::CostModel;
use crate::error::{Error, Result};
use crate::parallel::DataParallelStrategy;
use crate::placer::{resolve, OpPlacementStrategy, PlaceOptions};
use crate::sim::data_parallel::{self, DpMode, DpWorkload};
use crate::sim::synthetic::LayeredDag;

/// A strategy [`compare`] runs: a data-parallel one or a per-op one.
///
/// Parsed from either table's names, the data-parallel one first: `infra-aware` is the
/// data-parallel strategy here (as in `bench`); the per-op IA-TF placer is reached as
/// [`OpPlacementStrategy::InfraAware`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Planner {
    /// Replicas with shares of the batch ([`DataParallelStrategy`]).
    DataParallel(DataParallelStrategy),
    /// A device for every op of one graph ([`OpPlacementStrategy`]).
    PerOp(OpPlacementStrategy),
}

impl Planner {
    /// Both tables' names: `data-parallel: …; per-op: …` (for messages and help).
    pub fn known() -> String {
        format!(
            "data-parallel: {}; per-op: {}",
            DataParallelStrategy::known(),
            OpPlacementStrategy::known()
        )
    }
}

impl fmt::Display for Planner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Planner::DataParallel(s) => s.fmt(f),
            Planner::PerOp(s) => s.fmt(f),
        }
    }
}

impl FromStr for Planner {
    type Err = Error;

    /// A data-parallel strategy's name (`sync-backup:K` included), else a per-op one's.
    ///
    /// # Errors
    /// [`Error::UnknownStrategy`] listing both tables; [`Error::InvalidArgument`] for a bad
    /// `sync-backup:K`.
    fn from_str(s: &str) -> Result<Self> {
        match s.parse::<DataParallelStrategy>() {
            Ok(d) => Ok(Planner::DataParallel(d)),
            Err(Error::UnknownStrategy { .. }) => match s.parse::<OpPlacementStrategy>() {
                Ok(p) => Ok(Planner::PerOp(p)),
                Err(_) => Err(Error::UnknownStrategy {
                    name: s.into(),
                    known: Self::known(),
                }),
            },
            Err(e) => Err(e),
        }
    }
}

/// What the study sweeps.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StudyOptions {
    /// Worker counts of the data-parallel sweep and device counts of the per-op device sweep.
    pub workers: Vec<usize>,
    /// Op counts of the per-op graph sweep.
    pub ops: Vec<usize>,
    /// Data-parallel planners.
    pub dp_planners: Vec<DataParallelStrategy>,
    /// Per-op strategies.
    pub per_op: Vec<OpPlacementStrategy>,
    /// Devices of the per-op graph sweep.
    pub per_op_devices: usize,
    /// Ops of the graph of the per-op device sweep.
    pub per_op_ops: usize,
    /// The clusters' distributions, links and seed (its `workers` and `ps` are set per point).
    pub base: SyntheticSpec,
    /// Workers per ps task (`ps = ⌈workers ÷ this⌉`, at most the base spec's `ps` when that is
    /// larger than 1).
    pub workers_per_ps: usize,
    /// Global batch per worker of the data-parallel sweep.
    pub batch_per_worker: usize,
    /// The data-parallel model.
    pub workload: DpWorkload,
    /// Timed runs of each planner per point (the least time is reported).
    pub repeats: usize,
    /// Backup workers of `sync-backup` (each step aggregates N − k gradients).
    #[serde(default = "default_backups")]
    pub backups: usize,
}

fn default_backups() -> usize {
    data_parallel::DEFAULT_BACKUPS
}

impl Default for StudyOptions {
    /// Workers 4 → 1,000 and ops 1k → 100k; every data-parallel planner
    /// ([`DataParallelStrategy::all`], one backup worker); HEFT and ETF on 64
    /// devices and on 10k ops; `avail=beta(2,2):cap=lognormal(0,0.5):net=10gbit/50us`, 64
    /// workers per ps, 32 samples per worker, ResNet-20, best of 3.
    fn default() -> Self {
        StudyOptions {
            workers: vec![4, 16, 64, 256, 1000],
            ops: vec![1_000, 3_000, 10_000, 30_000, 100_000],
            dp_planners: DataParallelStrategy::all().collect(),
            per_op: vec![OpPlacementStrategy::Heft, OpPlacementStrategy::Etf],
            per_op_devices: 64,
            per_op_ops: 10_000,
            base: SyntheticSpec::parse(
                "synthetic:workers=4:avail=beta(2,2):cap=lognormal(0,0.5):net=10gbit/50us",
            )
            .unwrap_or_default(),
            workers_per_ps: 64,
            batch_per_worker: 32,
            workload: DpWorkload::resnet20(),
            repeats: 3,
            backups: data_parallel::DEFAULT_BACKUPS,
        }
    }
}

/// One planner at one size.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StudyRow {
    /// Planner or strategy name.
    pub planner: String,
    /// `data-parallel` or `per-op`.
    pub kind: String,
    /// What this row's sweep varies: `workers` (data-parallel), `ops` or `devices` (per-op).
    pub sweep: String,
    /// Workers (data-parallel) or devices (per-op) of the cluster.
    pub workers: usize,
    /// ps tasks of the cluster.
    pub ps: usize,
    /// Ops of the graph (per-op rows).
    pub ops: Option<usize>,
    /// Global batch (data-parallel rows).
    pub global_batch: Option<usize>,
    /// The size the sweep varies (`workers` or `ops`).
    pub size: usize,
    /// How a data-parallel plan combines gradients: `sync`, `backup` or `async` (`None` for
    /// per-op rows).
    #[serde(default)]
    pub mode: Option<String>,
    /// Least wall time of the planner over the repeats, ms.
    pub plan_ms: f64,
    /// Simulated step of its plan, ms; asynchronous plans: the time the cluster takes to
    /// process one global batch of samples (throughput, not time to accuracy).
    pub predicted_step_ms: f64,
    /// Lower bound of any plan's step under the row's mode, ms (backup plans: for the samples
    /// a step applies; asynchronous plans: for one global batch).
    pub lower_bound_ms: f64,
    /// `predicted_step_ms ÷ lower_bound_ms`.
    pub ratio_to_lower_bound: f64,
    /// Workers given a replica (data-parallel) or devices given an op (per-op).
    pub workers_used: usize,
    /// `workers_used ÷ workers` (devices for per-op rows).
    pub share_used: f64,
    /// Samples whose gradients are applied per second (data-parallel rows).
    #[serde(default)]
    pub images_per_sec: Option<f64>,
}

/// A fitted growth `plan_ms ∝ size^exponent` of one planner's sweep.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Growth {
    /// Planner name.
    pub planner: String,
    /// The sweep (`workers`, `ops`, `devices`).
    pub sweep: String,
    /// Fitted exponent.
    pub exponent: f64,
    /// Points fitted.
    pub points: usize,
}

/// What [`run`] returns.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Study {
    /// The options it ran with.
    pub options: StudyOptions,
    /// One row per (planner, sweep, size).
    pub rows: Vec<StudyRow>,
    /// Growth exponents of plan time per (planner, sweep).
    pub growth: Vec<Growth>,
}

fn invalid(what: &str, reason: String) -> Error {
    Error::InvalidArgument {
        what: what.into(),
        reason,
    }
}

/// Least time of `repeats` runs of `f`, ms, and the last result.
fn timed<T>(repeats: usize, mut f: impl FnMut() -> Result<T>) -> Result<(f64, T)> {
    let mut best = f64::INFINITY;
    let mut out = None;
    for _ in 0..repeats.max(1) {
        let t = Instant::now();
        let r = f()?;
        best = best.min(t.elapsed().as_secs_f64() * 1e3);
        out = Some(r);
    }
    match out {
        Some(r) => Ok((best, r)),
        None => Err(invalid("timed run", "no run".into())),
    }
}

/// The synthetic cluster of `workers` workers and `ps` ps tasks with `base`'s distributions.
pub(crate) fn cluster_of(base: &SyntheticSpec, workers: usize, ps: usize) -> SyntheticCluster {
    SyntheticSpec {
        workers,
        ps,
        ..base.clone()
    }
    .build()
}

/// A data-parallel planner's row on `cluster` for `global_batch` samples of `workload`
/// (`backups`: the k of `sync-backup`).
///
/// # Errors
/// As [`data_parallel::plan`] and `data_parallel::simulate`.
pub(crate) fn dp_row(
    strategy: DataParallelStrategy,
    cluster: &SyntheticCluster,
    workload: &DpWorkload,
    global_batch: usize,
    backups: usize,
    repeats: usize,
) -> Result<StudyRow> {
    let strategy = match strategy {
        DataParallelStrategy::SyncBackup { .. } => DataParallelStrategy::SyncBackup { backups },
        other => other,
    };
    let mode = DpMode::of(strategy);
    let caps = data_parallel::worker_capacities(cluster, workload);
    let net = data_parallel::ps_network(cluster);
    let (plan_ms, plan) = timed(repeats, || {
        data_parallel::plan(strategy, cluster, &caps, workload, global_batch)
    })?;
    let step = data_parallel::simulate(&plan, mode, &caps, &workload.variables, &cluster.ps, &net)?;
    let bound = data_parallel::lower_bound_for(
        mode,
        step.samples_per_step,
        &caps,
        &net,
        workload.variable_bytes(),
    );
    let workers = cluster.workers.len();
    Ok(StudyRow {
        planner: strategy.name().into(),
        kind: "data-parallel".into(),
        sweep: "workers".into(),
        workers,
        ps: cluster.ps.len(),
        ops: None,
        global_batch: Some(global_batch),
        size: workers,
        mode: Some(mode.name().into()),
        plan_ms,
        predicted_step_ms: step.step_ms,
        lower_bound_ms: bound.ms,
        ratio_to_lower_bound: step.step_ms / bound.ms,
        workers_used: step.replicas,
        share_used: step.replicas as f64 / workers as f64,
        images_per_sec: Some(step.images_per_sec),
    })
}

/// A per-op strategy's row: `strategy` placing a layered DAG of `ops` ops on every device of
/// `cluster` (workers and ps), simulated.
///
/// # Errors
/// The strategy's own errors.
pub(crate) fn per_op_row(
    strategy: OpPlacementStrategy,
    cluster: &SyntheticCluster,
    ops: usize,
    sweep: &str,
    repeats: usize,
) -> Result<StudyRow> {
    let width = ((ops as f64).sqrt().round() as usize).max(1);
    let graph = LayeredDag::new(ops, width).build()?;
    let c = &cluster.cluster;
    let cost = CostModel::new(&graph, c)?;
    let s = strategy.build(&PlaceOptions::default())?;
    let (plan_ms, placement) = timed(repeats, || s.place_with_cost(&graph, c, &cost))?;
    let assignment = resolve::assignment(&graph, c, &placement)?;
    let sim = crate::sim::simulate(&cost, &assignment)?;
    let bound = crate::sim::lower_bound(&cost).value();
    let devices = c.devices.len();
    let mut used = vec![false; devices];
    for &d in &assignment {
        used[d] = true;
    }
    let workers_used = used.iter().filter(|&&u| u).count();
    Ok(StudyRow {
        planner: strategy.name().into(),
        kind: "per-op".into(),
        sweep: sweep.into(),
        workers: devices,
        ps: cluster.ps.len(),
        ops: Some(ops),
        global_batch: None,
        size: if sweep == "ops" { ops } else { devices },
        mode: None,
        plan_ms,
        predicted_step_ms: sim.step_time * 1e3,
        lower_bound_ms: bound * 1e3,
        ratio_to_lower_bound: sim.step_time / bound,
        workers_used,
        share_used: workers_used as f64 / devices as f64,
        images_per_sec: None,
    })
}

/// Every strategy of `strategies` on one synthetic cluster: the data-parallel planners
/// ([`Planner::DataParallel`]) for `global_batch` samples of `workload`
/// (`backups` backup workers for `sync-backup`), the others as per-op strategies placing a
/// layered DAG of `ops` ops on all its devices — what `tf-iaware bench --simulate` prints.
///
/// # Errors
/// As `dp_row` and `per_op_row`.
pub fn compare(
    cluster: &SyntheticCluster,
    strategies: &[Planner],
    workload: &DpWorkload,
    global_batch: usize,
    backups: usize,
    ops: usize,
    repeats: usize,
) -> Result<Vec<StudyRow>> {
    crate::limits::check("ops", ops, 1, crate::limits::MAX_OPS)?;
    crate::limits::check("repeats", repeats, 1, crate::limits::MAX_REPEATS)?;
    strategies
        .iter()
        .map(|s| match *s {
            Planner::DataParallel(s) => {
                dp_row(s, cluster, workload, global_batch, backups, repeats)
            }
            Planner::PerOp(s) => per_op_row(s, cluster, ops, "ops", repeats),
        })
        .collect()
}

/// Runs the study, calling `progress` with each row as it is done.
///
/// # Errors
/// [`Error::InvalidArgument`] for empty sweeps or zero sizes; a planner's error.
pub fn run(options: &StudyOptions, progress: &mut dyn FnMut(&StudyRow)) -> Result<Study> {
    if options.workers.is_empty() && options.ops.is_empty() {
        return Err(invalid("scale study", "nothing to sweep".into()));
    }
    for &w in &options.workers {
        crate::limits::check("scale study workers", w, 1, crate::limits::MAX_WORKERS)?;
    }
    for &n in options.ops.iter().chain([&options.per_op_ops]) {
        crate::limits::check("scale study ops", n, 1, crate::limits::MAX_OPS)?;
    }
    crate::limits::check(
        "scale study per-op devices",
        options.per_op_devices,
        1,
        crate::limits::MAX_WORKERS,
    )?;
    if options.workers.iter().chain(&options.ops).any(|&n| n == 0)
        || options.workers_per_ps == 0
        || options.batch_per_worker == 0
        || options.per_op_devices == 0
        || options.per_op_ops == 0
    {
        return Err(invalid(
            "scale study",
            "worker counts, op counts, workers per ps, batch per worker and per-op sizes must be positive"
                .into(),
        ));
    }
    let ps_for = |workers: usize| {
        let ps = workers.div_ceil(options.workers_per_ps).max(1);
        if options.base.ps > 1 {
            ps.min(options.base.ps)
        } else {
            ps
        }
    };
    let mut rows = Vec::new();
    let mut push = |row: StudyRow, rows: &mut Vec<StudyRow>| {
        progress(&row);
        rows.push(row);
    };
    for &w in &options.workers {
        let cluster = cluster_of(&options.base, w, ps_for(w));
        for &p in &options.dp_planners {
            let row = dp_row(
                p,
                &cluster,
                &options.workload,
                w * options.batch_per_worker,
                options.backups,
                options.repeats,
            )?;
            push(row, &mut rows);
        }
    }
    if !options.per_op.is_empty() {
        let fixed = cluster_of(&options.base, options.per_op_devices, 1);
        for &ops in &options.ops {
            for &s in &options.per_op {
                push(
                    per_op_row(s, &fixed, ops, "ops", options.repeats)?,
                    &mut rows,
                );
            }
        }
        for &w in &options.workers {
            let cluster = cluster_of(&options.base, w, 1);
            for &s in &options.per_op {
                let row = per_op_row(s, &cluster, options.per_op_ops, "devices", options.repeats)?;
                push(row, &mut rows);
            }
        }
    }
    let growth = growth(&rows);
    Ok(Study {
        options: options.clone(),
        rows,
        growth,
    })
}

/// Least-squares exponent of `plan_ms ∝ size^e` per (planner, sweep) with at least two
/// distinct sizes.
pub(crate) fn growth(rows: &[StudyRow]) -> Vec<Growth> {
    let mut keys: Vec<(String, String)> = Vec::new();
    for r in rows {
        let k = (r.planner.clone(), r.sweep.clone());
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    keys.into_iter()
        .filter_map(|(planner, sweep)| {
            let pts: Vec<(f64, f64)> = rows
                .iter()
                .filter(|r| r.planner == planner && r.sweep == sweep && r.plan_ms > 0.0)
                .map(|r| ((r.size as f64).ln(), r.plan_ms.ln()))
                .collect();
            let exponent = log_slope(&pts)?;
            Some(Growth {
                planner,
                sweep,
                exponent,
                points: pts.len(),
            })
        })
        .collect()
}

/// Least-squares slope of `points`; `None` with fewer than two distinct x.
fn log_slope(points: &[(f64, f64)]) -> Option<f64> {
    let n = points.len() as f64;
    if points.len() < 2 {
        return None;
    }
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    (sxx > 0.0).then(|| sxy / sxx)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_study_has_one_row_per_planner_and_size() {
        let options = StudyOptions {
            workers: vec![4, 8, 16],
            ops: vec![200, 400],
            per_op_devices: 4,
            per_op_ops: 200,
            repeats: 1,
            ..StudyOptions::default()
        };
        let mut seen = 0;
        let study = run(&options, &mut |_| seen += 1).unwrap();
        // 5 planners × 3 worker counts + 2 strategies × (2 op counts + 3 device counts).
        assert_eq!(study.rows.len(), 15 + 10);
        assert_eq!(seen, study.rows.len());
        let mut keys: Vec<(String, String, usize)> = study
            .rows
            .iter()
            .map(|r| (r.planner.clone(), r.sweep.clone(), r.size))
            .collect();
        keys.sort();
        keys.dedup();
        assert_eq!(
            keys.len(),
            study.rows.len(),
            "one row per (planner, sweep, size)"
        );
        for r in &study.rows {
            assert!(r.ratio_to_lower_bound >= 1.0 - 1e-9, "{r:?}");
            assert!(r.share_used > 0.0 && r.share_used <= 1.0, "{r:?}");
            assert_eq!(r.mode.is_some(), r.kind == "data-parallel", "{r:?}");
            assert_eq!(
                r.images_per_sec.is_some(),
                r.kind == "data-parallel",
                "{r:?}"
            );
        }
        let mode_of = |p: &str| {
            let r = study.rows.iter().find(|r| r.planner == p).unwrap();
            r.mode.clone().unwrap()
        };
        assert_eq!(mode_of("replica-setter"), "sync");
        assert_eq!(mode_of("sync-backup"), "backup");
        assert_eq!(mode_of("async-ps"), "async");
        assert_eq!(mode_of("infra-aware-async"), "async");
        // A growth fit per (planner, sweep): 5 dp + 2 × 2 per-op.
        assert_eq!(study.growth.len(), 9);
        let json = serde_json::to_value(&study).unwrap();
        assert_eq!(json["rows"].as_array().unwrap().len(), 25);
        assert!(run(
            &StudyOptions {
                workers: vec![0],
                ..options
            },
            &mut |_| {}
        )
        .is_err());
    }

    #[test]
    fn planners_parse_from_either_table_and_a_typo_lists_both() {
        let p = |s: &str| s.parse::<Planner>();
        assert_eq!(
            p("infra-aware").unwrap(),
            Planner::DataParallel(DataParallelStrategy::InfraAware)
        );
        assert_eq!(
            p("sync-backup:2").unwrap(),
            Planner::DataParallel(DataParallelStrategy::SyncBackup { backups: 2 })
        );
        assert_eq!(
            p("heft").unwrap(),
            Planner::PerOp(OpPlacementStrategy::Heft)
        );
        for s in DataParallelStrategy::all()
            .map(Planner::DataParallel)
            .chain(OpPlacementStrategy::all().map(Planner::PerOp))
            .filter(|s| *s != Planner::PerOp(OpPlacementStrategy::InfraAware))
        {
            assert_eq!(p(&s.to_string()).unwrap(), s);
        }
        let msg = p("hetf").unwrap_err().to_string();
        assert!(
            msg.contains("hetf") && msg.contains("async-ps") && msg.contains("round-robin"),
            "{msg}"
        );
        assert!(matches!(
            p("sync-backup:0"),
            Err(Error::InvalidArgument { .. })
        ));
    }

    #[test]
    fn exponents_are_least_squares_slopes_on_logs() {
        let row = |size: usize, ms: f64| StudyRow {
            planner: "p".into(),
            kind: "per-op".into(),
            sweep: "ops".into(),
            workers: 1,
            ps: 1,
            ops: Some(size),
            global_batch: None,
            size,
            mode: None,
            plan_ms: ms,
            predicted_step_ms: 1.0,
            lower_bound_ms: 1.0,
            ratio_to_lower_bound: 1.0,
            workers_used: 1,
            share_used: 1.0,
            images_per_sec: None,
        };
        // ms = size² / 100.
        let rows = [row(10, 1.0), row(100, 100.0), row(1000, 10_000.0)];
        let g = growth(&rows);
        assert_eq!(g.len(), 1);
        assert!((g[0].exponent - 2.0).abs() < 1e-9, "{g:?}");
        assert!(growth(&rows[..1]).is_empty());
    }
}

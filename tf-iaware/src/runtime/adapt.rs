//! Adaptation during synchronous data-parallel training: watch every worker's live metrics and
//! every replica's step window, and re-plan between steps when a worker moves.
//!
//! * `DriftWatch` (pure) decides. A **metrics** move: a worker's live availability is more
//!   than [`AdaptOptions::availability_threshold`] (relative) away from what it was when the
//!   plan was made, in [`AdaptOptions::metric_patience`] consecutive *fresh* readings (a reading
//!   counts once, by its time stamp). A **step-time** move: a replica's busy window is more than
//!   [`AdaptOptions::step_threshold`] away from its own baseline (the median of its first
//!   windows after the plan) for [`AdaptOptions::step_patience`] steps.
//! * `LiveWatcher` reads the cluster's metrics on a background thread (every
//!   [`AdaptOptions::refresh_interval`]), so a training step never waits on the network.
//! * `Adapter` runs between the synchronous steps of the trainer
//!   ([`TrainingOptions::adapt`](crate::runtime::trainer::TrainingOptions::adapt)); on a move it
//!   rescales the moved workers' figures (metrics: to their availability now, see
//!   [`live_capacities`](crate::parallel::live_capacities); step time: by the measured factor)
//!   and re-plans from [`Replanning`]; the trainer switches sessions between two steps, the
//!   variables carried over. Each switch is a [`ReplanRecord`]: trigger, detection latency,
//!   steps until recovered.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde::Serialize;

use super::data_parallel::replica_spans_ms;
use super::train::StepTimes;
use crate::cluster::monitor::snapshot::unix_now_ms;
use crate::cluster::tf_config::TfConfig;
use crate::cluster::{Cluster, LiveOptions, LiveSource, MetricsFeed};
use crate::error::Result;
use crate::graph::proto::StepStats;
use crate::parallel::{
    self, DataParallelPlan, DataParallelStrategy, InfraAwareOptions, ReplicaMemory, Shares,
    VarInfo, WorkerCapacity,
};

/// When `DriftWatch` calls a move.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct AdaptOptions {
    /// Relative change of a worker's availability that counts as a move (default 0.15).
    pub availability_threshold: f64,
    /// Consecutive fresh readings a metrics move must last (default 2).
    pub metric_patience: usize,
    /// Relative change of a replica's busy window that counts as a move (default 0.5: the
    /// windows of a quota-limited worker jitter by a few CFS periods).
    pub step_threshold: f64,
    /// Consecutive steps a step-time move must last (default 2).
    pub step_patience: usize,
    /// Steps after a (re)plan whose windows are not used (a new session's first steps are
    /// slow; default 1).
    pub grace_steps: usize,
    /// Steps whose windows form a replica's baseline (default 3).
    pub baseline_steps: usize,
    /// How often the live metrics are read in the background (default 500 ms).
    pub refresh_interval: Duration,
    /// Trace every step for the step windows (default true; `false`: metrics only, no
    /// tracing cost).
    pub trace_steps: bool,
    /// A re-planned run has recovered once a step is within this share of the new plan's
    /// predicted step time (default 0.15).
    pub recovery_tolerance: f64,
}

impl Default for AdaptOptions {
    fn default() -> Self {
        AdaptOptions {
            availability_threshold: 0.15,
            metric_patience: 2,
            step_threshold: 0.5,
            step_patience: 2,
            grace_steps: 1,
            baseline_steps: 3,
            refresh_interval: Duration::from_millis(500),
            trace_steps: true,
            recovery_tolerance: 0.15,
        }
    }
}

/// What set a re-plan off.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Trigger {
    /// A worker's live availability moved.
    Metrics,
    /// A replica's measured step window moved.
    StepTime,
}

/// A move [`DriftWatch`] has called.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub(crate) struct Detection {
    /// Which signal.
    pub trigger: Trigger,
    /// Moved workers and their speed factor (new ÷ old: 0.5 = half as fast).
    pub moved: Vec<(String, f64)>,
    /// Step during (metrics) or after (step time) which the move was first seen.
    pub first_signal_step: usize,
    /// Unix time of the first reading beyond the threshold, ms (metrics), or of the first
    /// step window beyond it.
    pub first_signal_unix_ms: u64,
    /// Unix time the move was called, ms.
    pub decided_unix_ms: u64,
}

#[derive(Clone, Debug, Default)]
struct Strikes {
    count: usize,
    first_step: usize,
    first_ms: u64,
}

/// Decides when a worker has moved (see the module docs). Pure: fed readings and windows.
#[derive(Clone, Debug)]
pub(crate) struct DriftWatch {
    options: AdaptOptions,
    /// Availability per worker when the plan was made.
    base: BTreeMap<String, f64>,
    /// Time stamp of the last reading used, per worker.
    seen: BTreeMap<String, u64>,
    metric_strikes: BTreeMap<String, Strikes>,
    steps_seen: usize,
    window_base: BTreeMap<String, Vec<f64>>,
    step_strikes: Strikes,
}

impl DriftWatch {
    /// A watch for a plan made when the workers had availability `baseline` (worker, 0–1).
    pub(crate) fn new(options: &AdaptOptions, baseline: &[(String, f64)]) -> Self {
        DriftWatch {
            options: options.clone(),
            base: baseline.iter().cloned().collect(),
            seen: BTreeMap::new(),
            metric_strikes: BTreeMap::new(),
            steps_seen: 0,
            window_base: BTreeMap::new(),
            step_strikes: Strikes::default(),
        }
    }

    /// Feeds live readings `(worker, availability, taken_unix_ms)` seen during step `step` at
    /// `now_unix_ms`; returns a [`Trigger::Metrics`] detection once some worker has been beyond
    /// the threshold for `metric_patience` fresh readings. Readings not newer than the last
    /// one of their worker, and workers without a baseline, are ignored.
    pub(crate) fn observe_metrics(
        &mut self,
        step: usize,
        readings: &[(String, f64, u64)],
        now_unix_ms: u64,
    ) -> Option<Detection> {
        for (w, a, taken) in readings {
            if self.seen.get(w).is_some_and(|t| taken <= t) {
                continue;
            }
            self.seen.insert(w.clone(), *taken);
            let Some(&base) = self.base.get(w) else {
                continue;
            };
            let f = a / base.max(1e-9);
            let s = self.metric_strikes.entry(w.clone()).or_default();
            if (f - 1.0).abs() > self.options.availability_threshold {
                if s.count == 0 {
                    s.first_step = step;
                    s.first_ms = *taken;
                }
                s.count += 1;
            } else {
                *s = Strikes::default();
            }
        }
        let ready: Vec<&String> = self
            .metric_strikes
            .iter()
            .filter(|(_, s)| s.count >= self.options.metric_patience.max(1))
            .map(|(w, _)| w)
            .collect();
        if ready.is_empty() {
            return None;
        }
        // Every worker beyond the threshold moves with it, ready or not: one re-plan.
        let moved: Vec<(String, f64)> = self
            .metric_strikes
            .iter()
            .filter(|(_, s)| s.count > 0)
            .filter_map(|(w, _)| {
                let now = readings.iter().rev().find(|r| &r.0 == w).map(|r| r.1)?;
                Some((w.clone(), now / self.base.get(w)?.max(1e-9)))
            })
            .collect();
        let first = self
            .metric_strikes
            .values()
            .filter(|s| s.count > 0)
            .min_by_key(|s| s.first_ms)
            .cloned()
            .unwrap_or_default();
        Some(Detection {
            trigger: Trigger::Metrics,
            moved,
            first_signal_step: first.first_step,
            first_signal_unix_ms: first.first_ms,
            decided_unix_ms: now_unix_ms,
        })
    }

    /// Feeds the replicas' busy windows `(worker, ms)` of step `step`; returns a
    /// [`Trigger::StepTime`] detection once a window has been beyond the threshold of its
    /// baseline for `step_patience` steps (factor = baseline ÷ window).
    pub(crate) fn observe_step(
        &mut self,
        step: usize,
        spans: &[(String, f64)],
        now_unix_ms: u64,
    ) -> Option<Detection> {
        self.steps_seen += 1;
        let o = &self.options;
        if self.steps_seen <= o.grace_steps {
            return None;
        }
        if self.steps_seen <= o.grace_steps + o.baseline_steps {
            for (d, ms) in spans {
                self.window_base.entry(d.clone()).or_default().push(*ms);
            }
            return None;
        }
        let t = o.step_threshold;
        let moved: Vec<(String, f64)> = spans
            .iter()
            .filter_map(|(d, ms)| {
                let base = StepTimes::from_samples(self.window_base.get(d)?)?.median;
                let f = ms / base;
                (!(1.0 / (1.0 + t)..=1.0 + t).contains(&f)).then(|| (d.clone(), 1.0 / f))
            })
            .collect();
        if moved.is_empty() {
            self.step_strikes = Strikes::default();
            return None;
        }
        if self.step_strikes.count == 0 {
            self.step_strikes.first_step = step;
            self.step_strikes.first_ms = now_unix_ms;
        }
        self.step_strikes.count += 1;
        (self.step_strikes.count >= o.step_patience.max(1)).then_some(Detection {
            trigger: Trigger::StepTime,
            moved,
            first_signal_step: self.step_strikes.first_step,
            first_signal_unix_ms: self.step_strikes.first_ms,
            decided_unix_ms: now_unix_ms,
        })
    }
}

/// A reading of one device: (device, availability, taken Unix ms).
pub(crate) type Reading = (String, f64, u64);

/// Reads a cluster's live metrics on a background thread and keeps the latest view, and every
/// fresh reading since it was last drained (so patience counts agent samples, not steps).
pub(crate) struct LiveWatcher {
    latest: Arc<Mutex<(Cluster, u64)>>,
    pending: Arc<Mutex<Vec<Reading>>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<JoinHandle<()>>,
    tid: Arc<Mutex<Option<u32>>>,
    started: Instant,
}

impl std::fmt::Debug for LiveWatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveWatcher").finish_non_exhaustive()
    }
}

impl LiveWatcher {
    /// Starts refreshing `cluster` from `feed` every `interval`.
    ///
    /// # Errors
    /// [`Error::MonitorThread`](crate::Error::MonitorThread) if the thread cannot start.
    pub(crate) fn spawn(
        mut feed: MetricsFeed,
        cluster: Cluster,
        interval: Duration,
    ) -> Result<Self> {
        let latest = Arc::new(Mutex::new((cluster, 0u64)));
        let pending = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let tid = Arc::new(Mutex::new(None));
        let (l, p, s, t) = (latest.clone(), pending.clone(), stop.clone(), tid.clone());
        let thread = std::thread::Builder::new()
            .name("tf-iaware-live".into())
            .spawn(move || {
                *t.lock() = crate::cluster::monitor::sampler::current_tid();
                while !s.load(std::sync::atomic::Ordering::Relaxed) {
                    let mut c = l.lock().0.clone();
                    let before: Vec<Option<u64>> =
                        c.devices.iter().map(|d| d.live.taken_unix_ms).collect();
                    let _ = feed.refresh(&mut c);
                    let fresh: Vec<Reading> = c
                        .devices
                        .iter()
                        .zip(before)
                        .filter(|(d, was)| {
                            d.live.source != LiveSource::Stale
                                && d.live.taken_unix_ms.is_some()
                                && d.live.taken_unix_ms != *was
                        })
                        .map(|(d, _)| {
                            (
                                d.name.clone(),
                                d.availability,
                                d.live.taken_unix_ms.unwrap_or(0),
                            )
                        })
                        .collect();
                    p.lock().extend(fresh);
                    {
                        let mut g = l.lock();
                        g.0 = c;
                        g.1 += 1;
                    }
                    let end = Instant::now() + interval;
                    while Instant::now() < end && !s.load(std::sync::atomic::Ordering::Relaxed) {
                        std::thread::sleep(Duration::from_millis(20).min(interval));
                    }
                }
            })
            .map_err(|source| crate::Error::MonitorThread {
                what: "live metrics watcher".into(),
                source,
            })?;
        Ok(LiveWatcher {
            latest,
            pending,
            stop,
            thread: Some(thread),
            tid,
            started: Instant::now(),
        })
    }

    /// The cluster as last refreshed, and how many refreshes there have been.
    pub(crate) fn latest(&self) -> (Cluster, u64) {
        self.latest.lock().clone()
    }

    /// Every fresh reading since the last call, oldest first.
    pub(crate) fn drain(&self) -> Vec<Reading> {
        std::mem::take(&mut *self.pending.lock())
    }

    /// CPU time the reader thread used ÷ wall time since it started: what reading the metrics
    /// costs this process (`None` where thread CPU time cannot be read).
    pub(crate) fn cost_share(&self) -> Option<f64> {
        let tid = (*self.tid.lock())?;
        let cpu = crate::cluster::monitor::sampler::thread_cpu_time(tid)?;
        Some(cpu.as_secs_f64() / self.started.elapsed().as_secs_f64().max(1e-9))
    }
}

impl Drop for LiveWatcher {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// One switch of plans during training.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ReplanRecord {
    /// What set it off.
    pub trigger: Trigger,
    /// Moved workers and their speed factors (new ÷ old).
    pub moved: Vec<(String, f64)>,
    /// Step during or after which the move was first seen.
    pub first_signal_step: usize,
    /// First step run with the new plan.
    pub before_step: usize,
    /// First reading beyond the threshold → decision, ms.
    pub detection_latency_ms: f64,
    /// Shares of the new plan, (worker, samples).
    pub shares: Vec<(String, usize)>,
    /// The new plan's predicted step time, ms.
    pub predicted_step_ms: Option<f64>,
    /// Steps of the new plan until one ran within [`AdaptOptions::recovery_tolerance`] of its
    /// prediction (1: the first); `None` until then.
    pub steps_until_recovered: Option<usize>,
}

/// Where the trainer's live re-planning reads the workers' live metrics.
#[derive(Clone, Debug)]
pub enum MetricsSource {
    /// This host's own sampler (`local:` clusters).
    Local,
    /// Every task's metrics agent, as a TF_CONFIG cluster lists them.
    TfConfig(TfConfig),
}

impl MetricsSource {
    /// Opens the feed.
    ///
    /// # Errors
    /// As [`MetricsFeed::tf_config`] and [`MetricsFeed::local`].
    fn open(&self) -> Result<MetricsFeed> {
        match self {
            MetricsSource::Local => MetricsFeed::local(&LiveOptions::default()),
            MetricsSource::TfConfig(t) => MetricsFeed::tf_config(t, &LiveOptions::default()),
        }
    }
}

/// What a plan is made again from while training: when a worker moves (live re-planning of a
/// calibrated plan) or a task is lost (any strategy, over the survivors). The planner's inputs
/// ([`plan_live`](crate::parallel::plan_live), [`replica_setter`](crate::parallel::replica_setter)),
/// where the live metrics come from and the cluster's tasks.
#[derive(Clone, Debug)]
pub struct Replanning {
    /// The calibration a calibrated plan was made from (each worker's figures at full
    /// availability); empty for equal shares.
    pub calibration: Vec<WorkerCapacity>,
    /// Parameter-server devices.
    pub ps: Vec<String>,
    /// The variables.
    pub vars: Vec<VarInfo>,
    /// Samples per step over every replica.
    pub global_batch: usize,
    /// Replica memory, capping shares by free memory.
    pub memory: Option<ReplicaMemory>,
    /// The planner's options.
    pub options: InfraAwareOptions,
    /// Where live metrics are read (`None`: step windows only).
    pub metrics: Option<MetricsSource>,
    /// The cluster's tasks and their addresses, to probe which still answer after a failure
    /// (`None`: not a TF_CONFIG cluster; no recovery).
    pub tasks: Option<TfConfig>,
}

impl Replanning {
    /// `strategy`'s plan over `workers` and `ps` (lost tasks left out): equal shares, or shares
    /// from the calibration of those workers at `cluster`'s live availability.
    ///
    /// # Errors
    /// The planners' errors ([`Error::Infeasible`](crate::Error::Infeasible), …).
    pub fn plan_over(
        &self,
        strategy: DataParallelStrategy,
        workers: &[String],
        ps: &[String],
        cluster: &Cluster,
    ) -> Result<DataParallelPlan> {
        let mut plan = match strategy.shares() {
            Shares::Equal => parallel::replica_setter(workers, ps, &self.vars, self.global_batch)?,
            Shares::Calibrated => {
                let calibration: Vec<WorkerCapacity> = self
                    .calibration
                    .iter()
                    .filter(|c| workers.contains(&c.device))
                    .cloned()
                    .collect();
                parallel::plan_live(
                    &calibration,
                    cluster,
                    ps,
                    &self.vars,
                    self.global_batch,
                    self.memory.as_ref(),
                    &self.options,
                )?
            }
        };
        plan.strategy = strategy.to_string();
        Ok(plan)
    }

    /// Leaves `lost` devices out of later plans.
    pub(crate) fn forget(&mut self, lost: &[String]) {
        self.calibration.retain(|c| !lost.contains(&c.device));
        self.ps.retain(|p| !lost.contains(p));
    }
}

/// Live re-planning between a synchronous trainer's steps (see the module docs): reads the
/// metrics in the background, watches the replicas' step windows, and makes a new plan when a
/// worker moves. The trainer switches sessions; the variables stay on the ps.
pub(crate) struct Adapter {
    options: AdaptOptions,
    replanning: Replanning,
    watcher: Option<LiveWatcher>,
    cluster: Cluster,
    watch: DriftWatch,
    records: Vec<ReplanRecord>,
    steps_since_plan: usize,
}

impl std::fmt::Debug for Adapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Adapter")
            .field("replans", &self.records.len())
            .field("steps_since_plan", &self.steps_since_plan)
            .finish_non_exhaustive()
    }
}

/// Availability of every calibrated worker that has a live reading — all of them, not only the
/// plan's replicas, so a worker left out while busy is taken back when it recovers.
fn baseline(cluster: &Cluster, workers: &[WorkerCapacity]) -> Vec<(String, f64)> {
    workers
        .iter()
        .filter_map(|w| {
            let d = &cluster.devices[cluster.index_of(&w.device)?];
            d.live
                .has_reading()
                .then(|| (w.device.clone(), d.availability))
        })
        .collect()
}

impl Adapter {
    /// Starts watching `cluster` (its live view now is the plan's baseline).
    ///
    /// # Errors
    /// The metrics feed's errors; [`Error::MonitorThread`](crate::Error::MonitorThread).
    pub(crate) fn start(
        replanning: &Replanning,
        cluster: &Cluster,
        options: &AdaptOptions,
    ) -> Result<Self> {
        let watcher = match &replanning.metrics {
            Some(source) => Some(LiveWatcher::spawn(
                source.open()?,
                cluster.clone(),
                options.refresh_interval,
            )?),
            None => None,
        };
        Ok(Adapter {
            options: options.clone(),
            watch: DriftWatch::new(options, &baseline(cluster, &replanning.calibration)),
            replanning: replanning.clone(),
            watcher,
            cluster: cluster.clone(),
            records: Vec::new(),
            steps_since_plan: 0,
        })
    }

    /// Whether every step is traced for its replicas' windows.
    pub(crate) fn traces_steps(&self) -> bool {
        self.options.trace_steps
    }

    /// Every re-plan so far.
    pub(crate) fn records(&self) -> &[ReplanRecord] {
        &self.records
    }

    /// CPU share spent reading live metrics (see `LiveWatcher::cost_share`).
    pub(crate) fn metrics_cost_share(&self) -> Option<f64> {
        self.watcher.as_ref().and_then(LiveWatcher::cost_share)
    }

    /// After update `step` of `plan` (its wall time `ms`, its step stats when traced): a new
    /// plan when a worker has moved (recorded as a [`ReplanRecord`] before `step + 1`).
    ///
    /// # Errors
    /// The planner's errors.
    pub(crate) fn after_step(
        &mut self,
        step: usize,
        ms: f64,
        stats: Option<&StepStats>,
        plan: &DataParallelPlan,
    ) -> Result<Option<DataParallelPlan>> {
        self.steps_since_plan += 1;
        if let Some(r) = self.records.last_mut() {
            if r.steps_until_recovered.is_none()
                && r.predicted_step_ms
                    .is_some_and(|p| ms <= p * (1.0 + self.options.recovery_tolerance))
            {
                r.steps_until_recovered = Some(self.steps_since_plan);
            }
        }
        let now = unix_now_ms();
        let mut detection = None;
        if let Some(w) = &self.watcher {
            let (live, _) = w.latest();
            let readings: Vec<Reading> = w
                .drain()
                .into_iter()
                .filter(|r| plan.replicas.iter().any(|p| p.device == r.0))
                .collect();
            self.cluster = live;
            detection = self.watch.observe_metrics(step, &readings, now);
        }
        if detection.is_none() {
            if let Some(stats) = stats {
                let spans = replica_spans_ms(plan, stats);
                detection = self.watch.observe_step(step, &spans, now);
            }
        }
        let Some(d) = detection else {
            return Ok(None);
        };
        if d.trigger == Trigger::StepTime {
            self.rescale(&d.moved);
        }
        let r = &self.replanning;
        let new = parallel::plan_live(
            &r.calibration,
            &self.cluster,
            &r.ps,
            &r.vars,
            r.global_batch,
            r.memory.as_ref(),
            &r.options,
        )?;
        log::info!(
            "re-planned before update {} ({:?}: {:?}): shares {:?}",
            step + 1,
            d.trigger,
            d.moved,
            new.replicas.iter().map(|r| r.batch).collect::<Vec<_>>()
        );
        self.records.push(ReplanRecord {
            trigger: d.trigger,
            moved: d.moved,
            first_signal_step: d.first_signal_step,
            before_step: step + 1,
            detection_latency_ms: d.decided_unix_ms.saturating_sub(d.first_signal_unix_ms) as f64,
            shares: new
                .replicas
                .iter()
                .map(|r| (r.device.clone(), r.batch))
                .collect(),
            predicted_step_ms: new.predicted_step_ms,
            steps_until_recovered: None,
        });
        self.replanned();
        Ok(Some(new))
    }

    /// Leaves `lost` devices out of later plans (a recovery re-planned without them).
    pub(crate) fn forget(&mut self, lost: &[String]) {
        self.replanning.forget(lost);
        self.replanned();
    }

    /// After any switch of plans (this one's or another re-size): the windows and the
    /// availability the plan was made at start afresh.
    pub(crate) fn replanned(&mut self) {
        self.watch = DriftWatch::new(
            &self.options,
            &baseline(&self.cluster, &self.replanning.calibration),
        );
        self.steps_since_plan = 0;
    }

    /// A step-time move: the moved workers' figures now describe them as they are, at their
    /// availability now (the planner rescales figures to the live availability).
    fn rescale(&mut self, moved: &[(String, f64)]) {
        for (w, f) in moved {
            let now = self
                .cluster
                .index_of(w)
                .map(|i| self.cluster.devices[i].availability);
            let Some(c) = self
                .replanning
                .calibration
                .iter_mut()
                .find(|c| &c.device == w)
            else {
                continue;
            };
            let live = parallel::live_capacities(std::slice::from_ref(c), &self.cluster, None);
            let base = live.into_iter().next().unwrap_or_else(|| c.clone());
            *c = WorkerCapacity {
                samples_per_sec: base.samples_per_sec * f,
                fixed_ms: base.fixed_ms / f,
                availability: now.or(base.availability),
                ..base
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(w: &str, a: f64, t: u64) -> (String, f64, u64) {
        (w.into(), a, t)
    }

    /// A fake metrics source: worker `b` drops from 1.0 to 0.55 at t = 3 s, readings every
    /// second, polled twice per reading (so stale repeats must not count).
    fn fake_source(t_ms: u64) -> Vec<(String, f64, u64)> {
        let taken = t_ms / 1000 * 1000;
        let b = if taken >= 3000 { 0.55 } else { 1.0 };
        vec![r("a", 1.0, taken), r("b", b, taken)]
    }

    #[test]
    fn a_metrics_move_is_called_after_patience_fresh_readings() {
        let o = AdaptOptions::default();
        let mut w = DriftWatch::new(&o, &[("a".into(), 1.0), ("b".into(), 1.0)]);
        let mut called = None;
        for (step, t) in (0..20u64).map(|i| (i as usize, i * 500)) {
            if let Some(d) = w.observe_metrics(step, &fake_source(t), t) {
                called = Some((step, d));
                break;
            }
        }
        let (step, d) = called.expect("the drop is detected");
        assert_eq!(d.trigger, Trigger::Metrics);
        assert_eq!(d.moved.len(), 1);
        assert_eq!(d.moved[0].0, "b");
        assert!((d.moved[0].1 - 0.55).abs() < 1e-12);
        // First low reading at 3 s (step 6); the second fresh one at 4 s (step 8).
        assert_eq!(d.first_signal_step, 6);
        assert_eq!(step, 8);
        assert_eq!(d.first_signal_unix_ms, 3000);
        assert_eq!(d.decided_unix_ms - d.first_signal_unix_ms, 1000);
    }

    #[test]
    fn noise_within_the_threshold_and_single_blips_do_not_replan() {
        let o = AdaptOptions::default();
        let mut w = DriftWatch::new(&o, &[("a".into(), 0.8)]);
        for (i, a) in [0.85, 0.75, 0.5, 0.8, 0.9, 0.5, 0.78].iter().enumerate() {
            let t = i as u64 * 1000;
            assert!(w.observe_metrics(i, &[r("a", *a, t)], t).is_none(), "{i}");
        }
        // Unknown workers and stale repeats are ignored.
        assert!(w
            .observe_metrics(9, &[r("zz", 0.1, 1), r("zz", 0.1, 2)], 9)
            .is_none());
    }

    #[test]
    fn a_step_time_move_is_called_against_the_replicas_baseline() {
        let o = AdaptOptions::default();
        let mut w = DriftWatch::new(&o, &[]);
        let spans = |b: f64| vec![("a".to_string(), 100.0), ("b".to_string(), b)];
        let mut out = None;
        for step in 0..10 {
            let b = if step >= 5 { 250.0 } else { 100.0 };
            if let Some(d) = w.observe_step(step, &spans(b), step as u64) {
                out = Some((step, d));
                break;
            }
        }
        let (step, d) = out.unwrap();
        assert_eq!(step, 6, "grace 1 + baseline 3, then two slow steps");
        assert_eq!(d.trigger, Trigger::StepTime);
        assert_eq!(d.first_signal_step, 5);
        assert_eq!(d.moved, vec![("b".to_string(), 0.4)]);
    }
}

//! Adaptation during synchronous data-parallel training: watch every worker's live metrics and
//! every replica's step window, and re-plan between steps when a worker moves.
//!
//! * `DriftWatch` (pure) decides. A **metrics** move: a worker's live availability is more
//!   than [`AdaptOptions::availability_threshold`] (relative) away from what it was when the
//!   plan was made, in [`AdaptOptions::metric_patience`] consecutive *fresh* readings (a reading
//!   counts once, by its time stamp). A **step-time** move: a replica's busy window is more than
//!   [`AdaptOptions::step_threshold`] slower than its own baseline (the median of its first
//!   windows after the plan) for [`AdaptOptions::step_patience`] steps and at least
//!   [`AdaptOptions::step_persistence`] of wall time; windows that much
//!   faster become its baseline instead (a session warming up, not a move).
//! * `LiveWatcher` reads the cluster's metrics on a background thread (every
//!   [`AdaptOptions::refresh_interval`]), so a training step never waits on the network.
//! * `Adapter` runs between the synchronous steps of the trainer
//!   ([`TrainingOptions::adapt`](crate::runtime::trainer::TrainingOptions::adapt)); on a move it
//!   rescales the moved workers' figures (metrics: to their availability now, see
//!   [`live_capacities`](crate::parallel::live_capacities); step time: by the measured factor)
//!   and re-plans from [`Replanning`]; the trainer switches sessions between two steps, the
//!   variables carried over. Each switch is a [`ReplanRecord`]: trigger, detection latency,
//!   steps until recovered.

use std::time::Duration;

use serde::Serialize;

use super::data_parallel::replica_spans_ms;
use crate::cluster::monitor::snapshot::unix_now_ms;
use crate::cluster::tf_config::TfConfig;
use crate::cluster::{Cluster, LiveOptions, MetricsFeed};
use crate::error::Result;
use crate::graph::proto::StepStats;
use crate::parallel::{DataParallelPlan, DataParallelPlanner};

mod live;
mod watch;

use live::{LiveWatcher, Reading};
use watch::{Detection, DriftWatch};

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
    /// Consecutive steps a step-time move must last (default 3).
    pub step_patience: usize,
    /// Wall time a step-time move must last as well, from its first slow window (default 1 s):
    /// a quota-limited worker that runs out of its CFS quota is throttled for the rest of the
    /// 100 ms period, several short steps in a row, and on a busy 2-core host bursts of 4–5×
    /// slower windows for 3 steps made 2–3 re-plans in 60 s of an unchanged `paper` cluster.
    pub step_persistence: Duration,
    /// Steps after a (re)plan whose windows are not used (a new session's first steps are
    /// slow: with one step left out, the next windows made a baseline up to 6.5× too long on
    /// a quiet cluster, and every later window looked like a speed-up; default 3).
    pub grace_steps: usize,
    /// Steps whose windows form a replica's baseline (default 5).
    pub baseline_steps: usize,
    /// How often the live metrics are read in the background (default 500 ms).
    pub refresh_interval: Duration,
    /// Trace steps for the step windows (default true; `false`: metrics only, no tracing
    /// cost).
    pub trace_steps: bool,
    /// Least wall time between two steps traced for the step windows (default 100 ms). A
    /// traced step costs the time every worker's step stats take to reach the driver: tracing
    /// every step of the Python MLP on `uniform` (about 8 ms steps) made 35 % fewer updates
    /// than no tracing; the persistence a move needs (1 s) still sees about ten windows.
    pub trace_interval: Duration,
    /// A re-planned run has recovered once a step is within this share of the new plan's
    /// predicted step time (default 0.15).
    pub recovery_tolerance: f64,
    /// Least predicted gain of a re-plan, 1 − step(new) ÷ step(now) at the moved figures
    /// (default 0.1): a move whose new plan is not this much faster, or not faster by more than
    /// the step times' own measured noise, keeps the plan.
    pub min_gain: f64,
    /// Steps in which a re-plan's predicted saving must pay back the measured cost of the last
    /// switch of sessions (default 25).
    pub payback_steps: usize,
    /// Consecutive fresh readings (metrics) or steps (step time) that a worker a re-plan moved
    /// work away from must look recovered before work moves back to it (default 6): a worker
    /// relieved of its share reads better while it is still slow.
    pub return_patience: usize,
}

impl Default for AdaptOptions {
    fn default() -> Self {
        AdaptOptions {
            availability_threshold: 0.15,
            metric_patience: 2,
            step_threshold: 0.5,
            step_patience: 3,
            step_persistence: Duration::from_secs(1),
            grace_steps: 3,
            baseline_steps: 5,
            refresh_interval: Duration::from_millis(500),
            trace_steps: true,
            trace_interval: Duration::from_millis(100),
            recovery_tolerance: 0.15,
            min_gain: 0.1,
            payback_steps: 25,
            return_patience: 6,
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
/// plan that sizes shares) or a task is lost (any strategy, over the survivors) — the planner
/// the first plan came from, where the live metrics come from and the cluster's tasks.
#[derive(Clone, Debug)]
pub struct Replanning {
    /// The planner of the first plan (strategy, workers, ps, variables, batch, calibration).
    pub planner: DataParallelPlanner,
    /// Where live metrics are read (`None`: step windows only).
    pub metrics: Option<MetricsSource>,
    /// The cluster's tasks and their addresses, to probe which still answer after a failure
    /// (`None`: not a TF_CONFIG cluster; no recovery).
    pub tasks: Option<TfConfig>,
}

impl Replanning {
    /// Leaves `lost` devices out of later plans.
    pub(crate) fn forget(&mut self, lost: &[String]) {
        self.planner.forget(lost);
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
    /// (update, wall ms) of the steps since the plan, before any signal.
    recent_ms: Vec<(usize, f64)>,
    /// Wall time of the last switch of sessions, ms.
    switch_ms: Option<f64>,
    /// Workers work was moved away from as slow (see `Adapter::hold`).
    held: Vec<String>,
    /// Moves called and kept (too little predicted gain).
    kept: usize,
    /// When a step was last traced for the step windows.
    last_traced: Option<std::time::Instant>,
}

impl std::fmt::Debug for Adapter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Adapter")
            .field("replans", &self.records.len())
            .field("steps_since_plan", &self.steps_since_plan)
            .finish_non_exhaustive()
    }
}

/// The least gain a re-plan must show to clear the noise of the step times `recent` (update,
/// ms) before `first_signal_step`, the first `grace` of them left out (a new session's first
/// steps are slow): [`median_step_noise`](crate::parallel::noise::median_step_noise).
fn gain_noise(recent: &[(usize, f64)], grace: usize, first_signal_step: usize) -> f64 {
    let quiet: Vec<f64> = recent
        .iter()
        .skip(grace)
        .filter(|(s, _)| *s < first_signal_step)
        .map(|(_, ms)| *ms)
        .collect();
    crate::parallel::noise::median_step_noise(&quiet)
}

/// Availability of every worker of the planner that has a live reading — all of them, not only
/// the plan's replicas, so a worker left out while busy is taken back when it recovers.
fn baseline(cluster: &Cluster, workers: &[String]) -> Vec<(String, f64)> {
    workers
        .iter()
        .filter_map(|w| {
            let d = &cluster.devices[cluster.index_of(w)?];
            d.live.has_reading().then(|| (w.clone(), d.availability))
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
            watch: DriftWatch::new(
                options,
                &baseline(cluster, replanning.planner.workers()),
                &[],
            ),
            replanning: replanning.clone(),
            watcher,
            cluster: cluster.clone(),
            records: Vec::new(),
            steps_since_plan: 0,
            recent_ms: Vec::new(),
            switch_ms: None,
            held: Vec::new(),
            kept: 0,
            last_traced: None,
        })
    }

    /// The cluster as last read live (the connection's view until the first reading).
    pub(crate) fn live_cluster(&self) -> &Cluster {
        &self.cluster
    }

    /// Moves the adapter called and then kept the plan for (too little predicted gain).
    pub(crate) fn kept(&self) -> usize {
        self.kept
    }

    /// A switch of sessions (any re-plan or re-size) took `ms`: the cost a re-plan must pay
    /// back.
    pub(crate) fn switched(&mut self, ms: f64) {
        if ms.is_finite() && ms >= 0.0 {
            self.switch_ms = Some(ms);
        }
    }

    /// Whether the coming step is to be traced for its replicas' windows: tracing is on and
    /// [`AdaptOptions::trace_interval`] has passed since the last step this said yes to.
    pub(crate) fn wants_trace(&mut self) -> bool {
        if !self.options.trace_steps {
            return false;
        }
        let now = std::time::Instant::now();
        let due = self
            .last_traced
            .is_none_or(|t| now.duration_since(t) >= self.options.trace_interval);
        if due {
            self.last_traced = Some(now);
        }
        due
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
            self.recent_ms.push((step, ms));
            return Ok(None);
        };
        let before = self.replanning.planner.clone();
        if d.trigger == Trigger::StepTime {
            self.rescale(&d.moved);
        }
        let new = self.replanning.planner.plan(&self.cluster)?;
        if let Err(why) = self.worth_it(plan, &new, &d) {
            log::info!(
                "kept the plan at update {} ({:?}: {:?}): {why}",
                step + 1,
                d.trigger,
                d.moved
            );
            self.replanning.planner = before;
            self.kept += 1;
            self.replanned();
            return Ok(None);
        }
        self.hold(plan, &new, &d.moved);
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
            &baseline(&self.cluster, self.replanning.planner.workers()),
            &self.held,
        );
        self.steps_since_plan = 0;
        self.recent_ms.clear();
    }

    /// `Ok` when switching from `now` to `new` after `detection` is predicted to pay: a gain of
    /// at least [`AdaptOptions::min_gain`] — for a step-time move, whose factors come from the
    /// same noisy windows, also beyond the noise of the steps before the first signal
    /// ([`gain_noise`]); a metrics move was already held to its patience of fresh readings — whose saving over
    /// [`AdaptOptions::payback_steps`] steps pays back the last switch's measured cost; else why
    /// not.
    fn worth_it(
        &self,
        now: &DataParallelPlan,
        new: &DataParallelPlan,
        detection: &Detection,
    ) -> std::result::Result<(), String> {
        let shares = |p: &DataParallelPlan| -> Vec<(String, usize)> {
            p.replicas
                .iter()
                .filter(|r| r.batch > 0)
                .map(|r| (r.device.clone(), r.batch))
                .collect()
        };
        if shares(now) == shares(new) {
            return Err("the new plan has the same shares".into());
        }
        let planner = &self.replanning.planner;
        let capacity = planner.capacities(&self.cluster);
        let overhead = match planner.calibration() {
            Some(_) => planner.options().per_replica_overhead_ms,
            None => 0.0,
        };
        let step = |p| crate::parallel::noise::plan_step_ms(p, &capacity, overhead);
        let (Some(a), Some(b)) = (step(now), step(new)) else {
            return Ok(());
        };
        let gain = if a > 0.0 { 1.0 - b / a } else { 0.0 };
        let noise = match detection.trigger {
            Trigger::StepTime => gain_noise(
                &self.recent_ms,
                self.options.grace_steps,
                detection.first_signal_step,
            ),
            Trigger::Metrics => 0.0,
        };
        let guard = self.options.min_gain.max(noise);
        if gain < guard {
            return Err(format!(
                "predicted gain {:.0} % is below {:.0} % (noise {:.0} %)",
                gain * 100.0,
                guard * 100.0,
                noise * 100.0
            ));
        }
        let step_ms = crate::runtime::StepTimes::from_samples(
            &self.recent_ms.iter().map(|(_, ms)| *ms).collect::<Vec<_>>(),
        )
        .map_or(0.0, |t| t.median);
        if let Some(cost) = self.switch_ms {
            let saving = gain * step_ms * self.options.payback_steps as f64;
            if saving < cost {
                return Err(format!(
                    "{saving:.0} ms saved over {} steps does not pay a {cost:.0} ms switch",
                    self.options.payback_steps
                ));
            }
        }
        Ok(())
    }

    /// Workers the switch from `now` to `new` moves work away from because they slowed
    /// (`moved` factor below 1) are held: work moves back to them only after
    /// [`AdaptOptions::return_patience`]; a held worker given more work again is released.
    fn hold(&mut self, now: &DataParallelPlan, new: &DataParallelPlan, moved: &[(String, f64)]) {
        let share = |p: &DataParallelPlan, w: &str| {
            p.replicas
                .iter()
                .find(|r| r.device == w)
                .map_or(0, |r| r.batch)
        };
        for (w, f) in moved {
            let (a, b) = (share(now, w), share(new, w));
            if *f < 1.0 && b < a && !self.held.contains(w) {
                self.held.push(w.clone());
            } else if b > a {
                self.held.retain(|h| h != w);
            }
        }
    }

    /// A step-time move: the moved workers' figures now describe them as they are, at their
    /// availability now ([`DataParallelPlanner::rescale`]).
    fn rescale(&mut self, moved: &[(String, f64)]) {
        for (w, f) in moved {
            self.replanning.planner.rescale(w, *f, &self.cluster);
        }
    }
}

#[cfg(test)]
mod tests;

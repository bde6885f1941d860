//! When a worker has moved: the pure rules that read live availability readings and replica
//! step windows (`DriftWatch`).

use std::collections::BTreeMap;

use serde::Serialize;

use super::{AdaptOptions, Trigger};
use crate::runtime::train::StepTimes;

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
    /// Each strike's factor (new ÷ old speed), oldest first; all on one side of 1.
    factors: Vec<f64>,
    first_step: usize,
    first_ms: u64,
}

impl Strikes {
    /// Counts `factor` (beyond the threshold) at `step`/`ms`; a strike on the other side of 1
    /// starts the count afresh.
    fn strike(&mut self, factor: f64, step: usize, ms: u64) {
        if self
            .factors
            .last()
            .is_some_and(|f| (*f > 1.0) != (factor > 1.0))
        {
            self.factors.clear();
        }
        if self.factors.is_empty() {
            self.first_step = step;
            self.first_ms = ms;
        }
        self.factors.push(factor);
    }

    /// The median factor of the strikes (1 without any).
    fn factor(&self) -> f64 {
        let mut f = self.factors.clone();
        f.sort_by(f64::total_cmp);
        f.get(f.len() / 2).copied().unwrap_or(1.0)
    }
}

/// Decides when a worker has moved (see the module docs). Pure: fed readings and windows.
///
/// Strikes are counted per worker and per direction: a move is called once one worker has been
/// beyond the threshold, the same way, for its patience — [`AdaptOptions::metric_patience`]
/// fresh readings or [`AdaptOptions::step_patience`] steps, and
/// [`AdaptOptions::return_patience`] for a *held* worker (one a re-plan moved work away from)
/// that looks faster again. A replica's window counts as moved only beyond the larger of
/// [`AdaptOptions::step_threshold`] and twice its baseline's own spread, so a replica whose
/// windows jitter (a quota-limited worker's CFS periods) needs a larger move.
#[derive(Clone, Debug)]
pub(crate) struct DriftWatch {
    options: AdaptOptions,
    /// Availability per worker when the plan was made.
    base: BTreeMap<String, f64>,
    /// Workers that must look recovered for `return_patience` before work moves back.
    held: Vec<String>,
    /// Time stamp of the last reading used, per worker.
    seen: BTreeMap<String, u64>,
    metric_strikes: BTreeMap<String, Strikes>,
    steps_seen: usize,
    window_base: BTreeMap<String, Vec<f64>>,
    step_strikes: BTreeMap<String, Strikes>,
    /// Consecutive windows faster than the baseline, per replica: once there are a baseline's
    /// worth, they become its baseline.
    faster: BTreeMap<String, Vec<f64>>,
}

impl DriftWatch {
    /// A watch for a plan made when the workers had availability `baseline` (worker, 0–1);
    /// `held` workers move back only after `return_patience`.
    pub(crate) fn new(options: &AdaptOptions, baseline: &[(String, f64)], held: &[String]) -> Self {
        DriftWatch {
            options: options.clone(),
            base: baseline.iter().cloned().collect(),
            held: held.to_vec(),
            seen: BTreeMap::new(),
            metric_strikes: BTreeMap::new(),
            steps_seen: 0,
            window_base: BTreeMap::new(),
            step_strikes: BTreeMap::new(),
            faster: BTreeMap::new(),
        }
    }

    /// The strikes a move of `worker` by `factor` needs.
    fn patience(&self, worker: &str, factor: f64, patience: usize) -> usize {
        if factor > 1.0 && self.held.iter().any(|h| h == worker) {
            self.options.return_patience.max(patience)
        } else {
            patience
        }
        .max(1)
    }

    /// Feeds live readings `(worker, availability, taken_unix_ms)` seen during step `step` at
    /// `now_unix_ms`; returns a [`Trigger::Metrics`] detection once some worker has been beyond
    /// the threshold, the same way, for its patience of fresh readings. Readings not newer than
    /// the last one of their worker, and workers without a baseline, are ignored.
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
            if f.is_finite() && (f - 1.0).abs() > self.options.availability_threshold {
                s.strike(f, step, *taken);
            } else {
                *s = Strikes::default();
            }
        }
        let patience = self.options.metric_patience;
        self.called(
            Trigger::Metrics,
            &self.metric_strikes,
            (patience, 0),
            now_unix_ms,
        )
    }

    /// Feeds the replicas' busy windows `(worker, ms)` of step `step`; returns a
    /// [`Trigger::StepTime`] detection once a replica's window has been slower than its
    /// threshold of its baseline for its patience of steps (factor = baseline ÷ window).
    /// Windows *faster* than the threshold are no move: a baseline's worth of them in a row
    /// replaces the baseline.
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
        for (d, ms) in spans {
            let Some(base) = self
                .window_base
                .get(d)
                .and_then(|w| StepTimes::from_samples(w))
            else {
                continue;
            };
            let spread = (base.p90 - base.p10) / base.median.max(1e-9);
            let t = o.step_threshold.max(2.0 * spread);
            let ratio = ms / base.median.max(1e-9);
            let s = self.step_strikes.entry(d.clone()).or_default();
            let faster = self.faster.entry(d.clone()).or_default();
            if ratio.is_finite() && ratio > 1.0 + t {
                s.strike(1.0 / ratio, step, now_unix_ms);
                faster.clear();
            } else if ratio.is_finite() && ratio < 1.0 / (1.0 + t) {
                // Faster than the baseline: a session still warming up when the baseline was
                // taken, far more often than a worker that sped up — and a worker whose
                // co-tenant left shows in its availability and in LB-BSP's re-sizing. So a
                // speed-up is no move: its windows become the baseline once there are enough.
                *s = Strikes::default();
                faster.push(*ms);
                if faster.len() >= o.baseline_steps.max(1) {
                    let windows = std::mem::take(faster);
                    self.window_base.insert(d.clone(), windows);
                }
            } else {
                *s = Strikes::default();
                faster.clear();
            }
        }
        let patience = self.options.step_patience;
        let persistence = self.options.step_persistence.as_millis() as u64;
        self.called(
            Trigger::StepTime,
            &self.step_strikes,
            (patience, persistence),
            now_unix_ms,
        )
    }

    /// A detection of `trigger` once some worker of `strikes` has reached its patience —
    /// `(strikes, ms)`: that many strikes in a row, the first at least that long ago: every
    /// worker with strikes moves with it (one re-plan), each by its median factor.
    fn called(
        &self,
        trigger: Trigger,
        strikes: &BTreeMap<String, Strikes>,
        (patience, persistence_ms): (usize, u64),
        now_unix_ms: u64,
    ) -> Option<Detection> {
        let ready = strikes.iter().any(|(w, s)| {
            s.factors.len() >= self.patience(w, s.factor(), patience)
                && now_unix_ms.saturating_sub(s.first_ms) >= persistence_ms
        });
        if !ready {
            return None;
        }
        let moving = || strikes.iter().filter(|(_, s)| !s.factors.is_empty());
        let first = moving().map(|(_, s)| s).min_by_key(|s| s.first_ms)?;
        Some(Detection {
            trigger,
            moved: moving().map(|(w, s)| (w.clone(), s.factor())).collect(),
            first_signal_step: first.first_step,
            first_signal_unix_ms: first.first_ms,
            decided_unix_ms: now_unix_ms,
        })
    }
}

/// Step-time rules with a short warm-up (1 step), baseline (3) and patience (2), as the tests
/// count steps.
#[cfg(test)]
fn quick() -> AdaptOptions {
    AdaptOptions {
        grace_steps: 1,
        baseline_steps: 3,
        step_patience: 2,
        step_persistence: std::time::Duration::ZERO,
        ..AdaptOptions::default()
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
        let mut w = DriftWatch::new(&o, &[("a".into(), 1.0), ("b".into(), 1.0)], &[]);
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
        let mut w = DriftWatch::new(&o, &[("a".into(), 0.8)], &[]);
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
        let o = quick();
        let mut w = DriftWatch::new(&o, &[], &[]);
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

#[cfg(test)]
mod hysteresis {
    use super::*;

    fn spans(a: f64, b: f64) -> Vec<(String, f64)> {
        vec![("a".to_string(), a), ("b".to_string(), b)]
    }

    #[test]
    fn strikes_count_per_worker_not_across_replicas() {
        let mut w = DriftWatch::new(&quick(), &[], &[]);
        for step in 0..4 {
            assert!(w.observe_step(step, &spans(100.0, 100.0), 0).is_none());
        }
        // One slow window on a, then one on b, then a again: never twice in a row on one.
        for (step, (a, b)) in [(300.0, 100.0), (100.0, 300.0), (300.0, 100.0)]
            .into_iter()
            .enumerate()
        {
            assert!(
                w.observe_step(4 + step, &spans(a, b), 0).is_none(),
                "{step}"
            );
        }
    }

    #[test]
    fn a_slow_burst_shorter_than_the_persistence_is_no_move() {
        let o = AdaptOptions {
            step_persistence: std::time::Duration::from_millis(1000),
            ..quick()
        };
        let mut w = DriftWatch::new(&o, &[], &[]);
        for step in 0..4 {
            assert!(w
                .observe_step(step, &spans(100.0, 100.0), step as u64 * 10)
                .is_none());
        }
        // 3 slow 10 ms steps in a row (a CFS period's throttling), then back: nothing.
        for (i, step) in (4..7).enumerate() {
            let t = 1_000 + i as u64 * 10;
            assert!(w.observe_step(step, &spans(100.0, 500.0), t).is_none());
        }
        assert!(w.observe_step(7, &spans(100.0, 100.0), 1_040).is_none());
        // Slow for longer than a second: called, dated from its first slow window.
        let called = (8..400).find_map(|step| {
            let t = 2_000 + (step as u64 - 8) * 10;
            w.observe_step(step, &spans(100.0, 500.0), t)
        });
        let d = called.expect("a persistent slowdown is called");
        assert_eq!(d.decided_unix_ms - d.first_signal_unix_ms, 1_000);
    }

    #[test]
    fn a_speed_up_rebaselines_instead_of_replanning() {
        let mut w = DriftWatch::new(&quick(), &[], &[]);
        assert!(w.observe_step(0, &spans(100.0, 100.0), 0).is_none()); // grace
                                                                       // A baseline taken while the session warmed up, then steps 3× faster: no move.
        for step in 1..4 {
            assert!(w.observe_step(step, &spans(300.0, 300.0), 0).is_none());
        }
        for step in 4..20 {
            assert!(
                w.observe_step(step, &spans(100.0, 100.0), 0).is_none(),
                "{step}"
            );
        }
        // Against the new baseline, b 3× slower is called at the usual patience (2).
        assert!(w.observe_step(20, &spans(100.0, 300.0), 0).is_none());
        let d = w.observe_step(21, &spans(100.0, 300.0), 0).expect("slower");
        assert_eq!(d.moved.len(), 1);
        assert_eq!(d.moved[0].0, "b");
        assert!((d.moved[0].1 - 1.0 / 3.0).abs() < 1e-9);
    }

    #[test]
    fn a_jittery_replica_needs_a_larger_move() {
        let mut w = DriftWatch::new(&quick(), &[], &[]);
        assert!(w.observe_step(0, &spans(100.0, 100.0), 0).is_none()); // grace
        for (step, b) in [100.0, 170.0, 100.0].into_iter().enumerate() {
            assert!(w.observe_step(1 + step, &spans(100.0, b), 0).is_none());
        }
        // b's baseline spread is 70 %: a window 2× its median is within its 1.4 threshold.
        for step in 4..8 {
            assert!(
                w.observe_step(step, &spans(100.0, 200.0), 0).is_none(),
                "{step}"
            );
        }
        let d = (8..10)
            .find_map(|s| w.observe_step(s, &spans(100.0, 300.0), 0))
            .expect("3× is beyond it");
        assert_eq!(d.moved.len(), 1);
        assert!((d.moved[0].1 - 1.0 / 3.0).abs() < 1e-9);
    }

    #[test]
    fn work_moves_back_to_a_held_worker_only_after_return_patience() {
        let o = AdaptOptions::default();
        let r = |a: f64, t: u64| vec![("b".to_string(), a, t)];
        // b was moved away from while slow (availability 0.3); it now reads 0.9.
        let mut held = DriftWatch::new(&o, &[("b".into(), 0.3)], &["b".to_string()]);
        let mut free = DriftWatch::new(&o, &[("b".into(), 0.3)], &[]);
        let called = |w: &mut DriftWatch| {
            (1..=10u64).find(|&t| {
                w.observe_metrics(t as usize, &r(0.9, t * 500), t * 500)
                    .is_some()
            })
        };
        assert_eq!(called(&mut free), Some(o.metric_patience as u64));
        assert_eq!(called(&mut held), Some(o.return_patience as u64));
        // Slower still is called at the usual patience, held or not.
        let mut held = DriftWatch::new(&o, &[("b".into(), 0.6)], &["b".to_string()]);
        let t = (1..=10u64).find(|&t| held.observe_metrics(t as usize, &r(0.2, t), t).is_some());
        assert_eq!(t, Some(o.metric_patience as u64));
        // A reading on the other side of the baseline starts the count afresh.
        let mut w = DriftWatch::new(&o, &[("b".into(), 0.5)], &[]);
        assert!(w.observe_metrics(0, &r(0.9, 1), 1).is_none());
        assert!(w.observe_metrics(1, &r(0.1, 2), 2).is_none());
        assert!(w.observe_metrics(2, &r(0.1, 3), 3).is_some());
    }
}

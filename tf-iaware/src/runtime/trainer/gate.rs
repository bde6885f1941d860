//! What the coordinator and the worker threads share: counts, pauses, the stop flag, the first
//! error; and the training clock, which stops while evaluating.

use std::collections::BTreeMap;
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::error::Error;
use crate::parallel::DataParallelPlan;

/// Shared state of the worker threads and the coordinator.
#[derive(Default)]
pub(super) struct GateState {
    pub paused: bool,
    pub stop: bool,
    pub in_flight: usize,
    /// Steps the chief has completed (backup workers).
    pub global_step: i64,
    /// SyncReplicasOptimizer's token queue (backup workers): a worker takes one, tagged with the
    /// global step, before each gradient after its first; the chief adds one per worker after
    /// each step, so a fast worker may compute several gradients of one step.
    pub tokens: std::collections::VecDeque<i64>,
    pub error: Option<Error>,
    pub steps: Vec<u64>,
    pub samples: Vec<u64>,
    /// Samples read before this run (the runs a resumed run continues).
    pub carried_samples: u64,
    /// What workers a re-plan left out had done: device → (steps, samples).
    pub retired: BTreeMap<String, (u64, u64)>,
    pub updates: u64,
    /// Loss of the first and of the latest step.
    pub loss_first: Option<f32>,
    pub loss_last: Option<f32>,
}

pub(super) struct Gate {
    state: Mutex<GateState>,
    pub changed: Condvar,
}

impl Gate {
    pub fn new(workers: usize) -> Gate {
        Gate {
            state: Mutex::new(GateState {
                steps: vec![0; workers],
                samples: vec![0; workers],
                ..GateState::default()
            }),
            changed: Condvar::new(),
        }
    }

    pub fn lock(&self) -> MutexGuard<'_, GateState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits until no step is in flight, with new steps held back.
    pub fn pause(&self) {
        let mut s = self.lock();
        s.paused = true;
        while s.in_flight > 0 {
            s = self.changed.wait(s).unwrap_or_else(|p| p.into_inner());
        }
    }

    pub fn resume(&self) {
        self.lock().paused = false;
        self.changed.notify_all();
    }

    pub fn stop(&self) {
        self.lock().stop = true;
        self.changed.notify_all();
    }

    pub fn fail(&self, e: Error) {
        let mut s = self.lock();
        s.error.get_or_insert(e);
        s.stop = true;
        drop(s);
        self.changed.notify_all();
    }

    /// Records a step's loss.
    pub fn loss(&self, loss: f32) {
        let mut s = self.lock();
        s.loss_first.get_or_insert(loss);
        s.loss_last = Some(loss);
    }

    /// Counts one synchronous step of every replica of `plan`.
    pub fn account(&self, plan: &DataParallelPlan, update: bool) {
        let mut s = self.lock();
        for (k, r) in plan.replicas.iter().enumerate() {
            if k < s.steps.len() {
                s.steps[k] += 1;
                s.samples[k] += r.batch as u64;
            }
        }
        if update {
            s.updates += 1;
        }
    }

    /// (samples read, updates applied) so far.
    pub fn totals(&self) -> (u64, u64) {
        let s = self.lock();
        let retired: u64 = s.retired.values().map(|r| r.1).sum();
        (
            s.samples.iter().sum::<u64>() + s.carried_samples + retired,
            s.updates,
        )
    }

    /// Ready for a new graph after a failed phase, going on from `updates`: unpaused, nothing
    /// in flight, no error, the backup workers' accumulators back at step 0.
    pub fn restart(&self, updates: u64) {
        let mut s = self.lock();
        (s.stop, s.paused, s.in_flight, s.error) = (false, false, 0, None);
        s.updates = updates;
        s.global_step = 0;
        s.tokens.clear();
    }

    /// Carries each worker's counts from `old`'s replica order to `new`'s: workers left out
    /// keep theirs among the retired, and a retired worker taken back takes its counts back.
    pub fn remap_counts(&self, old: &DataParallelPlan, new: &DataParallelPlan) {
        let mut s = self.lock();
        let mut counts: BTreeMap<String, (u64, u64)> = std::mem::take(&mut s.retired);
        for (k, r) in old.replicas.iter().enumerate() {
            let (steps, samples) = (
                s.steps.get(k).copied().unwrap_or(0),
                s.samples.get(k).copied().unwrap_or(0),
            );
            let c = counts.entry(r.device.clone()).or_default();
            *c = (c.0 + steps, c.1 + samples);
        }
        let (steps, samples) = new
            .replicas
            .iter()
            .map(|r| counts.remove(&r.device).unwrap_or_default())
            .unzip();
        s.steps = steps;
        s.samples = samples;
        s.retired = counts;
    }
}

/// The training clock: runs between `start` and `stop`, evaluations excluded.
pub(super) struct Clock {
    total: Duration,
    since: Option<Instant>,
}

impl Clock {
    /// A running clock that starts at `seconds` (a resumed run's training time so far, checked
    /// when it was read; anything but a number from 0 to a year counts as 0 here all the same).
    pub fn resumed(seconds: f64) -> Clock {
        let max = tf_iaware_core::durable::MAX_TRAIN_SECONDS;
        let seconds = if (0.0..=max).contains(&seconds) {
            seconds
        } else {
            0.0
        };
        Clock {
            total: Duration::from_secs_f64(seconds),
            since: Some(Instant::now()),
        }
    }
    pub fn seconds(&self) -> f64 {
        (self.total + self.since.map_or(Duration::ZERO, |s| s.elapsed())).as_secs_f64()
    }
    pub fn stop(&mut self) {
        if let Some(s) = self.since.take() {
            self.total += s.elapsed();
        }
    }
    pub fn start(&mut self) {
        self.since.get_or_insert_with(Instant::now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clock_resumed_from_any_number_runs() {
        for s in [1e300, -1.0, f64::NAN, f64::INFINITY] {
            assert!(Clock::resumed(s).seconds() < 1.0, "{s}");
        }
        assert!(Clock::resumed(12.5).seconds() >= 12.5);
    }
}

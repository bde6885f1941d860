//! [`CheckpointSchedule`]: when the trainer takes the next checkpoint — every N steps, every T
//! seconds, or whichever comes first. Time is passed in, so the decision is pure.

/// Checkpoint every `every_steps` steps and/or every `every_secs` seconds of training
/// (whichever is due first; neither set: never, except when the trainer asks at the end).
#[derive(Clone, Debug, PartialEq)]
pub struct CheckpointSchedule {
    /// Steps between checkpoints (`None`: not by steps).
    pub every_steps: Option<u64>,
    /// Seconds between checkpoints (`None`: not by time).
    pub every_secs: Option<f64>,
    last_step: u64,
    last_secs: f64,
}

impl CheckpointSchedule {
    /// A schedule whose last checkpoint was at step `step`, `secs` seconds into the run (0 and
    /// 0.0 for a fresh run; a resumed run passes the checkpoint's step).
    pub fn new(every_steps: Option<u64>, every_secs: Option<f64>, step: u64, secs: f64) -> Self {
        CheckpointSchedule {
            every_steps: every_steps.filter(|&n| n > 0),
            every_secs: every_secs.filter(|s| s.is_finite() && *s > 0.0),
            last_step: step,
            last_secs: secs,
        }
    }

    /// Whether a checkpoint is due after `step` steps, `secs` seconds into the run.
    pub fn due(&self, step: u64, secs: f64) -> bool {
        let by_steps = self
            .every_steps
            .is_some_and(|n| step >= self.last_step.saturating_add(n));
        let by_time = self
            .every_secs
            .is_some_and(|t| step > self.last_step && secs - self.last_secs >= t);
        by_steps || by_time
    }

    /// Records a checkpoint taken after `step` steps, `secs` seconds into the run.
    pub fn taken(&mut self, step: u64, secs: f64) {
        self.last_step = step;
        self.last_secs = secs;
    }

    /// Step of the last checkpoint.
    pub fn last_step(&self) -> u64 {
        self.last_step
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_by_steps_or_by_time_whichever_first() {
        let mut s = CheckpointSchedule::new(Some(100), Some(60.0), 0, 0.0);
        assert!(!s.due(99, 10.0));
        assert!(s.due(100, 10.0));
        assert!(s.due(50, 60.0));
        s.taken(50, 60.0);
        assert!(!s.due(60, 100.0));
        assert!(s.due(150, 70.0));
        assert!(s.due(60, 120.0));
        // No new step since the last checkpoint: nothing to save, however long it has been.
        assert!(!s.due(50, 1000.0));
    }

    #[test]
    fn a_resumed_schedule_counts_from_the_checkpoint_and_none_is_never() {
        let s = CheckpointSchedule::new(Some(100), None, 300, 0.0);
        assert!(!s.due(399, 1e9));
        assert!(s.due(400, 0.0));
        let never = CheckpointSchedule::new(None, Some(0.0), 0, 0.0);
        assert!(!never.due(1_000_000, 1e9));
        assert_eq!(never.last_step(), 0);
    }
}

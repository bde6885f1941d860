//! Smoothing of gauges over time: a time-constant EWMA (robust to irregular intervals) and
//! min/mean/max over a sliding window. Pure: time is passed in as seconds.

use std::collections::{HashMap, VecDeque};

use crate::monitor::snapshot::Smoothed;

/// Most readings a window keeps, whatever its span (bounds memory for tiny intervals).
const MAX_WINDOW_READINGS: usize = 4096;

/// Smoothing state of one gauge.
#[derive(Clone, Debug)]
pub(crate) struct Smoother {
    tau_s: f64,
    window_s: f64,
    ewma: Option<(f64, f64)>,
    history: VecDeque<(f64, f64)>,
}

impl Smoother {
    /// A smoother with EWMA time constant `tau_s` and window span `window_s`, seconds.
    pub(crate) fn new(tau_s: f64, window_s: f64) -> Self {
        Smoother {
            tau_s,
            window_s,
            ewma: None,
            history: VecDeque::new(),
        }
    }

    /// Adds reading `value` taken at time `t_s` (seconds, non-decreasing) and returns the
    /// smoothed gauge. Non-finite values are not added; the last smoothed state is returned
    /// with `last` set to the value.
    pub(crate) fn update(&mut self, t_s: f64, value: f64) -> Smoothed {
        if !value.is_finite() {
            let mut s = self.current().unwrap_or(Smoothed::constant(value));
            s.last = value;
            return s;
        }
        let ewma = match self.ewma {
            Some((t0, e)) if self.tau_s > 0.0 => {
                let dt = (t_s - t0).max(0.0);
                let alpha = 1.0 - (-dt / self.tau_s).exp();
                e + alpha * (value - e)
            }
            _ => value,
        };
        self.ewma = Some((t_s, ewma));
        self.history.push_back((t_s, value));
        while let Some(&(t0, _)) = self.history.front() {
            if t_s - t0 > self.window_s || self.history.len() > MAX_WINDOW_READINGS {
                self.history.pop_front();
            } else {
                break;
            }
        }
        let mut s = self.current().unwrap_or(Smoothed::constant(value));
        s.last = value;
        s
    }

    /// The smoothed gauge as of the last reading (`None` before the first).
    pub(crate) fn current(&self) -> Option<Smoothed> {
        let (_, ewma) = self.ewma?;
        let &(_, last) = self.history.back()?;
        let n = self.history.len() as f64;
        let (mut sum, mut min, mut max) = (0.0, f64::INFINITY, f64::NEG_INFINITY);
        for &(_, v) in &self.history {
            sum += v;
            min = min.min(v);
            max = max.max(v);
        }
        Some(Smoothed {
            last,
            ewma,
            mean: sum / n,
            min,
            max,
        })
    }
}

/// Smoothers for many gauges, by key; gauges not updated in a round are forgotten.
#[derive(Clone, Debug)]
pub(crate) struct SmootherBank {
    tau_s: f64,
    window_s: f64,
    gauges: HashMap<String, (Smoother, u64)>,
    round: u64,
}

impl SmootherBank {
    /// A bank whose smoothers use EWMA time constant `tau_s` and window `window_s`, seconds.
    pub(crate) fn new(tau_s: f64, window_s: f64) -> Self {
        SmootherBank {
            tau_s,
            window_s,
            gauges: HashMap::new(),
            round: 0,
        }
    }

    /// EWMA time constant, s.
    pub(crate) fn tau_s(&self) -> f64 {
        self.tau_s
    }

    /// Window span, s.
    pub(crate) fn window_s(&self) -> f64 {
        self.window_s
    }

    /// Starts a round of updates.
    pub(crate) fn begin_round(&mut self) {
        self.round += 1;
    }

    /// Updates gauge `key` with `value` (if any) at `t_s` and returns it smoothed; `None` when
    /// there is no value this round.
    pub(crate) fn update(&mut self, key: &str, t_s: f64, value: Option<f64>) -> Option<Smoothed> {
        let value = value?;
        let round = self.round;
        let (tau, window) = (self.tau_s, self.window_s);
        let entry = self
            .gauges
            .entry(key.to_string())
            .or_insert_with(|| (Smoother::new(tau, window), round));
        entry.1 = round;
        Some(entry.0.update(t_s, value))
    }

    /// Ends a round: forgets gauges not updated in it (an interface or GPU that went away).
    pub(crate) fn end_round(&mut self) {
        let round = self.round;
        self.gauges.retain(|_, (_, seen)| *seen == round);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ewma_follows_time_constant() {
        let mut s = Smoother::new(10.0, 60.0);
        assert_eq!(s.update(0.0, 0.0), Smoothed::constant(0.0));
        let r = s.update(10.0, 1.0);
        let expect = 1.0 - (-1.0f64).exp();
        assert!((r.ewma - expect).abs() < 1e-12);
        assert_eq!(r.last, 1.0);
        assert_eq!(r.mean, 0.5);
        assert_eq!((r.min, r.max), (0.0, 1.0));
    }

    #[test]
    fn window_drops_old_readings() {
        let mut s = Smoother::new(1.0, 5.0);
        for t in 0..10 {
            s.update(t as f64, t as f64);
        }
        let r = s.current().unwrap();
        assert_eq!(r.min, 4.0, "readings older than 5 s are out");
        assert_eq!(r.max, 9.0);
        assert_eq!(r.mean, 6.5);
    }

    #[test]
    fn non_finite_values_do_not_poison() {
        let mut s = Smoother::new(1.0, 5.0);
        s.update(0.0, 2.0);
        let r = s.update(1.0, f64::NAN);
        assert!(r.last.is_nan());
        assert_eq!(r.ewma, 2.0);
        assert_eq!(s.update(2.0, 2.0).mean, 2.0);
    }

    #[test]
    fn bank_forgets_gauges_that_vanish() {
        let mut b = SmootherBank::new(1.0, 5.0);
        b.begin_round();
        b.update("a", 0.0, Some(1.0));
        b.update("b", 0.0, Some(1.0));
        b.end_round();
        b.begin_round();
        assert_eq!(b.update("a", 1.0, None), None);
        b.update("b", 1.0, Some(3.0));
        b.end_round();
        b.begin_round();
        // `a` was forgotten: it restarts from its new value.
        assert_eq!(b.update("a", 2.0, Some(5.0)), Some(Smoothed::constant(5.0)));
        assert_eq!(b.update("b", 2.0, Some(3.0)).unwrap().mean, 7.0 / 3.0);
    }
}

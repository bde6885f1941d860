//! Reading a calibration through its noise: each worker's probe steps fitted to an affine step
//! time, and workers whose probes cannot be told apart pooled to one figure.

use serde::Serialize;

use super::{indistinguishable_groups, log_spread, median, median_rel_se, Z_GAIN};
use crate::parallel::plan::WorkerCapacity;

/// One worker's calibration: the step times measured at each probe batch.
#[derive(Clone, Debug, PartialEq)]
pub struct Probe {
    /// The worker's device.
    pub device: String,
    /// Per probe batch (samples): the step times measured at it, ms, in the order taken.
    pub step_ms: Vec<(usize, Vec<f64>)>,
}

/// What [`fit_probes`] estimated.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ProbeFit {
    /// Each worker's figures (least squares over the median step time at each probe batch),
    /// workers that cannot be told apart pooled to one figure; each with the relative standard
    /// error of its median step at its largest probe batch ([`WorkerCapacity::step_rel_se`],
    /// over every member's steps for a pooled group; `None` without a measured noise).
    pub capacity: Vec<WorkerCapacity>,
    /// Relative noise of one step time (`log_spread` over every (worker, batch) group);
    /// `None` without two samples in any group (then nothing is pooled).
    pub spread: Option<f64>,
    /// The pooled groups, as indices into `capacity` (ascending throughput).
    pub pooled: Vec<Vec<usize>>,
}

/// A data-parallel calibration that survives noise: each worker is fitted
/// ([`WorkerCapacity::fit`], within physical bounds) to its median step time at each probe
/// batch, and workers whose step times at the largest probe batch they share cannot be told
/// apart at [`Z_TELL_APART`] (the medians' standard errors from the pooled `log_spread` of
/// every (worker, batch) group) get one fit over all their probes, so the planner gives equal
/// workers equal shares however the noise fell.
///
/// The step time at one batch is the test rather than the fitted rate because a fit over a few
/// noisy points trades its slope against its intercept: two equal workers can be fitted far
/// apart in samples/s while their measured steps agree. A worker without samples gets no
/// figure (it is left out of the result, as `WorkerCapacity::fit` has nothing to fit).
pub fn fit_probes(probes: &[Probe]) -> ProbeFit {
    let measured: Vec<&Probe> = probes
        .iter()
        .filter(|p| p.step_ms.iter().any(|(_, t)| median(t).is_some()))
        .collect();
    let medians = |p: &Probe| -> Vec<(usize, f64)> {
        p.step_ms
            .iter()
            .filter_map(|(b, t)| Some((*b, median(t)?)))
            .collect()
    };
    let spread = log_spread(
        measured
            .iter()
            .flat_map(|p| p.step_ms.iter().map(|(_, t)| t.as_slice())),
    );
    // A line over these probes: its throughput no higher than the noise lets them show.
    let fit_line = |device: &str, probes: &[&Probe]| -> WorkerCapacity {
        let points: Vec<(usize, f64)> = probes.iter().flat_map(|p| medians(p)).collect();
        let bound = spread.and_then(|s| noise_bound(&points, probes, s));
        WorkerCapacity::fit_bounded(device, &points, bound)
    };
    // Steps timed at a worker's largest probe batch: how well its figures are known.
    let timed_at_largest = |p: &Probe| -> usize {
        p.step_ms
            .iter()
            .filter(|(_, t)| median(t).is_some())
            .max_by_key(|(b, _)| *b)
            .map_or(0, |(_, t)| {
                t.iter().filter(|x| x.is_finite() && **x > 0.0).count()
            })
    };
    let mut capacity: Vec<WorkerCapacity> = measured
        .iter()
        .map(|p| WorkerCapacity {
            step_rel_se: spread.map(|s| median_rel_se(s, timed_at_largest(p))),
            ..fit_line(&p.device, &[p])
        })
        .collect();
    let mut pooled = Vec::new();
    if let Some(s) = spread {
        // The largest batch every measured worker was probed at.
        let common = measured
            .iter()
            .map(|p| {
                p.step_ms
                    .iter()
                    .filter(|(_, t)| median(t).is_some())
                    .map(|(b, _)| *b)
                    .collect::<std::collections::BTreeSet<usize>>()
            })
            .reduce(|a, b| a.intersection(&b).copied().collect());
        if let Some(batch) = common.and_then(|c| c.last().copied()) {
            let mut rates = Vec::with_capacity(measured.len());
            let mut rel_se = Vec::with_capacity(measured.len());
            for p in &measured {
                let times = p
                    .step_ms
                    .iter()
                    .find(|(b, t)| *b == batch && median(t).is_some())
                    .map_or(&[][..], |(_, t)| t.as_slice());
                let n = times.iter().filter(|x| x.is_finite() && **x > 0.0).count();
                rates.push(median(times).map_or(0.0, |ms| batch as f64 / ms * 1e3));
                rel_se.push(median_rel_se(s, n));
            }
            pooled = indistinguishable_groups(&rates, &rel_se);
            for group in &pooled {
                // One fit over every member's probes: workers the noise cannot tell apart are
                // one device measured several times, not several lines to average.
                let members: Vec<&Probe> = group.iter().map(|&i| measured[i]).collect();
                let joint = fit_line("", &members);
                let timed: usize = members.iter().map(|p| timed_at_largest(p)).sum();
                for &i in group {
                    capacity[i].samples_per_sec = joint.samples_per_sec;
                    capacity[i].fixed_ms = joint.fixed_ms;
                    capacity[i].step_rel_se = Some(median_rel_se(s, timed));
                }
            }
        }
    }
    ProbeFit {
        capacity,
        spread,
        pooled,
    }
}

/// The largest marginal throughput (samples/s) that `points` — median step times (ms) at each
/// batch of `probes`, whose single steps have relative noise `spread` — can tell from a flat
/// line: `1000 / (Z_GAIN × SE(slope))`, the slope's standard error from the medians' (each
/// `median_rel_se` of the mean step) over the spread of the batches. A slope the noise cannot
/// tell from 0 is taken at that one-sided 95 % bound instead of at whatever the noise made
/// it, so two runs of one worker read about the same figure. `None` with fewer than two
/// distinct batches or no noise.
fn noise_bound(points: &[(usize, f64)], probes: &[&Probe], spread: f64) -> Option<f64> {
    let n = probes
        .iter()
        .flat_map(|p| p.step_ms.iter())
        .map(|(_, t)| t.iter().filter(|x| x.is_finite() && **x > 0.0).count())
        .filter(|&k| k > 0)
        .min()?;
    if points.is_empty() {
        return None;
    }
    let xs: Vec<f64> = points.iter().map(|p| p.0 as f64).collect();
    let mx = xs.iter().sum::<f64>() / xs.len() as f64;
    let sxx: f64 = xs.iter().map(|x| (x - mx).powi(2)).sum();
    let my = points.iter().map(|p| p.1).sum::<f64>() / points.len() as f64;
    let se_slope = median_rel_se(spread, n) * my / sxx.sqrt();
    (sxx > 0.0 && se_slope > 0.0 && se_slope.is_finite()).then(|| 1e3 / (Z_GAIN * se_slope))
}

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
/// apart at `Z_TELL_APART` (the medians' standard errors from the pooled `log_spread` of
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
    // The batches a set of probes timed, ascending.
    let batches = |probes: &[&Probe]| -> Vec<usize> {
        probes
            .iter()
            .flat_map(|p| medians(p).into_iter().map(|(b, _)| b))
            .collect::<std::collections::BTreeSet<usize>>()
            .into_iter()
            .collect()
    };
    let mut capacity: Vec<WorkerCapacity> = measured
        .iter()
        .map(|p| WorkerCapacity {
            step_rel_se: spread.map(|s| median_rel_se(s, timed_at_largest(p))),
            probed_batches: batches(&[p]),
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
                let probed = batches(&members);
                for &i in group {
                    capacity[i].probed_batches.clone_from(&probed);
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

/// How far past its largest probe batch an operating probe may go: at most this many times it.
pub const OPERATING_REACH: usize = 4;

/// The batch at which to time each worker once more after a first fit of its small probes
/// (`capacity`, in the order of the workers), so that the shares a plan gives are read between
/// measured points instead of extrapolated from probes of at most `probe_batch` samples, where a
/// few noisy steps trade the fitted slope against the intercept (`paper`'s strongest worker,
/// probed at 3, 6 and 12 samples, was fitted at 246–454 samples/s across runs and its
/// whole-batch step priced 16 % low to 27 % high).
///
/// No plan that beats the fastest single worker holding all of `global_batch` gives a worker a
/// share whose step is longer than that worker's, so worker *w* is probed at the share at which
/// its fitted step reaches it — `(t₁ − fixed_ms) × samples_per_sec`, with `t₁` the fastest
/// worker's step at the whole batch — capped at `global_batch` and at [`OPERATING_REACH`] ×
/// `probe_batch` (the calibration's time). `None` for a worker whose share would stay below twice
/// `probe_batch`: such a point adds little range, and a worker that slow gets small shares.
pub fn operating_batches(
    capacity: &[WorkerCapacity],
    global_batch: usize,
    probe_batch: usize,
) -> Vec<Option<usize>> {
    let usable = |c: &&WorkerCapacity| {
        c.samples_per_sec.is_finite() && c.samples_per_sec > 0.0 && c.fixed_ms.is_finite()
    };
    let t1 = capacity
        .iter()
        .filter(usable)
        .map(|c| c.step_ms(global_batch))
        .min_by(f64::total_cmp);
    let cap = global_batch.min(OPERATING_REACH * probe_batch.max(1));
    capacity
        .iter()
        .map(|c| {
            let t1 = t1?;
            if !usable(&c) {
                return None;
            }
            // The fastest worker's own share is the whole batch: round-off must not take a
            // sample off it.
            let share = ((t1 - c.fixed_ms.max(0.0)) * c.samples_per_sec / 1e3 + 1e-6).floor();
            let share = if share.is_finite() && share > 0.0 {
                (share as usize).min(cap)
            } else {
                0
            };
            (share >= 2 * probe_batch.max(1)).then_some(share)
        })
        .collect()
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

/// Sets every member of each `pooled` group (indices into `capacity`, as [`ProbeFit::pooled`])
/// to the group's geometric-mean availability: their figures are one, measured alike, and the
/// availability readings that normalise them must be one too — else identical workers read a
/// little differently on a busy host (0.44 and 0.30 beside four CPU-bound processes) are
/// rescaled 1.5× apart by every later plan. Members without an availability are left alone.
pub fn pool_availability(capacity: &mut [WorkerCapacity], pooled: &[Vec<usize>]) {
    for group in pooled {
        let read: Vec<f64> = group
            .iter()
            .filter_map(|&i| capacity.get(i)?.availability)
            .filter(|a| a.is_finite() && *a > 0.0)
            .collect();
        if read.len() != group.len() || read.is_empty() {
            continue;
        }
        let mean = (read.iter().map(|a| a.ln()).sum::<f64>() / read.len() as f64).exp();
        for &i in group {
            capacity[i].availability = Some(mean);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cap(i: usize, samples_per_sec: f64, fixed_ms: f64) -> WorkerCapacity {
        WorkerCapacity {
            fixed_ms,
            ..WorkerCapacity::rate(&format!("/job:worker/task:{i}"), samples_per_sec)
        }
    }

    #[test]
    fn operating_probes_reach_the_shares_a_plan_can_give() {
        // `paper`'s first fit of a recorded main job (main-job/rerun-throttle-wait-0612, run 1):
        // global batch 64, probes of 3, 6 and 12 samples.
        let first = [
            cap(0, 255.2, 56.0),
            cap(1, 144.9, 103.0),
            cap(2, 72.2, 253.0),
            cap(3, 28.4, 491.0),
        ];
        // Worker 0 alone takes 306.8 ms for 64 samples: it would be probed at all 64, capped at
        // four times the probe; worker 1 reaches 306.8 ms at 29 samples; workers 2 and 3 would
        // get fewer than 24 in any plan that beats worker 0 alone.
        assert_eq!(
            operating_batches(&first, 64, 12),
            vec![Some(48), Some(29), None, None]
        );
        // A batch within reach of the probes adds nothing.
        assert_eq!(
            operating_batches(&first, 16, 12),
            vec![None, None, None, None]
        );
        // Four equal workers: each may hold the whole batch.
        let equal: Vec<_> = (0..4).map(|i| cap(i, 300.0, 50.0)).collect();
        assert_eq!(operating_batches(&equal, 40, 12), vec![Some(40); 4]);
        // Recorded where round-off gave the fastest worker 31 of 32 (every digit kept).
        #[allow(clippy::excessive_precision)]
        let recorded = [
            cap(0, 53_519.303_319_094_77, 2.706_675_720_000_220_2),
            cap(1, 858.354_678_774_862_9, 10.427_666_999_999_998),
        ];
        assert_eq!(operating_batches(&recorded, 32, 8), vec![Some(32), None]);
    }

    #[test]
    fn a_worker_without_usable_figures_gets_no_operating_probe() {
        let caps = [
            cap(0, 300.0, 50.0),
            cap(1, 0.0, 10.0),
            cap(2, f64::NAN, 10.0),
        ];
        assert_eq!(operating_batches(&caps, 64, 12), vec![Some(48), None, None]);
        assert_eq!(operating_batches(&[], 64, 12), Vec::<Option<usize>>::new());
        let none = [cap(0, 0.0, 50.0)];
        assert_eq!(operating_batches(&none, 64, 12), vec![None]);
    }

    #[test]
    fn figures_name_the_batches_they_were_fitted_to() {
        let steps = |ms: f64| vec![ms, ms * 1.01, ms * 0.99];
        let probe = |i: usize, extra: &[(usize, f64)]| Probe {
            device: format!("/job:worker/task:{i}"),
            step_ms: [(3, 20.0), (6, 30.0), (12, 50.0)]
                .iter()
                .chain(extra)
                .map(|&(b, ms)| (b, steps(ms)))
                .collect(),
        };
        // Two equal workers, one also timed at 48 samples: pooled, both name every batch.
        let fit = fit_probes(&[probe(0, &[(48, 170.0)]), probe(1, &[])]);
        assert_eq!(fit.pooled, vec![vec![0, 1]]);
        for c in &fit.capacity {
            assert_eq!(c.probed_batches, vec![3, 6, 12, 48], "{c:?}");
        }
        // Told apart: each names its own.
        let slow = Probe {
            device: "/job:worker/task:2".into(),
            step_ms: vec![(3, steps(80.0)), (12, steps(200.0))],
        };
        let fit = fit_probes(&[probe(0, &[(48, 170.0)]), slow]);
        assert!(fit.pooled.is_empty(), "{fit:?}");
        assert_eq!(fit.capacity[0].probed_batches, vec![3, 6, 12, 48]);
        assert_eq!(fit.capacity[1].probed_batches, vec![3, 12]);
    }

    #[test]
    fn pooled_workers_share_one_availability() {
        let w = |d: &str, a: Option<f64>| WorkerCapacity {
            availability: a,
            ..WorkerCapacity::rate(d, 100.0)
        };
        let mut c = vec![
            w("a", Some(0.444)),
            w("b", Some(0.295)),
            w("c", Some(0.9)),
            w("d", None),
            w("e", Some(0.5)),
        ];
        pool_availability(&mut c, &[vec![0, 1], vec![3, 4]]);
        let g = (0.444f64 * 0.295).sqrt();
        assert!((c[0].availability.unwrap() - g).abs() < 1e-12);
        assert_eq!(c[0].availability, c[1].availability);
        assert_eq!(c[2].availability, Some(0.9), "not pooled");
        assert_eq!((c[3].availability, c[4].availability), (None, Some(0.5)));
    }
}

//! Share decisions that survive measurement noise, pure: no TensorFlow, no I/O.
//!
//! Throughputs measured on a shared machine jitter: on two loaded cores the calibration and the
//! traced steps of four *identical* workers disagreed by 30–50 %, and re-sizing on every
//! difference (LB-BSP's feedback with a plain 10 % predicted-gain guard) gave shares such as
//! 27/9/14/14 where 16/16/16/16 was right. Two rules, both driven by the noise measured in the
//! repeated samples themselves:
//!
//! 1. **Workers that cannot be told apart get the same figures** (`pool_indistinguishable`):
//!    two workers' throughputs are told apart only when their log-ratio exceeds
//!    [`Z_TELL_APART`] standard errors of the difference; workers that cannot be told from the
//!    slowest of their group share the group's mean throughput and fixed cost, so the planner
//!    gives them equal shares. On `uniform` (four equal workers) that is the even split; on
//!    `paper` (true throughput ratios like 38/19/6/1, far beyond the noise) nothing is pooled.
//! 2. **Re-size only on a gain the noise could not produce** ([`gain_lower_bound`],
//!    [`decide_resize`]): the new shares are taken only when the gain they are predicted to
//!    bring, evaluated at the *worst* throughputs within [`Z_GAIN`] standard errors of each
//!    estimate (a one-sided 95 % lower confidence bound), is still at least the guard
//!    (`InfraAwareOptions::min_gain`).
//!
//! The calibration itself is read the same way ([`fit_probes`]): workers whose probe steps
//! cannot be told apart get one figure, so a burst of load during one worker's probes does not
//! become a share.
//!
//! Noise is multiplicative (a co-tenant takes a fraction of a core), so it is measured on
//! logarithms: the pooled standard deviation of ln(samples/s) of each worker's repeated
//! measurements about that worker's own mean (`log_spread`). A worker's estimate is the
//! median of its samples, whose standard error is √(π/2) ≈ 1.25 times the mean's, σ/√n.

mod probe;

pub use probe::{
    fit_probes, operating_batches, pool_availability, Probe, ProbeFit, OPERATING_REACH,
};

use std::collections::BTreeMap;

use serde::Serialize;

use super::network::VarInfo;
use super::plan::{infra_aware, DataParallelPlan, InfraAwareOptions, WorkerCapacity};
use crate::error::Result;

pub use super::plan::Z_TELL_APART;

/// Standard errors by which each throughput is moved against a re-size when its gain is
/// bounded: one-sided 95 %.
pub const Z_GAIN: f64 = 1.645;

/// Standard error of a median relative to the mean's, for normal noise: √(π/2).
const MEDIAN_EFFICIENCY: f64 = 1.2533;

/// Pooled standard deviation of ln(sample) about each group's own mean — the relative noise of
/// one measurement (0.1 ≈ 10 %). Groups are one worker's repeated measurements; non-positive or
/// non-finite samples are ignored. `None` without a group of two or more samples (no degree of
/// freedom).
pub(crate) fn log_spread<'a>(groups: impl IntoIterator<Item = &'a [f64]>) -> Option<f64> {
    let (mut ss, mut dof) = (0.0, 0usize);
    for g in groups {
        let logs: Vec<f64> = g
            .iter()
            .filter(|x| x.is_finite() && **x > 0.0)
            .map(|x| x.ln())
            .collect();
        if logs.len() < 2 {
            continue;
        }
        let mean = logs.iter().sum::<f64>() / logs.len() as f64;
        ss += logs.iter().map(|l| (l - mean).powi(2)).sum::<f64>();
        dof += logs.len() - 1;
    }
    (dof > 0).then(|| (ss / dof as f64).sqrt())
}

/// Relative standard error of the median of `n` measurements of relative noise `spread`.
pub(crate) fn median_rel_se(spread: f64, n: usize) -> f64 {
    if n == 0 {
        f64::INFINITY
    } else {
        MEDIAN_EFFICIENCY * spread / (n as f64).sqrt()
    }
}

/// The relative change of a median step that the noise of `step_ms` (repeated step times, ms)
/// cannot account for: [`Z_GAIN`] relative standard errors of their median (`log_spread` over
/// them, `median_rel_se`) — the least predicted gain a change of plans decided from these steps
/// must show. 0 with fewer than three finite steps.
pub fn median_step_noise(step_ms: &[f64]) -> f64 {
    let n = step_ms
        .iter()
        .filter(|x| x.is_finite() && **x > 0.0)
        .count();
    if n < 3 {
        return 0.0;
    }
    log_spread([step_ms]).map_or(0.0, |s| Z_GAIN * median_rel_se(s, n))
}

/// Workers whose throughputs cannot be told apart at [`Z_TELL_APART`] get their group's
/// figures: the geometric mean of their samples/s and the mean of their fixed costs (devices,
/// availability and memory caps are kept). `rel_se[i]` is worker `i`'s relative standard
/// error (see `median_rel_se`; 0: exact, never pooled with a different figure).
///
/// Groups are formed on the workers sorted by throughput: a group starts at its slowest
/// worker and takes each next one that cannot be told from that first one, so a chain of small
/// steps never merges workers that are themselves far apart. Workers without a positive
/// throughput are left as they are.
pub(crate) fn pool_indistinguishable(
    workers: &[WorkerCapacity],
    rel_se: &[f64],
) -> Vec<WorkerCapacity> {
    let rates: Vec<f64> = workers.iter().map(|w| w.samples_per_sec).collect();
    let mut out = workers.to_vec();
    for group in indistinguishable_groups(&rates, rel_se) {
        pool(&mut out, &group);
    }
    out
}

/// The groups of `pool_indistinguishable`: indices of `rates` (samples/s) that cannot be told
/// apart at [`Z_TELL_APART`], each group of two or more in ascending rate, formed from the
/// slowest up. Non-positive or non-finite rates are in no group.
fn indistinguishable_groups(rates: &[f64], rel_se: &[f64]) -> Vec<Vec<usize>> {
    let se = |i: usize| rel_se.get(i).copied().unwrap_or(0.0).max(0.0);
    let mut order: Vec<usize> = (0..rates.len())
        .filter(|&i| rates[i] > 0.0 && rates[i].is_finite())
        .collect();
    order.sort_by(|&a, &b| rates[a].total_cmp(&rates[b]));
    let mut groups = Vec::new();
    let mut start = 0;
    while start < order.len() {
        let first = order[start];
        let mut end = start + 1;
        while end < order.len() {
            let j = order[end];
            let gap = (rates[j] / rates[first]).ln();
            let tolerance = Z_TELL_APART * (se(first).powi(2) + se(j).powi(2)).sqrt();
            if gap > tolerance {
                break;
            }
            end += 1;
        }
        if end - start > 1 {
            groups.push(order[start..end].to_vec());
        }
        start = end;
    }
    groups
}

/// Gives the workers of `group` one figure: the geometric mean of their samples/s and the mean
/// of their fixed costs.
fn pool(workers: &mut [WorkerCapacity], group: &[usize]) {
    let n = group.len() as f64;
    let rate = (group
        .iter()
        .map(|&i| workers[i].samples_per_sec.ln())
        .sum::<f64>()
        / n)
        .exp();
    let fixed = group.iter().map(|&i| workers[i].fixed_ms).sum::<f64>() / n;
    for &i in group {
        workers[i].samples_per_sec = rate;
        workers[i].fixed_ms = fixed;
    }
}

/// Predicted step of `plan` from `capacity`, ms: the slowest replica's
/// [`WorkerCapacity::step_ms`] plus `per_replica_overhead_ms` per replica; `None` if a replica's
/// worker is not in `capacity`.
pub fn plan_step_ms(
    plan: &DataParallelPlan,
    capacity: &[WorkerCapacity],
    per_replica_overhead_ms: f64,
) -> Option<f64> {
    let mut worst: f64 = 0.0;
    for r in &plan.replicas {
        let c = capacity.iter().find(|c| c.device == r.device)?;
        worst = worst.max(c.step_ms(r.batch));
    }
    Some(worst + plan.replicas.len() as f64 * per_replica_overhead_ms)
}

/// The predicted gain of going from plan `now` to plan `new`, 1 − step(new) / step(now), and
/// its lower confidence bound: the least gain over throughputs within `z` relative standard
/// errors of each estimate (`capacity[i].samples_per_sec × e^(±z·rel_se[i])`, each worker
/// independently — the worst case for the change, e.g. the workers `new` loads more being
/// slower and those it relieves faster than measured). Returns `(predicted, lower bound)`;
/// `None` if a plan names a worker not in `capacity`.
///
/// The minimum is searched over the corners of that box by coordinate descent (each worker
/// moved to whichever end lowers the gain, until no move does; at most `capacity.len()`
/// passes): exact for the few workers a plan has in practice, a close bound otherwise.
pub fn gain_lower_bound(
    now: &DataParallelPlan,
    new: &DataParallelPlan,
    capacity: &[WorkerCapacity],
    rel_se: &[f64],
    z: f64,
    per_replica_overhead_ms: f64,
) -> Option<(f64, f64)> {
    let gain = |c: &[WorkerCapacity]| -> Option<f64> {
        let a = plan_step_ms(now, c, per_replica_overhead_ms)?;
        let b = plan_step_ms(new, c, per_replica_overhead_ms)?;
        Some(if a > 0.0 { 1.0 - b / a } else { 0.0 })
    };
    let predicted = gain(capacity)?;
    let mut c = capacity.to_vec();
    let mut worst = predicted;
    for _ in 0..capacity.len().max(1) {
        let mut moved = false;
        for i in 0..c.len() {
            let se = rel_se.get(i).copied().unwrap_or(0.0).max(0.0);
            if se == 0.0 {
                continue;
            }
            let keep = c[i].samples_per_sec;
            let mut best = (worst, keep);
            for f in [(-z * se).exp(), 1.0, (z * se).exp()] {
                c[i].samples_per_sec = capacity[i].samples_per_sec * f;
                if let Some(g) = gain(&c) {
                    if g < best.0 - 1e-12 {
                        best = (g, c[i].samples_per_sec);
                    }
                }
            }
            c[i].samples_per_sec = best.1;
            if best.1 != keep {
                moved = true;
                worst = best.0;
            }
        }
        if !moved {
            break;
        }
    }
    Some((predicted, worst))
}

/// What [`decide_resize`] measured and decided.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct ResizeDecision {
    /// Relative noise of one measurement (`log_spread`; `None`: fewer than two samples of any
    /// worker, then no re-size).
    pub spread: Option<f64>,
    /// Each worker's throughput estimate (median of its samples), samples/s, after pooling
    /// workers that cannot be told apart.
    pub estimates: Vec<WorkerCapacity>,
    /// Predicted gain of the proposed shares, 1 − step(new)/step(now).
    pub predicted_gain: f64,
    /// Its lower confidence bound ([`gain_lower_bound`] at [`Z_GAIN`]).
    pub gain_lower_bound: f64,
    /// The new plan, when the bound reaches the guard and the shares differ.
    pub resize: Option<DataParallelPlan>,
}

/// LB-BSP's re-sizing decision, robust to noise: from repeated throughput measurements of the
/// workers of plan `now` (`samples[device]`, samples/s each), estimate each worker by the
/// median of its samples (workers without samples keep `capacity`'s figure), measure the
/// noise (`log_spread`), pool workers that cannot be told apart
/// (`pool_indistinguishable`), plan shares with [`infra_aware`] and propose them only if the
/// lower confidence bound of their gain ([`gain_lower_bound`] at [`Z_GAIN`]) is at least
/// `options.min_gain` and they differ from `now`'s.
///
/// `capacity` gives the calibrated fixed costs, memory caps and the workers that may be used.
///
/// # Errors
/// The errors of [`infra_aware`].
pub fn decide_resize(
    now: &DataParallelPlan,
    samples: &BTreeMap<String, Vec<f64>>,
    capacity: &[WorkerCapacity],
    ps: &[(String, f64)],
    vars: &[VarInfo],
    options: &InfraAwareOptions,
) -> Result<ResizeDecision> {
    let spread = log_spread(samples.values().map(Vec::as_slice));
    let mut rel_se = Vec::with_capacity(capacity.len());
    let estimates: Vec<WorkerCapacity> = capacity
        .iter()
        .map(|c| {
            let mine = samples.get(&c.device).map(Vec::as_slice).unwrap_or(&[]);
            match (median(mine), spread) {
                (Some(m), Some(s)) => {
                    rel_se.push(median_rel_se(s, mine.len()));
                    WorkerCapacity {
                        samples_per_sec: m,
                        ..c.clone()
                    }
                }
                // Unmeasured: the calibration, taken as no better known than one sample.
                _ => {
                    rel_se.push(spread.unwrap_or(0.0));
                    c.clone()
                }
            }
        })
        .collect();
    let estimates = pool_indistinguishable(&estimates, &rel_se);
    let keep = |e: Vec<WorkerCapacity>, predicted: f64, bound: f64| ResizeDecision {
        spread,
        estimates: e,
        predicted_gain: predicted,
        gain_lower_bound: bound,
        resize: None,
    };
    if spread.is_none() {
        return Ok(keep(estimates, 0.0, 0.0));
    }
    let mut new = infra_aware(&estimates, ps, vars, now.global_batch(), options)?;
    new.strategy = now.strategy.clone();
    new.replicas.retain(|r| r.batch > 0);
    let overhead = options.per_replica_overhead_ms;
    let Some((predicted, bound)) =
        gain_lower_bound(now, &new, &estimates, &rel_se, Z_GAIN, overhead)
    else {
        return Ok(keep(estimates, 0.0, 0.0));
    };
    let mut d = keep(estimates, predicted, bound);
    if bound >= options.min_gain && new.replicas != now.replicas {
        d.resize = Some(new);
    }
    Ok(d)
}

/// Median of the finite values (upper median for an even count); `None` if there are none.
fn median(xs: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = xs.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    Some(v[v.len() / 2])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parallel::plan::Replica;

    fn dev(i: usize) -> String {
        format!("/job:worker/replica:0/task:{i}/device:CPU:0")
    }

    fn plan(shares: &[usize]) -> DataParallelPlan {
        DataParallelPlan {
            strategy: "infra-aware".into(),
            replicas: shares
                .iter()
                .enumerate()
                .filter(|(_, b)| **b > 0)
                .map(|(i, &batch)| Replica {
                    device: dev(i),
                    batch,
                })
                .collect(),
            variable_devices: BTreeMap::new(),
            global_device: "/job:ps/replica:0/task:0/device:CPU:0".into(),
            predicted_step_ms: None,
        }
    }

    fn cap(i: usize, rate: f64, fixed_ms: f64) -> WorkerCapacity {
        WorkerCapacity {
            device: dev(i),
            samples_per_sec: rate,
            fixed_ms,
            ..WorkerCapacity::default()
        }
    }

    fn ps() -> Vec<(String, f64)> {
        vec![("/job:ps/replica:0/task:0/device:CPU:0".to_string(), 1.0)]
    }

    fn options() -> InfraAwareOptions {
        InfraAwareOptions {
            per_replica_overhead_ms: 5.0,
            ..InfraAwareOptions::default()
        }
    }

    fn shares(p: &DataParallelPlan, n: usize) -> Vec<usize> {
        (0..n)
            .map(|i| {
                p.replicas
                    .iter()
                    .find(|r| r.device == dev(i))
                    .map_or(0, |r| r.batch)
            })
            .collect()
    }

    /// Traced throughputs (samples/s) of `uniform`'s four equal 0.3-core workers on shares
    /// 16/16/16/16, three traced steps each, while other builds loaded the machine: the spread
    /// that made the old feedback re-size to 27/9/14/14.
    fn uniform_samples() -> BTreeMap<String, Vec<f64>> {
        [
            vec![410.0, 265.0, 530.0],
            vec![190.0, 330.0, 240.0],
            vec![300.0, 225.0, 410.0],
            vec![280.0, 350.0, 215.0],
        ]
        .into_iter()
        .enumerate()
        .map(|(i, s)| (dev(i), s))
        .collect()
    }

    /// Four workers like `paper`'s (true ratios about 38/19/6/1), measured with the same
    /// relative noise as [`uniform_samples`].
    fn paper_samples() -> BTreeMap<String, Vec<f64>> {
        [
            vec![900.0, 620.0, 1100.0],
            vec![300.0, 420.0, 260.0],
            vec![95.0, 70.0, 120.0],
            vec![16.0, 22.0, 13.0],
        ]
        .into_iter()
        .enumerate()
        .map(|(i, s)| (dev(i), s))
        .collect()
    }

    #[test]
    fn spread_is_the_pooled_log_deviation_about_each_workers_own_mean() {
        // Each group at a different level, the same ±10 % about its own mean.
        let a = [100.0 / 1.1, 100.0 * 1.1];
        let b = [10.0 / 1.1, 10.0 * 1.1];
        let s = log_spread([&a[..], &b[..]]).unwrap();
        // ln 1.1 about the mean, two deviations per group, one degree of freedom each.
        let expected = (2.0 * 1.1f64.ln().powi(2)).sqrt();
        assert!((s - expected).abs() < 1e-12, "{s} vs {expected}");
        // One sample per worker: no degree of freedom.
        assert_eq!(log_spread([&[5.0][..], &[7.0][..]]), None);
        // Nonsense samples are skipped.
        assert!(log_spread([&[1.0, 1.0, f64::NAN, -3.0][..]]).unwrap().abs() < 1e-12);
    }

    #[test]
    fn equal_workers_measured_noisily_are_pooled_and_keep_the_even_split() {
        let samples = uniform_samples();
        let capacity: Vec<WorkerCapacity> = (0..4).map(|i| cap(i, 300.0, 20.0)).collect();
        let now = plan(&[16, 16, 16, 16]);
        let d = decide_resize(&now, &samples, &capacity, &ps(), &[], &options()).unwrap();
        let spread = d.spread.unwrap();
        assert!(spread > 0.2, "these samples are noisy: {spread}");
        // All four pooled to one figure: nothing to re-size.
        let rates: Vec<f64> = d.estimates.iter().map(|c| c.samples_per_sec).collect();
        assert!(
            rates.iter().all(|r| (r - rates[0]).abs() < 1e-9),
            "{rates:?}"
        );
        assert!(d.resize.is_none(), "{d:?}");
        // The old rule (medians as they are, predicted gain ≥ 10 %) would have re-sized.
        let medians: Vec<WorkerCapacity> = (0..4)
            .map(|i| cap(i, median(&samples[&dev(i)]).unwrap(), 20.0))
            .collect();
        let old = infra_aware(&medians, &ps(), &[], 64, &options()).unwrap();
        let old_gain = 1.0
            - plan_step_ms(&old, &medians, 5.0).unwrap()
                / plan_step_ms(&now, &medians, 5.0).unwrap();
        assert!(old_gain >= 0.1, "old gain {old_gain}");
        assert_ne!(shares(&old, 4), vec![16, 16, 16, 16]);
    }

    #[test]
    fn unequal_workers_beyond_the_noise_still_adapt() {
        let samples = paper_samples();
        let capacity: Vec<WorkerCapacity> = (0..4).map(|i| cap(i, 100.0, 20.0)).collect();
        let now = plan(&[16, 16, 16, 16]);
        let d = decide_resize(&now, &samples, &capacity, &ps(), &[], &options()).unwrap();
        let new = d.resize.as_ref().expect("a clear gain is taken");
        let s = shares(new, 4);
        assert!(s[0] > s[1] && s[1] > s[2] && s[2] >= s[3], "{s:?}");
        assert!(d.gain_lower_bound >= 0.1 && d.predicted_gain > d.gain_lower_bound);
        // No pooling: four distinct estimates.
        let mut rates: Vec<f64> = d.estimates.iter().map(|c| c.samples_per_sec).collect();
        rates.dedup();
        assert_eq!(rates.len(), 4);
    }

    #[test]
    fn a_small_true_gain_is_not_taken_when_the_noise_could_produce_it() {
        // Worker 0 is 15 % faster; the measurements' noise is ±25 %.
        let samples: BTreeMap<String, Vec<f64>> = [
            vec![345.0, 230.0, 430.0],
            vec![300.0, 220.0, 375.0],
            vec![380.0, 240.0, 300.0],
            vec![300.0, 210.0, 390.0],
        ]
        .into_iter()
        .enumerate()
        .map(|(i, s)| (dev(i), s))
        .collect();
        let capacity: Vec<WorkerCapacity> = (0..4).map(|i| cap(i, 300.0, 20.0)).collect();
        let d =
            decide_resize(&plan(&[16; 4]), &samples, &capacity, &ps(), &[], &options()).unwrap();
        assert!(d.resize.is_none(), "{d:?}");
        // The same medians measured exactly would pay no 10 % either way; with almost no
        // noise a clear difference is taken.
        let exact: BTreeMap<String, Vec<f64>> = [(600.0, 0), (300.0, 1), (300.0, 2), (300.0, 3)]
            .into_iter()
            .map(|(r, i)| (dev(i), vec![r * 0.999, r, r * 1.001]))
            .collect();
        let d = decide_resize(&plan(&[16; 4]), &exact, &capacity, &ps(), &[], &options()).unwrap();
        let s = shares(d.resize.as_ref().expect("taken"), 4);
        assert!(s[0] > 16 && s[1] < 16, "{s:?}");
    }

    #[test]
    fn pooling_groups_from_the_slowest_and_never_chains_far_apart_workers() {
        // 10 % steps: each next worker is within the tolerance of its neighbour but not of the
        // group's first beyond two steps.
        let w: Vec<WorkerCapacity> = [100.0, 110.0, 121.0, 133.1, 146.41]
            .iter()
            .enumerate()
            .map(|(i, &r)| cap(i, r, i as f64))
            .collect();
        let se = vec![0.05; 5]; // tolerance 1.96 × √2 × 0.05 ≈ 0.139 (×1.149)
        let p = pool_indistinguishable(&w, &se);
        let r: Vec<f64> = p.iter().map(|c| c.samples_per_sec).collect();
        assert!((r[0] - r[1]).abs() < 1e-9 && (r[0] - (100.0f64 * 110.0).sqrt()).abs() < 1e-9);
        assert!((p[0].fixed_ms - 0.5).abs() < 1e-12);
        assert!((r[2] - r[3]).abs() < 1e-9 && r[2] > r[1]);
        assert!((r[4] - 146.41).abs() < 1e-9);
        // Exact figures are never pooled.
        assert_eq!(pool_indistinguishable(&w, &[0.0; 5]), w);
        // Devices and caps are kept.
        assert!(p.iter().zip(&w).all(|(a, b)| a.device == b.device));
    }

    #[test]
    fn the_gain_bound_moves_each_worker_against_the_change() {
        let c: Vec<WorkerCapacity> = vec![cap(0, 200.0, 0.0), cap(1, 100.0, 0.0)];
        let now = plan(&[8, 8]);
        let new = plan(&[11, 5]);
        // now: 8/100 = 80 ms; new: max(55, 50) = 55 ms: gain 31 %.
        let (g, lb) = gain_lower_bound(&now, &new, &c, &[0.0, 0.0], Z_GAIN, 0.0).unwrap();
        assert!((g - (1.0 - 55.0 / 80.0)).abs() < 1e-9 && (lb - g).abs() < 1e-12);
        let (_, lb) = gain_lower_bound(&now, &new, &c, &[0.2, 0.2], Z_GAIN, 0.0).unwrap();
        // Worst case: worker 0 slower (new's bottleneck), worker 1 faster (now's).
        let slow0 = 200.0 * (-Z_GAIN * 0.2f64).exp();
        let fast1 = 100.0 * (Z_GAIN * 0.2f64).exp();
        let expected = 1.0 - (11.0 / slow0).max(5.0 / fast1) / (8.0 / slow0).max(8.0 / fast1);
        assert!((lb - expected).abs() < 1e-9, "{lb} vs {expected}");
        assert!(lb < g);
        // A worker the plans do not know: no bound.
        assert!(gain_lower_bound(&now, &plan(&[8, 0, 8]), &c, &[0.1; 2], Z_GAIN, 0.0).is_none());
    }

    #[test]
    fn without_repeated_samples_nothing_is_re_sized() {
        let one: BTreeMap<String, Vec<f64>> = (0..4).map(|i| (dev(i), vec![100.0])).collect();
        let capacity: Vec<WorkerCapacity> = (0..4).map(|i| cap(i, 300.0, 20.0)).collect();
        let d = decide_resize(&plan(&[16; 4]), &one, &capacity, &ps(), &[], &options()).unwrap();
        assert!(d.spread.is_none() && d.resize.is_none());
    }

    /// Step times (ms) at probe batches 4, 8 and 16 of a worker of `rate` samples/s and
    /// `fixed_ms`, each step stretched by the next of `noise` (multiplicative, as a co-tenant
    /// taking part of a core), starting at `offset`.
    fn probe(i: usize, rate: f64, fixed_ms: f64, noise: &[f64], offset: usize) -> Probe {
        let mut k = offset;
        Probe {
            device: dev(i),
            step_ms: [4usize, 8, 16]
                .into_iter()
                .map(|b| {
                    let times = (0..7)
                        .map(|_| {
                            k += 1;
                            (fixed_ms + b as f64 / rate * 1e3) * noise[k % noise.len()]
                        })
                        .collect();
                    (b, times)
                })
                .collect(),
        }
    }

    /// Relative slow-downs of a loaded machine, from 0.8× to 1.9× of the quiet step: bursts
    /// (other builds) that fall unevenly on the workers' probes.
    const BURSTS: [f64; 11] = [1.0, 1.9, 0.85, 1.2, 1.6, 0.8, 1.05, 1.45, 0.9, 1.3, 1.75];

    #[test]
    fn equal_workers_probed_under_bursts_get_one_figure_and_the_even_split() {
        // Besides the bursts, each worker's probes ran under its own level of load (a build
        // starting or ending between them): up to 1.32× apart.
        let levels = [1.0, 1.25, 0.95, 1.15];
        let probes: Vec<Probe> = (0..4)
            .map(|i| {
                let mut p = probe(i, 300.0, 20.0, &BURSTS, 5 * i);
                for (_, t) in &mut p.step_ms {
                    t.iter_mut().for_each(|ms| *ms *= levels[i]);
                }
                p
            })
            .collect();
        let fit = fit_probes(&probes);
        assert!(fit.spread.unwrap() > 0.2, "{:?}", fit.spread);
        assert_eq!(fit.pooled, vec![fit.pooled[0].clone()]);
        assert_eq!(fit.pooled[0].len(), 4);
        // The pooled figure is known from the four workers' 7 steps each at 16 samples.
        let se = median_rel_se(fit.spread.unwrap(), 4 * 7);
        assert!(fit.capacity.iter().all(|c| c.step_rel_se == Some(se)));
        let p = infra_aware(&fit.capacity, &ps(), &[], 64, &options()).unwrap();
        assert_eq!(shares(&p, 4), vec![16; 4]);
        // Without pooling the same medians fit the equal workers apart, and the planner
        // follows the noise.
        let raw: Vec<WorkerCapacity> = probes
            .iter()
            .map(|p| {
                let points: Vec<(usize, f64)> = p
                    .step_ms
                    .iter()
                    .map(|(b, t)| (*b, median(t).unwrap()))
                    .collect();
                WorkerCapacity::fit(&p.device, &points)
            })
            .collect();
        let rates: Vec<f64> = raw.iter().map(|c| c.samples_per_sec).collect();
        let (lo, hi) = rates
            .iter()
            .fold((f64::MAX, 0.0f64), |(a, b), r| (a.min(*r), b.max(*r)));
        assert!(hi / lo > 1.2, "the noise separates the raw fits: {rates:?}");
        let p = infra_aware(&raw, &ps(), &[], 64, &options()).unwrap();
        assert_ne!(shares(&p, 4), vec![16; 4]);
    }

    #[test]
    fn workers_far_apart_under_the_same_bursts_keep_their_own_figures() {
        // `paper`-like ratios 38/19/6/1, fixed costs growing as workers get busier.
        let truth = [(1200.0, 13.0), (480.0, 26.0), (240.0, 52.0), (60.0, 100.0)];
        let probes: Vec<Probe> = truth
            .iter()
            .enumerate()
            .map(|(i, &(r, f))| probe(i, r, f, &BURSTS, 5 * i))
            .collect();
        let fit = fit_probes(&probes);
        assert!(fit.pooled.is_empty(), "{:?}", fit.pooled);
        let rates: Vec<f64> = fit.capacity.iter().map(|c| c.samples_per_sec).collect();
        assert!(rates.windows(2).all(|w| w[0] > w[1]), "{rates:?}");
        // Two equal workers among unequal ones are pooled with each other only.
        let mut mixed = probes.clone();
        mixed[3] = probe(3, 480.0, 26.0, &BURSTS, 0);
        let fit = fit_probes(&mixed);
        assert_eq!(fit.pooled.len(), 1, "{:?}", fit.pooled);
        let mut group = fit.pooled[0].clone();
        group.sort_unstable();
        assert_eq!(group, vec![1, 3]);
        assert_eq!(
            fit.capacity[1],
            WorkerCapacity {
                device: dev(1),
                ..fit.capacity[3].clone()
            }
        );
    }

    #[test]
    fn probes_without_repeats_or_samples_are_fitted_but_not_pooled() {
        let one = |i: usize| Probe {
            device: dev(i),
            step_ms: vec![(4, vec![30.0]), (16, vec![70.0])],
        };
        let empty = Probe {
            device: dev(9),
            step_ms: vec![(4, vec![]), (16, vec![f64::NAN])],
        };
        let fit = fit_probes(&[one(0), empty, one(1)]);
        assert_eq!(fit.spread, None);
        assert!(fit.capacity.iter().all(|c| c.step_rel_se.is_none()));
        assert!(fit.pooled.is_empty());
        let devices: Vec<&str> = fit.capacity.iter().map(|c| c.device.as_str()).collect();
        assert_eq!(devices, vec![dev(0), dev(1)]);
        // 40 ms more for 12 samples: 300 samples/s, 16.7 ms fixed.
        assert!((fit.capacity[0].samples_per_sec - 300.0).abs() < 1e-9);
    }

    #[test]
    fn identical_workers_with_flat_steps_keep_their_plan_whichever_way_the_noise_tilts() {
        // A small model: ~9 ms per step whatever the batch, probed at 3/6/12 samples. In one
        // run the noise tilts worker 0's line up and worker 1's down; in the next the reverse.
        // Unbounded fits made 343,745 samples/s + 9.0 ms of one and 1,314 samples/s + 0 ms of
        // the other, and the whole batch went to whichever the noise favoured.
        let flat = |i: usize, tilt: f64| Probe {
            device: dev(i),
            step_ms: [3usize, 6, 12]
                .iter()
                .map(|&b| {
                    let t = 9.0 + tilt * (b as f64 - 6.0) / 6.0;
                    (b, vec![t * 0.98, t, t * 1.03])
                })
                .collect(),
        };
        let mut plans = Vec::new();
        for (t0, t1) in [(0.08, -0.08), (-0.08, 0.08)] {
            let fit = fit_probes(&[flat(0, t0), flat(1, t1)]);
            assert_eq!(fit.pooled.len(), 1, "one device measured twice");
            assert_eq!(fit.pooled[0].len(), 2);
            assert_eq!(
                fit.capacity[0].samples_per_sec,
                fit.capacity[1].samples_per_sec
            );
            for c in &fit.capacity {
                assert!(c.fixed_ms > 8.0 && c.samples_per_sec.is_finite(), "{c:?}");
            }
            let p = infra_aware(&fit.capacity, &ps(), &[], 24, &options()).unwrap();
            plans.push(shares(&p, 2));
        }
        assert_eq!(plans[0], plans[1], "the plan does not flip: {plans:?}");
    }
}

//! IA-TF's balanced plans: which workers to use and how much of the global batch each takes so
//! the slowest replica finishes first, with the variables laid out over the ps.

use serde::{Deserialize, Serialize};

use super::{check, DataParallelPlan, Replica, WorkerCapacity, Z_TELL_APART};
use crate::error::{Error, Result};
use crate::parallel::network::{
    place_variables, ps_bytes, PsNetwork, Sharding, VarInfo, VariableShard,
};

/// Knobs of [`infra_aware`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct InfraAwareOptions {
    /// Workers slower than this fraction of the fastest are never used.
    pub min_relative_throughput: f64,
    /// Fixed cost one more replica adds to every step (synchronisation, variable transfer), ms.
    pub per_replica_overhead_ms: f64,
    /// Keep the even split over every worker unless the balanced plan is predicted at least this
    /// much faster (0.1 = 10 %): sequential calibration of quota-limited workers jitters by about
    /// that much, and reshuffling equal workers on noise only costs.
    pub min_gain: f64,
}

impl Default for InfraAwareOptions {
    fn default() -> Self {
        InfraAwareOptions {
            min_relative_throughput: 0.05,
            per_replica_overhead_ms: 2.0,
            min_gain: 0.1,
        }
    }
}

/// IA-TF's idea for synchronous data parallelism: drop workers whose throughput is below a
/// threshold of the best, then share the global batch so the slowest replica finishes as early
/// as possible — the least step time at which the workers' shares (affine step costs, each
/// worker's fixed per-step cost counted once it is used) reach the batch, plus
/// `per_replica_overhead_ms` per replica, over the best number of workers — so
/// stragglers get small shares or none; put the variables, largest first, on the least-loaded ps
/// relative to its capacity.
///
/// Plans the calibration's noise cannot tell apart ([`WorkerCapacity::step_rel_se`]) are ties,
/// settled by a fixed rule rather than by the noise: the fewest replicas, and near-equal
/// workers by device name (see `balance`), so two calibrations of the same cluster give the
/// same plan.
///
/// `ps` pairs each parameter server with a relative capacity (1.0 when unknown). A worker never
/// gets more than its [`WorkerCapacity::max_batch`] (what its free memory holds); the samples
/// it cannot take go to the others.
///
/// # Errors
/// [`Error::Infeasible`] without workers, ps, or any worker with positive throughput, and
/// when the global batch does not fit in the workers' memory (naming each worker and what it
/// holds); [`Error::InvalidArgument`] for a zero batch.
pub fn infra_aware(
    workers: &[WorkerCapacity],
    ps: &[(String, f64)],
    vars: &[VarInfo],
    global_batch: usize,
    options: &InfraAwareOptions,
) -> Result<DataParallelPlan> {
    let ps_names: Vec<String> = ps.iter().map(|(p, _)| p.clone()).collect();
    let weights: Vec<f64> = ps.iter().map(|(_, c)| *c).collect();
    let shards = place_variables(vars, &weights, Sharding::Whole);
    let overhead = options.per_replica_overhead_ms;
    plan_infra_aware(
        workers,
        &ps_names,
        &weights,
        &shards,
        global_batch,
        options,
        &|replicas| replicas as f64 * overhead,
    )
}

/// [`infra_aware`] for a cluster whose ps links are known: the synchronisation cost of `k`
/// replicas is `PsNetwork::sync_ms` of the variables laid out by `sharding` over the ps in
/// proportion to their link bandwidths (not `per_replica_overhead_ms`), so it uses as many
/// workers as pay for the ps traffic they add. `ps` are the ps device names, in the order of
/// [`PsNetwork::ps_bandwidth`]; with [`Sharding::Balanced`] the plan's
/// [`DataParallelPlan::variable_devices`] name the parts (`name/part_K`) of split variables.
///
/// Planning takes about a thousand passes over the workers' figures, whatever their number:
/// the best number of replicas is searched on a grid (every count up to 32, then ×1.05, ≈ 120
/// counts for 1,000 workers) refined by ternary search around its best point (exhaustively up
/// to 64 workers), each count balanced by ≈ 45 bisection steps on the step time.
///
/// # Errors
/// As [`infra_aware`]; [`Error::InvalidArgument`] when `network` does not have one bandwidth
/// per ps.
pub fn infra_aware_networked(
    workers: &[WorkerCapacity],
    ps: &[String],
    vars: &[VarInfo],
    global_batch: usize,
    options: &InfraAwareOptions,
    network: &PsNetwork,
    sharding: Sharding,
) -> Result<DataParallelPlan> {
    if network.ps_bandwidth.len() != ps.len() {
        return Err(Error::InvalidArgument {
            what: "ps network".into(),
            reason: format!(
                "{} ps bandwidths for {} ps tasks",
                network.ps_bandwidth.len(),
                ps.len()
            ),
        });
    }
    let shards = place_variables(vars, &network.ps_bandwidth, sharding);
    let loads = ps_bytes(&shards, ps.len());
    plan_infra_aware(
        workers,
        ps,
        &network.ps_bandwidth,
        &shards,
        global_batch,
        options,
        &|replicas| network.sync_ms(replicas, &loads),
    )
}

/// [`infra_aware`] with the variables already laid out (`shards` over `ps`, whose weights
/// `ps_weight` pick the global device) and the synchronisation cost of `k` replicas given by
/// `sync_ms`.
fn plan_infra_aware(
    workers: &[WorkerCapacity],
    ps: &[String],
    ps_weight: &[f64],
    shards: &[VariableShard],
    global_batch: usize,
    options: &InfraAwareOptions,
    sync_ms: &dyn Fn(usize) -> f64,
) -> Result<DataParallelPlan> {
    check(workers.len(), ps, global_batch)?;
    let best = workers
        .iter()
        .map(|w| w.samples_per_sec)
        .fold(0.0, f64::max);
    if best <= 0.0 {
        return Err(Error::Infeasible {
            group: "(replicas)".into(),
            reason: "no worker has positive measured throughput".into(),
        });
    }
    let eligible: Vec<&WorkerCapacity> = workers
        .iter()
        .filter(|w| {
            w.samples_per_sec > 0.0 && w.samples_per_sec >= options.min_relative_throughput * best
        })
        .collect();
    let room: usize = eligible
        .iter()
        .fold(0usize, |a, w| a.saturating_add(w.cap()));
    if room < global_batch {
        return Err(Error::Infeasible {
            group: "(replicas)".into(),
            reason: format!(
                "a global batch of {global_batch} samples does not fit in the workers' free memory: {}",
                eligible
                    .iter()
                    .map(|w| format!("{} holds at most {} samples", w.device, w.cap()))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        });
    }
    let Balanced {
        shares: mut batches,
        predicted_ms: mut predicted,
        best_ms,
    } = balance(&eligible, global_batch, sync_ms);
    // The even split over all workers, if it is within `min_gain` of the best balanced plan.
    let even_fits = |n: usize| {
        (0..n).all(|i| global_batch / n + usize::from(i < global_batch % n) <= eligible[i].cap())
    };
    if eligible.len() == workers.len() && global_batch >= workers.len() && even_fits(workers.len())
    {
        let n = workers.len();
        let even: Vec<usize> = (0..n)
            .map(|i| global_batch / n + usize::from(i < global_batch % n))
            .collect();
        let even_ms = eligible
            .iter()
            .zip(&even)
            .map(|(w, &b)| w.step_ms(b))
            .fold(0.0, f64::max)
            + sync_ms(n);
        if even_ms <= best_ms * (1.0 + options.min_gain) {
            batches = even;
            predicted = even_ms;
        }
    }
    let replicas = eligible
        .iter()
        .zip(batches)
        .filter(|(_, b)| *b > 0)
        .map(|(w, batch)| Replica {
            device: w.device.clone(),
            batch,
        })
        .collect();
    let variable_devices = shards
        .iter()
        .map(|s| (s.name.clone(), ps[s.ps].clone()))
        .collect();
    let global = (0..ps.len())
        .max_by(|&a, &b| ps_weight[a].total_cmp(&ps_weight[b]))
        .unwrap_or(0);
    Ok(DataParallelPlan {
        strategy: "infra-aware".into(),
        replicas,
        variable_devices,
        global_device: ps[global].clone(),
        predicted_step_ms: Some(predicted),
    })
}

/// Most samples worker `w` finishes within `t_ms` (at most its cap).
fn fits_within(w: &WorkerCapacity, t_ms: f64) -> usize {
    let n = ((t_ms - w.fixed_ms) * w.samples_per_sec / 1e3).floor();
    if n.is_nan() || n < 1.0 {
        0
    } else if n >= w.cap() as f64 {
        w.cap()
    } else {
        n as usize
    }
}

/// Shares of `total` samples over `used` (indices into `workers`) minimising the slowest
/// replica's step time, and that time, ms; `None` when their memory cannot hold `total`.
///
/// Bisection on the step time `T`: each worker takes the most samples it finishes within `T`
/// (affine step costs, capped by memory); the least `T` whose shares reach `total` is the
/// optimum, and the surplus of workers that reach a whole sample at the same `T` is taken back
/// from the slowest replicas, smallest share first (so ties leave fewer replicas).
fn balance_prefix(
    workers: &[&WorkerCapacity],
    used: &[usize],
    total: usize,
) -> Option<(Vec<usize>, f64)> {
    let room = used
        .iter()
        .fold(0usize, |a, &i| a.saturating_add(workers[i].cap()));
    if room < total {
        return None;
    }
    let sum_at = |t: f64| -> usize {
        used.iter()
            .fold(0usize, |a, &i| a.saturating_add(fits_within(workers[i], t)))
    };
    // Padded: `(step_ms(b) - fixed) × rate` can round to just under `b`.
    let mut hi = used
        .iter()
        .map(|&i| workers[i].step_ms(workers[i].cap().min(total)))
        .fold(0.0, f64::max)
        * (1.0 + 1e-9)
        + 1e-9;
    if sum_at(hi) < total {
        return None; // Figures that are not finite.
    }
    let mut lo = 0.0f64;
    for _ in 0..200 {
        if hi - lo <= hi.abs() * 1e-12 {
            break;
        }
        let mid = 0.5 * (lo + hi);
        if sum_at(mid) >= total {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    let mut shares: Vec<usize> = used.iter().map(|&i| fits_within(workers[i], hi)).collect();
    let mut surplus = shares.iter().sum::<usize>().checked_sub(total)?;
    if surplus > 0 {
        // Take back from the slowest replicas (largest step, then smallest share).
        let mut order: Vec<usize> = (0..used.len()).filter(|&j| shares[j] > 0).collect();
        let key = |j: usize, b: usize| workers[used[j]].step_ms(b);
        order.sort_by(|&a, &b| {
            key(b, shares[b])
                .total_cmp(&key(a, shares[a]))
                .then(shares[a].cmp(&shares[b]))
        });
        for j in order {
            if surplus == 0 {
                break;
            }
            shares[j] -= 1;
            surplus -= 1;
        }
    }
    let makespan = used
        .iter()
        .zip(&shares)
        .map(|(&i, &b)| workers[i].step_ms(b))
        .fold(0.0, f64::max);
    Some((shares, makespan))
}

/// What [`balance`] chose.
struct Balanced {
    /// Samples per worker (0: unused), in `workers` order.
    shares: Vec<usize>,
    /// Predicted step of `shares`, ms.
    predicted_ms: f64,
    /// Predicted step of the fastest plan found, ms (`predicted_ms` is at most the noise above).
    best_ms: f64,
}

/// Shares of `total` samples over `workers` minimising the predicted step: the slowest
/// replica's step time plus `sync_ms(replicas)`, over the number of workers used. Workers are
/// taken in [`speed_order`]; the number used is searched exhaustively up to 64 workers, else on
/// a geometric grid (every count up to 32, then ×1.05) refined by ternary search between the
/// best point's neighbours. No worker gets more than its [`WorkerCapacity::cap`], and counts
/// that cannot hold `total` are skipped.
///
/// **Ties.** Counts whose predicted step is within the calibration's noise of the best
/// ([`within_noise`]) cannot be told apart by the figures, and picking the least of them lets
/// the noise pick the plan: on `paper` with a fixed-cost-dominated model, "the whole batch on
/// the fastest worker" and "half each on the two fastest" were predicted a few ms apart and two
/// runs differed by half the batch. Among them the plan with the **fewest replicas** is taken
/// (then the faster): a synchronous step waits for the slowest of its replicas, so with step
/// times that jitter by the noise measured, each replica more adds a chance of a late one, one
/// more gradient push and variable fetch through the ps and one more task that can fail —
/// predicted gains smaller than the noise do not pay for that. A count predicted faster beyond
/// the noise still wins, so stragglers are dropped and helpful workers used as before; with
/// exact figures (no [`WorkerCapacity::step_rel_se`]) only equal predictions tie.
fn balance(workers: &[&WorkerCapacity], total: usize, sync_ms: &dyn Fn(usize) -> f64) -> Balanced {
    let n = workers.len();
    let order = speed_order(workers);
    // Every count evaluated: (count, shares of order[..count], predicted ms).
    let mut tried: Vec<(usize, Vec<usize>, f64)> = Vec::new();
    let mut best: Option<(usize, f64)> = None;
    let mut seen: Vec<Option<f64>> = vec![None; n + 1];
    let mut eval = |k: usize, best: &mut Option<(usize, f64)>| -> f64 {
        if let Some(v) = seen[k] {
            return v;
        }
        let value = match balance_prefix(workers, &order[..k], total) {
            Some((shares, makespan)) => {
                let replicas = shares.iter().filter(|&&b| b > 0).count();
                let predicted = makespan + sync_ms(replicas);
                if best.as_ref().is_none_or(|(_, t)| predicted < *t) {
                    *best = Some((k, predicted));
                }
                tried.push((k, shares, predicted));
                predicted
            }
            None => f64::INFINITY,
        };
        seen[k] = Some(value);
        value
    };
    let grid: Vec<usize> = if n <= 64 {
        (1..=n).collect()
    } else {
        let mut g: Vec<usize> = (1..=32).collect();
        let mut k = 32usize;
        while k < n {
            k = ((k as f64 * 1.05).ceil() as usize).min(n);
            g.push(k);
        }
        g
    };
    for &k in &grid {
        eval(k, &mut best);
    }
    if n > 64 {
        if let Some(j) = best
            .as_ref()
            .and_then(|(k, _)| grid.iter().position(|g| g == k))
        {
            // Ternary search on the counts between the best grid point's neighbours.
            let (mut lo, mut hi) = (grid[j.saturating_sub(1)], grid[(j + 1).min(grid.len() - 1)]);
            while hi - lo > 2 {
                let m1 = lo + (hi - lo) / 3;
                let m2 = hi - (hi - lo) / 3;
                if eval(m1, &mut best) <= eval(m2, &mut best) {
                    hi = m2;
                } else {
                    lo = m1;
                }
            }
            for k in lo..=hi {
                eval(k, &mut best);
            }
        }
    }
    let Some((best_k, best_ms)) = best else {
        return Balanced {
            shares: vec![0; n],
            predicted_ms: f64::INFINITY,
            best_ms: f64::INFINITY,
        };
    };
    // Relative standard error of a plan's predicted step: its noisiest used worker's.
    let rel_se = |k: usize, shares: &[usize]| -> f64 {
        order[..k]
            .iter()
            .zip(shares)
            .filter(|(_, &b)| b > 0)
            .map(|(&i, _)| rel_se_of(workers[i]))
            .fold(0.0, f64::max)
    };
    let best_se = tried
        .iter()
        .find(|(k, _, _)| *k == best_k)
        .map_or(0.0, |(k, s, _)| rel_se(*k, s));
    let replicas = |s: &[usize]| s.iter().filter(|&&b| b > 0).count();
    let chosen = tried
        .iter()
        .filter(|(k, s, t)| *k == best_k || within_noise(*t, best_ms, rel_se(*k, s), best_se))
        .min_by(|a, b| {
            replicas(&a.1)
                .cmp(&replicas(&b.1))
                .then(a.2.total_cmp(&b.2))
                .then(a.0.cmp(&b.0))
        });
    let (k, prefix_shares, predicted) = match chosen {
        Some(c) => c.clone(),
        None => {
            return Balanced {
                shares: vec![0; n],
                predicted_ms: f64::INFINITY,
                best_ms,
            }
        }
    };
    let mut shares = vec![0usize; n];
    for (&i, b) in order[..k].iter().zip(prefix_shares) {
        shares[i] = b;
    }
    Balanced {
        shares,
        predicted_ms: predicted,
        best_ms,
    }
}

/// A worker's [`WorkerCapacity::step_rel_se`], 0 when unknown or not a number.
fn rel_se_of(w: &WorkerCapacity) -> f64 {
    w.step_rel_se
        .filter(|s| s.is_finite() && *s > 0.0)
        .unwrap_or(0.0)
}

/// Whether a plan predicted at `ms` cannot be told from the best, predicted at `best_ms`, when
/// their predicted steps carry relative standard errors `se` and `best_se`: `ms` exceeds
/// `best_ms` by at most [`Z_TELL_APART`] standard errors of the difference of their logs (the
/// test by which the calibration pools workers it cannot tell apart). Without noise only an
/// equal prediction ties.
fn within_noise(ms: f64, best_ms: f64, se: f64, best_se: f64) -> bool {
    let tolerance = Z_TELL_APART * (se * se + best_se * best_se).sqrt();
    ms.is_finite() && best_ms > 0.0 && (ms / best_ms).ln() <= tolerance + 1e-12
}

/// The order in which [`balance`] adds workers: by their single-sample step time
/// ([`WorkerCapacity::step_ms`] of 1), fastest first — except that workers whose times cannot
/// be told apart in their noise ([`within_noise`] of the run's fastest, runs formed from the
/// fastest down so a chain of small steps never joins workers far apart) are taken by device
/// name, so that noise, or the order the workers were listed in, cannot swap which of two
/// near-equal workers gets the larger share or the whole batch.
fn speed_order(workers: &[&WorkerCapacity]) -> Vec<usize> {
    let key = |i: usize| workers[i].step_ms(1);
    let mut order: Vec<usize> = (0..workers.len()).collect();
    order.sort_by(|&a, &b| {
        key(a)
            .total_cmp(&key(b))
            .then_with(|| workers[a].device.cmp(&workers[b].device))
    });
    let mut start = 0;
    while start < order.len() {
        let first = order[start];
        let mut end = start + 1;
        while end < order.len()
            && within_noise(
                key(order[end]),
                key(first),
                rel_se_of(workers[order[end]]),
                rel_se_of(workers[first]),
            )
        {
            end += 1;
        }
        order[start..end].sort_by(|&a, &b| workers[a].device.cmp(&workers[b].device));
        start = end;
    }
    order
}

/// Splits `total` into integer shares proportional to `weights` (largest remainder), each at
/// least 1 when `total >= weights.len()`.
#[cfg(test)]
pub(super) fn proportional_shares(weights: &[f64], total: usize) -> Vec<usize> {
    let n = weights.len();
    if n == 0 {
        return Vec::new();
    }
    let floor_each = usize::from(total >= n);
    let rest = total - floor_each * n;
    let sum: f64 = weights.iter().sum();
    let exact: Vec<f64> = weights.iter().map(|w| w / sum * rest as f64).collect();
    let mut shares: Vec<usize> = exact
        .iter()
        .map(|e| e.floor() as usize + floor_each)
        .collect();
    let mut left = total - shares.iter().sum::<usize>();
    let mut by_remainder: Vec<usize> = (0..n).collect();
    by_remainder
        .sort_by(|&a, &b| (exact[b] - exact[b].floor()).total_cmp(&(exact[a] - exact[a].floor())));
    for i in by_remainder.into_iter().cycle() {
        if left == 0 {
            break;
        }
        shares[i] += 1;
        left -= 1;
    }
    shares
}

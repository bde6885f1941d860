//! Data-parallel plans, pure: no TensorFlow, no I/O.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

mod balance;

pub use balance::{infra_aware, infra_aware_networked, InfraAwareOptions};

/// Standard errors by which two measured figures — two workers' throughputs, two plans'
/// predicted steps — must differ to be told apart: two-sided 95 %.
pub const Z_TELL_APART: f64 = 1.96;

use super::network::VarInfo;
use crate::error::{Error, Result};

/// One replica of the model: the device it runs on and its share of the global batch.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Replica {
    /// Device prefix or full device of a worker, e.g. `/job:worker/replica:0/task:1/device:CPU:0`.
    pub device: String,
    /// Samples of the global batch this replica computes per step.
    pub batch: usize,
}

/// Where everything of a synchronous data-parallel step goes.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DataParallelPlan {
    /// Strategy that made the plan (`even`, `infra-aware`, …).
    pub strategy: String,
    /// One entry per worker replica, in order.
    pub replicas: Vec<Replica>,
    /// Variable name → parameter-server device.
    pub variable_devices: BTreeMap<String, String>,
    /// Device of the global ops (summed loss, optimiser constants, `train`, `init`).
    pub global_device: String,
    /// Predicted step time, ms, when the strategy predicts one.
    pub predicted_step_ms: Option<f64>,
}

impl DataParallelPlan {
    /// Sum of the replicas' batches.
    pub fn global_batch(&self) -> usize {
        self.replicas.iter().map(|r| r.batch).sum()
    }
}

/// What a worker can do, as calibrated: a step with `b` samples of its own takes
/// `fixed_ms + b / samples_per_sec` (fetching variables and sending gradients cost the same
/// whatever the batch, so a weak worker pays them slowly too).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkerCapacity {
    /// Worker device (first CPU of the worker task).
    pub device: String,
    /// Marginal throughput, samples per second.
    pub samples_per_sec: f64,
    /// Per-step cost independent of the batch, ms.
    pub fixed_ms: f64,
    /// Availability of the worker's device (0–1) when these figures were measured (`None`:
    /// unknown, taken as 1); [`live_capacities`](super::live::live_capacities) rescales them
    /// to the availability now.
    #[serde(default)]
    pub availability: Option<f64>,
    /// Most samples a replica on this worker can take before its free memory runs out
    /// (`None`: no limit known).
    #[serde(default)]
    pub max_batch: Option<usize>,
    /// Relative standard error of the step times these figures were fitted to (0.06 = 6 %):
    /// the calibration's measured noise ([`fit_probes`](crate::parallel::noise::fit_probes);
    /// a re-size bounds its own gain by its samples' noise instead,
    /// [`decide_resize`](crate::parallel::noise::decide_resize)). [`infra_aware`] treats plans and workers
    /// whose predicted steps differ by less than this noise can show as ties, and breaks them
    /// by a fixed rule instead of by the noise. `None`: figures taken as exact.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step_rel_se: Option<f64>,
    /// The batches (samples) whose timed steps these figures were fitted to, ascending (a pooled
    /// worker's: every member's); empty where the figures were not fitted to timed steps.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub probed_batches: Vec<usize>,
}

impl WorkerCapacity {
    /// A worker with no fixed cost.
    pub fn rate(device: &str, samples_per_sec: f64) -> Self {
        WorkerCapacity {
            device: device.into(),
            samples_per_sec,
            fixed_ms: 0.0,
            ..WorkerCapacity::default()
        }
    }

    /// Most samples this worker may take (`usize::MAX` without a memory limit).
    pub(crate) fn cap(&self) -> usize {
        self.max_batch.unwrap_or(usize::MAX)
    }

    /// Predicted time of a step with `batch` samples on this worker, ms (0 for no samples).
    pub fn step_ms(&self, batch: usize) -> f64 {
        if batch == 0 {
            0.0
        } else {
            self.fixed_ms + batch as f64 / self.samples_per_sec * 1e3
        }
    }

    /// Fits `fixed_ms` and `samples_per_sec` to (batch, ms) measurements by least squares
    /// within physical bounds ([`fit_step_line`](crate::cluster::calibration::fit_step_line):
    /// no negative fixed cost, no throughput beyond what the probes can show); without a usable
    /// point, 1 sample/s (a worker nothing was learnt about is not given work).
    pub fn fit(device: &str, points: &[(usize, f64)]) -> Self {
        Self::fit_bounded(device, points, None)
    }

    /// As [`WorkerCapacity::fit`], the throughput also at most `max_samples_per_sec` (what the
    /// worker's cores can do).
    pub fn fit_bounded(
        device: &str,
        points: &[(usize, f64)],
        max_samples_per_sec: Option<f64>,
    ) -> Self {
        match crate::cluster::calibration::fit_step_line(points, max_samples_per_sec) {
            Some(l) => WorkerCapacity {
                device: device.into(),
                samples_per_sec: l.samples_per_sec,
                fixed_ms: l.fixed_ms,
                ..WorkerCapacity::default()
            },
            None => WorkerCapacity::rate(device, 1.0),
        }
    }
}

pub(crate) fn check(workers: usize, ps: &[String], global_batch: usize) -> Result<()> {
    if workers == 0 {
        return Err(Error::Infeasible {
            group: "(replicas)".into(),
            reason: "the cluster has no worker tasks".into(),
        });
    }
    if ps.is_empty() {
        return Err(Error::Infeasible {
            group: "(variables)".into(),
            reason: "the cluster has no ps tasks".into(),
        });
    }
    if global_batch == 0 {
        return Err(Error::InvalidArgument {
            what: "global batch".into(),
            reason: "must be at least 1".into(),
        });
    }
    Ok(())
}

/// TensorFlow's stock recipe (`tf.compat.v1.train.replica_device_setter` with one replica per
/// worker): every worker takes an equal share of the global batch (the remainder goes to the
/// first workers), variables are dealt round-robin over the ps tasks in creation order.
///
/// # Errors
/// [`Error::Infeasible`] without workers or ps; [`Error::InvalidArgument`] for a zero batch or a
/// batch smaller than the number of workers.
pub fn replica_setter(
    workers: &[String],
    ps: &[String],
    vars: &[VarInfo],
    global_batch: usize,
) -> Result<DataParallelPlan> {
    check(workers.len(), ps, global_batch)?;
    if global_batch < workers.len() {
        return Err(Error::InvalidArgument {
            what: "global batch".into(),
            reason: format!(
                "{global_batch} samples cannot be shared by {} workers",
                workers.len()
            ),
        });
    }
    let n = workers.len();
    let replicas = workers
        .iter()
        .enumerate()
        .map(|(i, w)| Replica {
            device: w.clone(),
            batch: global_batch / n + usize::from(i < global_batch % n),
        })
        .collect();
    let variable_devices = vars
        .iter()
        .enumerate()
        .map(|(i, v)| (v.name.clone(), ps[i % ps.len()].clone()))
        .collect();
    Ok(DataParallelPlan {
        strategy: "replica-setter".into(),
        replicas,
        variable_devices,
        global_device: ps[0].clone(),
        predicted_step_ms: None,
    })
}

/// Lower bound of a synchronous step of `global_batch` samples on workers of `capacity`, ms, as
/// the simulator's bound for a graph: max(critical path, total work ÷ total capacity) — the
/// cheapest worker's fixed per-step cost (no step is shorter), and the batch over the summed
/// marginal throughput of every worker (all of them busy the whole step, nothing lost to fixed
/// costs or synchronisation).
pub fn lower_bound_ms(global_batch: usize, capacity: &[WorkerCapacity]) -> f64 {
    let usable = || {
        capacity
            .iter()
            .filter(|c| c.samples_per_sec.is_finite() && c.samples_per_sec > 0.0)
    };
    let rate: f64 = usable().map(|c| c.samples_per_sec).sum();
    if rate <= 0.0 || global_batch == 0 {
        return 0.0;
    }
    let critical = usable()
        .map(|c| c.fixed_ms.max(0.0))
        .fold(f64::INFINITY, f64::min);
    (global_batch as f64 / rate * 1e3).max(critical)
}

/// Lower bound of a *synchronous data-parallel* step of `global_batch` samples on workers of
/// `capacity`, ms: the least `T` at which the workers, each paying its fixed per-step cost
/// before its first sample, could compute the batch with shares that need not be whole —
/// Σ max(0, T − fixed_i) × samples_per_sec_i / 1000 = `global_batch`. Every plan of
/// [`infra_aware`], [`replica_setter`] or any other synchronous split is at least this slow
/// under the affine step model ([`WorkerCapacity::step_ms`]): a worker with share `b` is busy
/// `fixed + b / rate`, and the slowest sets the step. It leaves out synchronisation (the
/// planner's `per_replica_overhead_ms`), whole-sample rounding and the replicas' contention for
/// shared cores, and is never below [`lower_bound_ms`] (which counts no fixed cost but the
/// cheapest, and holds for model-parallel placements too). 0 without a usable worker or batch.
pub fn sync_lower_bound_ms(global_batch: usize, capacity: &[WorkerCapacity]) -> f64 {
    let usable: Vec<(f64, f64)> = capacity
        .iter()
        .filter(|c| c.samples_per_sec.is_finite() && c.samples_per_sec > 0.0)
        .map(|c| (c.fixed_ms.max(0.0), c.samples_per_sec / 1e3))
        .collect();
    if usable.is_empty() || global_batch == 0 {
        return 0.0;
    }
    let b = global_batch as f64;
    // Σ max(0, T − f_i) r_i is piecewise linear and increasing in T: walk the fixed costs in
    // order, adding one worker at a time, until the batch fits.
    let mut by_fixed = usable;
    by_fixed.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (mut rate, mut weighted) = (0.0, 0.0); // Σ r_i, Σ f_i r_i of the workers so far
    for (k, &(f, r)) in by_fixed.iter().enumerate() {
        rate += r;
        weighted += f * r;
        let t = (b + weighted) / rate;
        let next = by_fixed.get(k + 1).map_or(f64::INFINITY, |n| n.0);
        if t <= next {
            return t;
        }
    }
    (b + weighted) / rate
}

#[cfg(test)]
mod tests {
    use super::balance::proportional_shares;
    use super::*;

    fn vars() -> Vec<VarInfo> {
        vec![
            VarInfo {
                name: "a".into(),
                bytes: 100,
            },
            VarInfo {
                name: "b".into(),
                bytes: 10,
            },
            VarInfo {
                name: "c".into(),
                bytes: 60,
            },
        ]
    }

    fn w(i: usize, rate: f64) -> WorkerCapacity {
        WorkerCapacity::rate(&format!("/job:worker/task:{i}"), rate)
    }

    #[test]
    fn replica_setter_splits_evenly_and_deals_variables() {
        let workers: Vec<String> = (0..3).map(|i| format!("w{i}")).collect();
        let ps = vec!["ps0".to_string(), "ps1".to_string()];
        let p = replica_setter(&workers, &ps, &vars(), 32).unwrap();
        assert_eq!(
            p.replicas.iter().map(|r| r.batch).collect::<Vec<_>>(),
            vec![11, 11, 10]
        );
        assert_eq!(p.variable_devices["a"], "ps0");
        assert_eq!(p.variable_devices["b"], "ps1");
        assert_eq!(p.variable_devices["c"], "ps0");
        assert!(replica_setter(&workers, &ps, &vars(), 2).is_err());
        assert!(replica_setter(&[], &ps, &vars(), 8).is_err());
    }

    #[test]
    fn infra_aware_gives_shares_by_throughput_and_drops_stragglers() {
        let ps = vec![("ps0".to_string(), 1.0)];
        let workers = vec![w(0, 100.0), w(1, 50.0), w(2, 25.0), w(3, 1.0)];
        let p = infra_aware(&workers, &ps, &vars(), 64, &InfraAwareOptions::default()).unwrap();
        let shares: Vec<(String, usize)> = p
            .replicas
            .iter()
            .map(|r| (r.device.clone(), r.batch))
            .collect();
        // The 1 sample/s worker is below 5 % of the best and is dropped; the rest share 64 ∝ rate.
        assert_eq!(shares.len(), 3, "{shares:?}");
        assert_eq!(shares[0].1 + shares[1].1 + shares[2].1, 64);
        assert!(
            shares[0].1 > shares[1].1 && shares[1].1 > shares[2].1,
            "{shares:?}"
        );
        assert_eq!(shares[0].0, "/job:worker/task:0");
        // Equal workers share equally.
        let even = infra_aware(
            &[w(0, 10.0), w(1, 10.0)],
            &ps,
            &vars(),
            10,
            &InfraAwareOptions::default(),
        )
        .unwrap();
        assert_eq!(
            even.replicas.iter().map(|r| r.batch).collect::<Vec<_>>(),
            vec![5, 5]
        );
    }

    #[test]
    fn infra_aware_stops_adding_workers_when_overhead_outweighs_them() {
        let ps = vec![("ps0".to_string(), 1.0)];
        let opts = InfraAwareOptions {
            min_relative_throughput: 0.0,
            per_replica_overhead_ms: 50.0,
            min_gain: 0.0,
        };
        // 10 samples: alone 100 ms + 50; with the 10 %-speed worker at best 9 + 1 samples:
        // max(90, 100) + 2 × 50 = 200 ms > 150.
        let p = infra_aware(&[w(0, 100.0), w(1, 10.0)], &ps, &vars(), 10, &opts).unwrap();
        assert_eq!(p.replicas.len(), 1);
        assert!((p.predicted_step_ms.unwrap() - 150.0).abs() < 1e-9);
    }

    #[test]
    fn fixed_costs_shift_work_to_the_workers_that_pay_them_quickly() {
        let ps = vec![("ps0".to_string(), 1.0)];
        let opts = InfraAwareOptions {
            min_relative_throughput: 0.0,
            per_replica_overhead_ms: 0.0,
            min_gain: 0.0,
        };
        let fast = WorkerCapacity {
            device: "fast".into(),
            samples_per_sec: 100.0,
            fixed_ms: 10.0,
            ..WorkerCapacity::default()
        };
        // Same marginal speed, but 500 ms to fetch variables and send gradients: unused.
        let far = WorkerCapacity {
            device: "far".into(),
            samples_per_sec: 100.0,
            fixed_ms: 500.0,
            ..WorkerCapacity::default()
        };
        let p = infra_aware(&[fast.clone(), far], &ps, &vars(), 20, &opts).unwrap();
        assert_eq!(p.replicas.len(), 1);
        assert_eq!(p.replicas[0].device, "fast");
        assert!((p.predicted_step_ms.unwrap() - 210.0).abs() < 1e-9);
        // Two equal workers with fixed costs share evenly; the prediction counts the fixed cost.
        let twin = WorkerCapacity {
            device: "twin".into(),
            ..fast.clone()
        };
        let p = infra_aware(&[fast, twin], &ps, &vars(), 20, &opts).unwrap();
        assert_eq!(
            p.replicas.iter().map(|r| r.batch).collect::<Vec<_>>(),
            vec![10, 10]
        );
        assert!((p.predicted_step_ms.unwrap() - 110.0).abs() < 1e-9);
    }

    #[test]
    fn near_equal_workers_keep_the_even_split() {
        let ps = vec![("ps0".to_string(), 1.0)];
        // The calibration of four equal 0.3-core workers measured by `bench --scenario uniform`.
        let c = |i: usize, rate: f64, fixed_ms: f64| WorkerCapacity {
            device: format!("/job:worker/task:{i}"),
            samples_per_sec: rate,
            fixed_ms,
            ..WorkerCapacity::default()
        };
        let workers = vec![
            c(0, 19.2, 230.0),
            c(1, 18.0, 150.0),
            c(2, 16.7, 187.0),
            c(3, 20.6, 232.0),
        ];
        let p = infra_aware(&workers, &ps, &vars(), 64, &InfraAwareOptions::default()).unwrap();
        assert_eq!(
            p.replicas.iter().map(|r| r.batch).collect::<Vec<_>>(),
            vec![16, 16, 16, 16]
        );
        // A real difference still reshapes the plan.
        let workers = vec![
            c(0, 40.0, 230.0),
            c(1, 18.0, 150.0),
            c(2, 16.7, 187.0),
            c(3, 20.6, 232.0),
        ];
        let p = infra_aware(&workers, &ps, &vars(), 64, &InfraAwareOptions::default()).unwrap();
        assert!(p.replicas[0].batch > 16, "{:?}", p.replicas);
    }

    /// A calibrated worker of `paper`: `rate` samples/s + `fixed_ms`, its median step known to
    /// the relative standard error of `steps` steps of 34 % noise (what `bench --scenario paper
    /// --model mlp --recalibrate` measured on the shared 2-core VM at load 5).
    fn noisy(i: usize, rate: f64, fixed_ms: f64, steps: usize) -> WorkerCapacity {
        noisy_at(0.34, i, rate, fixed_ms, steps)
    }

    /// As [`noisy`], with step-time noise `spread`.
    fn noisy_at(spread: f64, i: usize, rate: f64, fixed_ms: f64, steps: usize) -> WorkerCapacity {
        WorkerCapacity {
            device: format!("/job:worker/replica:0/task:{i}/device:CPU:0"),
            samples_per_sec: rate,
            fixed_ms,
            step_rel_se: Some(crate::parallel::noise::median_rel_se(spread, steps)),
            ..WorkerCapacity::default()
        }
    }

    fn batches(p: &DataParallelPlan, n: usize) -> Vec<usize> {
        (0..n)
            .map(|i| {
                let d = format!("/job:worker/replica:0/task:{i}/device:CPU:0");
                p.replicas
                    .iter()
                    .find(|r| r.device == d)
                    .map_or(0, |r| r.batch)
            })
            .collect()
    }

    /// The bench's options: 5 ms of synchronisation per replica.
    fn bench_options() -> InfraAwareOptions {
        InfraAwareOptions {
            per_replica_overhead_ms: 5.0,
            ..InfraAwareOptions::default()
        }
    }

    #[test]
    fn near_tied_plans_of_two_runs_on_paper_give_the_same_shares() {
        let ps = vec![("ps0".to_string(), 1.0)];
        // Runs b1 and b2 of the worker-fit-bounds notebook (mlp, global batch 64, probes at
        // 3/6/12 samples, at least 1 s or 50 steps each): w0 and w1 were fitted apart in b1
        // and pooled in b2 (100 steps between them).
        let b1 = vec![
            noisy(0, 6_103.0, 9.7, 50),
            noisy(1, 1_410.0, 11.0, 50),
            noisy(2, 436.0, 16.0, 23),
            noisy(3, 212.0, 30.5, 12),
        ];
        let b2 = vec![
            noisy(0, 3_981.0, 9.5, 100),
            noisy(1, 3_981.0, 9.5, 100),
            noisy(2, 500.0, 17.5, 24),
            noisy(3, 287.0, 42.9, 12),
        ];
        let plan = |w: &[WorkerCapacity]| infra_aware(w, &ps, &[], 64, &bench_options()).unwrap();
        // Taken as exact, the figures flip the plan between the runs (what the notebook
        // measured): 64 on w0 (25.2 ms predicted; 54/10 on w0/w1: 28.5 ms) against 32/32
        // (27.5 ms; 64 on w0: 30.6 ms) — 32 of 64 samples apart.
        let exact = |w: &[WorkerCapacity]| -> Vec<WorkerCapacity> {
            w.iter()
                .map(|c| WorkerCapacity {
                    step_rel_se: None,
                    ..c.clone()
                })
                .collect()
        };
        assert_eq!(batches(&plan(&exact(&b1)), 4), vec![64, 0, 0, 0]);
        assert_eq!(batches(&plan(&exact(&b2)), 4), vec![32, 32, 0, 0]);
        // Within the calibration's noise those are ties, and both runs take the plan with
        // the fewest replicas.
        let (p1, p2) = (plan(&b1), plan(&b2));
        let (s1, s2) = (batches(&p1, 4), batches(&p2, 4));
        let moved: usize = s1
            .iter()
            .zip(&s2)
            .map(|(a, b)| a.abs_diff(*b))
            .sum::<usize>()
            / 2;
        assert!(moved * 10 <= 64, "{s1:?} vs {s2:?}: {moved} samples moved");
        assert_eq!(s1, vec![64, 0, 0, 0]);
        assert_eq!(s2, vec![64, 0, 0, 0]);
        // The prediction is the chosen plan's own, not the best's.
        assert!((p2.predicted_step_ms.unwrap() - (9.5 + 64e3 / 3_981.0 + 5.0)).abs() < 1e-9);
    }

    #[test]
    fn a_plan_better_beyond_the_noise_still_wins_and_stragglers_are_still_dropped() {
        let ps = vec![("ps0".to_string(), 1.0)];
        // `paper` with resnet20, whose per-sample cost dominates (its calibration on the same
        // VM at load 5-6: 6 % step-time noise, three 1-2 s steps per probe): more workers are
        // far faster than one.
        let resnet = vec![
            noisy_at(0.06, 0, 27.2, 116.0, 3),
            noisy_at(0.06, 1, 15.4, 181.0, 3),
            noisy_at(0.06, 2, 7.2, 553.0, 3),
            noisy_at(0.06, 3, 2.8, 1098.0, 3),
        ];
        let p = infra_aware(&resnet, &ps, &[], 64, &bench_options()).unwrap();
        let s = batches(&p, 4);
        let exact: Vec<WorkerCapacity> = resnet
            .iter()
            .map(|c| WorkerCapacity {
                step_rel_se: None,
                ..c.clone()
            })
            .collect();
        let best = infra_aware(&exact, &ps, &[], 64, &bench_options()).unwrap();
        assert_eq!(batches(&best, 4), vec![37, 20, 6, 1]);
        // Three steps per probe tell plans apart only beyond 1.96 × √2 × 4.3 % ≈ 12 %: the
        // two- and three-worker plans (11.4 % and 1.9 % slower than the best, 1,500 ms) are
        // ties and the fewest replicas run; the whole batch on w0 (2,474 ms, 65 % slower)
        // never is one.
        assert_eq!(s, vec![42, 22, 0, 0]);
        let (t, t_best) = (
            p.predicted_step_ms.unwrap(),
            best.predicted_step_ms.unwrap(),
        );
        let tolerance = crate::parallel::noise::Z_TELL_APART
            * 2f64.sqrt()
            * crate::parallel::noise::median_rel_se(0.06, 3);
        assert!(
            t > t_best && (t / t_best).ln() <= tolerance,
            "{t} vs {t_best}"
        );
        // A fixed-cost-dominated model with a real straggler among three near-equal workers:
        // the straggler (ten times slower, 60 ms per step) gets nothing, noisy or not.
        let mlp = vec![
            noisy(0, 4_000.0, 9.5, 50),
            noisy(1, 3_800.0, 9.8, 50),
            noisy(2, 4_100.0, 9.6, 50),
            noisy(3, 400.0, 60.0, 12),
        ];
        let s = batches(
            &infra_aware(&mlp, &ps, &[], 64, &bench_options()).unwrap(),
            4,
        );
        assert_eq!(s[3], 0, "{s:?}");
        assert_eq!(s.iter().sum::<usize>(), 64);
    }

    #[test]
    fn near_equal_workers_are_taken_by_device_name_whatever_the_noise_and_listing() {
        let ps = vec![("ps0".to_string(), 1.0)];
        // Two equal workers of a small model, fitted a little apart (not pooled): which one
        // is ahead is noise, so the whole batch goes to task 0 however the noise fell and
        // whichever order the workers are listed in.
        for (r0, r1) in [(3_900.0, 4_100.0), (4_100.0, 3_900.0)] {
            let a = noisy(0, r0, 9.5, 50);
            let b = noisy(1, r1, 9.5, 50);
            for workers in [vec![a.clone(), b.clone()], vec![b.clone(), a.clone()]] {
                let p = infra_aware(&workers, &ps, &[], 16, &bench_options()).unwrap();
                assert_eq!(batches(&p, 2), vec![16, 0], "{workers:?}");
            }
            // Exact figures: the faster one.
            let exact = |c: &WorkerCapacity| WorkerCapacity {
                step_rel_se: None,
                ..c.clone()
            };
            let p = infra_aware(&[exact(&b), exact(&a)], &ps, &[], 16, &bench_options()).unwrap();
            let faster = usize::from(r1 > r0);
            assert_eq!(batches(&p, 2)[faster], 16);
        }
    }

    #[test]
    fn memory_caps_shrink_shares_and_nothing_fitting_is_infeasible() {
        let ps = vec![("ps0".to_string(), 1.0)];
        let opts = InfraAwareOptions {
            min_gain: 0.0,
            ..InfraAwareOptions::default()
        };
        let capped = |i: usize, rate: f64, max: usize| WorkerCapacity {
            max_batch: Some(max),
            ..w(i, rate)
        };
        // The fast worker would take 48 of 64; its memory holds 20.
        let p = infra_aware(
            &[capped(0, 300.0, 20), w(1, 100.0)],
            &ps,
            &vars(),
            64,
            &opts,
        )
        .unwrap();
        let shares: Vec<usize> = p.replicas.iter().map(|r| r.batch).collect();
        assert_eq!(shares, vec![20, 44]);
        // Even the stock-like even split respects the cap.
        let p = infra_aware(
            &[capped(0, 10.0, 4), w(1, 10.0)],
            &ps,
            &vars(),
            16,
            &InfraAwareOptions::default(),
        )
        .unwrap();
        assert_eq!(
            p.replicas.iter().map(|r| r.batch).collect::<Vec<_>>(),
            vec![4, 12]
        );
        // Nothing fits: a typed error naming every worker.
        let err = infra_aware(
            &[capped(0, 10.0, 4), capped(1, 10.0, 0)],
            &ps,
            &vars(),
            16,
            &opts,
        )
        .unwrap_err();
        assert!(matches!(err, Error::Infeasible { .. }), "{err}");
        let msg = err.to_string();
        assert!(
            msg.contains("/job:worker/task:0 holds at most 4")
                && msg.contains("/job:worker/task:1 holds at most 0"),
            "{msg}"
        );
    }

    #[test]
    fn one_usable_worker_takes_the_whole_batch_whatever_its_figures() {
        // Its step time at the whole batch, taken back to samples, can round to one short.
        let ps = vec![("ps0".to_string(), 1.0)];
        for rate in [3.3, 7.7, 19.2, 27.3, 45.9, 1e3 / 7.0] {
            for fixed_ms in [0.0, 98.0, 287.3, 1112.7] {
                for total in [1usize, 7, 32, 64, 1000] {
                    let fast = WorkerCapacity {
                        fixed_ms,
                        ..w(0, rate)
                    };
                    // The second is below 5 % of the first: not eligible.
                    let slow = w(1, rate / 100.0);
                    let p = infra_aware(
                        &[fast, slow],
                        &ps,
                        &vars(),
                        total,
                        &InfraAwareOptions::default(),
                    )
                    .unwrap();
                    assert_eq!(
                        p.replicas.iter().map(|r| r.batch).collect::<Vec<_>>(),
                        vec![total],
                        "rate {rate}, fixed {fixed_ms} ms, {total} samples"
                    );
                }
            }
        }
    }

    #[test]
    fn fit_recovers_fixed_cost_and_rate() {
        let c = WorkerCapacity::fit("w", &[(4, 140.0), (8, 180.0), (16, 260.0)]);
        assert!((c.samples_per_sec - 100.0).abs() < 1e-9);
        assert!((c.fixed_ms - 100.0).abs() < 1e-9);
        // Noise that makes the slope negative: a flat step (all fixed cost, the throughput at
        // its bound), not "no fixed cost".
        let c = WorkerCapacity::fit("w", &[(4, 300.0), (16, 200.0)]);
        assert!((c.fixed_ms - 248.75).abs() < 1e-9, "{c:?}");
        assert!((c.samples_per_sec - 8_000.0).abs() < 1e-6);
    }

    #[test]
    fn variables_go_largest_first_to_the_least_loaded_ps() {
        let ps = vec![("ps0".to_string(), 1.0), ("ps1".to_string(), 1.0)];
        let p = infra_aware(&[w(0, 1.0)], &ps, &vars(), 4, &InfraAwareOptions::default()).unwrap();
        assert_eq!(p.variable_devices["a"], "ps0");
        assert_eq!(p.variable_devices["c"], "ps1");
        assert_eq!(p.variable_devices["b"], "ps1");
    }

    #[test]
    fn shares_sum_to_the_total_and_respect_the_minimum() {
        assert_eq!(proportional_shares(&[1.0, 1.0, 1.0], 10), vec![4, 3, 3]);
        assert_eq!(proportional_shares(&[100.0, 1.0], 10), vec![9, 1]);
        assert_eq!(proportional_shares(&[3.0, 1.0], 8), vec![6, 2]);
        assert_eq!(
            proportional_shares(&[1.0, 1.0, 1.0], 2)
                .iter()
                .sum::<usize>(),
            2
        );
    }

    #[test]
    fn the_synchronous_bound_counts_each_used_workers_fixed_cost() {
        let w = |d: &str, rate: f64, fixed: f64| WorkerCapacity {
            device: d.into(),
            samples_per_sec: rate,
            fixed_ms: fixed,
            ..WorkerCapacity::default()
        };
        // Without fixed costs it is the work bound.
        let caps = [
            WorkerCapacity::rate("a", 100.0),
            WorkerCapacity::rate("b", 300.0),
        ];
        assert!((sync_lower_bound_ms(40, &caps) - 100.0).abs() < 1e-9);
        // a: 100 ms fixed, 1 sample/ms; b: 1000 ms fixed. 64 samples: a alone at 164 ms, before
        // b could start.
        let caps = [w("a", 1000.0, 100.0), w("b", 1000.0, 1000.0)];
        assert!((sync_lower_bound_ms(64, &caps) - 164.0).abs() < 1e-9);
        // 1000 samples: a alone would need 1100 ms; with b from 1000 ms, (1000 + 100 + 1000) / 2.
        assert!((sync_lower_bound_ms(1000, &caps) - 1050.0).abs() < 1e-9);
        // Never below the plain bound, never above what the planner achieves.
        let paper = [
            w("w0", 27.3, 98.0),
            w("w1", 17.5, 287.0),
            w("w2", 8.4, 753.0),
            w("w3", 3.3, 1112.0),
        ];
        let sync = sync_lower_bound_ms(64, &paper);
        assert!(sync >= lower_bound_ms(64, &paper));
        let opts = InfraAwareOptions {
            per_replica_overhead_ms: 0.0,
            ..InfraAwareOptions::default()
        };
        let plan = infra_aware(&paper, &[("ps".into(), 1.0)], &[], 64, &opts).unwrap();
        assert!(
            plan.predicted_step_ms.unwrap() + 1e-9 >= sync,
            "{plan:?} vs {sync}"
        );
        assert_eq!(sync_lower_bound_ms(0, &paper), 0.0);
        assert_eq!(
            sync_lower_bound_ms(5, &[WorkerCapacity::rate("z", 0.0)]),
            0.0
        );
    }

    #[test]
    fn the_lower_bound_is_work_over_capacity_or_the_cheapest_fixed_cost() {
        // Batch over the summed rates.
        let caps = [
            WorkerCapacity::rate("a", 100.0),
            WorkerCapacity::rate("b", 300.0),
        ];
        assert!((lower_bound_ms(40, &caps) - 100.0).abs() < 1e-9);
        // Fixed costs only count where every worker pays more than the work bound.
        let fixed = |d: &str, ms: f64| WorkerCapacity {
            device: d.into(),
            samples_per_sec: 300.0,
            fixed_ms: ms,
            ..WorkerCapacity::default()
        };
        let caps = [fixed("a", 50.0), fixed("b", 500.0)];
        assert!((lower_bound_ms(60, &caps) - 100.0).abs() < 1e-9);
        let caps = [fixed("a", 150.0), fixed("b", 500.0)];
        assert!((lower_bound_ms(60, &caps) - 150.0).abs() < 1e-9);
        assert_eq!(lower_bound_ms(10, &[]), 0.0);
        assert_eq!(lower_bound_ms(10, &[WorkerCapacity::rate("z", 0.0)]), 0.0);
    }
}

//! Simulated data-parallel steps with parameter servers, pure (no TensorFlow, no workers), in
//! the three ways the contenders combine gradients ([`DpMode`]).
//!
//! **Synchronous** (`replica-setter`, `infra-aware`): a step is
//!
//! `pull + max over replicas (fixed_ms + share ÷ throughput) + push`
//!
//! where pulling the variables and pushing the gradients each take one latency plus the longer
//! of the busiest ps link (`replicas × its bytes ÷ its bandwidth`: every replica contends for
//! it) and a worker's own link (`PsNetwork::phase_ms`).
//!
//! **Backup workers** (`sync-backup`, SyncReplicasOptimizer with `k` backup workers): every
//! replica pulls and pushes as in a synchronous step, but the step ends when the fastest
//! `N − k` replicas have computed — `pull + (N − k)-th fastest replica + push` — and the
//! others' gradients are dropped, so a step applies the samples of those `N − k` replicas only.
//! (TensorFlow's token queue lets a fast worker contribute two gradients to one step; the model
//! counts each replica once.)
//!
//! **Asynchronous** (`async-ps`, `infra-aware-async`; ParameterServerStrategy): no barrier.
//! Each worker loops on its own share — pull, compute, push, one step in flight — taking
//! `T⁰ᵢ = fixed_ms + share ÷ throughput + 2 × (latency + max(busiest ps link, own link))` alone.
//! The ps links carry each worker's pull and push at its own rate: ps `p` moves
//! `bytes_p × Σᵢ 1/Tᵢ` per second each way. When that exceeds its bandwidth the link is
//! saturated and every worker's transfers stretch by the same delay `d` (the links shared
//! equally), the least `d ≥ 0` with `bytes_p × Σᵢ 1/(T⁰ᵢ + d) ≤ bandwidth_p` for every ps
//! (found by bisection). The comparable figure is the **time the cluster takes to process one
//! global batch of samples**, `global batch ÷ Σᵢ shareᵢ / Tᵢ` — throughput, not time to
//! accuracy: an asynchronous gradient is computed on variables up to `N − 1` updates old, so a
//! sample is worth less than in a synchronous step (`bench --data digits` measures that).
//!
//! Lower bounds (`lower_bound`): synchronous and backup plans, the least over the number of
//! replicas `k` of the ideal synchronisation of `k` replicas (bytes spread over the ps in
//! proportion to bandwidth) plus the batch over the `k` fastest workers' summed throughput (or
//! the cheapest fixed cost); asynchronous plans, the batch over every worker's summed
//! throughput (and at least one transfer of the variables over all ps links together). No plan
//! under its model beats its bound.
//!
//! Every [`DataParallelStrategy`] runs here: [`plan`] is the one place that maps a strategy to a
//! planner, [`DpMode::of`] the one that maps it to how its gradients are combined.

mod step;

pub(crate) use step::simulate;
#[cfg(test)]
pub(crate) use step::simulate_step;

use serde::{Deserialize, Serialize};

use crate::cluster::SyntheticCluster;
use crate::error::Result;
use crate::parallel::{
    self, DataParallelPlan, DataParallelStrategy, InfraAwareOptions, PsNetwork, ReplicaMemory,
    Sharding, Shares, Updates, VarInfo, WorkerCapacity,
};

/// What one replica of a data-parallel model needs: its variables, its compute per sample and
/// per step, its memory.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DpWorkload {
    /// Name (a zoo model's, or the caller's).
    pub name: String,
    /// Trainable variables (pulled from the ps and pushed back as gradients every step).
    pub variables: Vec<VarInfo>,
    /// Training FLOPs per sample (forward and backward).
    pub flops_per_sample: f64,
    /// Ops one replica runs per step (each pays the device's per-op overhead).
    pub ops_per_step: usize,
    /// Memory of one replica by batch.
    pub memory: ReplicaMemory,
}

impl DpWorkload {
    /// ResNet-20 for CIFAR-10 (32×32×3 images, 10 classes) as the zoo builds it: its 0.27 M
    /// parameters as 61 float variables (convolutions, batch-norm scales and offsets, the
    /// classifier), ≈ 123 MFLOP per training sample (3 × 41 MFLOP forward), ≈ 600 ops per
    /// step, ≈ 5 MiB of activations and their gradients per sample over a 64 MiB fixed
    /// footprint.
    pub fn resnet20() -> Self {
        let mut variables = Vec::new();
        let mut add = |name: String, floats: u64| {
            variables.push(VarInfo {
                name,
                bytes: floats * 4,
            })
        };
        add("conv0/kernel".into(), 3 * 3 * 3 * 16);
        add("bn0/gamma".into(), 16);
        add("bn0/beta".into(), 16);
        let mut cin = 16u64;
        for (stage, cout) in [16u64, 32, 64].into_iter().enumerate() {
            for block in 0..3 {
                let p = format!("stage{stage}/block{block}");
                add(format!("{p}/conv1/kernel"), 3 * 3 * cin * cout);
                add(format!("{p}/bn1/gamma"), cout);
                add(format!("{p}/bn1/beta"), cout);
                add(format!("{p}/conv2/kernel"), 3 * 3 * cout * cout);
                add(format!("{p}/bn2/gamma"), cout);
                add(format!("{p}/bn2/beta"), cout);
                if cin != cout {
                    add(format!("{p}/shortcut/kernel"), cin * cout);
                }
                cin = cout;
            }
        }
        add("fc/kernel".into(), 64 * 10);
        add("fc/bias".into(), 10);
        DpWorkload {
            name: "resnet20".into(),
            variables,
            flops_per_sample: 1.23e8,
            ops_per_step: 600,
            memory: ReplicaMemory {
                fixed_bytes: 64 << 20,
                per_sample_bytes: 5 << 20,
            },
        }
    }

    /// Bytes of all variables.
    pub(crate) fn variable_bytes(&self) -> u64 {
        self.variables.iter().map(|v| v.bytes).sum()
    }
}

/// What each worker of `cluster` can do for `workload`: throughput = effective FLOP/s ÷
/// FLOPs per sample; fixed cost = ops per step × the device's per-op overhead stretched by its
/// availability, ms; the batch its memory holds.
pub fn worker_capacities(cluster: &SyntheticCluster, workload: &DpWorkload) -> Vec<WorkerCapacity> {
    let c = &cluster.cluster;
    c.devices[..cluster.workers.len()]
        .iter()
        .map(|d| {
            let a = d.availability.max(crate::cluster::model::MIN_AVAILABILITY);
            WorkerCapacity {
                device: d.name.clone(),
                samples_per_sec: d.effective_flops() / workload.flops_per_sample,
                fixed_ms: workload.ops_per_step as f64 * d.op_overhead / a * 1e3,
                availability: Some(d.availability),
                max_batch: d.memory_bytes.map(|m| workload.memory.max_batch(m)),
                ..WorkerCapacity::default()
            }
        })
        .collect()
}

/// The ps links of `cluster`: every ps task's host link, a worker's share of its host's
/// link, and the cross-rack latency (most workers reach a ps in another rack).
pub(crate) fn ps_network(cluster: &SyntheticCluster) -> PsNetwork {
    let s = &cluster.spec;
    PsNetwork {
        ps_bandwidth: vec![s.net.bandwidth; cluster.ps.len()],
        worker_bandwidth: s.worker_bandwidth(),
        latency_s: s.rack_net.latency.max(s.net.latency),
    }
}

/// Backup workers of `sync-backup` unless told otherwise (as `bench --backup-workers`).
pub(crate) const DEFAULT_BACKUPS: usize = 1;

/// How a data-parallel contender's gradients reach the variables.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DpMode {
    /// One barrier per step over every replica.
    Sync,
    /// Each step takes the first N − `backups` replicas' gradients.
    Backup {
        /// Gradients each step does without (k).
        backups: usize,
    },
    /// No barrier: every worker steps and updates on its own, one step in flight.
    Async,
}

impl DpMode {
    /// How `strategy` combines gradients in the simulator: an adaptive one
    /// (`infra-aware-async`) as asynchronous, the mode it takes where asynchrony pays.
    pub fn of(strategy: DataParallelStrategy) -> DpMode {
        match strategy.updates() {
            Updates::Sync => DpMode::Sync,
            Updates::Backup { backups } => DpMode::Backup { backups },
            Updates::Async | Updates::Adaptive => DpMode::Async,
        }
    }

    /// `sync`, `backup` or `async`.
    pub(crate) fn name(self) -> &'static str {
        match self {
            DpMode::Sync => "sync",
            DpMode::Backup { .. } => "backup",
            DpMode::Async => "async",
        }
    }
}

/// The plan of `strategy` for `global_batch` samples on `cluster` (the shares and variables;
/// [`DpMode::of`] says how its gradients are combined): TensorFlow's stock recipes
/// (`replica-setter`, `sync-backup`, `async-ps`) give equal shares and deal the variables
/// round-robin; the infra-aware ones (`infra-aware`, `infra-aware-async`) size shares by
/// capability × availability within memory, as many replicas as pay for their ps traffic, and
/// shard the variables evenly over the ps.
///
/// # Errors
/// The planner's own errors (a batch that does not fit, …).
pub fn plan(
    strategy: DataParallelStrategy,
    cluster: &SyntheticCluster,
    capacity: &[WorkerCapacity],
    workload: &DpWorkload,
    global_batch: usize,
) -> Result<DataParallelPlan> {
    let mut plan = match strategy.shares() {
        Shares::Equal => parallel::replica_setter(
            &cluster.workers,
            &cluster.ps,
            &workload.variables,
            global_batch,
        )?,
        Shares::Calibrated => parallel::infra_aware_networked(
            capacity,
            &cluster.ps,
            &workload.variables,
            global_batch,
            &InfraAwareOptions::default(),
            &ps_network(cluster),
            Sharding::Balanced,
        )?,
    };
    plan.strategy = strategy.name().into();
    if strategy.updates() == Updates::Adaptive {
        // Its prediction is the synchronous step's; the asynchronous one is the simulator's.
        plan.predicted_step_ms = None;
    }
    Ok(plan)
}

/// The lower bound of a simulated step, and where it is reached.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
pub(crate) struct DpBound {
    /// The bound, ms.
    pub ms: f64,
    /// Replicas at which it is reached.
    pub replicas: usize,
}

/// Lower bound of a step of `global_batch` samples on workers of `capacity` over `network`
/// with `variable_bytes` of variables, ms: `min over k` of the ideal synchronisation of `k`
/// replicas ([`PsNetwork::ideal_sync_ms`]) plus the larger of the batch over the `k` fastest
/// throughputs and the cheapest fixed cost. `O(workers log workers)`.
pub(crate) fn lower_bound(
    global_batch: usize,
    capacity: &[WorkerCapacity],
    network: &PsNetwork,
    variable_bytes: u64,
) -> DpBound {
    let mut rates: Vec<f64> = capacity
        .iter()
        .map(|c| c.samples_per_sec)
        .filter(|r| r.is_finite() && *r > 0.0)
        .collect();
    if rates.is_empty() || global_batch == 0 {
        return DpBound::default();
    }
    rates.sort_by(|a, b| b.total_cmp(a));
    let cheapest = capacity
        .iter()
        .filter(|c| c.samples_per_sec > 0.0)
        .map(|c| c.fixed_ms.max(0.0))
        .fold(f64::INFINITY, f64::min);
    let mut best = DpBound {
        ms: f64::INFINITY,
        replicas: 0,
    };
    let mut sum = 0.0;
    for (i, r) in rates.iter().enumerate() {
        sum += r;
        let k = i + 1;
        let compute = (global_batch as f64 / sum * 1e3).max(cheapest);
        let ms = compute + network.ideal_sync_ms(k, variable_bytes);
        if ms < best.ms {
            best = DpBound { ms, replicas: k };
        }
    }
    best
}

/// Lower bound of the time an asynchronous plan takes to process `global_batch` samples on
/// workers of `capacity` over `network` with `variable_bytes` of variables, ms: the largest of
/// the batch over every worker's summed throughput (no worker computes faster), one transfer
/// of the variables over all ps links together (every step moves them each way, and the
/// global batch takes at least one step of its largest share), and one worker's pull and push
/// over its own link (every step takes them). `O(workers)`.
pub(crate) fn async_lower_bound(
    global_batch: usize,
    capacity: &[WorkerCapacity],
    network: &PsNetwork,
    variable_bytes: u64,
) -> DpBound {
    let (sum, workers) = capacity
        .iter()
        .map(|c| c.samples_per_sec)
        .filter(|r| r.is_finite() && *r > 0.0)
        .fold((0.0, 0usize), |(s, k), r| (s + r, k + 1));
    if workers == 0 || global_batch == 0 {
        return DpBound::default();
    }
    let compute = global_batch as f64 / sum * 1e3;
    let ps_bw: f64 = network.ps_bandwidth.iter().sum();
    let ps = if ps_bw > 0.0 {
        variable_bytes as f64 / ps_bw * 1e3
    } else {
        0.0
    };
    let own = 2.0 * (network.latency_s + variable_bytes as f64 / network.worker_bandwidth) * 1e3;
    DpBound {
        ms: compute.max(ps).max(own),
        replicas: workers,
    }
}

/// The lower bound of a step of a plan in `mode` that applies `samples` samples (see
/// [`lower_bound`] and [`async_lower_bound`]).
pub(crate) fn lower_bound_for(
    mode: DpMode,
    samples: usize,
    capacity: &[WorkerCapacity],
    network: &PsNetwork,
    variable_bytes: u64,
) -> DpBound {
    match mode {
        DpMode::Sync | DpMode::Backup { .. } => {
            lower_bound(samples, capacity, network, variable_bytes)
        }
        DpMode::Async => async_lower_bound(samples, capacity, network, variable_bytes),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::step::ps_loads;
    use super::*;
    use crate::cluster::SyntheticSpec;

    fn thousand() -> SyntheticCluster {
        SyntheticSpec::parse(
            "synthetic:workers=1000:ps=16:avail=beta(2,2):cap=lognormal(0,0.5):net=10gbit/50us:mem=2g",
        )
        .unwrap()
        .build()
    }

    #[test]
    fn resnet20_has_its_parameter_count() {
        let w = DpWorkload::resnet20();
        let params = w.variable_bytes() / 4;
        assert!((268_000..=275_000).contains(&params), "{params}");
        assert_eq!(w.variables.len(), 61);
    }

    #[test]
    fn planners_on_a_thousand_workers_give_valid_plans() {
        let c = thousand();
        let w = DpWorkload::resnet20();
        let caps = worker_capacities(&c, &w);
        let net = ps_network(&c);
        let batch = 32 * 1000;
        let by_device: HashMap<&str, &WorkerCapacity> =
            caps.iter().map(|c| (c.device.as_str(), c)).collect();
        let mut steps = HashMap::new();
        for strategy in DataParallelStrategy::all() {
            let name = strategy.name();
            let p = plan(strategy, &c, &caps, &w, batch).unwrap();
            assert_eq!(p.global_batch(), batch, "{name}");
            let m = DpMode::of(strategy);
            let step = simulate(&p, m, &caps, &w.variables, &c.ps, &net).unwrap();
            let bound = lower_bound_for(m, step.samples_per_step, &caps, &net, w.variable_bytes());
            assert!(
                step.step_ms >= bound.ms * (1.0 - 1e-9),
                "{name}: {step:?} < {bound:?}"
            );
            assert_eq!(
                step.ps_bytes.iter().sum::<u64>(),
                w.variable_bytes(),
                "{name}"
            );
            steps.insert(name, step.clone());
            if name == "infra-aware" {
                // Every share within the worker's memory (2 GiB: 396 samples).
                for r in &p.replicas {
                    let cap = by_device[r.device.as_str()].cap();
                    assert!(r.batch <= cap, "{}: {} > {cap}", r.device, r.batch);
                }
                // Its prediction is the simulator's.
                let predicted = p.predicted_step_ms.unwrap();
                assert!(
                    (predicted - step.step_ms).abs() < 1e-6 * predicted,
                    "{predicted} vs {step:?}"
                );
            }
        }
        // Equal shares wait on the slowest worker; infra-aware does not.
        assert!(steps["infra-aware"].step_ms * 2.0 < steps["replica-setter"].step_ms);
        // A backup worker spares equal shares the slowest replica only.
        assert!(steps["sync-backup"].step_ms <= steps["replica-setter"].step_ms);
        // Asynchronous equal shares do not wait on the slowest worker.
        assert!(steps["async-ps"].step_ms < steps["replica-setter"].step_ms);
        assert_eq!(
            DpMode::of(DataParallelStrategy::SyncBackup { backups: 3 }),
            DpMode::Backup { backups: 3 }
        );
        assert_eq!(
            DpMode::of(DataParallelStrategy::InfraAwareAsync),
            DpMode::Async
        );
    }

    /// Four workers of 100, 50, 25 and 10 samples/s with 1 ms of fixed cost, 20 samples each.
    fn four() -> (
        Vec<WorkerCapacity>,
        DataParallelPlan,
        Vec<VarInfo>,
        Vec<String>,
    ) {
        let caps: Vec<WorkerCapacity> = [100.0, 50.0, 25.0, 10.0]
            .iter()
            .enumerate()
            .map(|(i, &r)| WorkerCapacity {
                fixed_ms: 1.0,
                ..WorkerCapacity::rate(&format!("w{i}"), r)
            })
            .collect();
        let workers: Vec<String> = caps.iter().map(|c| c.device.clone()).collect();
        let ps = vec!["ps0".to_string(), "ps1".to_string()];
        let vars = vec![
            VarInfo {
                name: "a".into(),
                bytes: 3_000_000,
            },
            VarInfo {
                name: "b".into(),
                bytes: 1_000_000,
            },
        ];
        let plan = parallel::replica_setter(&workers, &ps, &vars, 80).unwrap();
        (caps, plan, vars, ps)
    }

    fn net(ps_bandwidth: f64) -> PsNetwork {
        PsNetwork {
            ps_bandwidth: vec![ps_bandwidth; 2],
            worker_bandwidth: 1e9,
            latency_s: 1e-4,
        }
    }

    #[test]
    fn backup_steps_wait_for_the_fastest_n_minus_k_replicas() {
        let (caps, plan, vars, ps) = four();
        let network = net(1e9);
        let sync = simulate(&plan, DpMode::Sync, &caps, &vars, &ps, &network).unwrap();
        let mut computes: Vec<f64> = plan
            .replicas
            .iter()
            .zip(&caps)
            .map(|(r, c)| c.step_ms(r.batch))
            .collect();
        computes.sort_by(f64::total_cmp);
        for k in 0..4 {
            let b = simulate(
                &plan,
                DpMode::Backup { backups: k },
                &caps,
                &vars,
                &ps,
                &network,
            )
            .unwrap();
            // Never slower than the synchronous step with the same shares, and never before
            // the (N − k)-th replica has computed and every replica synchronised.
            assert!(b.step_ms <= sync.step_ms, "k={k}: {b:?} vs {sync:?}");
            assert_eq!(b.compute_ms, computes[3 - k], "k={k}");
            assert!(b.step_ms >= computes[3 - k] + sync.sync_ms, "k={k}");
            assert_eq!(b.samples_per_step, 20 * (4 - k), "k={k}");
            let bound = lower_bound_for(b.mode, b.samples_per_step, &caps, &network, 4_000_000);
            assert!(b.step_ms >= bound.ms, "k={k}: {b:?} < {bound:?}");
        }
        // k = 0 is the synchronous step; one backup of four drops the 10 samples/s worker.
        let b0 = simulate(
            &plan,
            DpMode::Backup { backups: 0 },
            &caps,
            &vars,
            &ps,
            &network,
        )
        .unwrap();
        assert_eq!(b0.step_ms, sync.step_ms);
        let b1 = simulate(
            &plan,
            DpMode::Backup { backups: 1 },
            &caps,
            &vars,
            &ps,
            &network,
        )
        .unwrap();
        assert_eq!(b1.slowest.as_deref(), Some("w2"));
        let err = simulate(
            &plan,
            DpMode::Backup { backups: 4 },
            &caps,
            &vars,
            &ps,
            &network,
        )
        .unwrap_err()
        .to_string();
        assert!(
            err.contains("backup workers") && err.contains("4 of 4"),
            "{err}"
        );
    }

    #[test]
    fn async_throughput_is_at_most_the_solo_sum_and_limited_by_the_ps_links() {
        let (caps, plan, vars, ps) = four();
        let bytes = ps_loads(&plan, &vars, &ps).unwrap();
        assert_eq!(bytes, vec![3_000_000, 1_000_000]);
        let solo_sum = |network: &PsNetwork| -> f64 {
            let transfer = network.sync_ms(1, &bytes);
            plan.replicas
                .iter()
                .zip(&caps)
                .map(|(r, c)| r.batch as f64 * 1e3 / (c.step_ms(r.batch) + transfer))
                .sum()
        };
        // Fast ps links: every worker at its solo rate, no delay.
        let fast = net(1e12);
        let a = simulate(&plan, DpMode::Async, &caps, &vars, &ps, &fast).unwrap();
        assert_eq!(a.ps_delay_ms, 0.0);
        assert!((a.images_per_sec - solo_sum(&fast)).abs() < 1e-9 * a.images_per_sec);
        assert!((a.step_ms - 80.0 / a.images_per_sec * 1e3).abs() < 1e-9 * a.step_ms);
        // Slow ps links: saturated. Throughput stays below the solo sum, and the ps that holds
        // 3 MB carries at most its bandwidth each way.
        for bw in [3e6, 1e6, 3e5] {
            let slow = net(bw);
            let a = simulate(&plan, DpMode::Async, &caps, &vars, &ps, &slow).unwrap();
            assert!(a.ps_delay_ms > 0.0, "{bw}: {a:?}");
            assert!(a.images_per_sec <= solo_sum(&slow), "{bw}: {a:?}");
            let transfer = slow.sync_ms(1, &bytes);
            let steps_per_sec: f64 = plan
                .replicas
                .iter()
                .zip(&caps)
                .map(|(r, c)| 1e3 / (c.step_ms(r.batch) + transfer + a.ps_delay_ms))
                .sum();
            let carried = steps_per_sec * 3e6;
            assert!(carried <= bw * (1.0 + 1e-9), "{bw}: {carried} B/s");
            assert!(
                carried >= bw * (1.0 - 1e-6),
                "{bw}: saturated at {carried} B/s"
            );
            let bound = async_lower_bound(80, &caps, &slow, 4_000_000);
            assert!(a.step_ms >= bound.ms, "{bw}: {a:?} < {bound:?}");
        }
        // Slower links, lower throughput.
        let rates: Vec<f64> = [1e8, 1e7, 1e6]
            .iter()
            .map(|&bw| {
                simulate(&plan, DpMode::Async, &caps, &vars, &ps, &net(bw))
                    .unwrap()
                    .images_per_sec
            })
            .collect();
        assert!(rates[0] > rates[1] && rates[1] > rates[2], "{rates:?}");
        // Never above every worker's raw throughput.
        assert!(rates[0] < 185.0, "{rates:?}");
    }

    #[test]
    fn the_bound_is_compute_or_ps_traffic() {
        let cap = |d: &str| WorkerCapacity::rate(d, 100.0);
        let caps = [cap("a"), cap("b"), cap("c"), cap("d")];
        let net = PsNetwork {
            ps_bandwidth: vec![1e6],
            worker_bandwidth: 1e9,
            latency_s: 0.0,
        };
        // 400 samples: k replicas take 4000/k ms, plus 2 × k × 1000 B / 1 MB/s = 2k ms.
        // Best k = 4: 1000 + 8 ms.
        let b = lower_bound(400, &caps, &net, 1000);
        assert_eq!(b.replicas, 4);
        assert!((b.ms - 1008.0).abs() < 1e-9, "{b:?}");
        // Heavy variables: one replica is best (4000 + 2000 < 2000 + 4000 …).
        let b = lower_bound(400, &caps, &net, 1_000_000);
        assert_eq!(b.replicas, 1);
        assert_eq!(lower_bound(0, &caps, &net, 1), DpBound::default());
    }

    #[test]
    fn bad_plans_are_errors_naming_the_culprit() {
        let c = SyntheticSpec::parse("synthetic:workers=4:ps=2")
            .unwrap()
            .build();
        let w = DpWorkload::resnet20();
        let caps = worker_capacities(&c, &w);
        let net = ps_network(&c);
        let mut p = plan(DataParallelStrategy::ReplicaSetter, &c, &caps, &w, 8).unwrap();
        p.variable_devices.insert("nope".into(), c.ps[0].clone());
        let err = simulate_step(&p, &caps, &w.variables, &c.ps, &net).unwrap_err();
        assert!(err.to_string().contains("nope"), "{err}");
        let mut p = plan(DataParallelStrategy::ReplicaSetter, &c, &caps, &w, 8).unwrap();
        p.replicas[0].device = "/job:worker/task:99".into();
        let err = simulate_step(&p, &caps, &w.variables, &c.ps, &net).unwrap_err();
        assert!(err.to_string().contains("task:99"), "{err}");
    }
}

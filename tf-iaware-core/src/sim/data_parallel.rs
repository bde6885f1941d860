//! Simulated synchronous data-parallel steps with parameter servers, pure (no TensorFlow, no
//! workers): the step of a plan is
//!
//! `pull + max over replicas (fixed_ms + share ÷ throughput) + push`
//!
//! where pulling the variables and pushing the gradients each take one latency plus the longer
//! of the busiest ps link (`replicas × its bytes ÷ its bandwidth`: every replica contends for
//! it) and a worker's own link (`PsNetwork::phase_ms`). Its lower bound (`lower_bound`) is
//! the least, over the number of replicas `k`, of the ideal synchronisation of `k` replicas
//! (bytes spread over the ps in proportion to bandwidth) plus the batch over the `k` fastest
//! workers' summed throughput (or the cheapest fixed cost): no plan under this model beats it.
//!
//! The planners that run here are listed in [`DP_PLANNERS`]; [`plan`] is the one place that maps
//! a name to a planner. The asynchronous and backup-worker contenders (`async-ps`,
//! `sync-backup`, `infra-aware-async`) train for real (`bench --data digits`) but have no
//! simulated step yet: they join there, with their own step model in `simulate_step`.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::cluster::SyntheticCluster;
use crate::error::{Error, Result};
use crate::parallel::{
    self, DataParallelPlan, InfraAwareOptions, PsNetwork, ReplicaMemory, Sharding, VarInfo,
    WorkerCapacity,
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

/// Data-parallel planners [`plan`] knows: TensorFlow's stock `replica-setter` (equal shares,
/// variables round-robin) and `infra-aware` (shares by capability × availability within
/// memory, as many replicas as pay for their ps traffic, variables sharded evenly over the ps).
pub const DP_PLANNERS: &[&str] = &["replica-setter", "infra-aware"];

/// The plan of data-parallel planner `name` for `global_batch` samples on `cluster`.
///
/// # Errors
/// [`Error::InvalidArgument`] for a name not in [`DP_PLANNERS`]; the planner's own errors
/// (a batch that does not fit, …).
pub fn plan(
    name: &str,
    cluster: &SyntheticCluster,
    capacity: &[WorkerCapacity],
    workload: &DpWorkload,
    global_batch: usize,
) -> Result<DataParallelPlan> {
    match name {
        "replica-setter" => parallel::replica_setter(
            &cluster.workers,
            &cluster.ps,
            &workload.variables,
            global_batch,
        ),
        "infra-aware" => parallel::infra_aware_networked(
            capacity,
            &cluster.ps,
            &workload.variables,
            global_batch,
            &InfraAwareOptions::default(),
            &ps_network(cluster),
            Sharding::Balanced,
        ),
        // Extension point: `sync-backup` (the step waits for the fastest N − k replicas),
        // `async-ps` and `infra-aware-async` (no barrier: throughput, not a step) plan here and
        // need their own step model in `simulate_step`.
        other => Err(Error::InvalidArgument {
            what: format!("data-parallel planner `{other}`"),
            reason: format!("the simulator knows {}", DP_PLANNERS.join(", ")),
        }),
    }
}

/// One simulated data-parallel step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct DpStep {
    /// Predicted step time, ms.
    pub step_ms: f64,
    /// The slowest replica's compute, ms.
    pub compute_ms: f64,
    /// Pull and push together, ms.
    pub sync_ms: f64,
    /// Replicas with a share.
    pub replicas: usize,
    /// The slowest replica's device.
    pub slowest: Option<String>,
    /// Bytes on each ps, in the order given.
    pub ps_bytes: Vec<u64>,
}

/// Simulates one step of `plan` on workers of `capacity`, with its variables (`vars`; the
/// parts `name/part_K` of a sharded variable split it equally) on the ps tasks `ps` linked by
/// `network`.
///
/// # Errors
/// [`Error::InvalidArgument`] for a replica on a worker `capacity` lacks, a variable on a
/// device that is not one of `ps`, or a variable name that is neither in `vars` nor a part of
/// one.
pub(crate) fn simulate_step(
    plan: &DataParallelPlan,
    capacity: &[WorkerCapacity],
    vars: &[VarInfo],
    ps: &[String],
    network: &PsNetwork,
) -> Result<DpStep> {
    let by_device: HashMap<&str, &WorkerCapacity> =
        capacity.iter().map(|c| (c.device.as_str(), c)).collect();
    let mut compute_ms = 0.0f64;
    let mut slowest = None;
    for r in &plan.replicas {
        let c = by_device
            .get(r.device.as_str())
            .ok_or_else(|| Error::InvalidArgument {
                what: format!("replica on `{}`", r.device),
                reason: "no capacity is known for this worker".into(),
            })?;
        let t = c.step_ms(r.batch);
        if t > compute_ms || slowest.is_none() {
            compute_ms = compute_ms.max(t);
            slowest = Some(r.device.clone());
        }
    }
    let bytes: HashMap<&str, u64> = vars.iter().map(|v| (v.name.as_str(), v.bytes)).collect();
    let mut parts: HashMap<&str, u64> = HashMap::new();
    for key in plan.variable_devices.keys() {
        if let Some((base, _)) = split_part(key) {
            *parts.entry(base).or_default() += 1;
        }
    }
    let ps_index: HashMap<&str, usize> = ps
        .iter()
        .enumerate()
        .map(|(i, p)| (p.as_str(), i))
        .collect();
    let mut ps_bytes = vec![0u64; ps.len()];
    for (key, dev) in &plan.variable_devices {
        let p = *ps_index
            .get(dev.as_str())
            .ok_or_else(|| Error::InvalidArgument {
                what: format!("variable `{key}`"),
                reason: format!("is on `{dev}`, which is not one of the ps tasks"),
            })?;
        let b = match (bytes.get(key.as_str()), split_part(key)) {
            (Some(&b), _) => b,
            (None, Some((base, k))) if bytes.contains_key(base) => {
                let (total, n) = (bytes[base], parts[base]);
                total / n + u64::from(k < total % n)
            }
            _ => {
                return Err(Error::InvalidArgument {
                    what: format!("variable `{key}`"),
                    reason: "is not a variable of the workload (nor a part of one)".into(),
                })
            }
        };
        ps_bytes[p] += b;
    }
    let replicas = plan.replicas.iter().filter(|r| r.batch > 0).count();
    let sync_ms = network.sync_ms(replicas, &ps_bytes);
    Ok(DpStep {
        step_ms: compute_ms + sync_ms,
        compute_ms,
        sync_ms,
        replicas,
        slowest,
        ps_bytes,
    })
}

/// `name/part_K` → (`name`, K).
fn split_part(key: &str) -> Option<(&str, u64)> {
    let (base, k) = key.rsplit_once("/part_")?;
    Some((base, k.parse().ok()?))
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

#[cfg(test)]
mod tests {
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
        let bound = lower_bound(batch, &caps, &net, w.variable_bytes());
        let by_device: HashMap<&str, &WorkerCapacity> =
            caps.iter().map(|c| (c.device.as_str(), c)).collect();
        let mut steps = HashMap::new();
        for name in DP_PLANNERS {
            let p = plan(name, &c, &caps, &w, batch).unwrap();
            assert_eq!(p.global_batch(), batch, "{name}");
            let step = simulate_step(&p, &caps, &w.variables, &c.ps, &net).unwrap();
            assert!(
                step.step_ms >= bound.ms * (1.0 - 1e-9),
                "{name}: {step:?} < {bound:?}"
            );
            assert_eq!(
                step.ps_bytes.iter().sum::<u64>(),
                w.variable_bytes(),
                "{name}"
            );
            steps.insert(*name, step.clone());
            if *name == "infra-aware" {
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
        assert!(plan("async-ps", &c, &caps, &w, batch).is_err());
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
        let mut p = plan("replica-setter", &c, &caps, &w, 8).unwrap();
        p.variable_devices.insert("nope".into(), c.ps[0].clone());
        let err = simulate_step(&p, &caps, &w.variables, &c.ps, &net).unwrap_err();
        assert!(err.to_string().contains("nope"), "{err}");
        let mut p = plan("replica-setter", &c, &caps, &w, 8).unwrap();
        p.replicas[0].device = "/job:worker/task:99".into();
        let err = simulate_step(&p, &caps, &w.variables, &c.ps, &net).unwrap_err();
        assert!(err.to_string().contains("task:99"), "{err}");
    }
}

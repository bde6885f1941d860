//! Data-parallel plans at the cluster's live state: calibrated worker figures rescaled to each
//! worker's availability now, shares capped by free memory, ps weighted by their effective
//! speed. Pure: the cluster's live figures come from `tf_iaware::cluster::connect`
//! or a `tf_iaware::cluster::MetricsFeed`.

use serde::{Deserialize, Serialize};

use super::plan::WorkerCapacity;
use crate::cluster::model::MIN_AVAILABILITY;
use crate::cluster::Cluster;
use crate::graph::OpGraph;

/// Memory one replica needs on its worker: `fixed_bytes + batch × per_sample_bytes`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReplicaMemory {
    /// Bytes independent of the batch (gradients, weights copied in, constants).
    pub fixed_bytes: u64,
    /// Bytes per sample of the replica's batch (activations and their gradients).
    pub per_sample_bytes: u64,
}

impl ReplicaMemory {
    /// From the memory of the same replica graph at two batch sizes (`(batch, bytes)`, distinct
    /// batches): the line through both points, clamped to non-negative figures.
    pub(crate) fn from_two(a: (usize, u64), b: (usize, u64)) -> Self {
        let ((b1, m1), (b2, m2)) = if a.0 <= b.0 { (a, b) } else { (b, a) };
        if b2 == b1 {
            return ReplicaMemory {
                fixed_bytes: 0,
                per_sample_bytes: m2 / b2.max(1) as u64,
            };
        }
        let per = m2.saturating_sub(m1) / (b2 - b1) as u64;
        ReplicaMemory {
            fixed_bytes: m1.saturating_sub(per.saturating_mul(b1 as u64)),
            per_sample_bytes: per,
        }
    }

    /// `ReplicaMemory::from_two` over two analysed replica graphs: the memory of a graph is
    /// the sum of [`op_memory`](crate::cost::op_memory) over its ops — an upper bound (every
    /// output held at once), so a share that passes it fits.
    pub fn of_graphs(a: (usize, &OpGraph), b: (usize, &OpGraph)) -> Self {
        let total = |g: &OpGraph| -> u64 {
            g.node_ids()
                .map(|id| crate::cost::op_memory(g, id))
                .fold(0u64, u64::saturating_add)
        };
        ReplicaMemory::from_two((a.0, total(a.1)), (b.0, total(b.1)))
    }

    /// Bytes a replica of `batch` samples needs.
    pub fn bytes(&self, batch: usize) -> u64 {
        self.fixed_bytes
            .saturating_add(self.per_sample_bytes.saturating_mul(batch as u64))
    }

    /// Most samples that fit in `free_bytes` (0 when not even the fixed part does).
    pub(crate) fn max_batch(&self, free_bytes: u64) -> usize {
        if free_bytes < self.fixed_bytes {
            return 0;
        }
        match self.per_sample_bytes {
            0 => usize::MAX,
            p => usize::try_from((free_bytes - self.fixed_bytes) / p).unwrap_or(usize::MAX),
        }
    }
}

/// Calibrated worker figures at the availability now: each worker's figures were measured at
/// [`WorkerCapacity::availability`] (1 when unknown); they are rescaled by `now / then` — the
/// marginal rate multiplied, the fixed per-step cost divided — with `now` the live
/// availability of the worker's device in `cluster`. With `memory`, each worker's
/// [`WorkerCapacity::max_batch`] is what its device's free memory holds
/// ([`LiveStatus::free_memory_bytes`](crate::cluster::LiveStatus::free_memory_bytes), else
/// [`Device::memory_bytes`](crate::cluster::Device::memory_bytes)). Workers that are not
/// devices of `cluster` are passed through unchanged.
pub fn live_capacities(
    calibrated: &[WorkerCapacity],
    cluster: &Cluster,
    memory: Option<&ReplicaMemory>,
) -> Vec<WorkerCapacity> {
    calibrated
        .iter()
        .map(|c| {
            let Some(d) = cluster.index_of(&c.device).map(|i| &cluster.devices[i]) else {
                return c.clone();
            };
            let then = c.availability.unwrap_or(1.0).max(MIN_AVAILABILITY);
            let now = d.availability.max(MIN_AVAILABILITY);
            let f = now / then;
            WorkerCapacity {
                device: c.device.clone(),
                samples_per_sec: c.samples_per_sec * f,
                fixed_ms: c.fixed_ms / f,
                availability: Some(now),
                max_batch: memory_cap(d, memory).or(c.max_batch),
                step_rel_se: c.step_rel_se,
                probed_batches: c.probed_batches.clone(),
            }
        })
        .collect()
}

/// Most samples a replica of `memory` holds in device `d`'s free memory (its live reading, else
/// its total), `None` without both figures.
pub(crate) fn memory_cap(
    d: &crate::cluster::Device,
    memory: Option<&ReplicaMemory>,
) -> Option<usize> {
    let free = d.live.free_memory_bytes.or(d.memory_bytes)?;
    Some(memory?.max_batch(free))
}

/// Parameter servers with their relative capacity for [`infra_aware`](super::infra_aware):
/// capability × live availability of each ps device (1 for a name `cluster` does not know).
pub fn ps_capacities(ps: &[String], cluster: &Cluster) -> Vec<(String, f64)> {
    ps.iter()
        .map(|p| {
            let c = cluster
                .index_of(p)
                .map(|i| {
                    let d = &cluster.devices[i];
                    d.peak_flops * d.availability.max(MIN_AVAILABILITY)
                })
                .unwrap_or(1.0);
            (p.clone(), c)
        })
        .collect()
}

/// The [`infra_aware`](super::infra_aware) plan at the cluster's live state:
/// [`live_capacities`] of the calibrated workers (capped by free memory with `memory`) and
/// [`ps_capacities`] of `ps`.
///
/// # Errors
/// As [`infra_aware`](super::infra_aware); in particular [`Error::Infeasible`](crate::Error::Infeasible)
/// naming the workers when the global batch does not fit in their free memory.
pub fn plan_live(
    calibrated: &[WorkerCapacity],
    cluster: &Cluster,
    ps: &[String],
    vars: &[super::VarInfo],
    global_batch: usize,
    memory: Option<&ReplicaMemory>,
    options: &super::InfraAwareOptions,
) -> crate::Result<super::DataParallelPlan> {
    super::infra_aware(
        &live_capacities(calibrated, cluster, memory),
        &ps_capacities(ps, cluster),
        vars,
        global_batch,
        options,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::Device;
    use crate::parallel::{infra_aware, InfraAwareOptions, VarInfo};

    fn cluster() -> Cluster {
        let d = |task: u32| {
            Device::nominal(
                &format!("/job:worker/replica:0/task:{task}/device:CPU:0"),
                "CPU",
                None,
                "h",
            )
        };
        Cluster::new(vec![d(0), d(1)])
    }

    #[test]
    fn replica_memory_is_a_line_through_two_batches() {
        let m = ReplicaMemory::from_two((4, 1_400), (2, 1_200));
        assert_eq!(
            m,
            ReplicaMemory {
                fixed_bytes: 1_000,
                per_sample_bytes: 100
            }
        );
        assert_eq!(m.bytes(10), 2_000);
        assert_eq!(m.max_batch(2_050), 10);
        assert_eq!(m.max_batch(999), 0);
        assert_eq!(ReplicaMemory::default().max_batch(0), usize::MAX);
    }

    #[test]
    fn live_availability_moves_share_away_from_a_busy_worker() {
        let mut c = cluster();
        let cal: Vec<WorkerCapacity> = c
            .devices
            .iter()
            .map(|d| WorkerCapacity {
                availability: Some(1.0),
                fixed_ms: 10.0,
                ..WorkerCapacity::rate(&d.name, 100.0)
            })
            .collect();
        let ps = vec![("ps".to_string(), 1.0)];
        let vars = vec![VarInfo {
            name: "w".into(),
            bytes: 4,
        }];
        let opts = InfraAwareOptions::default();
        let before = infra_aware(&live_capacities(&cal, &c, None), &ps, &vars, 64, &opts).unwrap();
        assert_eq!(
            before.replicas.iter().map(|r| r.batch).collect::<Vec<_>>(),
            vec![32, 32]
        );
        // A co-tenant takes most of worker 1: its live availability falls to ½.
        c.devices[1].availability = 0.5;
        let live = live_capacities(&cal, &c, None);
        assert_eq!(live[1].samples_per_sec, 50.0);
        assert_eq!(live[1].fixed_ms, 20.0);
        let after = infra_aware(&live, &ps, &vars, 64, &opts).unwrap();
        let b: Vec<usize> = after.replicas.iter().map(|r| r.batch).collect();
        assert!(b[0] > b[1] && b.iter().sum::<usize>() == 64, "{b:?}");
        // Figures calibrated at ½ and read at ½ are the calibrated ones.
        let at_half = WorkerCapacity {
            availability: Some(0.5),
            ..cal[1].clone()
        };
        assert_eq!(
            live_capacities(std::slice::from_ref(&at_half), &c, None)[0].samples_per_sec,
            100.0
        );

        // Free memory caps the share.
        c.devices[0].live.free_memory_bytes = Some(1_000 + 10 * 100);
        let m = ReplicaMemory {
            fixed_bytes: 1_000,
            per_sample_bytes: 100,
        };
        let capped = live_capacities(&cal, &c, Some(&m));
        assert_eq!(capped[0].max_batch, Some(10));
        assert_eq!(capped[1].max_batch, None, "no memory figure: no cap");
        let p = infra_aware(&capped, &ps, &vars, 64, &opts).unwrap();
        assert_eq!(p.replicas[0].batch, 10);

        // ps weighted by effective speed.
        let ps = ps_capacities(&[c.devices[0].name.clone(), c.devices[1].name.clone()], &c);
        assert!((ps[0].1 / ps[1].1 - 2.0).abs() < 1e-12);
    }
}

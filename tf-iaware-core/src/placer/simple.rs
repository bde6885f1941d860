//! Simple memory-aware strategies: `random` (seeded) and `single-fastest`.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::sched::check_groups;
use super::{Placement, Strategy};
use crate::cluster::{Cluster, DeviceId};
use crate::cost::CostModel;
use crate::error::{Error, Result};
use crate::graph::{GroupId, OpGraph};

/// Free memory per device, bytes (`u64::MAX`: unlimited).
pub(crate) fn memory_left(cost: &CostModel) -> Vec<u64> {
    cost.device_ids()
        .map(|d| cost.capacity(d).unwrap_or(u64::MAX))
        .collect()
}

/// Takes `need` bytes from `left`.
pub(crate) fn take(left: &mut u64, need: u64) {
    if *left != u64::MAX {
        *left -= need;
    }
}

/// The error for group `g` that no device with its kernels has memory for any more.
pub(crate) fn out_of_memory(
    graph: &OpGraph,
    cluster: &Cluster,
    cost: &CostModel,
    left: &[u64],
    g: GroupId,
) -> Error {
    let best = cost
        .device_ids()
        .filter(|&d| cost.group_allowed(g, d))
        .max_by_key(|&d| left[d]);
    let most = best.map_or(0, |d| left[d]);
    Error::Infeasible {
        group: graph.groups()[g].name.clone(),
        reason: format!(
            "needs {} bytes of device memory but, with the groups placed before it, the most left \
             on a device with its kernels is {most} bytes{}",
            cost.group_memory(g),
            best.map_or(String::new(), |d| format!(
                " on `{}`",
                cluster.devices[d].name
            ))
        ),
    }
}

/// Every colocation group on a device drawn uniformly (seeded) among those with its kernels and
/// room for it.
#[derive(Debug, Clone, Copy)]
pub struct Random {
    /// Seed of the draw.
    pub seed: u64,
}

impl Strategy for Random {
    fn name(&self) -> &'static str {
        "random"
    }

    fn place_with_cost(
        &self,
        graph: &OpGraph,
        cluster: &Cluster,
        cost: &CostModel,
    ) -> Result<Placement> {
        check_groups(graph, cluster, cost)?;
        let mut rng = StdRng::seed_from_u64(self.seed);
        let mut left = memory_left(cost);
        let mut group_device = Vec::with_capacity(cost.num_groups());
        let mut candidates = Vec::with_capacity(cost.num_devices());
        for g in cost.group_ids() {
            let need = cost.group_memory(g);
            candidates.clear();
            candidates.extend(
                cost.device_ids()
                    .filter(|&d| cost.group_allowed(g, d) && need <= left[d]),
            );
            if candidates.is_empty() {
                return Err(out_of_memory(graph, cluster, cost, &left, g));
            }
            let d = candidates[rng.gen_range(0..candidates.len())];
            take(&mut left[d], need);
            group_device.push(d);
        }
        Placement::from_groups(self.name(), graph, cluster, &group_device)
    }
}

/// Everything on the device that runs the whole graph fastest on its own (least summed op time);
/// groups without a kernel there, or that no longer fit, go to the next fastest device that takes
/// them.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct SingleFastest;

/// Devices by the summed time of the ops they can run (fastest first), ties by index.
pub(crate) fn devices_by_serial_time(cost: &CostModel) -> Vec<DeviceId> {
    let nd = cost.num_devices();
    let mut total = vec![0.0f64; nd];
    for i in cost.node_ids() {
        for (d, t) in cost.device_ids().zip(total.iter_mut()) {
            if cost.allowed(i, d) {
                *t += cost.op_time(i, d);
            }
        }
    }
    let mut order: Vec<DeviceId> = cost.device_ids().collect();
    order.sort_by(|&a, &b| total[a].total_cmp(&total[b]).then(a.cmp(&b)));
    order
}

/// The device of every colocation group when everything goes to the fastest device (by summed
/// op time), overflowing to the next fastest that takes a group.
///
/// # Errors
/// [`Error::Infeasible`](crate::error::Error::Infeasible) naming a group no device can take.
pub(crate) fn fastest_device_groups(
    graph: &OpGraph,
    cluster: &Cluster,
    cost: &CostModel,
) -> Result<Vec<DeviceId>> {
    check_groups(graph, cluster, cost)?;
    let order = devices_by_serial_time(cost);
    let mut left = memory_left(cost);
    let mut group_device = Vec::with_capacity(cost.num_groups());
    for g in cost.group_ids() {
        let need = cost.group_memory(g);
        let Some(&d) = order
            .iter()
            .find(|&&d| cost.group_allowed(g, d) && need <= left[d])
        else {
            return Err(out_of_memory(graph, cluster, cost, &left, g));
        };
        take(&mut left[d], need);
        group_device.push(d);
    }
    Ok(group_device)
}

impl Strategy for SingleFastest {
    fn name(&self) -> &'static str {
        "single-fastest"
    }

    fn place_with_cost(
        &self,
        graph: &OpGraph,
        cluster: &Cluster,
        cost: &CostModel,
    ) -> Result<Placement> {
        let group_device = fastest_device_groups(graph, cluster, cost)?;
        Placement::from_groups(self.name(), graph, cluster, &group_device)
    }
}

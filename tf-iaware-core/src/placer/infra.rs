//! `infra-aware`: the IA-TF idea (MASCOTS 2020) as op placement. Devices are ranked by
//! effective capability (`peak_flops × availability`); those below `threshold ×` the best are
//! dropped. For `k = 1, 2, …` best devices, two candidates fill them: contiguous slices of the
//! graph (in a depth-first topological order) with shares of the work proportional to each
//! device's capability, and HEFT restricted to those `k` devices. The simulator predicts each
//! candidate's step time; devices are added while that pays off (until two more counts in a row
//! bring no improvement) and the best candidate wins.

use super::heft::heft_schedule_on;
use super::sched::check_groups;
use super::simple::{memory_left, out_of_memory, take};
use super::split::keep_split_if_it_pays;
use super::{Placement, Strategy};
use crate::cluster::{Cluster, DeviceId};
use crate::cost::CostModel;
use crate::error::Result;
use crate::graph::{GroupId, NodeId, OpGraph};
use crate::sim::simulate;

/// Candidates without improvement after which no more devices are tried.
const PATIENCE: usize = 2;

/// How many of the best devices to try: every count up to 8, then steps of about √2 (11, 16,
/// 23, …), always ending with all of them.
fn device_counts(n: usize) -> Vec<usize> {
    let mut out: Vec<usize> = (1..=n.min(8)).collect();
    let mut k = 8.0f64;
    while (k as usize) < n {
        k *= std::f64::consts::SQRT_2;
        let next = (k.round() as usize).min(n);
        if out.last() != Some(&next) {
            out.push(next);
        }
    }
    out
}

/// The `infra-aware` strategy.
#[derive(Debug, Clone, Copy)]
pub(crate) struct InfraAware {
    /// Devices whose capability × availability is below `threshold ×` the best device's are not
    /// used (0–1).
    pub threshold: f64,
    /// Least predicted gain (share, 0–1) for which a split over several devices is kept
    /// ([`PlaceOptions::min_split_gain`](super::PlaceOptions::min_split_gain)).
    pub min_split_gain: f64,
}

impl Default for InfraAware {
    fn default() -> Self {
        InfraAware {
            threshold: 0.2,
            min_split_gain: super::MIN_SPLIT_GAIN,
        }
    }
}

/// A depth-first topological order (Kahn's algorithm with a stack): chains stay contiguous, so
/// contiguous slices of it cut few edges. Returns each node's position.
fn depth_first_positions(cost: &CostModel) -> Vec<usize> {
    let dag = cost.dag();
    let n = cost.num_nodes();
    let mut pending: Vec<u32> = cost.node_ids().map(|i| dag.preds(i).len() as u32).collect();
    let mut stack: Vec<NodeId> = dag
        .topo()
        .iter()
        .rev()
        .copied()
        .filter(|&i| pending[i] == 0)
        .collect();
    let mut pos = vec![0usize; n];
    let mut next = 0;
    while let Some(id) = stack.pop() {
        pos[id] = next;
        next += 1;
        for e in dag.succs(id).iter().rev() {
            let c = e.node;
            pending[c] -= 1;
            if pending[c] == 0 {
                stack.push(c);
            }
        }
    }
    pos
}

/// Position (in a depth-first topological order) at which each group's work happens: its
/// earliest costly member, or for a free member (a variable handle, a read) its earliest costly
/// consumer.
fn group_anchors(cost: &CostModel) -> Vec<usize> {
    let dag = cost.dag();
    let pos = depth_first_positions(cost);
    let mut anchor = vec![usize::MAX; cost.num_groups()];
    for i in cost.node_ids() {
        let a = if cost.is_free(i) {
            dag.succs(i)
                .iter()
                .map(|e| e.node)
                .filter(|&c| !cost.is_free(c))
                .map(|c| pos[c])
                .min()
                .unwrap_or(pos[i])
        } else {
            pos[i]
        };
        let g = cost.group_of(i);
        anchor[g] = anchor[g].min(a);
    }
    anchor
}

/// What every capability-proportional split of one placement problem shares.
struct Slicing<'a> {
    graph: &'a OpGraph,
    cluster: &'a Cluster,
    cost: &'a CostModel,
    /// Groups in the order their work happens.
    order: Vec<GroupId>,
    /// Each group's time on the reference device, seconds.
    work: Vec<f64>,
    /// Every device, fastest first: where a group goes when none of a split's devices fits it.
    fallback: Vec<DeviceId>,
}

impl<'a> Slicing<'a> {
    /// Groups ordered by [`group_anchors`], timed on `reference`.
    fn new(
        graph: &'a OpGraph,
        cluster: &'a Cluster,
        cost: &'a CostModel,
        reference: DeviceId,
    ) -> Self {
        let mut fallback: Vec<DeviceId> = cost.device_ids().collect();
        fallback.sort_by(|&a, &b| cost.speed(b).total_cmp(&cost.speed(a)).then(a.cmp(&b)));
        let anchors = group_anchors(cost);
        let mut order: Vec<GroupId> = cost.group_ids().collect();
        order.sort_by_key(|&g| (anchors[g], g));
        let mut work = vec![0.0f64; cost.num_groups()];
        for (i, w) in cost.node_ids().map(|i| (i, cost.op_time(i, reference))) {
            work[cost.group_of(i)] += w;
        }
        Slicing {
            graph,
            cluster,
            cost,
            order,
            work,
            fallback,
        }
    }

    /// The contiguous, capability-proportional split of the groups (in `order`) over `devices`.
    ///
    /// # Errors
    /// [`Error::Infeasible`](crate::Error::Infeasible) naming a group that fits nowhere.
    fn proportional(&self, devices: &[DeviceId]) -> Result<Vec<DeviceId>> {
        let (cost, work) = (self.cost, &self.work);
        let total: f64 = work.iter().sum();
        let score: f64 = devices.iter().map(|&d| cost.speed(d)).sum();
        let mut bounds = Vec::with_capacity(devices.len());
        let mut acc = 0.0;
        for &d in devices {
            acc += cost.speed(d);
            bounds.push(total * acc / score);
        }
        let mut left = memory_left(cost);
        let mut group_device = vec![DeviceId::new(0); cost.num_groups()];
        let mut cum = 0.0;
        for &g in &self.order {
            let mid = cum + work[g] / 2.0;
            cum += work[g];
            let j = bounds
                .iter()
                .position(|&b| mid <= b)
                .unwrap_or(devices.len() - 1);
            let need = cost.group_memory(g);
            let fits = |d: DeviceId, left: &[u64]| cost.group_allowed(g, d) && need <= left[d];
            let pick = devices[j..]
                .iter()
                .chain(devices[..j].iter().rev())
                .chain(&self.fallback)
                .copied()
                .find(|&d| fits(d, &left));
            let Some(d) = pick else {
                return Err(out_of_memory(self.graph, self.cluster, cost, &left, g));
            };
            take(&mut left[d], need);
            group_device[g] = d;
        }
        Ok(group_device)
    }
}

impl InfraAware {
    /// Devices in decreasing capability × availability that pass the threshold.
    pub(crate) fn ranked_devices(&self, cost: &CostModel) -> Vec<DeviceId> {
        let mut order: Vec<DeviceId> = cost.device_ids().collect();
        order.sort_by(|&a, &b| cost.speed(b).total_cmp(&cost.speed(a)).then(a.cmp(&b)));
        let best = order.first().map_or(0.0, |&d| cost.speed(d));
        let threshold = if self.threshold.is_nan() {
            0.0
        } else {
            self.threshold.clamp(0.0, 1.0)
        };
        order.retain(|&d| cost.speed(d) >= threshold * best);
        order
    }

    /// The chosen split and its predicted step time (seconds).
    ///
    /// # Errors
    /// [`Error::Infeasible`](crate::Error::Infeasible) naming a group that fits nowhere.
    pub(crate) fn choose(
        &self,
        graph: &OpGraph,
        cluster: &Cluster,
        cost: &CostModel,
    ) -> Result<(Vec<DeviceId>, f64)> {
        check_groups(graph, cluster, cost)?;
        let ranked = self.ranked_devices(cost);
        let reference = ranked[0];
        let slicing = Slicing::new(graph, cluster, cost, reference);
        let mut assignment = vec![reference; cost.num_nodes()];
        let mut best: Option<(Vec<DeviceId>, f64)> = None;
        let mut last_err = None;
        let mut stale = 0;
        let mut mask = vec![false; cost.num_devices()];
        for k in device_counts(ranked.len()) {
            // Two ways to fill the k best devices: capability-proportional slices, and HEFT
            // restricted to them; the simulator judges both.
            let mut round: Option<(Vec<DeviceId>, f64)> = None;
            let sliced = slicing.proportional(&ranked[..k]);
            mask.fill(false);
            for &d in &ranked[..k] {
                mask[d] = true;
            }
            let listed =
                heft_schedule_on(graph, cluster, cost, Some(&mask)).map(|s| s.group_device);
            for groups in [sliced, listed] {
                let groups = match groups {
                    Ok(g) => g,
                    Err(e) => {
                        last_err = Some(e);
                        continue;
                    }
                };
                for (i, a) in cost.node_ids().zip(assignment.iter_mut()) {
                    *a = groups[cost.group_of(i)];
                }
                let t = simulate(cost, &assignment)?.step_time;
                if round.as_ref().is_none_or(|(_, rt)| t < *rt) {
                    round = Some((groups, t));
                }
            }
            let Some((groups, t)) = round else {
                continue;
            };
            let improves = best.as_ref().is_none_or(|(_, bt)| t < *bt * (1.0 - 1e-9));
            if improves {
                best = Some((groups, t));
                stale = 0;
            } else {
                stale += 1;
                if stale >= PATIENCE {
                    break;
                }
            }
        }
        match (best, last_err) {
            (Some(b), _) => Ok(b),
            (None, Some(e)) => Err(e),
            (None, None) => Err(crate::Error::Infeasible {
                group: "(all)".into(),
                reason: "the cluster has no devices".into(),
            }),
        }
    }
}

impl Strategy for InfraAware {
    fn name(&self) -> &'static str {
        "infra-aware"
    }

    fn place_with_cost(
        &self,
        graph: &OpGraph,
        cluster: &Cluster,
        cost: &CostModel,
    ) -> Result<Placement> {
        let (groups, _) = self.choose(graph, cluster, cost)?;
        // As `heft`: a split that is not clearly faster than one device goes back to it.
        let groups = keep_split_if_it_pays(graph, cluster, cost, groups, self.min_split_gain)?;
        Placement::from_groups(self.name(), graph, cluster, &groups)
    }
}

#[cfg(test)]
mod tests {
    use super::device_counts;

    #[test]
    fn device_counts_cover_small_clusters_and_step_through_large_ones() {
        assert_eq!(device_counts(3), vec![1, 2, 3]);
        assert_eq!(
            device_counts(64),
            vec![1, 2, 3, 4, 5, 6, 7, 8, 11, 16, 23, 32, 45, 64]
        );
        assert_eq!(*device_counts(9).last().unwrap(), 9);
    }
}

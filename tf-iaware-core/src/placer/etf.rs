//! ETF, earliest time first (Hwang, Chow, Anger and Lee, 1989), with memory as in Baechi's m-ETF
//! (Jeon et al., 2020): among every ready op and every device it may use, schedule the pair that
//! can *start* earliest (ties: the op with the larger upward rank, then the earlier topological
//! position, then the earlier finish); a device is usable only while the op's colocation group fits
//! in its free memory. Ops run in the order they are scheduled on each device (no insertion);
//! devices of one compute pool share one timeline (their capacity).
//!
//! Two bookkeepings of the ready list give the same schedule; [`etf_schedule`] picks by the number
//! of timelines ([`FEW_TIMELINES`]):
//!
//! - **Per timeline** (`by_timeline`), for few timelines: ready ops wait on every timeline in two
//!   queues, those whose inputs would arrive after the timeline is free (by arrival time) and those
//!   already there (by rank). The best pair of a timeline is the top of one of them, and the
//!   scheduler takes the best over timelines; scheduling an op moves only its own timeline's clock,
//!   so nothing else needs re-evaluating. Queue entries of ops that were scheduled elsewhere, or
//!   whose arrival time or feasibility changed, are fixed when they reach the top (times only grow,
//!   so a key is always a lower bound). Each ready op sits on every timeline and each step scans
//!   every timeline: `O(ready ops × timelines)` work and memory, which dominated at a thousand
//!   devices (2 s for 10k ops).
//! - **Per op** (`by_op`), for many timelines: ready ops wait in one heap keyed by their best
//!   pair over every timeline. Scheduling an op only ever makes other pairs later (a clock moves
//!   on, memory shrinks, a floating producer gets a device, a group is pinned), so every key is a
//!   lower bound of its op's best pair now: the top is re-evaluated (`O(devices)`), scheduled if
//!   its key still holds, else pushed back with its new key. Memory is linear in ops + devices. On
//!   few timelines every clock move makes most keys stale (they all wait on the same earliest-free
//!   device), so there the per-timeline queues are faster.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use super::heft::upward_ranks;
use super::sched::{timelines, Schedule, State, NONE};
use super::split::keep_split_if_it_pays;
use super::{Placement, Strategy};
use crate::cluster::{Cluster, DeviceId};
use crate::cost::CostModel;
use crate::error::Result;
use crate::graph::{NodeId, OpGraph};

/// Up to this many timelines [`etf_schedule`] keeps per-timeline queues;
/// above it, one heap of ready ops. Measured on layered DAGs of 10k ops: per
/// timeline is faster at 17 devices (51 against 145 ms), per op from 65 devices on (77 against
/// 190 ms; 0.4 against 2 s at 1,016).
pub(crate) const FEW_TIMELINES: usize = 32;

/// Runs m-ETF and returns its schedule.
///
/// # Errors
/// [`Error::Infeasible`](crate::Error::Infeasible) naming a group that fits on no device (kernels
/// or memory).
pub fn etf_schedule(graph: &OpGraph, cluster: &Cluster, cost: &CostModel) -> Result<Schedule> {
    let (_, base) = timelines(cost);
    if base.len() - 1 <= FEW_TIMELINES {
        by_timeline::schedule(graph, cluster, cost)
    } else {
        by_op::schedule(graph, cluster, cost)
    }
}

/// Best (start, finish, device) of ready op `i` on `devices` (one timeline, free at `free`),
/// with the data-ready time on each device given by `ready`, or `None` if none of them may take
/// it now (kernels, memory, its group placed elsewhere).
#[inline]
fn best_with(
    state: &State<'_>,
    devices: &[DeviceId],
    free: f64,
    i: NodeId,
    ready: impl Fn(DeviceId) -> f64,
) -> Option<(f64, f64, DeviceId)> {
    let cost = state.cost;
    let g = cost.group_of(i);
    let placed = state.group_dev[g];
    let kernels = cost.group_devices(g);
    let need = cost.group_memory(g);
    let mut best: Option<(f64, f64, DeviceId)> = None;
    for &d in devices {
        let ok = match placed {
            NONE => kernels[d] && need <= state.mem_left[d],
            p => p as usize == d.index(),
        };
        if !ok {
            continue;
        }
        let start = free.max(ready(d));
        if best.is_some_and(|(bs, _, _)| start > bs) {
            continue; // No need to price the op here.
        }
        let finish = start + cost.op_time(i, d);
        if best.is_none_or(|(bs, bf, _)| start < bs || (start == bs && finish < bf)) {
            best = Some((start, finish, d));
        }
    }
    best
}

/// m-ETF with the ready ops queued on every timeline (see the module docs).
mod by_timeline;

/// m-ETF with one lazy heap of ready ops (see the module docs).
mod by_op;

/// The `etf` strategy (m-ETF).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Etf {
    /// Least predicted gain (share, 0–1) for which a split is kept
    /// ([`PlaceOptions::min_split_gain`](super::PlaceOptions::min_split_gain)).
    pub min_split_gain: f64,
}

impl Default for Etf {
    fn default() -> Self {
        Etf {
            min_split_gain: super::MIN_SPLIT_GAIN,
        }
    }
}

impl Strategy for Etf {
    fn name(&self) -> &'static str {
        "etf"
    }

    fn place_with_cost(
        &self,
        graph: &OpGraph,
        cluster: &Cluster,
        cost: &CostModel,
    ) -> Result<Placement> {
        let s = etf_schedule(graph, cluster, cost)?;
        // As `heft`: a split that is not clearly faster than one device goes back to it.
        let best =
            keep_split_if_it_pays(graph, cluster, cost, s.group_device, self.min_split_gain)?;
        Placement::from_groups(self.name(), graph, cluster, &best)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::tests::{cluster, graph, ids, model};

    #[test]
    fn etf_starts_the_earliest_pair_first() {
        // Fork: t0 (1 s) → t1 (4 s), t2 (1 s), t3 (1 s); 2 devices; transfers 0.5 s.
        let g = graph(4, &[(0, 1, 1), (0, 2, 1), (0, 3, 1)]);
        let c = cluster(2, 0.5, f64::MAX);
        let m = model(&g, &c, &[[1.0, 1.0], [4.0, 4.0], [1.0, 1.0], [1.0, 1.0]]);
        let s = etf_schedule(&g, &c, &m).unwrap();
        // t0 on dev 0 at 0. At 1, dev 0 can start at 1 and dev 1 at 1.5: t1 (highest rank) starts
        // first on dev 0 at 1; then t2 on dev 1 at 1.5 (vs dev 0 at 5), t3 on dev 1 at 2.5.
        assert_eq!(s.device, ids(&[0, 0, 1, 1]));
        assert_eq!(s.start, vec![0.0, 1.0, 1.5, 2.5]);
        assert_eq!(s.makespan, 5.0);
    }

    #[test]
    fn both_bookkeepings_give_the_same_schedule() {
        use crate::sim::synthetic::{cluster as hetero, LayeredDag};
        // (ops, width, devices, hosts): pools of several devices per host, one device per host,
        // memory that runs short on some devices.
        for (ops, width, devices, hosts, capped) in [
            (300, 20, 6, 2, false),
            (500, 30, 40, 40, false),
            (400, 10, 12, 3, true),
        ] {
            let g = LayeredDag::new(ops, width).build().unwrap();
            let mut c = hetero(devices, hosts, 3);
            if capped {
                for d in c.devices.iter_mut().step_by(2) {
                    d.memory_bytes = Some(1 << 20);
                }
            }
            let m = CostModel::new(&g, &c).unwrap();
            let a = by_timeline::schedule(&g, &c, &m).unwrap();
            let b = by_op::schedule(&g, &c, &m).unwrap();
            // Same pairs; times to the last bits (arrivals are summed in another order).
            assert_eq!(a.device, b.device, "{ops} ops on {devices} devices");
            let close = |x: f64, y: f64| (x - y).abs() <= 1e-12 * x.abs().max(1e-9);
            assert!(
                a.start.iter().zip(&b.start).all(|(&x, &y)| close(x, y)),
                "{ops} ops on {devices} devices"
            );
            assert!(close(a.makespan, b.makespan));
        }
    }
}

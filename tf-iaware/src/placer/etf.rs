//! ETF, earliest time first (Hwang, Chow, Anger and Lee, 1989), with memory as in Baechi's m-ETF
//! (Jeon et al., 2020): among every ready op and every device it may use, schedule the pair that
//! can *start* earliest (ties: the op with the larger upward rank, then the earlier topological
//! position, then the earlier finish); a device is usable only while the op's colocation group fits
//! in its free memory. Ops run in the order they are scheduled on each device (no insertion);
//! devices of one compute pool share one timeline (their capacity).
//!
//! Ready ops wait in one heap keyed by their best pair (start, rank, position, finish) over every
//! timeline. Scheduling an op only ever makes other pairs later (a timeline's clock moves on,
//! memory shrinks, a floating producer gets a device, a group is pinned), so every key is a lower
//! bound of its op's best pair now: the top is re-evaluated (`O(devices)`), scheduled if its key
//! still holds, else pushed back with its new key. Each ready op is in the heap once — not once
//! per timeline, which made the ready-list scan `O(ready ops × devices)` per step and dominated at
//! a thousand devices.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use super::heft::upward_ranks;
use super::sched::{timelines, Schedule, State, NONE};
use super::{Placement, Strategy};
use crate::cluster::Cluster;
use crate::cost::CostModel;
use crate::error::Result;
use crate::graph::OpGraph;

/// Best (start, finish, device) of ready op `i` on `devices` (one timeline, free at `free`),
/// with the data-ready time on each device given by `ready`, or `None` if none of them may take
/// it now (kernels, memory, its group placed elsewhere).
#[inline]
fn best_with(
    state: &State<'_>,
    devices: &[usize],
    free: f64,
    i: usize,
    ready: impl Fn(usize) -> f64,
) -> Option<(f64, f64, usize)> {
    let cost = state.cost;
    let g = cost.group_of(i);
    let placed = state.group_dev[g];
    let kernels = cost.group_devices(g);
    let need = cost.group_memory(g);
    let mut best: Option<(f64, f64, usize)> = None;
    for &d in devices {
        let ok = match placed {
            NONE => kernels[d] && need <= state.mem_left[d],
            p => p as usize == d,
        };
        if !ok {
            continue;
        }
        let start = free.max(ready(d));
        let finish = start + cost.op_time(i, d);
        if best.is_none_or(|(bs, bf, _)| start < bs || (start == bs && finish < bf)) {
            best = Some((start, finish, d));
        }
    }
    best
}

/// A ready op's best pair: min-heap by start, then rank (high first), then topological
/// position, then finish.
#[derive(Clone, Copy, Debug)]
struct Candidate {
    start: f64,
    rank: f64,
    pos: u32,
    node: u32,
    finish: f64,
    device: usize,
    line: usize,
}

impl Candidate {
    fn order(&self, other: &Self) -> Ordering {
        self.start
            .total_cmp(&other.start)
            .then(other.rank.total_cmp(&self.rank))
            .then(self.pos.cmp(&other.pos))
            .then(self.finish.total_cmp(&other.finish))
    }
}

impl PartialEq for Candidate {
    fn eq(&self, other: &Self) -> bool {
        self.order(other) == Ordering::Equal
    }
}
impl Eq for Candidate {}
impl PartialOrd for Candidate {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Candidate {
    /// Reversed, so that `BinaryHeap` pops the earliest pair.
    fn cmp(&self, other: &Self) -> Ordering {
        other.order(self)
    }
}

/// One timeline: its devices and its lanes' free times.
struct Timeline {
    devices: Vec<usize>,
    lanes: Vec<f64>,
    /// Earliest free lane.
    free: f64,
}

/// The best pair of ready op `i` over every timeline now (ties: the first timeline and device),
/// or `None` if no device may take it. `ready_at` is scratch, one slot per device.
fn best_pair(
    state: &State<'_>,
    lines: &[Timeline],
    i: usize,
    rank: f64,
    pos: u32,
    ready_at: &mut [f64],
) -> Option<Candidate> {
    state.data_ready_all(i, ready_at);
    let mut best: Option<Candidate> = None;
    for (t, line) in lines.iter().enumerate() {
        let Some((start, finish, device)) =
            best_with(state, &line.devices, line.free, i, |d| ready_at[d])
        else {
            continue;
        };
        if best.is_none_or(|b| start < b.start || (start == b.start && finish < b.finish)) {
            best = Some(Candidate {
                start,
                rank,
                pos,
                node: i as u32,
                finish,
                device,
                line: t,
            });
        }
    }
    best
}

/// Runs m-ETF and returns its schedule.
///
/// # Errors
/// [`Error::Infeasible`](crate::Error::Infeasible) naming a group that fits on no device (kernels
/// or memory).
pub fn etf_schedule(graph: &OpGraph, cluster: &Cluster, cost: &CostModel) -> Result<Schedule> {
    let mut state = State::new(graph, cluster, cost)?;
    let dag = cost.dag();
    let n = cost.num_nodes();
    let nd = cost.num_devices();
    let rank = upward_ranks(cost);
    let (tl, base) = timelines(cost);
    let mut lines: Vec<Timeline> = (0..base.len() - 1)
        .map(|t| Timeline {
            devices: Vec::new(),
            lanes: vec![0.0; base[t + 1] - base[t]],
            free: 0.0,
        })
        .collect();
    for d in 0..nd {
        lines[tl[d]].devices.push(d);
    }
    let mut ready_at = vec![0.0f64; nd];
    let mut pending: Vec<u32> = (0..n).map(|i| dag.preds(i).len() as u32).collect();
    let mut heap: BinaryHeap<Candidate> = BinaryHeap::new();
    let mut ready: Vec<u32> = dag
        .topo()
        .iter()
        .copied()
        .filter(|&i| pending[i as usize] == 0)
        .collect();
    ready.reverse();
    loop {
        // Float free ops; key the others by their best pair.
        while let Some(id) = ready.pop() {
            let i = id as usize;
            if state.should_float(i) {
                state.float(i);
                for e in dag.succs(i) {
                    let c = e.node as usize;
                    pending[c] -= 1;
                    if pending[c] == 0 {
                        ready.push(c as u32);
                    }
                }
                continue;
            }
            let pos = dag.position(i) as u32;
            match best_pair(&state, &lines, i, rank[i], pos, &mut ready_at) {
                Some(c) => heap.push(c),
                None => return Err(state.no_device(i)),
            }
        }
        let Some(top) = heap.pop() else {
            break;
        };
        let i = top.node as usize;
        // Memory only shrinks and groups only get pinned, so an op no device may take now never
        // finds one.
        let Some(c) = best_pair(&state, &lines, i, top.rank, top.pos, &mut ready_at) else {
            return Err(state.no_device(i));
        };
        if c.order(&top) != Ordering::Equal {
            heap.push(c);
            continue;
        }
        let line = &mut lines[c.line];
        let lane = line
            .lanes
            .iter()
            .enumerate()
            .min_by(|a, b| a.1.total_cmp(b.1))
            .map_or(0, |(l, _)| l);
        line.lanes[lane] = c.finish;
        line.free = line.lanes.iter().copied().fold(f64::INFINITY, f64::min);
        state.commit(i, c.device, c.start, c.finish)?;
        state.newly_placed.clear();
        for e in dag.succs(i) {
            let s = e.node as usize;
            pending[s] -= 1;
            if pending[s] == 0 {
                ready.push(s as u32);
            }
        }
    }
    state.finish_groups()
}

/// The `etf` strategy (m-ETF).
#[derive(Debug, Clone, Copy, Default)]
pub struct Etf;

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
        Ok(Placement::from_groups(
            self.name(),
            graph,
            cluster,
            &s.group_device,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::tests::{cluster, graph, model};

    #[test]
    fn etf_starts_the_earliest_pair_first() {
        // Fork: t0 (1 s) → t1 (4 s), t2 (1 s), t3 (1 s); 2 devices; transfers 0.5 s.
        let g = graph(4, &[(0, 1, 1), (0, 2, 1), (0, 3, 1)]);
        let c = cluster(2, 0.5, f64::MAX);
        let m = model(&g, &c, &[[1.0, 1.0], [4.0, 4.0], [1.0, 1.0], [1.0, 1.0]]);
        let s = etf_schedule(&g, &c, &m).unwrap();
        // t0 on dev 0 at 0. At 1, dev 0 can start at 1 and dev 1 at 1.5: t1 (highest rank) starts
        // first on dev 0 at 1; then t2 on dev 1 at 1.5 (vs dev 0 at 5), t3 on dev 1 at 2.5.
        assert_eq!(s.device, vec![0, 0, 1, 1]);
        assert_eq!(s.start, vec![0.0, 1.0, 1.5, 2.5]);
        assert_eq!(s.makespan, 5.0);
    }
}

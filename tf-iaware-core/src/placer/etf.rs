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
mod by_timeline {
    use super::*;

    /// An op waiting for its inputs on a timeline: min-heap by arrival, then rank (high first), then
    /// topological position.
    #[derive(Clone, Copy, Debug)]
    struct Waiting {
        arrival: f64,
        rank: f64,
        pos: u32,
        node: NodeId,
    }

    impl PartialEq for Waiting {
        fn eq(&self, other: &Self) -> bool {
            self.cmp(other) == Ordering::Equal
        }
    }
    impl Eq for Waiting {}
    impl PartialOrd for Waiting {
        fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
            Some(self.cmp(other))
        }
    }
    impl Ord for Waiting {
        fn cmp(&self, other: &Self) -> Ordering {
            other
                .arrival
                .total_cmp(&self.arrival)
                .then(self.rank.total_cmp(&other.rank))
                .then(other.pos.cmp(&self.pos))
        }
    }

    /// An op whose inputs are on a timeline by the time it is free: max-heap by rank, then
    /// topological position (early first).
    #[derive(Clone, Copy, Debug)]
    struct Arrived {
        rank: f64,
        pos: u32,
        node: NodeId,
    }

    impl PartialEq for Arrived {
        fn eq(&self, other: &Self) -> bool {
            self.cmp(other) == Ordering::Equal
        }
    }
    impl Eq for Arrived {}
    impl PartialOrd for Arrived {
        fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
            Some(self.cmp(other))
        }
    }
    impl Ord for Arrived {
        fn cmp(&self, other: &Self) -> Ordering {
            self.rank
                .total_cmp(&other.rank)
                .then(other.pos.cmp(&self.pos))
        }
    }

    /// One timeline: its lanes' free times and its two queues.
    struct Timeline {
        devices: Vec<DeviceId>,
        lanes: Vec<f64>,
        /// Earliest free lane.
        free: f64,
        waiting: BinaryHeap<Waiting>,
        arrived: BinaryHeap<Arrived>,
    }

    /// Best (start, finish, device) of ready op `i` on `devices` (one timeline, free at `free`), or
    /// `None` if none of them may take it now. Computed afresh: a producer that floated may have
    /// got a device since the last look.
    fn best_on(
        state: &State<'_>,
        devices: &[DeviceId],
        free: f64,
        i: NodeId,
    ) -> Option<(f64, f64, DeviceId)> {
        let cost = state.cost;
        let preds = cost.dag().preds(i);
        best_with(state, devices, free, i, |d| {
            let mut ready = 0.0f64;
            for e in preds {
                let p = e.node;
                let arrive = match state.node_dev[p] {
                    NONE => state.finish[p],
                    pd => {
                        state.finish[p] + cost.transfer_time(e.bytes, DeviceId::new(pd as usize), d)
                    }
                };
                ready = ready.max(arrive);
            }
            ready
        })
    }

    /// A timeline's best pair: start, rank, topological position, node, finish, device.
    #[derive(Clone, Copy, Debug, PartialEq)]
    struct Candidate {
        start: f64,
        rank: f64,
        pos: u32,
        node: NodeId,
        finish: f64,
        device: DeviceId,
    }

    impl Candidate {
        /// Whether `self` goes before `other`: earlier start, then higher rank, then earlier
        /// position, then earlier finish.
        fn before(&self, other: &Candidate) -> bool {
            self.start
                .total_cmp(&other.start)
                .then(other.rank.total_cmp(&self.rank))
                .then(self.pos.cmp(&other.pos))
                .then(self.finish.total_cmp(&other.finish))
                .is_lt()
        }
    }

    impl Timeline {
        /// Brings the queue tops up to date (arrived ops move over, entries of scheduled ops go,
        /// entries whose arrival grew are requeued) and returns the timeline's best pair.
        fn candidate(&mut self, state: &State<'_>, done: &[bool]) -> Option<Candidate> {
            loop {
                // Waiting ops whose (lower-bound) arrival is by the time the timeline is free.
                while let Some(&w) = self.waiting.peek() {
                    if done[w.node] {
                        self.waiting.pop();
                        continue;
                    }
                    if w.arrival > self.free {
                        // Validate the top: its true arrival may have grown.
                        match best_on(state, &self.devices, self.free, w.node) {
                            Some((start, finish, device)) if start == w.arrival => {
                                if self.arrived.is_empty() {
                                    return Some(Candidate {
                                        start,
                                        rank: w.rank,
                                        pos: w.pos,
                                        node: w.node,
                                        finish,
                                        device,
                                    });
                                }
                                break;
                            }
                            Some((start, _, _)) => {
                                self.waiting.pop();
                                self.waiting.push(Waiting {
                                    arrival: start,
                                    ..w
                                });
                            }
                            None => {
                                self.waiting.pop();
                            }
                        }
                        continue;
                    }
                    self.waiting.pop();
                    self.arrived.push(Arrived {
                        rank: w.rank,
                        pos: w.pos,
                        node: w.node,
                    });
                }
                let a = *self.arrived.peek()?;
                if done[a.node] {
                    self.arrived.pop();
                    continue;
                }
                match best_on(state, &self.devices, self.free, a.node) {
                    Some((start, finish, device)) if start <= self.free => {
                        return Some(Candidate {
                            start,
                            rank: a.rank,
                            pos: a.pos,
                            node: a.node,
                            finish,
                            device,
                        })
                    }
                    Some((start, _, _)) => {
                        // Its inputs now arrive later (a floating producer got a device).
                        self.arrived.pop();
                        self.waiting.push(Waiting {
                            arrival: start,
                            rank: a.rank,
                            pos: a.pos,
                            node: a.node,
                        });
                    }
                    None => {
                        self.arrived.pop();
                    }
                }
            }
        }

        /// Drops the entries of scheduled ops.
        fn compact(&mut self, done: &[bool]) {
            self.waiting.retain(|w| !done[w.node]);
            self.arrived.retain(|a| !done[a.node]);
        }
    }

    /// The per-timeline scheduler's bookkeeping between steps.
    struct Queues {
        lines: Vec<Timeline>,
        /// Upward rank of every node.
        rank: Vec<f64>,
        done: Vec<bool>,
        /// Unscheduled predecessors of every node.
        pending: Vec<u32>,
        /// Ops whose predecessors are all scheduled, not yet queued.
        ready: Vec<NodeId>,
        /// Scratch: when the op being queued has its inputs on each device.
        ready_at: Vec<f64>,
        /// Each timeline's best pair while nothing it depends on has changed.
        cache: Vec<Option<Candidate>>,
        valid: Vec<bool>,
        /// Ready ops not yet scheduled.
        queued: usize,
        /// Queue entries in all (for compaction).
        entries: usize,
    }

    impl Queues {
        fn new(cost: &CostModel) -> Self {
            let dag = cost.dag();
            let (tl, base) = timelines(cost);
            let lines: Vec<Timeline> = (0..base.len() - 1)
                .map(|t| Timeline {
                    devices: cost.device_ids().filter(|&d| tl[d] == t).collect(),
                    lanes: vec![0.0; base[t + 1] - base[t]],
                    free: 0.0,
                    waiting: BinaryHeap::new(),
                    arrived: BinaryHeap::new(),
                })
                .collect();
            let pending: Vec<u32> = cost.node_ids().map(|i| dag.preds(i).len() as u32).collect();
            let mut ready: Vec<NodeId> = dag
                .topo()
                .iter()
                .copied()
                .filter(|&i| pending[i] == 0)
                .collect();
            ready.reverse();
            Queues {
                cache: vec![None; lines.len()],
                valid: vec![false; lines.len()],
                lines,
                rank: upward_ranks(cost),
                done: vec![false; cost.num_nodes()],
                pending,
                ready,
                ready_at: vec![0.0f64; cost.num_devices()],
                queued: 0,
                entries: 0,
            }
        }

        /// Marks `i`'s successors' input from `i` as there; those with all their inputs become
        /// ready.
        fn release(&mut self, cost: &CostModel, i: NodeId) {
            for e in cost.dag().succs(i) {
                let c = e.node;
                self.pending[c] -= 1;
                if self.pending[c] == 0 {
                    self.ready.push(c);
                }
            }
        }

        /// Floats the ready free ops; queues the others on every timeline that may take them.
        ///
        /// # Errors
        /// An op no device may take.
        fn enqueue_ready(&mut self, state: &mut State<'_>) -> Result<()> {
            let cost = state.cost;
            while let Some(i) = self.ready.pop() {
                if state.should_float(i) {
                    state.float(i);
                    self.done[i] = true;
                    self.release(cost, i);
                    continue;
                }
                if !self.enqueue(state, i) {
                    return Err(state.no_device(i));
                }
                self.queued += 1;
            }
            Ok(())
        }

        /// Queues ready op `i` on every timeline that may take it; whether any may.
        fn enqueue(&mut self, state: &State<'_>, i: NodeId) -> bool {
            let mut anywhere = false;
            state.data_ready_all(i, &mut self.ready_at);
            let ready_at = &self.ready_at;
            for (t, line) in self.lines.iter_mut().enumerate() {
                let Some((start, finish, device)) =
                    best_with(state, &line.devices, line.free, i, |d| ready_at[d])
                else {
                    continue;
                };
                anywhere = true;
                self.entries += 1;
                let here = Candidate {
                    start,
                    rank: self.rank[i],
                    pos: state.cost.dag().position(i) as u32,
                    node: i,
                    finish,
                    device,
                };
                if start <= line.free {
                    line.arrived.push(Arrived {
                        rank: here.rank,
                        pos: here.pos,
                        node: i,
                    });
                } else {
                    line.waiting.push(Waiting {
                        arrival: start,
                        rank: here.rank,
                        pos: here.pos,
                        node: i,
                    });
                }
                // A valid cached best stays valid unless the new op beats it.
                if self.valid[t] && self.cache[t].is_none_or(|c| here.before(&c)) {
                    self.cache[t] = Some(here);
                }
            }
            anywhere
        }

        /// The best pair over every timeline, and its timeline.
        fn best(&mut self, state: &State<'_>) -> Option<(Candidate, usize)> {
            let mut best: Option<(Candidate, usize)> = None;
            for (t, line) in self.lines.iter_mut().enumerate() {
                if !self.valid[t] {
                    self.cache[t] = line.candidate(state, &self.done);
                    self.valid[t] = true;
                }
                if let Some(c) = self.cache[t] {
                    if best.is_none_or(|(b, _)| c.before(&b)) {
                        best = Some((c, t));
                    }
                }
            }
            best
        }

        /// A ready op no timeline may take (memory ran out).
        fn stuck(&self, cost: &CostModel) -> NodeId {
            cost.node_ids()
                .find(|&i| !self.done[i] && self.pending[i] == 0)
                .unwrap_or(NodeId::new(0))
        }

        /// Schedules pair `c` on timeline `t`.
        ///
        /// # Errors
        /// As [`State::commit`].
        fn take(&mut self, state: &mut State<'_>, c: Candidate, t: usize) -> Result<()> {
            let cost = state.cost;
            let i = c.node;
            let line = &mut self.lines[t];
            let lane = line
                .lanes
                .iter()
                .enumerate()
                .min_by(|a, b| a.1.total_cmp(b.1))
                .map_or(0, |(l, _)| l);
            line.lanes[lane] = c.finish;
            line.free = line.lanes.iter().copied().fold(f64::INFINITY, f64::min);
            self.done[i] = true;
            self.queued -= 1;
            let g = cost.group_of(i);
            let group_was_free = state.group_dev[g] == NONE;
            state.commit(i, c.device, c.start, c.finish)?;
            // What changed: this timeline's clock and memory; the feasibility of the group's
            // other members; with floating producers placed, memory and arrivals anywhere.
            self.valid[t] = false;
            let adopted = !state.newly_placed.is_empty();
            state.newly_placed.clear();
            for (u, cached) in self.cache.iter().enumerate() {
                let hit = cached
                    .is_some_and(|x| x.node == i || (group_was_free && cost.group_of(x.node) == g));
                if adopted || hit {
                    self.valid[u] = false;
                }
            }
            self.compact_if_due();
            self.release(cost, i);
            Ok(())
        }

        /// Entries of scheduled ops are dropped when they reach a top; sweeps them when they
        /// outnumber the live ones.
        fn compact_if_due(&mut self) {
            if self.entries > 4 * (self.queued + 16) * self.lines.len() {
                for line in &mut self.lines {
                    line.compact(&self.done);
                }
                self.entries = self
                    .lines
                    .iter()
                    .map(|l| l.waiting.len() + l.arrived.len())
                    .sum();
            }
        }
    }

    /// m-ETF with per-timeline queues.
    pub(super) fn schedule(
        graph: &OpGraph,
        cluster: &Cluster,
        cost: &CostModel,
    ) -> Result<Schedule> {
        let mut state = State::new(graph, cluster, cost)?;
        let mut queues = Queues::new(cost);
        loop {
            queues.enqueue_ready(&mut state)?;
            if queues.queued == 0 {
                break;
            }
            let Some((c, t)) = queues.best(&state) else {
                return Err(state.no_device(queues.stuck(cost)));
            };
            queues.take(&mut state, c, t)?;
        }
        state.finish_groups()
    }
}

/// m-ETF with one lazy heap of ready ops (see the module docs).
mod by_op {
    use super::*;

    /// A ready op's best pair: min-heap by start, then rank (high first), then topological
    /// position, then finish.
    #[derive(Clone, Copy, Debug)]
    struct Candidate {
        start: f64,
        rank: f64,
        pos: u32,
        node: NodeId,
        finish: f64,
        device: DeviceId,
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
        devices: Vec<DeviceId>,
        lanes: Vec<f64>,
        /// Earliest free lane.
        free: f64,
    }

    /// The best pair of ready op `i` over every timeline now (ties: the first timeline and device),
    /// or `None` if no device may take it. `ready_at` is scratch, one slot per device.
    fn best_pair(
        state: &State<'_>,
        lines: &[Timeline],
        i: NodeId,
        rank: f64,
        pos: u32,
        ready_at: &mut [f64],
    ) -> Option<Candidate> {
        state.data_ready_all(i, ready_at);
        let cost = state.cost;
        let g = cost.group_of(i);
        let placed = state.group_dev[g];
        let kernels = cost.group_devices(g);
        let need = cost.group_memory(g);
        // As `best_with` over each timeline in turn, inline: the op is priced only where it
        // could start no later than the best so far.
        let mut best: Option<Candidate> = None;
        for (t, line) in lines.iter().enumerate() {
            for &d in &line.devices {
                let ok = match placed {
                    NONE => kernels[d] && need <= state.mem_left[d],
                    p => p as usize == d.index(),
                };
                if !ok {
                    continue;
                }
                let start = line.free.max(ready_at[d]);
                if best.is_some_and(|b| start > b.start) {
                    continue;
                }
                let finish = start + cost.op_time(i, d);
                if best.is_none_or(|b| start < b.start || (start == b.start && finish < b.finish)) {
                    best = Some(Candidate {
                        start,
                        rank,
                        pos,
                        node: i,
                        finish,
                        device: d,
                        line: t,
                    });
                }
            }
        }
        best
    }

    /// m-ETF with one lazy heap of ready ops.
    pub(super) fn schedule(
        graph: &OpGraph,
        cluster: &Cluster,
        cost: &CostModel,
    ) -> Result<Schedule> {
        let mut state = State::new(graph, cluster, cost)?;
        let dag = cost.dag();
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
        for d in cost.device_ids() {
            lines[tl[d]].devices.push(d);
        }
        let mut ready_at = vec![0.0f64; nd];
        let mut pending: Vec<u32> = cost.node_ids().map(|i| dag.preds(i).len() as u32).collect();
        let mut heap: BinaryHeap<Candidate> = BinaryHeap::new();
        let mut ready: Vec<NodeId> = dag
            .topo()
            .iter()
            .copied()
            .filter(|&i| pending[i] == 0)
            .collect();
        ready.reverse();
        loop {
            // Float free ops; key the others by their best pair.
            while let Some(id) = ready.pop() {
                let i = id;
                if state.should_float(i) {
                    state.float(i);
                    for e in dag.succs(i) {
                        let c = e.node;
                        pending[c] -= 1;
                        if pending[c] == 0 {
                            ready.push(c);
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
            let i = top.node;
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
                let s = e.node;
                pending[s] -= 1;
                if pending[s] == 0 {
                    ready.push(s);
                }
            }
        }
        state.finish_groups()
    }
}

/// The `etf` strategy (m-ETF).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Etf;

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
        Placement::from_groups(self.name(), graph, cluster, &s.group_device)
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

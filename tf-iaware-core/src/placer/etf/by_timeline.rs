//! m-ETF with the ready ops queued on every timeline (see the module docs of [`etf`](super)).

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
                pd => state.finish[p] + cost.transfer_time(e.bytes, DeviceId::new(pd as usize), d),
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
pub(super) fn schedule(graph: &OpGraph, cluster: &Cluster, cost: &CostModel) -> Result<Schedule> {
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

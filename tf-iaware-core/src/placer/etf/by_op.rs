//! m-ETF with one lazy heap of ready ops (see the module docs of [`etf`](super)).

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
pub(super) fn schedule(graph: &OpGraph, cluster: &Cluster, cost: &CostModel) -> Result<Schedule> {
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

//! The discrete-event engine behind [`simulate`]: events in time order, ops queued per device
//! and sharing their compute pool, transfers sharing their link (see the module docs of
//! [`sim`](super)).

use std::cmp::Ordering;
use std::collections::{BinaryHeap, HashMap};

use super::{OpRun, SimResult, TransferRun};
use crate::cluster::DeviceId;
use crate::cost::CostModel;
use crate::error::{Error, Result};
use crate::graph::NodeId;

/// A totally ordered f64 (times are never NaN here).
#[derive(Clone, Copy, Debug, PartialEq)]
struct Time(f64);

impl Eq for Time {}
impl PartialOrd for Time {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Time {
    fn cmp(&self, other: &Self) -> Ordering {
        self.0.total_cmp(&other.0)
    }
}

/// What happens at an event: an op ends, a transfer's latency is over, a link's next transfer
/// ends, or a compute pool's next op ends (the last two if the version still matches).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Ev {
    Op(u32),
    Latency(u32),
    Channel(u32, u32),
    Pool(u32, u32),
}

/// Min-heap entry: earliest time first, then issue order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Event {
    time: Time,
    seq: u64,
    ev: Ev,
}

impl PartialOrd for Event {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Event {
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .time
            .cmp(&self.time)
            .then_with(|| other.seq.cmp(&self.seq))
    }
}

/// A capacity shared equally by the jobs on it (processor sharing with a virtual clock: `virt`
/// grows at `min(rate / active, cap)` units per second, and a job ends when `virt` reaches its
/// tag). A link (bytes/s, jobs are transfers, no cap) or a compute pool (as many seconds of work
/// per second as it has cores, jobs are ops, each at most at full speed).
#[derive(Debug)]
struct Shared {
    rate: f64,
    /// Most units per second one job gets.
    cap: f64,
    virt: f64,
    last: f64,
    active: u32,
    version: u32,
    /// (tag, job id), smallest tag first.
    pending: BinaryHeap<std::cmp::Reverse<(Time, u32)>>,
}

impl Shared {
    fn new(rate: f64, cap: f64, now: f64) -> Self {
        Shared {
            rate,
            cap,
            virt: 0.0,
            last: now,
            active: 0,
            version: 0,
            pending: BinaryHeap::new(),
        }
    }

    /// Units per second each active job gets now.
    fn per_job(&self) -> f64 {
        (self.rate / self.active.max(1) as f64).min(self.cap)
    }

    fn advance(&mut self, now: f64) {
        if self.active > 0 {
            self.virt += (now - self.last) * self.per_job();
        }
        self.last = now;
    }

    /// Adds job `id` needing `amount` units.
    fn join(&mut self, id: u32, amount: f64, now: f64) {
        self.advance(now);
        if self.active == 0 {
            self.virt = 0.0;
        }
        self.pending
            .push(std::cmp::Reverse((Time(self.virt + amount), id)));
        self.active += 1;
    }

    /// When the next job ends, with the version that event must carry.
    fn next_end(&mut self, now: f64) -> Option<(f64, u32)> {
        self.version = self.version.wrapping_add(1);
        let std::cmp::Reverse((tag, _)) = self.pending.peek()?;
        let when = now + (tag.0 - self.virt).max(0.0) / self.per_job();
        Some((when, self.version))
    }

    /// Moves the jobs that end now (the event for `version`) into `done`.
    fn take_done(&mut self, version: u32, now: f64, done: &mut Vec<u32>) {
        if self.version != version {
            return;
        }
        self.advance(now);
        // The event was scheduled for the smallest tag: that job is done whatever rounding left
        // in `virt`; so is any other within rounding of the same point.
        if let Some(std::cmp::Reverse((tag, _))) = self.pending.peek() {
            self.virt = self.virt.max(tag.0);
        }
        while let Some(&std::cmp::Reverse((tag, id))) = self.pending.peek() {
            if tag.0 - self.virt > 1e-9 * tag.0.max(1.0) {
                break;
            }
            self.pending.pop();
            self.active -= 1;
            done.push(id);
        }
        if self.active == 0 {
            self.virt = 0.0;
        }
    }
}

struct Sim<'a> {
    cost: &'a CostModel,
    assign: &'a [DeviceId],
    events: BinaryHeap<Event>,
    seq: u64,
    pending: Vec<u32>,
    free_lanes: Vec<u32>,
    /// Per device: ready ops by (ready time, topological position, node).
    queues: Vec<BinaryHeap<std::cmp::Reverse<(Time, u32, u32)>>>,
    touched: Vec<DeviceId>,
    is_touched: Vec<bool>,
    channels: Vec<Shared>,
    channel_of: ChannelIndex,
    pools: Vec<Shared>,
    /// Scratch for transfers finishing together.
    done: Vec<u32>,
    result: SimResult,
}

/// Channel of each ordered device pair: a dense table for clusters up to [`DENSE_DEVICES`]
/// devices, beyond a hash map of the pairs a step uses (at most one per transfer), so the
/// simulator's memory stays linear in devices and ops.
enum ChannelIndex {
    Dense { n: usize, table: Vec<u32> },
    Sparse(HashMap<(u32, u32), u32>),
}

/// Largest cluster whose channel table is dense (64² × 4 bytes = 16 KiB).
const DENSE_DEVICES: usize = 64;

impl ChannelIndex {
    fn new(n: usize) -> Self {
        if n <= DENSE_DEVICES {
            ChannelIndex::Dense {
                n,
                table: vec![u32::MAX; n * n],
            }
        } else {
            ChannelIndex::Sparse(HashMap::new())
        }
    }

    fn get(&self, from: DeviceId, to: DeviceId) -> Option<u32> {
        let (from, to) = (from.index(), to.index());
        match self {
            ChannelIndex::Dense { n, table } => {
                Some(table[from * n + to]).filter(|&c| c != u32::MAX)
            }
            ChannelIndex::Sparse(m) => m.get(&(from as u32, to as u32)).copied(),
        }
    }

    fn insert(&mut self, from: DeviceId, to: DeviceId, c: u32) {
        let (from, to) = (from.index(), to.index());
        match self {
            ChannelIndex::Dense { n, table } => table[from * *n + to] = c,
            ChannelIndex::Sparse(m) => {
                m.insert((from as u32, to as u32), c);
            }
        }
    }
}

impl Sim<'_> {
    fn push(&mut self, time: f64, ev: Ev) {
        self.seq += 1;
        self.events.push(Event {
            time: Time(time),
            seq: self.seq,
            ev,
        });
    }

    fn touch(&mut self, d: DeviceId) {
        if !self.is_touched[d] {
            self.is_touched[d] = true;
            self.touched.push(d);
        }
    }

    fn ready(&mut self, node: NodeId, now: f64) {
        let d = self.assign[node];
        let pos = self.cost.dag().position(node) as u32;
        self.queues[d].push(std::cmp::Reverse((Time(now), pos, node.index() as u32)));
        self.touch(d);
    }

    fn deliver(&mut self, node: NodeId, now: f64) {
        self.pending[node] -= 1;
        if self.pending[node] == 0 {
            self.ready(node, now);
        }
    }

    fn dispatch(&mut self, now: f64) {
        while let Some(d) = self.touched.pop() {
            self.is_touched[d] = false;
            while self.free_lanes[d] > 0 {
                let Some(std::cmp::Reverse((_, _, node))) = self.queues[d].pop() else {
                    break;
                };
                let node = NodeId::new(node as usize);
                self.free_lanes[d] -= 1;
                let dur = self.cost.op_time(node, d);
                self.result.busy[d] += dur;
                self.result.ops[node] = OpRun {
                    device: d,
                    start: now,
                    end: now + dur,
                };
                match self.cost.pool(d) {
                    Some(p) if dur > 0.0 => {
                        self.pools[p].join(node.index() as u32, dur, now);
                        self.schedule_pool(p as u32, now);
                    }
                    _ => self.push(now + dur, Ev::Op(node.index() as u32)),
                }
            }
        }
    }

    fn op_done(&mut self, node: NodeId, now: f64) {
        let d = self.assign[node];
        self.free_lanes[d] += 1;
        self.touch(d);
        let first_transfer = self.result.transfers.len();
        let cost = self.cost;
        for e in cost.dag().succs(node) {
            let c = e.node;
            let dc = self.assign[c];
            if dc == d {
                self.deliver(c, now);
                continue;
            }
            let exists = self.result.transfers[first_transfer..]
                .iter()
                .any(|t| t.output == e.output && t.to == dc);
            if exists {
                continue;
            }
            let tid = self.result.transfers.len() as u32;
            self.result.transfers.push(TransferRun {
                producer: node,
                output: e.output,
                from: d,
                to: dc,
                bytes: e.bytes,
                start: now,
                end: f64::NAN,
            });
            let latency = cost.link(d, dc).latency;
            if latency > 0.0 {
                self.push(now + latency, Ev::Latency(tid));
            } else {
                self.join(tid, now);
            }
        }
    }

    fn join(&mut self, tid: u32, now: f64) {
        let t = self.result.transfers[tid as usize];
        if t.bytes == 0 {
            self.complete(tid, now);
            return;
        }
        let ch = match self.channel_of.get(t.from, t.to) {
            Some(c) => c,
            None => {
                let c = self.channels.len() as u32;
                self.channels.push(Shared::new(
                    self.cost.link(t.from, t.to).bandwidth,
                    f64::INFINITY,
                    now,
                ));
                self.channel_of.insert(t.from, t.to, c);
                c
            }
        };
        self.channels[ch as usize].join(tid, t.bytes as f64, now);
        self.schedule_channel(ch, now);
    }

    fn schedule_channel(&mut self, ch: u32, now: f64) {
        if let Some((when, version)) = self.channels[ch as usize].next_end(now) {
            self.push(when, Ev::Channel(ch, version));
        }
    }

    fn schedule_pool(&mut self, p: u32, now: f64) {
        if let Some((when, version)) = self.pools[p as usize].next_end(now) {
            self.push(when, Ev::Pool(p, version));
        }
    }

    fn channel_done(&mut self, ch: u32, version: u32, now: f64) {
        let mut done = std::mem::take(&mut self.done);
        self.channels[ch as usize].take_done(version, now, &mut done);
        if done.is_empty() {
            self.done = done;
            return;
        }
        for &tid in &done {
            self.complete(tid, now);
        }
        done.clear();
        self.done = done;
        self.schedule_channel(ch, now);
    }

    fn pool_done(&mut self, p: u32, version: u32, now: f64) {
        let mut done = std::mem::take(&mut self.done);
        self.pools[p as usize].take_done(version, now, &mut done);
        if done.is_empty() {
            self.done = done;
            return;
        }
        for &node in &done {
            self.result.ops[node as usize].end = now;
            self.op_done(NodeId::new(node as usize), now);
        }
        done.clear();
        self.done = done;
        self.schedule_pool(p, now);
    }

    fn complete(&mut self, tid: u32, now: f64) {
        let t = &mut self.result.transfers[tid as usize];
        t.end = now;
        let (producer, output, to, bytes) = (t.producer, t.output, t.to, t.bytes);
        self.result.bytes_moved += bytes;
        let cost = self.cost;
        for e in cost.dag().succs(producer) {
            let c = e.node;
            if e.output == output && self.assign[c] == to {
                self.deliver(c, now);
            }
        }
    }
}

/// Simulates one step of the cost model's graph with op `i` on device `assignment[i]`.
///
/// # Errors
/// [`Error::InvalidArgument`] if `assignment` does not have one device per op or names a device
/// the cost model's cluster does not have (an id of a larger cluster).
pub fn simulate(cost: &CostModel, assignment: &[DeviceId]) -> Result<SimResult> {
    let n = cost.num_nodes();
    let nd = cost.num_devices();
    if assignment.len() != n {
        return Err(Error::InvalidArgument {
            what: "simulated assignment".into(),
            reason: format!("has {} devices for a graph of {n} ops", assignment.len()),
        });
    }
    if let Some((i, &d)) = assignment
        .iter()
        .enumerate()
        .find(|(_, &d)| d.index() >= nd)
    {
        return Err(Error::InvalidArgument {
            what: "simulated assignment".into(),
            reason: format!("op {i} is on device {d}, but the cluster has {nd}"),
        });
    }
    let dag = cost.dag();
    let mut sim = Sim {
        cost,
        assign: assignment,
        events: BinaryHeap::with_capacity(nd * 4 + 16),
        seq: 0,
        pending: NodeId::range(n)
            .map(|i| dag.preds(i).len() as u32)
            .collect(),
        free_lanes: cost.device_ids().map(|d| cost.lanes(d) as u32).collect(),
        queues: (0..nd).map(|_| BinaryHeap::new()).collect(),
        touched: Vec::with_capacity(nd),
        is_touched: vec![false; nd],
        channels: Vec::new(),
        channel_of: ChannelIndex::new(nd),
        pools: (0..cost.num_pools())
            .map(|p| Shared::new(cost.pool_capacity(p), 1.0, 0.0))
            .collect(),
        done: Vec::new(),
        result: SimResult {
            step_time: 0.0,
            busy: vec![0.0; nd],
            bytes_moved: 0,
            ops: vec![OpRun::default(); n],
            transfers: Vec::new(),
        },
    };
    for &id in dag.topo() {
        if sim.pending[id] == 0 {
            sim.ready(id, 0.0);
        }
    }
    sim.dispatch(0.0);
    while let Some(first) = sim.events.pop() {
        let now = first.time.0;
        let mut next = Some(first);
        // Everything that happens at `now` before any device picks its next op.
        while let Some(ev) = next {
            match ev.ev {
                Ev::Op(node) => sim.op_done(NodeId::new(node as usize), now),
                Ev::Latency(tid) => sim.join(tid, now),
                Ev::Channel(ch, version) => sim.channel_done(ch, version, now),
                Ev::Pool(p, version) => sim.pool_done(p, version, now),
            }
            next = match sim.events.peek() {
                Some(e) if e.time.0 == now => sim.events.pop(),
                _ => None,
            };
        }
        sim.dispatch(now);
    }
    let mut result = sim.result;
    let done = sim.pending.iter().all(|&p| p == 0) && sim.queues.iter().all(BinaryHeap::is_empty);
    if !done {
        // Unreachable for an acyclic graph; report rather than return a wrong time.
        return Err(Error::InvalidArgument {
            what: "simulation".into(),
            reason: "some ops never became ready".into(),
        });
    }
    // The last op's or transfer's end, and the step's own time outside every op (a session's
    // round trip, where measurements recorded one).
    result.step_time = result
        .ops
        .iter()
        .map(|r| r.end)
        .chain(result.transfers.iter().map(|t| t.end))
        .fold(0.0, f64::max)
        + cost.step_overhead();
    Ok(result)
}

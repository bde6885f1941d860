//! What the list schedulers (HEFT, ETF) share: colocation groups as the unit of placement, device
//! memory, kernel eligibility, data-ready times, and *floating* free ops.
//!
//! A free op (a variable handle, a constant, a placeholder, a read — see
//! [`OpWork::free`](crate::cost::OpWork)) whose group has no device yet and whose inputs all float
//! too does not choose a device when it is scheduled: it floats, finishing when its inputs do, and
//! its group lands where its first costly consumer is placed (or, failing that, where a scheduled
//! member or neighbour is). Without this every variable would land on whichever device is idle at
//! time 0 and drag its consumers there.

use crate::cluster::{Cluster, DeviceId};
use crate::cost::CostModel;
use crate::error::{Error, Result};
use crate::graph::{GroupId, NodeId, OpGraph};

/// No device (yet).
pub(crate) const NONE: u32 = u32::MAX;

/// A schedule from a list scheduler: where and when every op runs.
#[derive(Clone, Debug, PartialEq)]
pub struct Schedule {
    /// Device of each colocation group.
    pub group_device: Vec<DeviceId>,
    /// Device of each op (that of its group).
    pub device: Vec<DeviceId>,
    /// Planned start of each op, seconds (floating free ops: when their inputs were ready).
    pub start: Vec<f64>,
    /// Planned end of each op, seconds.
    pub finish: Vec<f64>,
    /// Planned step time, seconds.
    pub makespan: f64,
}

fn fmt_bytes(b: u64) -> String {
    if b == u64::MAX {
        "unlimited".into()
    } else {
        format!("{b} bytes")
    }
}

/// Checks that every group has a device with kernels for all its members and enough memory to
/// hold it on an empty device.
///
/// # Errors
/// [`Error::Infeasible`] naming the first group that fits nowhere.
pub(crate) fn check_groups(graph: &OpGraph, cluster: &Cluster, cost: &CostModel) -> Result<()> {
    if cost.num_devices() == 0 {
        return Err(Error::Infeasible {
            group: "(all)".into(),
            reason: "the cluster has no devices".into(),
        });
    }
    for (g, group) in graph.enumerate_groups() {
        let allowed = cost.group_devices(g);
        if !allowed.contains(&true) {
            let mut kinds: Vec<String> = group
                .members
                .iter()
                .filter(|&&m| !graph.node(m).kernel_device_types.is_empty())
                .map(|&m| {
                    let n = graph.node(m);
                    format!("{} ({}): {}", n.name, n.op, n.kernel_list("/"))
                })
                .collect();
            kinds.truncate(4);
            return Err(Error::Infeasible {
                group: group.name.clone(),
                reason: format!(
                    "no device of the cluster has kernels for all of its {} ops (kernels: {})",
                    group.members.len(),
                    kinds.join(", ")
                ),
            });
        }
        let need = cost.group_memory(g);
        if need == 0 {
            continue;
        }
        // `allowed` has a device (checked above), and there is a device 0.
        let (best, most) = cost
            .device_ids()
            .filter(|&d| allowed[d])
            .map(|d| (d, cost.capacity(d).unwrap_or(u64::MAX)))
            .max_by_key(|&(_, c)| c)
            .unwrap_or((DeviceId::new(0), 0));
        if need > most {
            return Err(Error::Infeasible {
                group: group.name.clone(),
                reason: format!(
                    "needs {need} bytes of device memory but the largest device with its kernels \
                     (`{}`) holds {}",
                    cluster.devices[best].name,
                    fmt_bytes(most)
                ),
            });
        }
    }
    Ok(())
}

/// The timelines a list scheduler books ops on: a device with a capacity of its own has one
/// timeline with its lanes; the devices of a compute pool share one single-lane timeline (the pool
/// runs one op at full speed at a time, or several at a share of it). Returns the timeline of each
/// device and the first lane of each timeline (`lanes[t]..lanes[t + 1]`).
pub(crate) fn timelines(cost: &CostModel) -> (Vec<usize>, Vec<usize>) {
    let nd = cost.num_devices();
    let mut of_device = vec![0usize; nd];
    let mut count: Vec<usize> = Vec::with_capacity(nd);
    let mut of_pool = vec![usize::MAX; cost.num_pools()];
    for (d, t) in cost.device_ids().zip(of_device.iter_mut()) {
        *t = match cost.pool(d) {
            Some(p) if of_pool[p] != usize::MAX => of_pool[p],
            Some(p) => {
                of_pool[p] = count.len();
                count.push(1);
                of_pool[p]
            }
            None => {
                count.push(cost.lanes(d));
                count.len() - 1
            }
        };
    }
    let mut first = Vec::with_capacity(count.len() + 1);
    first.push(0usize);
    for c in count {
        first.push(first[first.len() - 1] + c);
    }
    (of_device, first)
}

/// Scheduling state shared by the list schedulers.
pub(crate) struct State<'a> {
    pub cost: &'a CostModel,
    graph: &'a OpGraph,
    cluster: &'a Cluster,
    pub group_dev: Vec<u32>,
    /// Free memory per device, bytes (`u64::MAX`: unlimited).
    pub mem_left: Vec<u64>,
    /// Device of each scheduled op (`NONE` while unscheduled or floating).
    pub node_dev: Vec<u32>,
    pub start: Vec<f64>,
    pub finish: Vec<f64>,
    pub floating: Vec<bool>,
    /// Floating members per group.
    floating_in: Vec<u32>,
    /// Floating ops that got a device since the caller last cleared this (their consumers'
    /// data-ready times changed).
    pub newly_placed: Vec<u32>,
}

impl<'a> State<'a> {
    /// Fresh state; checks that every group fits somewhere.
    ///
    /// # Errors
    /// [`Error::Infeasible`] from [`check_groups`].
    pub(crate) fn new(
        graph: &'a OpGraph,
        cluster: &'a Cluster,
        cost: &'a CostModel,
    ) -> Result<Self> {
        check_groups(graph, cluster, cost)?;
        let n = cost.num_nodes();
        Ok(State {
            cost,
            graph,
            mem_left: cost
                .device_ids()
                .map(|d| cost.capacity(d).unwrap_or(u64::MAX))
                .collect(),
            cluster,
            group_dev: vec![NONE; cost.num_groups()],
            node_dev: vec![NONE; n],
            start: vec![0.0; n],
            finish: vec![0.0; n],
            floating: vec![false; n],
            floating_in: vec![0; cost.num_groups()],
            newly_placed: Vec::new(),
        })
    }

    /// Whether group `g` (unplaced) can go to `d`: kernels and free memory.
    #[inline]
    pub(crate) fn group_fits(&self, g: GroupId, d: DeviceId) -> bool {
        self.cost.group_allowed(g, d) && self.cost.group_memory(g) <= self.mem_left[d]
    }

    /// When every input of `node` (all producers scheduled or floating) would be on each device,
    /// into `out` (one slot per device), seconds.
    #[inline]
    pub(crate) fn data_ready_all(&self, node: NodeId, out: &mut [f64]) {
        out.fill(0.0);
        for e in self.cost.dag().preds(node) {
            let p = e.node;
            let f = self.finish[p];
            match self.node_dev[p] {
                NONE => out.iter_mut().for_each(|t| *t = t.max(f)),
                pd => self
                    .cost
                    .links_from(DeviceId::new(pd as usize))
                    .max_arrivals(f, e.bytes as f64, out),
            }
        }
    }

    /// Whether `node` should float instead of taking a device (see the module docs).
    pub(crate) fn should_float(&self, node: NodeId) -> bool {
        self.cost.is_free(node)
            && self.group_dev[self.cost.group_of(node)] == NONE
            && self
                .cost
                .dag()
                .preds(node)
                .iter()
                .all(|e| e.output == crate::cost::CONTROL || self.floating[e.node.index()])
    }

    /// Floats `node`: it finishes when its inputs do.
    pub(crate) fn float(&mut self, node: NodeId) {
        let t = self
            .cost
            .dag()
            .preds(node)
            .iter()
            .map(|e| self.finish[e.node.index()])
            .fold(0.0, f64::max);
        self.floating[node] = true;
        self.floating_in[self.cost.group_of(node)] += 1;
        self.start[node] = t;
        self.finish[node] = t;
    }

    fn assign_group(&mut self, g: GroupId, d: DeviceId) {
        self.group_dev[g] = d.index() as u32;
        if self.mem_left[d] != u64::MAX {
            self.mem_left[d] -= self.cost.group_memory(g);
        }
        if self.floating_in[g] > 0 {
            self.floating_in[g] = 0;
            for &m in &self.graph.groups()[g].members {
                if self.floating[m] {
                    self.floating[m] = false;
                    self.node_dev[m] = d.index() as u32;
                    self.newly_placed.push(m.index() as u32);
                }
            }
        }
    }

    /// Schedules `node` on `d` from `start` to `finish`, placing its group there if it has no
    /// device yet, and pulls floating producers onto `d` (or, where their group does not fit
    /// there, onto the fitting device with the cheapest link to `d`).
    ///
    /// # Errors
    /// [`Error::Infeasible`] if a floating producer's group fits nowhere.
    pub(crate) fn commit(
        &mut self,
        node: NodeId,
        d: DeviceId,
        start: f64,
        finish: f64,
    ) -> Result<()> {
        let g = self.cost.group_of(node);
        if self.group_dev[g] == NONE {
            self.assign_group(g, d);
        }
        self.node_dev[node] = d.index() as u32;
        self.start[node] = start;
        self.finish[node] = finish;
        let mut stack: Vec<(NodeId, DeviceId, u64)> = Vec::new();
        let push_floating =
            |state: &Self, id: NodeId, target: DeviceId, stack: &mut Vec<(NodeId, _, u64)>| {
                for e in state.cost.dag().preds(id) {
                    let p = e.node;
                    if state.floating[p] && state.group_dev[state.cost.group_of(p)] == NONE {
                        stack.push((p, target, e.bytes));
                    }
                }
            };
        push_floating(self, node, d, &mut stack);
        while let Some((p, target, bytes)) = stack.pop() {
            let pg = self.cost.group_of(p);
            if self.group_dev[pg] != NONE {
                continue;
            }
            let dev = if self.group_fits(pg, target) {
                target
            } else {
                let best = self
                    .cost
                    .device_ids()
                    .filter(|&x| self.group_fits(pg, x))
                    .min_by(|&a, &b| {
                        self.cost
                            .transfer_time(bytes, a, target)
                            .total_cmp(&self.cost.transfer_time(bytes, b, target))
                    });
                match best {
                    Some(x) => x,
                    None => return Err(self.no_device(p)),
                }
            };
            self.assign_group(pg, dev);
            push_floating(self, p, dev, &mut stack);
        }
        Ok(())
    }

    /// The error for op `node` whose group fits on no device any more.
    pub(crate) fn no_device(&self, node: NodeId) -> Error {
        let g = self.cost.group_of(node);
        let need = self.cost.group_memory(g);
        let best = self
            .cost
            .device_ids()
            .filter(|&d| self.cost.group_allowed(g, d))
            .max_by_key(|&d| self.mem_left[d]);
        let reason = match best {
            Some(d) => format!(
                "needs {need} bytes of device memory but, with the groups placed before it, the \
                 most left on a device with its kernels is {} on `{}`",
                fmt_bytes(self.mem_left[d]),
                self.cluster.devices[d].name
            ),
            None => "no device of the cluster has kernels for all of its ops".into(),
        };
        Error::Infeasible {
            group: self.graph.groups()[g].name.clone(),
            reason,
        }
    }

    /// Places every group still without a device (all its ops floated): next to a placed
    /// neighbour if it fits there, else on the fastest device it fits on. Returns the device of
    /// every group and every op.
    ///
    /// # Errors
    /// [`Error::Infeasible`] naming a group that fits nowhere.
    pub(crate) fn finish_groups(&mut self) -> Result<Schedule> {
        for g in GroupId::range(self.group_dev.len()) {
            if self.group_dev[g] != NONE {
                continue;
            }
            let members = &self.graph.groups()[g].members;
            let dag = self.cost.dag();
            let neighbour = members
                .iter()
                .flat_map(|&m| dag.succs(m).iter().chain(dag.preds(m)))
                .map(|e| self.group_dev[self.cost.group_of(e.node)])
                .filter(|&d| d != NONE)
                .map(|d| DeviceId::new(d as usize))
                .find(|&d| self.group_fits(g, d));
            let dev = match neighbour {
                Some(d) => d,
                None => {
                    let best = self
                        .cost
                        .device_ids()
                        .filter(|&d| self.group_fits(g, d))
                        .max_by(|&a, &b| {
                            self.cost
                                .speed(a)
                                .total_cmp(&self.cost.speed(b))
                                .then(b.cmp(&a))
                        });
                    match best {
                        Some(d) => d,
                        None => return Err(self.no_device(members[0])),
                    }
                }
            };
            self.assign_group(g, dev);
        }
        let group_device: Vec<DeviceId> = self
            .group_dev
            .iter()
            .map(|&d| DeviceId::new(d as usize))
            .collect();
        let device: Vec<DeviceId> = NodeId::range(self.cost.num_nodes())
            .map(|i| group_device[self.cost.group_of(i)])
            .collect();
        let makespan = self.finish.iter().copied().fold(0.0, f64::max);
        Ok(Schedule {
            group_device,
            device,
            start: self.start.clone(),
            finish: self.finish.clone(),
            makespan,
        })
    }
}

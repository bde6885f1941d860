//! Placement strategies: given an [`OpGraph`] and a [`Cluster`], choose a device for every op.
//! Colocation groups are the unit of placement; every strategy returns a [`Placement`], and with
//! [`place_with_report`](crate::report::PlaceWithReport::place_with_report) a
//! [`PlacementReport`](crate::report::PlacementReport) (simulated step time, lower bound,
//! per-device load).
//!
//! | name | idea |
//! |---|---|
//! | `tf-default` | no devices: TensorFlow's placer decides |
//! | `round-robin` | groups dealt over the devices |
//! | `random` | each group on a random device with room (seeded) |
//! | `single-fastest` | everything on the device that runs the graph fastest alone |
//! | `infra-aware` | IA-TF: capable, available devices, proportional slices while it pays off |
//! | `etf` | m-ETF list scheduling (earliest start first, memory-aware) |
//! | `heft` | HEFT (upward rank, insertion-based earliest finish) |
//!
//! ```
//! use tf_iaware_core::cluster::{Cluster, Device};
//! use tf_iaware_core::cost::CostModel;
//! use tf_iaware_core::placer::{self, PlaceOptions};
//! use tf_iaware_core::report::PlaceWithReport;
//! use tf_iaware_core::sim::synthetic::LayeredDag;
//!
//! let graph = LayeredDag::new(200, 10).build().unwrap();
//! let cluster = Cluster::new(
//!     (0..4)
//!         .map(|i| Device::nominal(&format!("/job:localhost/replica:0/task:0/device:CPU:{i}"), "CPU", None, "localhost"))
//!         .collect(),
//! );
//! let cost = CostModel::new(&graph, &cluster).unwrap();
//! let heft = placer::by_name_with("heft", &PlaceOptions::default()).unwrap();
//! let (placement, report) = heft.place_with_report(&graph, &cluster, &cost).unwrap();
//! assert_eq!(placement.placed_ops(), 200);
//! assert!(report.predicted_step_ms >= report.lower_bound_ms);
//! ```

mod basic;
mod choice;
mod etf;
mod heft;
mod infra;
pub mod resolve;
mod sched;
mod simple;
mod split;
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use crate::cluster::{Cluster, DeviceId};
use crate::cost::CostModel;
use crate::error::{Error, Result};
use crate::graph::{GroupId, NodeId, OpGraph};

pub(crate) use basic::{RoundRobin, TfDefault};
pub use choice::OpPlacementStrategy;
pub use etf::etf_schedule;
pub(crate) use etf::Etf;
pub use heft::heft_schedule;
pub(crate) use heft::Heft;
pub(crate) use infra::InfraAware;
pub use sched::Schedule;
pub use simple::Random;
pub(crate) use simple::SingleFastest;
pub use split::MIN_SPLIT_GAIN;

/// A device for every op, by id: `device(op)` is the [`DeviceId`] (of the cluster the placement
/// was made for) that op `op` (a [`NodeId`] of the graph it was made for) runs on, or `None` for
/// an op left to TensorFlow's placer. Names appear only at the edges: [`Placement::from_names`]
/// reads op names and device strings, [`Placement::device_of`] and [`Placement::to_names`] give
/// them back.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Placement {
    /// Name of the strategy that produced it.
    pub strategy: String,
    /// Device of every op, indexed by [`NodeId`].
    devices: Vec<Option<DeviceId>>,
}

impl Placement {
    /// A placement from `strategy` of `graph`'s ops that places none (TensorFlow decides).
    pub fn new(strategy: &str, graph: &OpGraph) -> Self {
        Placement {
            strategy: strategy.into(),
            devices: vec![None; graph.len()],
        }
    }

    /// Ops of the graph the placement was made for (placed or not).
    pub fn ops(&self) -> usize {
        self.devices.len()
    }

    /// Ops with a device.
    pub fn placed_ops(&self) -> usize {
        self.devices.iter().filter(|d| d.is_some()).count()
    }

    /// Device of op `op`, if placed (`None` too for an id beyond the graph).
    pub fn device(&self, op: NodeId) -> Option<DeviceId> {
        self.devices.get(op.index()).copied().flatten()
    }

    /// Every placed op and its device, in id order.
    pub fn placed(&self) -> impl Iterator<Item = (NodeId, DeviceId)> + '_ {
        NodeId::range(self.devices.len())
            .zip(&self.devices)
            .filter_map(|(op, d)| d.map(|d| (op, d)))
    }

    /// Puts op `op` on `device` (`None`: leaves it to TensorFlow). The device is checked against
    /// a cluster where the placement is used ([`resolve::check`]).
    ///
    /// # Errors
    /// [`Error::BadId`] for an op id beyond the graph the placement was made for.
    pub fn set(&mut self, op: NodeId, device: Option<DeviceId>) -> Result<()> {
        let len = self.devices.len();
        let slot = self.devices.get_mut(op.index()).ok_or(Error::BadId {
            kind: "node",
            id: op.index(),
            len,
        })?;
        *slot = device;
        Ok(())
    }

    /// A placement of `graph` on `cluster` from op names and device strings (full or partial
    /// device names, each naming one device of `cluster`); ops not named are left to TensorFlow.
    ///
    /// # Errors
    /// [`Error::UnknownOp`] for a name `graph` lacks; [`Error::MalformedDevice`] or
    /// [`Error::UnknownDevice`] for a device string that names no single device of `cluster`.
    pub fn from_names<O, D>(
        strategy: &str,
        graph: &OpGraph,
        cluster: &Cluster,
        devices: impl IntoIterator<Item = (O, D)>,
    ) -> Result<Self>
    where
        O: AsRef<str>,
        D: AsRef<str>,
    {
        let mut placement = Placement::new(strategy, graph);
        let mut known: std::collections::HashMap<String, DeviceId> =
            std::collections::HashMap::new();
        let context = format!("placement `{strategy}`");
        for (op, device) in devices {
            let (op, device) = (op.as_ref(), device.as_ref());
            let id = graph.require(op, &context)?;
            let d = match known.get(device) {
                Some(&d) => d,
                None => {
                    let d = resolve::device(cluster, op, device)?;
                    known.insert(device.to_string(), d);
                    d
                }
            };
            placement.devices[id] = Some(d);
        }
        Ok(placement)
    }

    /// Full device name of op `name` on `cluster`, if the graph has it and it is placed.
    ///
    /// # Panics
    /// If the placement names a device id `cluster` does not have (a placement made for a
    /// larger cluster).
    pub fn device_of<'c>(
        &self,
        graph: &OpGraph,
        cluster: &'c Cluster,
        name: &str,
    ) -> Option<&'c str> {
        let d = self.device(graph.id(name)?)?;
        Some(cluster.devices[d].name.as_str())
    }

    /// Op name → full device name of every placed op (for output).
    ///
    /// # Panics
    /// As [`Placement::device_of`].
    pub fn to_names(&self, graph: &OpGraph, cluster: &Cluster) -> BTreeMap<String, String> {
        self.placed()
            .map(|(op, d)| (graph.node(op).name.clone(), cluster.devices[d].name.clone()))
            .collect()
    }

    /// Puts every member of every group on the device chosen for that group
    /// (`group_device[g]`, a device of `cluster`).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if `group_device` does not have one device per colocation
    /// group; [`Error::BadId`] naming a device id the cluster does not have (one of a larger
    /// cluster).
    pub fn from_groups(
        strategy: &str,
        graph: &OpGraph,
        cluster: &Cluster,
        group_device: &[DeviceId],
    ) -> Result<Self> {
        if group_device.len() != graph.groups().len() {
            return Err(Error::InvalidArgument {
                what: format!("group devices of a `{strategy}` placement"),
                reason: format!(
                    "need one device per colocation group ({}), got {}",
                    graph.groups().len(),
                    group_device.len()
                ),
            });
        }
        if let Some(&d) = group_device
            .iter()
            .find(|&&d| d.index() >= cluster.devices.len())
        {
            return Err(Error::BadId {
                kind: "device",
                id: d.index(),
                len: cluster.devices.len(),
            });
        }
        let mut devices = vec![None; graph.len()];
        for (group, &d) in graph.groups().iter().zip(group_device) {
            for &m in &group.members {
                devices[m] = Some(d);
            }
        }
        Ok(Placement {
            strategy: strategy.into(),
            devices,
        })
    }
}

/// A placement strategy.
pub trait Strategy: Send + Sync {
    /// The name users select it by (`--strategy`).
    fn name(&self) -> &'static str;

    /// Chooses a device for every op of `graph` on `cluster`, priced by the analytic
    /// [`CostModel`] (strategies that ignore costs override this to skip building it).
    ///
    /// # Errors
    /// [`Error::Infeasible`] naming the group that fits nowhere; other errors from the graph.
    fn place(&self, graph: &OpGraph, cluster: &Cluster) -> Result<Placement> {
        let cost = CostModel::new(graph, cluster)?;
        self.place_with_cost(graph, cluster, &cost)
    }

    /// Chooses a device for every op with `cost` (built for this graph and cluster, analytic or
    /// measured).
    ///
    /// # Errors
    /// As [`Strategy::place`].
    fn place_with_cost(
        &self,
        graph: &OpGraph,
        cluster: &Cluster,
        cost: &CostModel,
    ) -> Result<Placement>;
}

/// Knobs of the strategies that have any.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct PlaceOptions {
    /// Seed of `random`.
    pub seed: u64,
    /// `infra-aware`: devices below this share (0–1) of the best device's capability ×
    /// availability are left out.
    pub infra_threshold: f64,
    /// `heft`, `etf`, `infra-aware`: a split over several devices is kept only when it is
    /// predicted at least this share (0–1) faster than everything on the fastest single device
    /// ([`MIN_SPLIT_GAIN`] by default; 0 keeps any split predicted faster at all).
    pub min_split_gain: f64,
}

impl Default for PlaceOptions {
    fn default() -> Self {
        PlaceOptions {
            seed: 0,
            infra_threshold: InfraAware::default().threshold,
            min_split_gain: MIN_SPLIT_GAIN,
        }
    }
}

/// The strategy called `name`, with default [`PlaceOptions`].
///
/// # Errors
/// [`Error::UnknownStrategy`] listing the known names.
pub fn by_name(name: &str) -> Result<Box<dyn Strategy>> {
    by_name_with(name, &PlaceOptions::default())
}

/// The strategy called `name`, with `options`.
///
/// # Errors
/// [`Error::UnknownStrategy`] listing the known names; [`Error::InvalidArgument`] for an
/// `infra_threshold` outside 0–1 or a `min_split_gain` outside 0–1 (1 excluded).
pub fn by_name_with(name: &str, options: &PlaceOptions) -> Result<Box<dyn Strategy>> {
    name.parse::<OpPlacementStrategy>()?.build(options)
}

/// What an out-of-range [`PlaceOptions::infra_threshold`] is called in errors.
const ERROR_THRESHOLD: &str = "infra-aware threshold";

/// What an out-of-range [`PlaceOptions::min_split_gain`] is called in errors.
const ERROR_SPLIT_GAIN: &str = "min split gain";

/// Devices of `cluster` on which every member of group `g` has a kernel.
pub(crate) fn eligible_devices(graph: &OpGraph, cluster: &Cluster, g: GroupId) -> Vec<DeviceId> {
    let members = &graph.group(g).members;
    cluster
        .device_ids()
        .filter(|&d| {
            members.iter().all(|&m| {
                graph
                    .node(m)
                    .has_kernel_for(&cluster.devices[d].device_type)
            })
        })
        .collect()
}

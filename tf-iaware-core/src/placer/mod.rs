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
//! assert_eq!(placement.devices.len(), 200);
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
#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::cluster::{Cluster, DeviceId};
use crate::cost::CostModel;
use crate::error::{Error, Result};
use crate::graph::{GroupId, OpGraph};

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

/// Op name → device string. Ops absent from the map keep no device (TensorFlow decides).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Placement {
    /// Name of the strategy that produced it.
    pub strategy: String,
    /// Op name → device string (a full device name for every strategy here).
    pub devices: BTreeMap<String, String>,
}

impl Placement {
    /// An empty placement from `strategy`.
    pub fn new(strategy: &str) -> Self {
        Placement {
            strategy: strategy.into(),
            devices: BTreeMap::new(),
        }
    }

    /// Device of op `name`, if placed.
    pub fn device_of(&self, name: &str) -> Option<&str> {
        self.devices.get(name).map(String::as_str)
    }

    /// Puts every member of every group on the device chosen for that group
    /// (`group_device[g]`, a device of `cluster`).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if `group_device` does not have one device per colocation
    /// group; [`Error::BadId`] naming a device id the cluster does not have (one of a larger
    /// cluster).
    pub(crate) fn from_groups(
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
        // Collected first: building the map from a sorted sequence is much faster than inserting.
        let mut pairs: Vec<(String, String)> = Vec::with_capacity(graph.len());
        for (g, group) in graph.groups().iter().enumerate() {
            let device = &cluster.devices[group_device[g]].name;
            for &m in &group.members {
                pairs.push((graph.node(m).name.clone(), device.clone()));
            }
        }
        pairs.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        Ok(Placement {
            strategy: strategy.into(),
            devices: pairs.into_iter().collect(),
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
}

impl Default for PlaceOptions {
    fn default() -> Self {
        PlaceOptions {
            seed: 0,
            infra_threshold: InfraAware::default().threshold,
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
/// `infra_threshold` outside 0–1.
pub fn by_name_with(name: &str, options: &PlaceOptions) -> Result<Box<dyn Strategy>> {
    name.parse::<OpPlacementStrategy>()?.build(options)
}

/// What an out-of-range [`PlaceOptions::infra_threshold`] is called in errors.
const ERROR_THRESHOLD: &str = "infra-aware threshold";

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

//! Placement strategies: given an [`OpGraph`] and a [`Cluster`], choose a device for every op.
//! Colocation groups are the unit of placement; every strategy returns a [`Placement`].

mod basic;

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::cluster::Cluster;
use crate::error::{Error, Result};
use crate::graph::OpGraph;

pub use basic::{RoundRobin, TfDefault};

/// Op name → device string. Ops absent from the map keep no device (TensorFlow decides).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Placement {
    /// Name of the strategy that produced it.
    pub strategy: String,
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

    /// Puts every member of every group on the device chosen for that group.
    pub fn from_groups(
        strategy: &str,
        graph: &OpGraph,
        cluster: &Cluster,
        group_device: &[usize],
    ) -> Self {
        let mut p = Placement::new(strategy);
        for (g, group) in graph.groups().iter().enumerate() {
            let device = &cluster.devices[group_device[g]].name;
            for &m in &group.members {
                p.devices.insert(graph.node(m).name.clone(), device.clone());
            }
        }
        p
    }
}

/// A placement strategy.
pub trait Strategy: Send + Sync {
    /// The name users select it by (`--strategy`).
    fn name(&self) -> &'static str;

    /// Chooses a device for every op of `graph` on `cluster`.
    ///
    /// # Errors
    /// [`Error::Infeasible`] naming the group that fits nowhere; other errors from the graph.
    fn place(&self, graph: &OpGraph, cluster: &Cluster) -> Result<Placement>;
}

/// Names of every strategy [`by_name`] knows.
pub const STRATEGIES: &[&str] = &["tf-default", "round-robin"];

/// The strategy called `name`.
///
/// # Errors
/// [`Error::UnknownStrategy`] listing the known names.
pub fn by_name(name: &str) -> Result<Box<dyn Strategy>> {
    match name {
        "tf-default" => Ok(Box::new(TfDefault)),
        "round-robin" => Ok(Box::new(RoundRobin)),
        other => Err(Error::UnknownStrategy {
            name: other.into(),
            known: STRATEGIES.join(", "),
        }),
    }
}

/// Devices of `cluster` on which every member of group `g` has a kernel.
pub fn eligible_devices(graph: &OpGraph, cluster: &Cluster, g: usize) -> Vec<usize> {
    let members = &graph.groups()[g].members;
    (0..cluster.devices.len())
        .filter(|&d| {
            members.iter().all(|&m| {
                graph
                    .node(m)
                    .has_kernel_for(&cluster.devices[d].device_type)
            })
        })
        .collect()
}

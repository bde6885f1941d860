//! Baseline strategies: TensorFlow's own choice, and round-robin.

use super::{eligible_devices, Placement, Strategy};
use crate::cluster::{Cluster, DeviceId};
use crate::cost::CostModel;
use crate::error::{Error, Result};
use crate::graph::OpGraph;

/// Stock TensorFlow: no device strings, the TensorFlow placer decides.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct TfDefault;

impl Strategy for TfDefault {
    fn name(&self) -> &'static str {
        "tf-default"
    }

    fn place(&self, graph: &OpGraph, _cluster: &Cluster) -> Result<Placement> {
        Ok(Placement::new(self.name(), graph))
    }

    fn place_with_cost(
        &self,
        graph: &OpGraph,
        cluster: &Cluster,
        _cost: &CostModel,
    ) -> Result<Placement> {
        self.place(graph, cluster)
    }
}

/// Colocation groups dealt over the devices in topological order of their first-ready member,
/// skipping devices without a kernel for the group.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RoundRobin;

impl Strategy for RoundRobin {
    fn name(&self) -> &'static str {
        "round-robin"
    }

    fn place_with_cost(
        &self,
        graph: &OpGraph,
        cluster: &Cluster,
        _cost: &CostModel,
    ) -> Result<Placement> {
        self.place(graph, cluster)
    }

    fn place(&self, graph: &OpGraph, cluster: &Cluster) -> Result<Placement> {
        if cluster.devices.is_empty() {
            return Err(Error::Infeasible {
                group: "(all)".into(),
                reason: "the cluster has no devices".into(),
            });
        }
        let mut group_device: Vec<Option<DeviceId>> = vec![None; graph.groups().len()];
        let mut next = 0usize;
        for id in graph.topo_order()? {
            let g = graph.node(id).group;
            if group_device[g].is_some() {
                continue;
            }
            let eligible = eligible_devices(graph, cluster, g);
            if eligible.is_empty() {
                return Err(Error::Infeasible {
                    group: graph.groups()[g].name.clone(),
                    reason: "no device type has kernels for all of its ops".into(),
                });
            }
            // The next device in the rotation that is eligible.
            let n = cluster.devices.len();
            let pick = (0..n)
                .map(|k| DeviceId::new((next + k) % n))
                .find(|d| eligible.contains(d))
                .unwrap_or(eligible[0]);
            group_device[g] = Some(pick);
            next = (pick.index() + 1) % n;
        }
        // Every group has a member in the topological order; were one missed, the list would be
        // short and `from_groups` would say so.
        let group_device: Vec<DeviceId> = group_device.into_iter().flatten().collect();
        Placement::from_groups(self.name(), graph, cluster, &group_device)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{Attr, DType, OpGraphBuilder};
    use crate::placer::tests::cpus;

    #[test]
    fn round_robin_deals_groups_and_keeps_them_whole() {
        let mut b = OpGraphBuilder::new();
        let v = b.add("v", "VarHandleOp").unwrap();
        b.output(v, DType::RESOURCE, Some(vec![]));
        let r = b.add("v/read", "ReadVariableOp").unwrap();
        b.connect(v, 0, r);
        for i in 0..4 {
            b.add(&format!("op{i}"), "Relu").unwrap();
        }
        let gpu_only = b.add("gpu_only", "NcclAllReduce").unwrap();
        b.node_mut(gpu_only).kernel_device_types = vec!["GPU".into()];
        b.node_mut(gpu_only).attrs.insert("x".into(), Attr::Int(1));
        let g = b.build().unwrap();
        let cluster = cpus(3);
        let err = RoundRobin.place(&g, &cluster).unwrap_err();
        assert!(err.to_string().contains("gpu_only"), "{err}");

        let mut b = OpGraphBuilder::new();
        let v = b.add("v", "VarHandleOp").unwrap();
        b.output(v, DType::RESOURCE, Some(vec![]));
        let r = b.add("v/read", "ReadVariableOp").unwrap();
        b.connect(v, 0, r);
        for i in 0..4 {
            b.add(&format!("op{i}"), "Relu").unwrap();
        }
        let g = b.build().unwrap();
        let p = RoundRobin.place(&g, &cluster).unwrap();
        let of = |op: &str| p.device_of(&g, &cluster, op);
        assert_eq!(of("v"), of("v/read"));
        let used: std::collections::BTreeSet<_> = p.placed().map(|(_, d)| d).collect();
        assert_eq!(used.len(), 3);
        assert_eq!(p.placed_ops(), 6);
    }
}

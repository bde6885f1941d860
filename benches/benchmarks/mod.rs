//! Benchmark groups of `bench_main` (one module per area) and what they share.

pub mod alloc;
pub mod placement;
pub mod scale;
pub mod simulator;

use tf_iaware::cluster::Cluster;
use tf_iaware::cost::CostModel;
use tf_iaware::graph::OpGraph;
use tf_iaware::sim::synthetic::{self, LayeredDag};

/// One benchmark problem: a synthetic layered DAG on a heterogeneous cluster.
pub struct Case {
    /// Name shown by criterion.
    pub name: &'static str,
    /// Ops in the graph.
    pub ops: usize,
    /// Ops per layer.
    pub width: usize,
    /// Devices in the cluster (spread over 8 hosts).
    pub devices: usize,
}

/// The graph, cluster and analytic cost model of `case`.
pub fn problem(case: &Case) -> (OpGraph, Cluster, CostModel) {
    let graph = LayeredDag::new(case.ops, case.width)
        .build()
        .expect("the synthetic DAG parameters are valid");
    let cluster = synthetic::cluster(case.devices, 8, 1);
    let cost = CostModel::new(&graph, &cluster).expect("the synthetic cluster is valid");
    (graph, cluster, cost)
}

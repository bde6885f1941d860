//! Applying a [`Placement`]: validation against the graph and the cluster, then a GraphDef
//! rewrite that sets `NodeDef.device` and, where a ref-typed variable is read on another device,
//! adds the explicit read TensorFlow needs ([`ref_reads`](crate::graph::ref_reads)); everything else is left untouched;
//! then import into a fresh TensorFlow graph.

use std::collections::HashMap;

use prost::Message;
use tensorflow::{Graph, ImportGraphDefOptions};

use crate::cluster::Cluster;
use crate::error::Result;
use crate::graph::proto::GraphDef;
use crate::graph::ref_reads::add_ref_reads;
use crate::graph::{DeviceName, OpGraph};
use crate::placer::resolve::{check_kernel, split_colocation};
use crate::placer::Placement;

/// A placed graph: the rewritten GraphDef and the TensorFlow graph imported from it.
pub struct Placed {
    /// The GraphDef with a device on every node.
    pub graph_def: GraphDef,
    /// The TensorFlow graph imported from `graph_def`.
    pub graph: Graph,
}

impl std::fmt::Debug for Placed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Placed")
            .field("nodes", &self.graph_def.node.len())
            .finish_non_exhaustive()
    }
}

impl Placed {
    /// The placed GraphDef, serialized.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.graph_def.encode_to_vec()
    }
}

/// Checks `placement` before TensorFlow sees it and returns the full device name of every placed
/// op: every op exists, every device string parses and names one device of `cluster`, the device
/// type has a kernel for the op, and no colocation group is split.
///
/// # Errors
/// [`Error::UnknownOp`], [`Error::MalformedDevice`], [`Error::UnknownDevice`], [`Error::NoKernel`]
/// or [`Error::SplitColocation`], each naming the op and the device.
pub fn validate(
    graph: &OpGraph,
    cluster: &Cluster,
    placement: &Placement,
) -> Result<HashMap<String, String>> {
    let mut resolved: HashMap<String, String> = HashMap::with_capacity(placement.devices.len());
    for (op, device) in &placement.devices {
        let id = graph.require(op, &format!("placement `{}`", placement.strategy))?;
        DeviceName::parse(device)?;
        let d = &cluster.devices[cluster.resolve(op, device)?];
        check_kernel(graph.node(id), d)?;
        resolved.insert(op.clone(), d.name.clone());
    }
    for group in graph.groups() {
        let mut first: Option<(&str, &str)> = None;
        for &m in &group.members {
            let name = graph.node(m).name.as_str();
            let Some(device) = resolved.get(name) else {
                continue;
            };
            match first {
                None => first = Some((name, device)),
                Some(other) if other.1 != device => {
                    return Err(split_colocation(&group.name, (name, device), other));
                }
                Some(_) => {}
            }
        }
    }
    Ok(resolved)
}

/// Validates `placement` and rewrites `graph_def`: every placed op gets its full device name,
/// unplaced ops keep what they had; a ref-typed output read on another device is read through an
/// `Identity` added beside it ([`add_ref_reads`]: without it TensorFlow can deadlock the step);
/// names, the other inputs, attributes, the function library, versions and debug info are carried
/// over unchanged. Pure: no TensorFlow call.
///
/// # Errors
/// Validation errors of [`validate`]; [`Error::InvalidGraph`](crate::Error::InvalidGraph) if
/// `graph` is not the analysis of `graph_def`.
pub(crate) fn rewrite(
    graph_def: &GraphDef,
    graph: &OpGraph,
    cluster: &Cluster,
    placement: &Placement,
) -> Result<GraphDef> {
    let resolved = validate(graph, cluster, placement)?;
    let mut def = graph_def.clone();
    for node in &mut def.node {
        if let Some(device) = resolved.get(&node.name) {
            node.device = device.clone();
        }
    }
    let reads = add_ref_reads(&mut def, graph)?;
    for r in &reads {
        log::debug!(
            "{}: `{}` reads ref `{}:{}` on {} for {} op(s) elsewhere",
            placement.strategy,
            r.read,
            r.source,
            r.output,
            r.device,
            r.consumers.len()
        );
    }
    Ok(def)
}

/// Imports `def` into a fresh TensorFlow graph; `what` names it in errors.
///
/// # Errors
/// [`Error::TensorFlow`] if TensorFlow rejects the GraphDef.
pub fn import(def: &GraphDef, what: &str) -> Result<Graph> {
    let mut tf_graph = Graph::new();
    tf_graph
        .import_graph_def(&def.encode_to_vec(), &ImportGraphDefOptions::new())
        .map_err(|e| {
            crate::tf::status::error(format!("importing the placed GraphDef ({what})"), &e)
        })?;
    Ok(tf_graph)
}

/// `rewrite`, then [`import`] of the result.
///
/// # Errors
/// Validation errors of [`validate`]; [`Error::TensorFlow`] if TensorFlow rejects the result.
pub fn apply(
    graph_def: &GraphDef,
    graph: &OpGraph,
    cluster: &Cluster,
    placement: &Placement,
) -> Result<Placed> {
    let def = rewrite(graph_def, graph, cluster, placement)?;
    let graph = import(&def, &placement.strategy)?;
    Ok(Placed {
        graph_def: def,
        graph,
    })
}

//! Applying a [`Placement`]: validation against the graph and the cluster, then a GraphDef
//! rewrite that writes the placed devices' names into `NodeDef.device` and, where a ref-typed variable is read on another device,
//! adds the explicit read TensorFlow needs ([`ref_reads`](crate::graph::ref_reads)); everything else is left untouched;
//! then import into a fresh TensorFlow graph.

use prost::Message;
use tensorflow::{Graph, ImportGraphDefOptions};

use crate::cluster::Cluster;
use crate::error::{Error, Result};
use crate::graph::proto::GraphDef;
use crate::graph::ref_reads::add_ref_reads;
use crate::graph::OpGraph;
use crate::placer::{resolve, Placement};

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

/// Validates `placement` and rewrites `graph_def`: every placed op gets its device's full name,
/// unplaced ops keep what they had; a ref-typed output read on another device is read through an
/// `Identity` added beside it ([`add_ref_reads`]: without it TensorFlow can deadlock the step);
/// names, the other inputs, attributes, the function library, versions and debug info are carried
/// over unchanged. Pure: no TensorFlow call.
///
/// # Errors
/// The errors of [`resolve::check`]; [`Error::InvalidGraph`](crate::Error::InvalidGraph) if
/// `graph` is not the analysis of `graph_def`.
pub(crate) fn rewrite(
    graph_def: &GraphDef,
    graph: &OpGraph,
    cluster: &Cluster,
    placement: &Placement,
) -> Result<GraphDef> {
    resolve::check(graph, cluster, placement)?;
    let mut def = graph_def.clone();
    for node in &mut def.node {
        let id = graph.id(&node.name).ok_or_else(|| Error::InvalidGraph {
            node: node.name.clone(),
            reason: "the GraphDef has a node its analysis lacks".into(),
        })?;
        if let Some(d) = placement.device(id) {
            node.device.clone_from(&cluster.devices[d].name);
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
/// The errors of [`resolve::check`]; [`Error::TensorFlow`] if TensorFlow rejects the result.
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

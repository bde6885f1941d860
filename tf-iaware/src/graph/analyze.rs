//! Analysis of a real TensorFlow graph into an [`OpGraph`]: names, op types, requested devices,
//! inputs, output dtypes and shapes (TensorFlow's shape inference), decoded attributes, registered
//! kernels and colocation groups.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use tensorflow::{Graph, ImportGraphDefOptions, Operation};

use super::op_defs;
use super::{Attr, DType, Input, NodeId, OpGraph, OpGraphBuilder, OpSignature};
use crate::error::{Error, Result};
use crate::graph::proto::GraphDef;
use crate::tf;

use tf_iaware_core::graph::graph_def::{
    decode_attr, decode_graph_def, parse_input, requested_device,
};
use tf_iaware_core::graph::library::function_names;

/// A graph as TensorFlow analysed it, in plain data: its decoded GraphDef, its [`OpGraph`] and
/// the signatures of its op types. No TensorFlow graph is kept: what needs one (a session, a
/// variable listing) imports the GraphDef itself ([`Analyzed::import`]).
#[derive(Clone)]
pub struct Analyzed {
    /// The GraphDef, decoded losslessly (for rewriting).
    pub graph_def: GraphDef,
    /// The plain-data model.
    pub op_graph: OpGraph,
    /// Registry signature (input names, statefulness) of every op type in the graph.
    pub signatures: BTreeMap<String, OpSignature>,
}

impl std::fmt::Debug for Analyzed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Analyzed")
            .field("nodes", &self.graph_def.node.len())
            .field("ops", &self.op_graph.len())
            .field("signatures", &self.signatures.len())
            .finish_non_exhaustive()
    }
}

impl Analyzed {
    /// The GraphDef imported into a fresh TensorFlow graph (for a session, or to read what only
    /// TensorFlow knows of it); `what` names it in errors.
    ///
    /// # Errors
    /// [`Error::TensorFlow`] if TensorFlow rejects the GraphDef.
    pub fn import(&self, what: &str) -> Result<Graph> {
        import_bytes(&prost::Message::encode_to_vec(&self.graph_def), what)
    }

    /// The graph analysed again with a dynamic batch pinned to `batch`: every placeholder of
    /// shape `[-1, …]` becomes `[batch, …]`
    /// ([`pin_batch`](tf_iaware_core::graph::batch::pin_batch)), so TensorFlow's shape
    /// inference carries the batch through and the cost model prices `batch` samples, not one.
    /// A graph with nothing to pin comes back as it is.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a batch of 0 or above
    /// [`MAX_BATCH`](crate::runtime::limits::MAX_BATCH); as [`analyze_bytes`] if TensorFlow's shape
    /// inference rejects the pinned graph (an op that needs another batch).
    pub fn with_batch(&self, batch: usize) -> Result<Analyzed> {
        if batch == 0 || batch > crate::limits::MAX_BATCH {
            return Err(Error::InvalidArgument {
                what: "batch".into(),
                reason: format!("{batch}: must be 1 to {}", crate::limits::MAX_BATCH),
            });
        }
        let (pinned, changed) =
            tf_iaware_core::graph::batch::pin_batch(&self.graph_def, batch as i64);
        if changed == 0 {
            return Ok(self.clone());
        }
        analyze_bytes(
            &prost::Message::encode_to_vec(&pinned),
            &format!("with its batch pinned to {batch}"),
        )
    }
}

/// Serialized GraphDef bytes imported into a fresh TensorFlow graph; `what` names them in errors.
fn import_bytes(bytes: &[u8], what: &str) -> Result<Graph> {
    let mut graph = Graph::new();
    graph
        .import_graph_def(bytes, &ImportGraphDefOptions::new())
        .map_err(|e| crate::tf::status::error(format!("importing GraphDef {what}"), &e))?;
    Ok(graph)
}

/// Analyses serialized GraphDef bytes: TensorFlow imports them into a graph of its own for the
/// analysis (shape inference, the op registry), which is dropped afterwards.
///
/// # Errors
/// [`Error::GraphDecode`] for bytes that are not a GraphDef; [`Error::TensorFlow`] if TensorFlow
/// rejects the graph (unknown op, bad input reference, failed shape inference);
/// [`Error::NoKernelForTypes`] for an op whose kernels all take other types than the node's;
/// [`Error::NoKernelAnywhere`] for an op this TensorFlow build has no kernel for on any device
/// type (a function call of the graph's library needs none).
pub fn analyze_bytes(bytes: &[u8], what: &str) -> Result<Analyzed> {
    tf::ensure_supported_version()?;
    let graph_def = decode_graph_def(bytes, what)?;
    analyze_def(&import_bytes(bytes, what)?, graph_def)
}

/// Analyses a graph built in-process (e.g. with the `tensorflow` crate's ops): its GraphDef is
/// exported, and `graph` itself answers what TensorFlow knows (shapes, the op registry).
///
/// # Errors
/// As [`analyze_bytes`].
pub fn analyze_graph(graph: &Graph) -> Result<Analyzed> {
    tf::ensure_supported_version()?;
    let bytes = graph
        .graph_def()
        .map_err(|e| crate::tf::status::error("exporting GraphDef", &e))?;
    let graph_def = decode_graph_def(&bytes, "in-process graph")?;
    analyze_def(graph, graph_def)
}

/// The analysis of `graph_def`, with `graph` (which holds its nodes) answering shapes, input
/// types and op signatures.
fn analyze_def(graph: &Graph, graph_def: GraphDef) -> Result<Analyzed> {
    let op_graph = build(graph, &graph_def)?;
    let signatures = op_defs::signatures(graph, graph_def.node.iter().map(|n| n.op.as_str()))?;
    Ok(Analyzed {
        graph_def,
        op_graph,
        signatures,
    })
}

/// Builds the [`OpGraph`] of `def`, reading dtypes, shapes and input types from `graph`
/// (which must hold `def`'s nodes).
fn build(graph: &Graph, def: &GraphDef) -> Result<OpGraph> {
    // Op types that call a function of the library: run by the function runtime, no kernel.
    let functions = match &def.library {
        Some(library) => function_names(library, "the GraphDef's function library")?,
        None => BTreeSet::new(),
    };
    let mut b = OpGraphBuilder::new();
    let mut ops: Vec<Operation> = Vec::with_capacity(def.node.len());
    let mut ids: Vec<NodeId> = Vec::with_capacity(def.node.len());
    for node in &def.node {
        let id = b.add(&node.name, &node.op)?;
        ids.push(id);
        let op = graph
            .operation_by_name_required(&node.name)
            .map_err(|e| Error::InvalidGraph {
                node: node.name.clone(),
                reason: format!("not found after import: {e}"),
            })?;
        for i in 0..op.num_outputs() {
            let output = tensorflow::Output {
                operation: op.clone(),
                index: i as i32,
            };
            let dtype = dtype_of(op.output_type(i));
            let shape = graph.tensor_shape(output).ok().and_then(|s| {
                s.dims()
                    .map(|n| (0..n).map(|d| s[d].unwrap_or(-1)).collect::<Vec<i64>>())
            });
            b.output(id, dtype, shape);
        }
        let n = b.node_mut(id);
        n.requested_device = requested_device(&node.name, &node.device)?;
        for (name, raw) in &node.attr {
            n.attrs
                .insert(name.clone(), decode_attr(&node.name, name, raw)?);
        }
        // Kernels for the node's own types: every placer then keeps it off devices that cannot
        // run it, and an op that no device can run (MatMul on uint16; CudnnRNN, registered in
        // a CPU-only build without any kernel) is an error here. A function call has none.
        let type_of = |a: &str| match n.attrs.get(a) {
            Some(Attr::Type(t)) => Some(t.0),
            _ => None,
        };
        let matching = tf::kernel_device_types_for(&node.op, type_of)?;
        if matching.is_empty() && !functions.contains(&node.op) {
            let any = tf::kernel_device_types(&node.op)?;
            if any.is_empty() {
                return Err(Error::NoKernelAnywhere {
                    op: node.name.clone(),
                    op_type: node.op.clone(),
                });
            }
            let mut types: Vec<String> = n
                .attrs
                .iter()
                .filter_map(|(k, v)| match v {
                    Attr::Type(t) => Some(format!("{k}={}", t.name())),
                    _ => None,
                })
                .collect();
            types.sort();
            return Err(Error::NoKernelForTypes {
                op: node.name.clone(),
                op_type: node.op.clone(),
                types: types.join(", "),
                available: any
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", "),
            });
        }
        n.kernel_device_types = matching;
        ops.push(op);
    }
    let index: HashMap<&str, NodeId> = def
        .node
        .iter()
        .zip(&ids)
        .map(|(n, &id)| (n.name.as_str(), id))
        .collect();
    for ((k, node), &id) in def.node.iter().enumerate().zip(&ids) {
        let mut data_index = 0usize;
        for input in &node.input {
            let (control, rest) = match input.strip_prefix('^') {
                Some(r) => (true, r),
                None => (false, input.as_str()),
            };
            let (src_name, output) = parse_input(rest);
            let src = *index.get(src_name).ok_or_else(|| Error::InvalidGraph {
                node: node.name.clone(),
                reason: format!("input `{input}` names no node"),
            })?;
            if control {
                b.control(src, id);
            } else {
                let dtype = if data_index < ops[k].num_inputs() {
                    dtype_of(ops[k].input_type(data_index))
                } else {
                    DType::FLOAT
                };
                b.node_mut(id).inputs.push(Input {
                    node: src,
                    output,
                    dtype,
                });
                data_index += 1;
            }
        }
    }
    b.build()
}

/// The [`DType`] (the `DataType` enum value) of a TensorFlow data type.
fn dtype_of(t: tensorflow::DataType) -> DType {
    use tensorflow::DataType as T;
    DType(match t {
        T::Float => 1,
        T::Double => 2,
        T::Int32 => 3,
        T::UInt8 => 4,
        T::Int16 => 5,
        T::Int8 => 6,
        T::String => 7,
        T::Complex64 => 8,
        T::Int64 => 9,
        T::Bool => 10,
        T::QInt8 => 11,
        T::QUInt8 => 12,
        T::QInt32 => 13,
        T::BFloat16 => 14,
        T::QInt16 => 15,
        T::QUInt16 => 16,
        T::UInt16 => 17,
        T::Complex128 => 18,
        T::Half => 19,
        T::Resource => 20,
        T::Variant => 21,
        T::UInt32 => 22,
        T::UInt64 => 23,
        T::UnrecognizedEnumValue(c) => c as i32,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::proto::NodeDef;
    use tf_iaware_core::graph::library::library_bytes;

    /// A NodeDef of `op` with `inputs` and type attributes `types` (`AttrValue.type`, field 6).
    fn node(name: &str, op: &str, inputs: &[&str], types: &[(&str, u8)]) -> NodeDef {
        NodeDef {
            name: name.into(),
            op: op.into(),
            input: inputs.iter().map(|i| i.to_string()).collect(),
            attr: types
                .iter()
                .map(|(k, t)| (k.to_string(), vec![6 << 3, *t]))
                .collect(),
            ..Default::default()
        }
    }

    fn analyze(def: &GraphDef) -> Result<Analyzed> {
        analyze_bytes(&prost::Message::encode_to_vec(def), "g.pb")
    }

    #[test]
    fn an_op_with_no_kernel_on_any_device_is_refused_naming_node_and_type() {
        // CudnnRNN is registered in every build; its kernels are GPU-only, and the pinned
        // libtensorflow is CPU-only.
        if !tf::kernel_device_types("CudnnRNN").unwrap().is_empty() {
            eprintln!("skipped: this TensorFlow build has CudnnRNN kernels");
            return;
        }
        let mut def = GraphDef::default();
        for p in ["i", "h", "c", "p"] {
            def.node.push(node(p, "Placeholder", &[], &[("dtype", 1)]));
        }
        def.node
            .push(node("rnn", "CudnnRNN", &["i", "h", "c", "p"], &[("T", 1)]));
        let e = analyze(&def).unwrap_err();
        assert!(
            matches!(&e, Error::NoKernelAnywhere { op, op_type } if op == "rnn" && op_type == "CudnnRNN"),
            "{e}"
        );
        assert!(e.to_string().contains("no kernel"), "{e}");
    }

    #[test]
    fn a_function_call_needs_no_kernel() {
        let mut def = GraphDef::default();
        def.node.push(node("call", "f", &[], &[]));
        def.library = Some(library_bytes(&[("f", &[])]));
        let a = analyze(&def).unwrap();
        let id = a.op_graph.id("call").unwrap();
        assert!(a.op_graph.node(id).kernel_device_types.is_empty());
    }
}

//! Analysis of a real TensorFlow graph into an [`OpGraph`]: names, op types, requested devices,
//! inputs, output dtypes and shapes (TensorFlow's shape inference), decoded attributes, registered
//! kernels and colocation groups.

use std::collections::{BTreeMap, HashMap};

use prost::Message;
use tensorflow::{Graph, ImportGraphDefOptions, Operation};

use super::dtype::DType;
use super::model::{Attr, Input, NodeId, OpGraph, OpGraphBuilder, TensorInfo};
use super::signature::{self, OpSignature};
use crate::error::{Error, Result};
use crate::proto::{self, GraphDef};
use crate::tf;

/// A TensorFlow graph together with its decoded GraphDef and its [`OpGraph`].
pub struct Analyzed {
    /// The graph as TensorFlow holds it.
    pub graph: Graph,
    /// The GraphDef, decoded losslessly (for rewriting).
    pub graph_def: GraphDef,
    /// The plain-data model.
    pub op_graph: OpGraph,
    /// Registry signature (input names, statefulness) of every op type in the graph.
    pub signatures: BTreeMap<String, OpSignature>,
}

/// Decodes serialized GraphDef bytes without TensorFlow.
///
/// # Errors
/// [`Error::GraphDecode`] (naming `what`, e.g. the file) for bytes that are not a GraphDef.
pub fn decode_graph_def(bytes: &[u8], what: &str) -> Result<GraphDef> {
    if bytes.is_empty() {
        return Err(Error::GraphDecode {
            what: what.into(),
            source: prost::DecodeError::new("the GraphDef is empty (0 bytes)"),
        });
    }
    let def = GraphDef::decode(bytes).map_err(|source| Error::GraphDecode {
        what: what.into(),
        source,
    })?;
    if def.node.is_empty() && !bytes.is_empty() {
        return Err(Error::GraphDecode {
            what: what.into(),
            source: prost::DecodeError::new("decoded to a GraphDef without nodes"),
        });
    }
    Ok(def)
}

/// Imports serialized GraphDef bytes into TensorFlow and analyses them.
///
/// # Errors
/// [`Error::GraphDecode`] for bytes that are not a GraphDef; [`Error::TensorFlow`] if TensorFlow
/// rejects the graph (unknown op, bad input reference, failed shape inference).
pub fn analyze_bytes(bytes: &[u8], what: &str) -> Result<Analyzed> {
    tf::ensure_supported_version()?;
    let graph_def = decode_graph_def(bytes, what)?;
    let mut graph = Graph::new();
    graph
        .import_graph_def(bytes, &ImportGraphDefOptions::new())
        .map_err(|e| Error::tf(format!("importing GraphDef {what}"), e))?;
    let op_graph = build(&graph, &graph_def)?;
    let signatures = signature::signatures(&graph, graph_def.node.iter().map(|n| n.op.as_str()))?;
    Ok(Analyzed {
        graph,
        graph_def,
        op_graph,
        signatures,
    })
}

/// Analyses a graph built in-process (e.g. with the `tensorflow` crate's ops).
///
/// # Errors
/// As [`analyze_bytes`].
pub fn analyze_graph(graph: &Graph) -> Result<Analyzed> {
    let bytes = graph
        .graph_def()
        .map_err(|e| Error::tf("exporting GraphDef", e))?;
    analyze_bytes(&bytes, "in-process graph")
}

/// Builds the [`OpGraph`] of `def`, reading dtypes, shapes and input types from `graph`
/// (which must hold `def`'s nodes).
fn build(graph: &Graph, def: &GraphDef) -> Result<OpGraph> {
    let mut b = OpGraphBuilder::new();
    let mut ops: Vec<Operation> = Vec::with_capacity(def.node.len());
    for node in &def.node {
        let id = b.add(&node.name, &node.op)?;
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
            let dtype = DType::from(op.output_type(i));
            let shape = graph.tensor_shape(output).ok().and_then(|s| {
                s.dims()
                    .map(|n| (0..n).map(|d| s[d].unwrap_or(-1)).collect::<Vec<i64>>())
            });
            b.output(id, dtype, shape);
        }
        let n = b.node_mut(id);
        n.requested_device = requested_device(&node.name, &node.device)?;
        n.kernel_device_types = tf::kernel_device_types(&node.op)?;
        for (name, raw) in &node.attr {
            n.attrs
                .insert(name.clone(), decode_attr(&node.name, name, raw)?);
        }
        ops.push(op);
    }
    let index: HashMap<&str, NodeId> = def
        .node
        .iter()
        .enumerate()
        .map(|(i, n)| (n.name.as_str(), i))
        .collect();
    for (id, node) in def.node.iter().enumerate() {
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
                let dtype = if data_index < ops[id].num_inputs() {
                    DType::from(ops[id].input_type(data_index))
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

/// The structure of a decoded GraphDef as an [`OpGraph`], without TensorFlow: names, op types,
/// devices, inputs, control inputs, attributes and colocation groups (`_class` only — edge types
/// and output shapes need TensorFlow's op registry, see [`analyze_bytes`]). For tooling and
/// fuzzing.
///
/// # Errors
/// [`Error::InvalidGraph`] for duplicate names or inputs naming no node; [`Error::BadAttr`].
pub fn structure(def: &GraphDef) -> Result<OpGraph> {
    let mut b = OpGraphBuilder::new();
    for node in &def.node {
        let id = b.add(&node.name, &node.op)?;
        let n = b.node_mut(id);
        n.requested_device = requested_device(&node.name, &node.device)?;
        for (name, raw) in &node.attr {
            n.attrs
                .insert(name.clone(), decode_attr(&node.name, name, raw)?);
        }
    }
    for (id, node) in def.node.iter().enumerate() {
        for input in &node.input {
            let (control, rest) = match input.strip_prefix('^') {
                Some(r) => (true, r),
                None => (false, input.as_str()),
            };
            let (src_name, output) = parse_input(rest);
            let src = b.id(src_name).ok_or_else(|| Error::InvalidGraph {
                node: node.name.clone(),
                reason: format!("input `{input}` names no node"),
            })?;
            if control {
                b.control(src, id);
            } else {
                b.node_mut(id).inputs.push(Input {
                    node: src,
                    output,
                    dtype: DType::FLOAT,
                });
            }
        }
    }
    b.build()
}

/// `"name:3"` → (`name`, 3); `"name"` → (`name`, 0) (GraphDef input syntax, without `^`).
pub fn parse_input(input: &str) -> (&str, usize) {
    match input.rsplit_once(':') {
        Some((n, o)) if !o.is_empty() && o.chars().all(|c| c.is_ascii_digit()) => {
            (n, o.parse().unwrap_or(usize::MAX))
        }
        _ => (input, 0),
    }
}

/// Decodes one serialized `AttrValue` into an [`Attr`].
fn decode_attr(node: &str, name: &str, raw: &[u8]) -> Result<Attr> {
    let v = proto::AttrValue::decode(raw).map_err(|e| Error::BadAttr {
        node: node.into(),
        attr: name.into(),
        reason: e.to_string(),
    })?;
    let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
    Ok(if let Some(l) = v.list {
        if !l.s.is_empty() {
            Attr::Strs(l.s.iter().map(|s| text(s)).collect())
        } else if !l.i.is_empty() {
            Attr::Ints(l.i)
        } else if !l.r#type.is_empty() {
            Attr::Types(l.r#type.into_iter().map(DType).collect())
        } else {
            Attr::Other
        }
    } else if let Some(s) = v.s {
        Attr::Str(text(&s))
    } else if let Some(i) = v.i {
        Attr::Int(i)
    } else if let Some(f) = v.f {
        Attr::Float(f)
    } else if let Some(b) = v.b {
        Attr::Bool(b)
    } else if let Some(t) = v.r#type {
        Attr::Type(DType(t))
    } else if let Some(s) = v.shape {
        Attr::Shape(s.dims())
    } else {
        Attr::Other
    })
}

/// Output tensor sizes of `node` summed, bytes (unknown sizes count 0).
pub fn output_bytes(info: &[TensorInfo]) -> u64 {
    info.iter().filter_map(TensorInfo::bytes).sum()
}

/// A NodeDef's `device` field, checked to be a device specification TensorFlow could match.
///
/// # Errors
/// [`Error::InvalidGraph`] naming the node and the device string.
fn requested_device(node: &str, device: &str) -> Result<String> {
    super::device_name::DeviceName::parse(device).map_err(|e| Error::InvalidGraph {
        node: node.into(),
        reason: format!("requested device: {e}"),
    })?;
    Ok(device.to_string())
}

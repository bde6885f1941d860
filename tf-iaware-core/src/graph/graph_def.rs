//! A decoded GraphDef, without TensorFlow: the bytes checked and decoded ([`decode_graph_def`]),
//! its structure as an [`OpGraph`] ([`structure`]), and the pieces of NodeDef syntax the
//! TensorFlow-side analysis (`tf_iaware::graph::analyze`) shares: input references, attributes,
//! requested devices.

use prost::Message;

use super::builder::OpGraphBuilder;
use super::dtype::DType;
use super::model::{Attr, Input, NodeId, OpGraph, TensorInfo};
use crate::error::{Error, Result};
use crate::proto::{self, GraphDef};

/// Decodes serialized GraphDef bytes without TensorFlow.
///
/// # Errors
/// [`Error::GraphDecode`] (naming `what`, e.g. the file) for bytes that are not a GraphDef;
/// [`Error::FunctionLibrary`] for a function library TensorFlow's import would recurse through
/// until it aborts ([`check_function_library`](super::library::check_function_library)).
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
    if let Some(library) = &def.library {
        super::library::check_function_library(library, what)?;
    }
    Ok(def)
}

/// The structure of a decoded GraphDef as an [`OpGraph`], without TensorFlow: names, op types,
/// devices, inputs, control inputs, attributes and colocation groups (`_class` only — edge types
/// and output shapes need TensorFlow's op registry, see `tf_iaware::graph::analyze::analyze_bytes`). For tooling and
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
    for (id, node) in NodeId::range(def.node.len()).zip(&def.node) {
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
///
/// # Errors
/// [`Error::BadAttr`] naming the node and the attribute.
pub fn decode_attr(node: &str, name: &str, raw: &[u8]) -> Result<Attr> {
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
pub fn requested_device(node: &str, device: &str) -> Result<String> {
    super::device_name::DeviceName::parse(device).map_err(|e| Error::InvalidGraph {
        node: node.into(),
        reason: format!("requested device: {e}"),
    })?;
    Ok(device.to_string())
}

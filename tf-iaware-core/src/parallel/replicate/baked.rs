//! Shape arithmetic that Python folded from a fixed batch (`tf.shape` of a fully defined shape
//! is a constant): constants with the batch as leading entry, and what is computed from them
//! alone, are replicated too, each copy with its replica's share; a float constant equal to the
//! batch is rewritten where it divides in a replica (the divisor of a mean's gradient).

use std::collections::BTreeMap;

use prost::Message;

use super::select::{Edge, Selection};
use crate::graph::{OpSignature, Sidecar};
use crate::proto::attr::{self, DT_DOUBLE, DT_FLOAT, DT_INT32, DT_INT64};
use crate::proto::{GraphDef, NodeDef, TensorAttr, TensorProto};

/// How a constant holds a fixed batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Baked {
    /// An integer vector (a shape) whose first entry is the batch.
    LeadingInt,
    /// A float scalar equal to the batch (the divisor of a mean's gradient).
    FloatScalar,
}

/// Finds the constants that hold the graph's fixed batch, marks them and what is computed from
/// them alone (where the step needs it) as replicated in `s`, and returns each node's kind.
/// Nothing when the batch is not fixed.
pub(super) fn mark_baked(
    def: &GraphDef,
    signatures: &BTreeMap<String, OpSignature>,
    sidecar: &Sidecar,
    s: &mut Selection<'_>,
) -> Vec<Option<Baked>> {
    let n = def.node.len();
    let mut baked: Vec<Option<Baked>> = vec![None; n];
    let Some(b) = fixed_batch(def, &s.inputs, sidecar) else {
        return baked;
    };
    let derived = const_derived(def, &s.edges, &s.batch_dep, signatures);
    for (slot, node) in baked.iter_mut().zip(&def.node) {
        *slot = baked_kind(node, b).filter(|k| *k == Baked::LeadingInt);
    }
    let mut tainted: Vec<bool> = baked.iter().map(Option::is_some).collect();
    let mut changed = true;
    while changed {
        changed = false;
        for i in 0..n {
            if !tainted[i] && derived[i] && s.edges[i].iter().any(|e| !e.control && tainted[e.src])
            {
                tainted[i] = true;
                changed = true;
            }
        }
    }
    for ((r, &t), &needed) in s.replicated.iter_mut().zip(&tainted).zip(&s.needed) {
        *r |= t && needed;
    }
    // A float batch is the mean's divisor only where it divides in a replica.
    for (i, node) in def.node.iter().enumerate() {
        if baked_kind(node, b) != Some(Baked::FloatScalar) {
            continue;
        }
        let divides = s.consumers[i].iter().any(|&c| {
            s.replicated[c]
                && matches!(def.node[c].op.as_str(), "RealDiv" | "Div" | "DivNoNan")
                && s.edges[c]
                    .iter()
                    .filter(|e| !e.control)
                    .nth(1)
                    .map(|e| e.src)
                    == Some(i)
        });
        if divides {
            baked[i] = Some(Baked::FloatScalar);
            s.replicated[i] = true;
        }
    }
    baked
}

/// The batch fixed in the graph: the leading dimension every sidecar input's placeholder
/// declares, when they agree and it is known.
fn fixed_batch(def: &GraphDef, inputs: &BTreeMap<usize, String>, sidecar: &Sidecar) -> Option<i64> {
    let mut fixed = None;
    for (&i, name) in inputs {
        let declared = attr::get(&def.node[i], "shape")
            .and_then(|a| a.shape)
            .and_then(|s| s.dims())
            .and_then(|d| d.first().copied());
        let given = sidecar.inputs.get(name).and_then(|d| d.first().copied());
        let b = declared.filter(|&b| b > 0).or(given.filter(|&b| b > 0))?;
        if *fixed.get_or_insert(b) != b {
            return None;
        }
    }
    fixed
}

/// Nodes computed from constants alone (no batch, no variable, nothing stateful).
fn const_derived(
    def: &GraphDef,
    edges: &[Vec<Edge>],
    batch_dep: &[bool],
    signatures: &BTreeMap<String, OpSignature>,
) -> Vec<bool> {
    let n = def.node.len();
    let mut derived: Vec<bool> = def.node.iter().map(|d| d.op == "Const").collect();
    let mut changed = true;
    while changed {
        changed = false;
        for i in 0..n {
            let node = &def.node[i];
            if derived[i]
                || batch_dep[i]
                || edges[i].is_empty()
                || signatures.get(&node.op).is_none_or(|s| s.stateful)
            {
                continue;
            }
            if edges[i].iter().all(|e| e.control || derived[e.src]) {
                derived[i] = true;
                changed = true;
            }
        }
    }
    derived
}

fn const_tensor(node: &NodeDef) -> Option<TensorProto> {
    if node.op != "Const" {
        return None;
    }
    TensorAttr::decode(node.attr.get("value")?.as_slice())
        .ok()?
        .tensor
}

fn elements(t: &TensorProto) -> Option<usize> {
    t.tensor_shape
        .as_ref()?
        .dims()?
        .iter()
        .try_fold(1usize, |a, &d| usize::try_from(d).ok().map(|d| a * d))
}

/// The integer values of a constant, expanded to every element.
fn int_values(t: &TensorProto) -> Option<Vec<i64>> {
    let n = elements(t)?;
    let v: Vec<i64> = match t.dtype {
        DT_INT32 if !t.tensor_content.is_empty() => t
            .tensor_content
            .chunks_exact(4)
            .map(|c| i64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]])))
            .collect(),
        DT_INT64 if !t.tensor_content.is_empty() => t
            .tensor_content
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
            .collect(),
        DT_INT32 => t.int_val.iter().map(|&x| i64::from(x)).collect(),
        DT_INT64 => t.int64_val.clone(),
        _ => return None,
    };
    match v.len() {
        len if len == n => Some(v),
        1 => Some(vec![v[0]; n]),
        _ => None,
    }
}

fn float_scalar(t: &TensorProto) -> Option<f64> {
    if elements(t)? != 1 {
        return None;
    }
    match t.dtype {
        DT_FLOAT if t.tensor_content.len() == 4 => {
            let c = &t.tensor_content;
            Some(f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]])))
        }
        DT_FLOAT => t.float_val.first().map(|&x| f64::from(x)),
        DT_DOUBLE => t.double_val.first().copied(),
        _ => None,
    }
}

fn baked_kind(node: &NodeDef, batch: i64) -> Option<Baked> {
    let t = const_tensor(node)?;
    let rank = t.tensor_shape.as_ref()?.dims()?.len();
    if rank == 1 && int_values(&t)?.first() == Some(&batch) {
        return Some(Baked::LeadingInt);
    }
    (rank == 0 && float_scalar(&t) == Some(batch as f64)).then_some(Baked::FloatScalar)
}

/// Writes `share` where a baked constant holds the batch.
pub(super) fn rewrite_baked(node: &mut NodeDef, kind: Baked, share: i64) {
    let Some(mut t) = const_tensor(node) else {
        return;
    };
    match kind {
        Baked::LeadingInt => {
            let Some(mut v) = int_values(&t) else { return };
            v[0] = share;
            t.tensor_content.clear();
            if t.dtype == DT_INT32 {
                t.int_val = v.iter().map(|&x| x as i32).collect();
            } else {
                t.int64_val = v;
            }
        }
        Baked::FloatScalar => {
            t.tensor_content.clear();
            if t.dtype == DT_DOUBLE {
                t.double_val = vec![share as f64];
            } else {
                t.float_val = vec![share as f32];
            }
        }
    }
    node.attr.insert("value".into(), attr::tensor(t));
}

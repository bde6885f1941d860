//! Analytic work of one op from the shapes of its tensors: floating-point operations (a
//! multiply-add counts 2, as TensorFlow's grappler cost estimator counts them), bytes of memory
//! traffic (inputs read + outputs written) and the memory it holds.
//!
//! Unknown dimensions (`-1`) count as 1 and unknown ranks as empty tensors, so a graph whose batch
//! size is not yet set still gets relative costs; set shapes first for absolute ones.

mod kind;

pub(crate) use kind::OpKind;
pub use kind::{classify, OpClass};

use crate::graph::{Attr, DType, Input, NodeId, OpGraph, OpNode};

/// Work of one op, device-independent.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct OpWork {
    /// Floating-point operations.
    pub flops: f64,
    /// Bytes read and written (inputs + outputs).
    pub bytes: f64,
    /// Whether the op does no work at all (a view, a constant, a handle, control flow): its time
    /// is the device's per-op overhead only.
    pub free: bool,
}

/// Elements of a shape; `-1` dimensions count as 1.
fn elems_of(shape: &[i64]) -> f64 {
    shape.iter().map(|&d| d.max(1) as f64).product()
}

fn output_elems(node: &OpNode, k: usize) -> f64 {
    node.outputs
        .get(k)
        .and_then(|t| t.shape.as_deref())
        .map_or(0.0, elems_of)
}

fn elem_size(dtype: DType) -> f64 {
    dtype.size_bytes().unwrap_or(0) as f64
}

fn input_shape<'g>(graph: &'g OpGraph, input: &Input) -> Option<&'g [i64]> {
    graph
        .node(input.node)
        .outputs
        .get(input.output)?
        .shape
        .as_deref()
}

fn input_dtype(graph: &OpGraph, input: &Input) -> DType {
    graph
        .node(input.node)
        .outputs
        .get(input.output)
        .map_or(input.dtype, |t| t.dtype)
}

fn input_elems(graph: &OpGraph, input: &Input) -> f64 {
    input_shape(graph, input).map_or(0.0, elems_of)
}

fn input_bytes(graph: &OpGraph, input: &Input) -> f64 {
    input_elems(graph, input) * elem_size(input_dtype(graph, input))
}

fn nth_input_shape<'g>(graph: &'g OpGraph, node: &OpNode, k: usize) -> Option<&'g [i64]> {
    input_shape(graph, node.inputs.get(k)?)
}

fn nth_input_elems(graph: &OpGraph, node: &OpNode, k: usize) -> f64 {
    node.inputs.get(k).map_or(0.0, |i| input_elems(graph, i))
}

fn dim(shape: Option<&[i64]>, k: usize) -> Option<f64> {
    shape.and_then(|s| s.get(k)).map(|&d| d.max(1) as f64)
}

/// Bytes of all data inputs (resource handles count 0).
fn all_input_bytes(graph: &OpGraph, node: &OpNode) -> f64 {
    node.inputs.iter().map(|i| input_bytes(graph, i)).sum()
}

/// Bytes of all outputs (reference outputs alias a variable and count 0).
fn all_output_bytes(node: &OpNode) -> f64 {
    node.outputs
        .iter()
        .filter(|t| !t.dtype.is_ref())
        .map(|t| t.shape.as_deref().map_or(0.0, elems_of) * elem_size(t.dtype))
        .sum()
}

/// Product of the spatial window of a pooling op's `ksize` attribute (1 × kh × kw × 1).
fn window(node: &OpNode) -> Option<f64> {
    node.attr_ints("ksize")
        .filter(|k| !k.is_empty())
        .map(|k| k.iter().map(|&d| d.max(1) as f64).product())
}

/// FLOPs of a MatMul-like op: `2 · out_elems · k`, `k` the contracted dimension.
fn matmul_flops(graph: &OpGraph, node: &OpNode, batched: bool) -> f64 {
    let a = nth_input_shape(graph, node, 0);
    let b = nth_input_shape(graph, node, 1);
    let (ta, tb) = if batched {
        (
            node.attr_bool("adj_x").unwrap_or(false),
            node.attr_bool("adj_y").unwrap_or(false),
        )
    } else {
        (
            node.attr_bool("transpose_a").unwrap_or(false),
            node.attr_bool("transpose_b").unwrap_or(false),
        )
    };
    let last = |s: Option<&[i64]>, from_end: usize| -> Option<f64> {
        let s = s?;
        (s.len() >= from_end).then(|| s[s.len() - from_end].max(1) as f64)
    };
    // k: last dim of a (second-last if transposed); else second-last of b (last if transposed).
    let k = last(a, if ta { 2 } else { 1 })
        .or_else(|| last(b, if tb { 1 } else { 2 }))
        .unwrap_or(1.0);
    let out = output_elems(node, 0);
    let out = if out > 0.0 {
        out
    } else {
        // Output shape unknown: m from a, n from b.
        let m = last(a, if ta { 1 } else { 2 }).unwrap_or(1.0);
        let n = last(b, if tb { 2 } else { 1 }).unwrap_or(1.0);
        let batch = a.map_or(1.0, |s| {
            s.iter()
                .take(s.len().saturating_sub(2))
                .map(|&d| d.max(1) as f64)
                .product()
        });
        batch * m * n
    };
    2.0 * out * k
}

/// FLOPs of a compute op of `kind`; `None` where its formula lacks a shape.
fn compute_flops(graph: &OpGraph, node: &OpNode, kind: OpKind) -> Option<f64> {
    let out = output_elems(node, 0);
    let flops = match kind {
        OpKind::MatMul => matmul_flops(graph, node, false),
        OpKind::BatchMatMul => matmul_flops(graph, node, true),
        OpKind::Conv2D => {
            // filter [kh, kw, in/group, out]
            let f = nth_input_shape(graph, node, 1);
            2.0 * out * dim(f, 0)? * dim(f, 1)? * dim(f, 2)?
        }
        OpKind::Conv2DBackpropInput => {
            // (input_sizes, filter, out_backprop)
            let f = nth_input_shape(graph, node, 1);
            2.0 * nth_input_elems(graph, node, 2) * dim(f, 0)? * dim(f, 1)? * dim(f, 2)?
        }
        OpKind::Conv2DBackpropFilter => {
            // (input, filter_sizes, out_backprop); output is the filter [kh, kw, in, out].
            let f = node.outputs.first().and_then(|t| t.shape.as_deref());
            2.0 * nth_input_elems(graph, node, 2) * dim(f, 0)? * dim(f, 1)? * dim(f, 2)?
        }
        OpKind::Depthwise => {
            let f = nth_input_shape(graph, node, 1);
            2.0 * out * dim(f, 0)? * dim(f, 1)?
        }
        OpKind::DepthwiseBackpropInput => {
            let f = nth_input_shape(graph, node, 1);
            2.0 * nth_input_elems(graph, node, 2) * dim(f, 0)? * dim(f, 1)?
        }
        OpKind::DepthwiseBackpropFilter => {
            let f = node.outputs.first().and_then(|t| t.shape.as_deref());
            2.0 * nth_input_elems(graph, node, 2) * dim(f, 0)? * dim(f, 1)?
        }
        OpKind::Pool => out * window(node).unwrap_or(9.0),
        OpKind::MaxPoolV2 => nth_input_elems(graph, node, 0).max(out),
        // (orig_input, orig_output, grad): compare the window, route the gradient.
        OpKind::MaxPoolGrad => nth_input_elems(graph, node, 2) * window(node).unwrap_or(9.0) + out,
        OpKind::AvgPoolGrad => nth_input_elems(graph, node, 1) * window(node).unwrap_or(9.0),
        OpKind::BatchNorm => {
            let per = if node.attr_bool("is_training").unwrap_or(true) {
                10.0
            } else {
                4.0
            };
            per * nth_input_elems(graph, node, 0)
        }
        OpKind::BatchNormGrad => 12.0 * nth_input_elems(graph, node, 0),
        OpKind::CrossEntropy => 8.0 * nth_input_elems(graph, node, 0),
        OpKind::AddN => (node.inputs.len().max(2) - 1) as f64 * out,
        OpKind::Elementwise {
            per_element,
            input_scaled,
        } => {
            let base = if input_scaled || out == 0.0 {
                nth_input_elems(graph, node, 0)
            } else {
                out
            };
            per_element * base
        }
        OpKind::Free
        | OpKind::Memory
        | OpKind::Assign
        | OpKind::Optimiser { .. }
        | OpKind::Unknown => return None,
    };
    Some(flops)
}

fn optimiser_work(graph: &OpGraph, node: &OpNode, per: f64, sparse: bool) -> OpWork {
    // Variables and slots: reference or resource inputs (read and written once each).
    let stateful = node
        .inputs
        .iter()
        .filter(|i| i.dtype.is_ref() || i.dtype.is_resource())
        .count()
        .max(1) as f64;
    // Elements updated: the largest plain input (the gradient); for dense TF1 updates the
    // reference inputs carry the same shape.
    let mut elems = 0.0f64;
    let mut esize = 4.0f64;
    for i in &node.inputs {
        let dt = input_dtype(graph, i);
        if dt.is_resource() || (sparse && dt.is_ref()) {
            continue;
        }
        let e = input_elems(graph, i);
        if e > elems {
            elems = e;
            esize = elem_size(dt.base()).max(1.0);
        }
    }
    OpWork {
        flops: per * elems,
        bytes: elems * esize * (1.0 + 2.0 * stateful),
        free: false,
    }
}

/// Analytic work of op `id` of `graph`.
pub fn op_work(graph: &OpGraph, id: NodeId) -> OpWork {
    work_of_kind(graph, id, OpKind::of(&graph.node(id).op))
}

/// Analytic work of op `id`, whose kind is `kind` (see [`OpKind::of`]).
pub(crate) fn work_of_kind(graph: &OpGraph, id: NodeId, kind: OpKind) -> OpWork {
    let node = graph.node(id);
    match kind {
        OpKind::Optimiser {
            per_element,
            sparse,
        } => optimiser_work(graph, node, per_element, sparse),
        OpKind::Free => OpWork {
            flops: 0.0,
            bytes: 0.0,
            free: true,
        },
        // Assign reads the value and writes the variable (its output aliases it).
        OpKind::Assign => OpWork {
            flops: 0.0,
            bytes: 2.0 * node.inputs.get(1).map_or(0.0, |i| input_bytes(graph, i)),
            free: false,
        },
        OpKind::Memory => OpWork {
            flops: 0.0,
            bytes: all_input_bytes(graph, node) + all_output_bytes(node),
            free: false,
        },
        _ => {
            let bytes = all_input_bytes(graph, node) + all_output_bytes(node);
            // An op without a formula: one FLOP per output element.
            let flops = compute_flops(graph, node, kind).unwrap_or_else(|| {
                node.outputs
                    .iter()
                    .map(|t| t.shape.as_deref().map_or(0.0, elems_of))
                    .sum()
            });
            OpWork {
                flops,
                bytes,
                free: false,
            }
        }
    }
}

/// Bytes op `id` keeps in its device's memory during a step: a variable's value (with its
/// optimiser slots, which are variables of their own), a constant, or the outputs an op produces
/// (activations, counted as live for the whole step as Baechi's m-ETF does). Views (`Identity`,
/// `Reshape`, `ReadVariableOp`, …), reference outputs and handles hold nothing of their own.
pub fn op_memory(graph: &OpGraph, id: NodeId) -> u64 {
    memory_of_kind(graph, id, OpKind::of(&graph.node(id).op))
}

/// [`op_memory`] of op `id`, whose kind is `kind` (see [`OpKind::of`]).
pub(crate) fn memory_of_kind(graph: &OpGraph, id: NodeId, kind: OpKind) -> u64 {
    let node = graph.node(id);
    let bytes_of = |dtype: DType, shape: &[i64]| -> u64 {
        let e = dtype.base().size_bytes().unwrap_or(0);
        shape
            .iter()
            .fold(e, |acc, &d| acc.saturating_mul(d.max(1) as u64))
    };
    match node.op.as_str() {
        "VarHandleOp" => {
            let dtype = match node.attrs.get("dtype") {
                Some(Attr::Type(t)) => *t,
                _ => return 0,
            };
            match node.attrs.get("shape") {
                Some(Attr::Shape(Some(dims))) => bytes_of(dtype, dims),
                _ => 0,
            }
        }
        "VariableV2" | "Variable" | "Const" | "HostConst" => node
            .outputs
            .first()
            .and_then(|t| Some(bytes_of(t.dtype, t.shape.as_deref()?)))
            .unwrap_or(0),
        _ if kind == OpKind::Free => 0,
        _ => node
            .outputs
            .iter()
            .filter(|t| !t.dtype.is_ref() && !t.dtype.is_resource())
            .filter_map(|t| Some(bytes_of(t.dtype, t.shape.as_deref()?)))
            .fold(0u64, u64::saturating_add),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::OpGraphBuilder;

    fn leaf(b: &mut OpGraphBuilder, name: &str, shape: &[i64]) -> NodeId {
        let id = b.add(name, "Placeholder").unwrap();
        b.output(id, DType::FLOAT, Some(shape.to_vec()));
        id
    }

    fn op(b: &mut OpGraphBuilder, name: &str, ty: &str, ins: &[NodeId], out: &[i64]) -> NodeId {
        let id = b.add(name, ty).unwrap();
        for &i in ins {
            b.connect(i, 0, id);
        }
        b.output(id, DType::FLOAT, Some(out.to_vec()));
        id
    }

    #[test]
    fn matmul_and_batch_matmul() {
        let mut b = OpGraphBuilder::new();
        let x = leaf(&mut b, "x", &[32, 784]);
        let w = leaf(&mut b, "w", &[784, 100]);
        let mm = op(&mut b, "mm", "MatMul", &[x, w], &[32, 100]);
        // dW = x^T · dy: transpose_a, contracted dim 32.
        let dy = leaf(&mut b, "dy", &[32, 100]);
        let dw = op(&mut b, "dw", "MatMul", &[x, dy], &[784, 100]);
        b.node_mut(dw)
            .attrs
            .insert("transpose_a".into(), Attr::Bool(true));
        let p = leaf(&mut b, "p", &[8, 16, 64]);
        let q = leaf(&mut b, "q", &[8, 64, 32]);
        let bmm = op(&mut b, "bmm", "BatchMatMulV2", &[p, q], &[8, 16, 32]);
        let g = b.build().unwrap();
        let w1 = op_work(&g, mm);
        assert_eq!(w1.flops, 2.0 * 32.0 * 784.0 * 100.0);
        assert_eq!(
            w1.bytes,
            4.0 * (32.0 * 784.0 + 784.0 * 100.0 + 32.0 * 100.0)
        );
        assert!(!w1.free);
        assert_eq!(op_work(&g, dw).flops, 2.0 * 784.0 * 100.0 * 32.0);
        assert_eq!(op_work(&g, bmm).flops, 2.0 * 8.0 * 16.0 * 32.0 * 64.0);
    }

    #[test]
    fn convolutions_and_their_gradients_agree() {
        // 3×3 conv, 16 → 32 channels, 28×28 SAME, batch 4.
        let mut b = OpGraphBuilder::new();
        let x = leaf(&mut b, "x", &[4, 28, 28, 16]);
        let f = leaf(&mut b, "f", &[3, 3, 16, 32]);
        let conv = op(&mut b, "conv", "Conv2D", &[x, f], &[4, 28, 28, 32]);
        let sizes = leaf(&mut b, "sizes", &[4]);
        let dy = leaf(&mut b, "dy", &[4, 28, 28, 32]);
        let dx = op(
            &mut b,
            "dx",
            "Conv2DBackpropInput",
            &[sizes, f, dy],
            &[4, 28, 28, 16],
        );
        let fsizes = leaf(&mut b, "fsizes", &[4]);
        let df = op(
            &mut b,
            "df",
            "Conv2DBackpropFilter",
            &[x, fsizes, dy],
            &[3, 3, 16, 32],
        );
        let df_w = leaf(&mut b, "dwf", &[3, 3, 16, 2]);
        let dw = op(
            &mut b,
            "dw",
            "DepthwiseConv2dNative",
            &[x, df_w],
            &[4, 28, 28, 32],
        );
        let g = b.build().unwrap();
        let fwd = 2.0 * (4.0 * 28.0 * 28.0 * 32.0) * 9.0 * 16.0;
        assert_eq!(op_work(&g, conv).flops, fwd);
        assert_eq!(op_work(&g, dx).flops, fwd);
        assert_eq!(op_work(&g, df).flops, fwd);
        assert_eq!(
            op_work(&g, dw).flops,
            2.0 * (4.0 * 28.0 * 28.0 * 32.0) * 9.0
        );
    }

    #[test]
    fn pools_norms_softmax_reductions_elementwise() {
        let mut b = OpGraphBuilder::new();
        let x = leaf(&mut b, "x", &[2, 8, 8, 4]);
        let pool = op(&mut b, "pool", "MaxPool", &[x], &[2, 4, 4, 4]);
        b.node_mut(pool)
            .attrs
            .insert("ksize".into(), Attr::Ints(vec![1, 2, 2, 1]));
        let bn = op(&mut b, "bn", "FusedBatchNormV3", &[x], &[2, 8, 8, 4]);
        let relu = op(&mut b, "relu", "Relu", &[x], &[2, 8, 8, 4]);
        let sum = op(&mut b, "sum", "Sum", &[x], &[4]);
        let logits = leaf(&mut b, "logits", &[32, 10]);
        let xent = op(
            &mut b,
            "xent",
            "SoftmaxCrossEntropyWithLogits",
            &[logits],
            &[32],
        );
        let addn = op(&mut b, "addn", "AddN", &[x, x, x], &[2, 8, 8, 4]);
        let concat = op(&mut b, "concat", "ConcatV2", &[x, x], &[2, 8, 8, 8]);
        let reshape = op(&mut b, "reshape", "Reshape", &[x], &[2, 256]);
        let weird = op(&mut b, "weird", "SomeCustomOp", &[x], &[7]);
        let g = b.build().unwrap();
        let n = 2.0 * 8.0 * 8.0 * 4.0;
        assert_eq!(op_work(&g, pool).flops, (2.0 * 4.0 * 4.0 * 4.0) * 4.0);
        assert_eq!(op_work(&g, bn).flops, 10.0 * n);
        assert_eq!(op_work(&g, relu).flops, n);
        assert_eq!(op_work(&g, relu).bytes, 8.0 * n);
        assert_eq!(op_work(&g, sum).flops, n);
        assert_eq!(op_work(&g, xent).flops, 8.0 * 320.0);
        assert_eq!(op_work(&g, addn).flops, 2.0 * n);
        let c = op_work(&g, concat);
        assert_eq!((c.flops, c.bytes, c.free), (0.0, 4.0 * 4.0 * n, false));
        let r = op_work(&g, reshape);
        assert!(r.free && r.flops == 0.0 && r.bytes == 0.0);
        assert_eq!(op_memory(&g, reshape), 0);
        assert_eq!(op_work(&g, weird).flops, 7.0);
        assert_eq!(op_memory(&g, relu), 4 * n as u64);
    }

    #[test]
    fn optimiser_updates_and_variable_memory() {
        let mut b = OpGraphBuilder::new();
        let v = b.add("v", "VarHandleOp").unwrap();
        b.output(v, DType::RESOURCE, Some(vec![]));
        b.node_mut(v)
            .attrs
            .insert("dtype".into(), Attr::Type(DType::FLOAT));
        b.node_mut(v)
            .attrs
            .insert("shape".into(), Attr::Shape(Some(vec![100, 10])));
        let m = b.add("m", "VarHandleOp").unwrap();
        b.output(m, DType::RESOURCE, Some(vec![]));
        let lr = leaf(&mut b, "lr", &[]);
        let grad = leaf(&mut b, "grad", &[100, 10]);
        let mom = leaf(&mut b, "mom", &[]);
        let apply = b.add("apply", "ResourceApplyMomentum").unwrap();
        for i in [v, m, lr, grad, mom] {
            b.connect(i, 0, apply);
        }
        let old = b.add("old", "VariableV2").unwrap();
        b.output(old, DType(101), Some(vec![50]));
        let delta = leaf(&mut b, "delta", &[50]);
        let sgd = b.add("sgd", "ApplyGradientDescent").unwrap();
        b.connect(old, 0, sgd);
        b.connect(lr, 0, sgd);
        b.connect(delta, 0, sgd);
        b.output(sgd, DType(101), Some(vec![50]));
        let g = b.build().unwrap();
        let w = op_work(&g, apply);
        assert_eq!(w.flops, 4.0 * 1000.0);
        // grad read + (var, accum) read and written.
        assert_eq!(w.bytes, 1000.0 * 4.0 * 5.0);
        let w = op_work(&g, sgd);
        assert_eq!(w.flops, 2.0 * 50.0);
        assert_eq!(w.bytes, 50.0 * 4.0 * 3.0);
        assert_eq!(op_memory(&g, v), 4000);
        assert_eq!(op_memory(&g, m), 0, "no shape attr: unknown size");
        assert_eq!(op_memory(&g, old), 200);
        assert_eq!(
            op_memory(&g, sgd),
            0,
            "a reference output aliases the variable"
        );
    }
}

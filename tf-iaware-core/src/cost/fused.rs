//! Measured times of rewritten kernels, given back to the user's ops they replaced.
//!
//! TensorFlow does not always run the graph it was given. Grappler's remapper and, on oneDNN
//! builds, the MKL layout pass fuse a contraction with the element-wise ops that follow it
//! (`Conv2D`+`BiasAdd`+`Relu` → one `_FusedConv2D`, `MatMul`+`BiasAdd` → `_FusedMatMul`,
//! `FusedBatchNormV3`+`Relu` → `_FusedBatchNormEx`, …). The fused node takes the name of the *last*
//! op of the chain, and step stats show one entry under that name whose `timeline_label` names
//! the fused kernel. Taken at face value that sample would charge the convolution's time to
//! `conv1/Relu` while `conv1/Conv2D` kept its analytic time: the layer counted twice.
//!
//! [`attribute`] finds the chain a fused sample replaced (the named node, then back through
//! its data inputs while each intermediate has a single consumer, until an op the kernel's name
//! begins with once the rewriters' prefixes are gone: `Conv2D` for `_FusedConv2D`,
//! `FusedBatchNormV3` for `_FusedBatchNormEx`)
//! and splits the time over the chain in proportion to each op's analytic size (FLOPs + bytes,
//! the size the per-type fits use). The parts add up to the kernel's time, so nothing is counted
//! twice, and a placement that splits the chain over devices (where TensorFlow cannot fuse) gets
//! a time for each op. Kernels that only rename an op (`_MklNativeConv2D` on a `Conv2D` node)
//! stay where they are; a rewrite whose chain cannot be found stays on the named node.
//!
//! The backward pass has a fusion of siblings, not of a chain: oneDNN's
//! `_MklNativeConv2DBackpropFilterWithBias` runs a `Conv2DBackpropFilter` *and* the
//! `BiasAddGrad` that reads the same gradient, under the filter gradient's name, and the bias
//! gradient has no sample at all. Left so, the bias gradient was priced by its type's fit from
//! a dense layer's, extrapolated to a convolution's size: 163 ms of a 31 ms inception step.
//! [`attribute`] splits such a kernel's time over the two as it does a chain's.

use super::analytic::op_work;
use super::measured::{Measurements, OpSample};
use crate::graph::{Input, NodeId, OpGraph};

/// How many ops back from the fused node a chain may reach (contraction, bias, add, activation).
const MAX_CHAIN: usize = 4;

impl Measurements {
    /// These samples with every fused kernel's time split over the ops of `graph` it replaced
    /// (TensorFlow names a fused `Conv2D`+`BiasAdd`+`Relu` after the `Relu`), so a measured
    /// layer is counted once whether or not this machine's TensorFlow fused it. Idempotent;
    /// the cost model applies it to whatever it is given.
    pub fn attributed(&self, graph: &OpGraph) -> Measurements {
        attribute(self, graph)
    }
}

/// The samples of `m` with every fused kernel's time split over the user's ops it replaced
/// (see the module documentation). Samples of ops not in `graph`, and samples already
/// attributed, are kept as they are, so attributing twice changes nothing.
pub(super) fn attribute(m: &Measurements, graph: &OpGraph) -> Measurements {
    let mut out = Measurements {
        step_overhead_s: m.step_overhead_s,
        ..Measurements::new()
    };
    for s in &m.samples {
        match fused_chain(s, graph) {
            Some(chain) => split(s, graph, &chain, &mut out),
            None => out.samples.push(s.clone()),
        }
    }
    out
}

/// The user's ops a sample's kernel replaced, contraction first, when the kernel is not the
/// node's own op; `None` when the sample needs no attribution.
fn fused_chain(s: &OpSample, graph: &OpGraph) -> Option<Vec<NodeId>> {
    let kernel = s.kernel.as_deref()?;
    let start = graph.id(&s.node)?;
    let own = graph.node(start).op.as_str();
    if kernel == own {
        return None;
    }
    if contains_op(kernel, own) {
        // A rename, or a backward contraction fused with the bias gradient beside it.
        let with_bias = core_name(kernel).strip_suffix("WithBias") == Some(core_name(own));
        return with_bias
            .then(|| bias_gradient_beside(graph, start))
            .flatten()
            .map(|bias| vec![start, bias]);
    }
    let mut chain = vec![start];
    if walk_back(graph, kernel, start, &mut chain) {
        chain.reverse();
        Some(chain)
    } else {
        None
    }
}

/// The `BiasAddGrad` that reads the same gradient tensor as one of `at`'s data inputs, seen
/// through `Identity` ops (the gradient of a `BiasAdd` passes its input's gradient on through
/// one, which Grappler removes before oneDNN fuses).
fn bias_gradient_beside(graph: &OpGraph, at: NodeId) -> Option<NodeId> {
    graph.node(at).inputs.iter().find_map(|input| {
        let source = through_identity(graph, input);
        let mut readers = graph.consumers(source.node).to_vec();
        for k in 0..readers.len() {
            if graph.node(readers[k]).op == "Identity" {
                readers.extend_from_slice(graph.consumers(readers[k]));
            }
        }
        readers.into_iter().find(|&c| {
            c != at
                && graph.node(c).op == "BiasAddGrad"
                && graph
                    .node(c)
                    .inputs
                    .first()
                    .map(|i| through_identity(graph, i))
                    .is_some_and(|i| (i.node, i.output) == (source.node, source.output))
        })
    })
}

/// The tensor `input` carries, before any `Identity` ops that pass it on (at most a few).
fn through_identity<'g>(graph: &'g OpGraph, input: &'g Input) -> &'g Input {
    let mut at = input;
    for _ in 0..MAX_CHAIN {
        match graph.node(at.node) {
            n if n.op == "Identity" && !n.inputs.is_empty() => at = &n.inputs[0],
            _ => break,
        }
    }
    at
}

/// Depth-first from the last op of `chain` through data inputs whose output only it consumes;
/// true (with `chain` extended up to the contraction) when an op the kernel names is reached.
fn walk_back(graph: &OpGraph, kernel: &str, at: NodeId, chain: &mut Vec<NodeId>) -> bool {
    if chain.len() > MAX_CHAIN {
        return false;
    }
    for input in &graph.node(at).inputs {
        let prev = input.node;
        if chain.contains(&prev) || graph.consumers(prev).len() != 1 {
            continue;
        }
        chain.push(prev);
        if contains_op(kernel, &graph.node(prev).op) || walk_back(graph, kernel, prev, chain) {
            return true;
        }
        chain.pop();
    }
    false
}

/// Whether `kernel` is op type `op` or a fusion that starts with it: both stripped of the
/// rewriters' prefixes (`_`, `Mkl`, `Native`, `Fused`) and `op` of its version suffix, the
/// kernel's name begins with the op's (`_FusedBatchNormEx` → `BatchNormEx` begins with
/// `FusedBatchNormV3` → `BatchNorm`; `_FusedMatMul` is not a `Mul`).
fn contains_op(kernel: &str, op: &str) -> bool {
    let digits = op.trim_end_matches(|c: char| c.is_ascii_digit());
    let unversioned = match digits.strip_suffix('V') {
        Some(base) if digits.len() < op.len() => base,
        _ => op,
    };
    let op = core_name(unversioned);
    !op.is_empty() && core_name(kernel).starts_with(op)
}

/// `name` without the prefixes Grappler's remapper and oneDNN's rewrites put on kernel names.
fn core_name(name: &str) -> &str {
    let mut s = name.trim_start_matches('_');
    loop {
        match ["Mkl", "Native", "Fused"]
            .iter()
            .find_map(|p| s.strip_prefix(p))
        {
            Some(rest) => s = rest,
            None => return s,
        }
    }
}

/// Pushes one sample per op of `chain`, the kernel's time split by analytic size; the parts
/// follow each other from the kernel's start in `chain`'s order, so the last ends where the
/// kernel did.
fn split(s: &OpSample, graph: &OpGraph, chain: &[NodeId], out: &mut Measurements) {
    let sizes: Vec<f64> = chain
        .iter()
        .map(|&id| {
            let w = op_work(graph, id);
            let size = w.flops + w.bytes;
            if size.is_finite() && size > 0.0 {
                size
            } else {
                0.0
            }
        })
        .collect();
    let total: f64 = sizes.iter().sum();
    let mut before = 0.0;
    for (k, &id) in chain.iter().enumerate() {
        // Nothing to weigh by: the contraction (first) takes it all.
        let share = if total > 0.0 {
            sizes[k] / total
        } else if k == 0 {
            1.0
        } else {
            0.0
        };
        out.samples.push(OpSample {
            node: graph.node(id).name.clone(),
            device: s.device.clone(),
            seconds: s.seconds * share,
            kernel: None,
            fused_into: Some(s.node.clone()),
            availability: s.availability,
            step: s.step,
            start_s: s.start_s.map(|t| t + before),
        });
        before += s.seconds * share;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{DType, OpGraphBuilder};

    const CPU: &str = "/job:localhost/replica:0/task:0/device:CPU:0";

    /// Adds op `name` of type `ty` reading output 0 of each of `ins`, with one float output
    /// of `shape`.
    fn add(b: &mut OpGraphBuilder, name: &str, ty: &str, ins: &[NodeId], shape: &[i64]) -> NodeId {
        let id = b.add(name, ty).unwrap();
        for &i in ins {
            b.connect(i, 0, id);
        }
        b.output(id, DType::FLOAT, Some(shape.to_vec()));
        id
    }

    /// x, w → conv1/Conv2D → conv1/BiasAdd (b) → conv1/Relu → pool; plus a lone MatMul.
    fn graph() -> OpGraph {
        let mut b = OpGraphBuilder::new();
        let mut op =
            |name: &str, ty: &str, ins: &[NodeId], shape: &[i64]| add(&mut b, name, ty, ins, shape);
        let x = op("x", "Placeholder", &[], &[8, 28, 28, 1]);
        let w = op("w", "Placeholder", &[], &[5, 5, 1, 32]);
        let bias = op("b", "Placeholder", &[], &[32]);
        let conv = op("conv1/Conv2D", "Conv2D", &[x, w], &[8, 28, 28, 32]);
        let add = op("conv1/BiasAdd", "BiasAdd", &[conv, bias], &[8, 28, 28, 32]);
        let relu = op("conv1/Relu", "Relu", &[add], &[8, 28, 28, 32]);
        op("pool", "MaxPool", &[relu], &[8, 14, 14, 32]);
        let a = op("a", "Placeholder", &[], &[8, 64]);
        let m = op("m", "Placeholder", &[], &[64, 10]);
        op("mm", "MatMul", &[a, m], &[8, 10]);
        b.build().unwrap()
    }

    fn sample(node: &str, kernel: &str, seconds: f64) -> OpSample {
        OpSample {
            node: node.into(),
            device: CPU.into(),
            seconds,
            kernel: Some(kernel.into()),
            fused_into: None,
            availability: None,
            step: None,
            start_s: None,
        }
    }

    fn total(m: &Measurements) -> f64 {
        m.samples.iter().map(|s| s.seconds).sum()
    }

    /// oneDNN's filter gradient fused with the bias gradient that reads the same `dy` (the
    /// kernel, node names and the Identity between as in a zoo inception step's step stats and
    /// GraphDef).
    #[test]
    fn a_filter_gradient_fused_with_its_bias_gradient_is_split_over_both() {
        let mut b = OpGraphBuilder::new();
        let mut op =
            |name: &str, ty: &str, ins: &[NodeId], shape: &[i64]| add(&mut b, name, ty, ins, shape);
        let x = op("x", "Placeholder", &[], &[8, 28, 28, 16]);
        let sizes = op("sizes", "Const", &[], &[4]);
        let dy = op("gradients/ReluGrad_6", "Placeholder", &[], &[8, 28, 28, 32]);
        // The filter gradient reads `dy` through the Identity of BiasAdd's gradient.
        let passed = op("gradients/Identity_8", "Identity", &[dy], &[8, 28, 28, 32]);
        op(
            "gradients/Conv2DBackpropFilter_7",
            "Conv2DBackpropFilter",
            &[x, sizes, passed],
            &[3, 3, 16, 32],
        );
        op("gradients/BiasAddGrad_7", "BiasAddGrad", &[dy], &[32]);
        op(
            "gradients/Conv2DBackpropFilter_8",
            "Conv2DBackpropFilter",
            &[x, sizes, x],
            &[3, 3, 16, 16],
        );
        let g = b.build().unwrap();
        let fused = "_MklNativeConv2DBackpropFilterWithBias";
        let m = Measurements {
            samples: vec![
                sample("gradients/Conv2DBackpropFilter_7", fused, 3.6e-3),
                // No bias gradient beside it: the time stays where it was.
                sample("gradients/Conv2DBackpropFilter_8", fused, 1e-3),
                // A rename only.
                sample(
                    "gradients/Conv2DBackpropFilter_7",
                    "_MklNativeConv2DBackpropFilter",
                    3e-3,
                ),
            ],
            ..Default::default()
        };
        let a = attribute(&m, &g);
        let names: Vec<&str> = a.samples.iter().map(|s| s.node.as_str()).collect();
        assert_eq!(
            names,
            [
                "gradients/Conv2DBackpropFilter_7",
                "gradients/BiasAddGrad_7",
                "gradients/Conv2DBackpropFilter_8",
                "gradients/Conv2DBackpropFilter_7"
            ]
        );
        assert!(
            (total(&a) - total(&m)).abs() < 1e-15,
            "nothing counted twice"
        );
        let (filter, bias) = (a.samples[0].seconds, a.samples[1].seconds);
        assert!(
            bias > 0.0 && bias < filter,
            "by size: {filter} s and {bias} s"
        );
        assert_eq!(
            a.samples[0].fused_into.as_deref(),
            Some("gradients/Conv2DBackpropFilter_7")
        );
        assert_eq!(a.samples[2].seconds, 1e-3);
        assert_eq!(attribute(&a, &g), a, "idempotent");
    }

    #[test]
    fn a_fused_convolution_is_split_over_the_ops_it_replaced() {
        let g = graph();
        let m = Measurements {
            samples: vec![
                sample("conv1/Relu", "_FusedConv2D", 1e-3),
                sample("pool", "MaxPool", 2e-4),
            ],
            ..Default::default()
        };
        let a = attribute(&m, &g);
        let names: Vec<&str> = a.samples.iter().map(|s| s.node.as_str()).collect();
        assert_eq!(
            names,
            ["conv1/Conv2D", "conv1/BiasAdd", "conv1/Relu", "pool"]
        );
        assert!(
            (total(&a) - total(&m)).abs() < 1e-15,
            "nothing counted twice"
        );
        let conv = &a.samples[0];
        assert!(
            conv.seconds > a.samples[1].seconds && conv.seconds > a.samples[2].seconds,
            "the convolution carries most of the kernel: {:?}",
            a.samples
        );
        assert_eq!(conv.fused_into.as_deref(), Some("conv1/Relu"));
        assert_eq!(attribute(&a, &g), a, "attributing twice changes nothing");
        // The parts keep the availability the kernel ran at.
        let mut busy = m.clone();
        busy.samples[0].availability = Some(0.25);
        let a = attribute(&busy, &g);
        assert!(a.samples[..3].iter().all(|s| s.availability == Some(0.25)));
    }

    #[test]
    fn renamed_kernels_and_unknown_rewrites_stay_put() {
        let g = graph();
        let m = Measurements {
            samples: vec![
                // oneDNN's own kernel of the same op.
                sample("conv1/Conv2D", "_MklNativeConv2D", 1e-3),
                // A bias fused without its convolution's chain found (Conv2D has a second consumer
                // below): the sample stays on the named node.
                sample("mm", "_FusedMatMul", 5e-4),
                // Not in this graph (Grappler's own node).
                sample("ConstantFolding/x", "Const", 1e-6),
            ],
            ..Default::default()
        };
        let a = attribute(&m, &g);
        assert_eq!(a, m);
    }

    #[test]
    fn the_chain_stops_at_ops_with_other_consumers() {
        let mut b = OpGraphBuilder::new();
        let mut op = |name: &str, ty: &str, ins: &[NodeId]| {
            let id = b.add(name, ty).unwrap();
            for &i in ins {
                b.connect(i, 0, id);
            }
            b.output(id, DType::FLOAT, Some(vec![4, 16]));
            id
        };
        let x = op("x", "Placeholder", &[]);
        let w = op("w", "Placeholder", &[]);
        let mm = op("mm", "MatMul", &[x, w]);
        let add = op("add", "BiasAdd", &[mm, w]);
        // `mm` is read elsewhere too: TensorFlow could not have fused it away.
        op("other", "Relu", &[mm]);
        let g = b.build().unwrap();
        let _ = add;
        let m = Measurements {
            samples: vec![sample("add", "_FusedMatMul", 1e-3)],
            ..Default::default()
        };
        assert_eq!(attribute(&m, &g), m);
    }

    #[test]
    fn batch_norm_versions_match_the_fused_kernel() {
        assert!(contains_op("_FusedBatchNormEx", "FusedBatchNormV3"));
        assert!(contains_op("_FusedConv2D", "Conv2D"));
        assert!(contains_op("_MklNativeFusedMatMul", "MatMul"));
        assert!(!contains_op("_FusedConv2D", "BiasAdd"));
        assert!(!contains_op("_FusedConv2D", "Relu"));
        assert!(!contains_op("_FusedConv2D", "V2"));
        assert!(!contains_op("_FusedMatMul", "Mul"));
        assert!(contains_op("_MklNativeConv2DWithBias", "Conv2D"));
        assert!(contains_op("_FusedBatchMatMulV2", "BatchMatMulV2"));
        assert!(!contains_op("_FusedDepthwiseConv2dNative", "Conv2D"));
    }
}

//! The calibration network: a small CIFAR-shaped training graph that exercises every op type the
//! zoo and common Keras/TF1 models spend their time in — convolutions of several kernel sizes,
//! strides and channel counts (and their two backprop ops), depthwise convolution, batch norm,
//! bias, ReLU, residual add, max and average pooling, concat, reshape, dense layers, softmax
//! cross-entropy and momentum updates — at sizes that bracket the zoo's. Timing it op by op
//! (step stats) at two batch sizes gives the per-op-type cost lines of a calibration
//! ([`crate::cost::OpCostFitter`]). It is not one of the zoo's models on purpose: the prediction
//! error measured on the zoo is then out of sample.

use super::builder::Net;
use super::zoo::{assemble, conv_bn, conv_relu, Conv, Model};
use crate::error::Result;

/// Batch sizes the calibration network is timed at.
pub(crate) const BATCHES: [usize; 2] = [16, 64];

/// The calibration network for `batch` images of 32×32×3, 10 classes.
///
/// # Errors
/// [`crate::Error::InvalidArgument`] for a batch outside 1..=65536; [`crate::Error::TensorFlow`]
/// if TensorFlow rejects an op.
pub(crate) fn build(batch: usize, seed: u64) -> Result<Model> {
    assemble("calibration", batch, seed, &[32, 32, 3], 10, body)
}

fn conv(k: i64, cin: i64, cout: i64, stride: i64) -> Conv {
    Conv {
        k,
        cin,
        cout,
        stride,
    }
}

fn body(net: &mut Net, x: tensorflow::Output) -> Result<tensorflow::Output> {
    // A narrow LeNet-style branch: few channels, VALID 5×5 convolutions, bias, max pooling.
    let n = conv_relu(net, "narrow1", x.clone(), 5, 3, 6, "VALID")?; // 28×28×6
    let n = net.pool("MaxPool", n, 2, 2, "VALID")?; // 14×14×6
    let n = conv_relu(net, "narrow2", n, 5, 6, 16, "VALID")?; // 10×10×16
    let n = net.pool("MaxPool", n, 2, 2, "VALID")?; // 5×5×16
    let n = net.reshape(n, &[-1, 400])?;
    let narrow = net.scoped("narrow_logits", |net| net.dense(n, 400, 10))?;
    // 32×32: a 3×3 stem with batch norm, a 5×5 convolution with bias, a residual add.
    let a = conv_bn(net, "stem", x, conv(3, 3, 16, 1), true)?;
    let b = conv_relu(net, "wide", a.clone(), 5, 16, 16, "SAME")?;
    let h = net.scoped("residual", |n| {
        let s = n.add(a, b)?;
        n.relu(s)
    })?;
    let h = net.pool("MaxPool", h, 2, 2, "VALID")?; // 16×16×16
                                                    // 16×16: depthwise-separable block.
    let h = net.scoped("separable", |n| {
        let y = n.scoped("dw", |n| {
            let y = n.depthwise(h, 3, 16, 1)?;
            let y = n.batch_norm(y, 16)?;
            n.relu(y)
        })?;
        conv_bn(n, "pw", y, conv(1, 16, 32, 1), true)
    })?; // 16×16×32
    let h = conv_bn(net, "down", h, conv(3, 32, 32, 2), true)?; // 8×8×32
                                                                // 8×8: two branches concatenated (inception-style).
    let left = conv_relu(net, "branch_1x1", h.clone(), 1, 32, 16, "SAME")?;
    let right = conv_relu(net, "branch_3x3", h, 3, 32, 48, "SAME")?;
    let h = net.concat(&[left, right], 3)?; // 8×8×64
                                            // Global average pooling (ResNet's head) beside average pooling and a wide dense layer.
    let g = net.mean(h.clone(), &[1, 2], false)?; // 64
    let global = net.scoped("global_logits", |n| n.dense(g, 64, 10))?;
    let h = net.pool("AvgPool", h, 2, 2, "VALID")?; // 4×4×64
    let h = net.reshape(h, &[-1, 1024])?;
    let h = net.scoped("fc", |n| n.dense(h, 1024, 256))?;
    let h = net.relu(h)?;
    let wide = net.scoped("logits", |n| n.dense(h, 256, 10))?;
    let sum = net.add(wide, global)?;
    net.add(sum, narrow)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::analyze::analyze_graph;

    #[test]
    fn covers_the_op_types_models_spend_time_in() {
        let m = build(4, 1).unwrap();
        let g = analyze_graph(m.net.graph()).unwrap().op_graph;
        let types: std::collections::BTreeSet<&str> =
            g.nodes().iter().map(|n| n.op.as_str()).collect();
        for t in [
            "Conv2D",
            "Conv2DBackpropInput",
            "Conv2DBackpropFilter",
            "DepthwiseConv2dNative",
            "DepthwiseConv2dNativeBackpropInput",
            "DepthwiseConv2dNativeBackpropFilter",
            "FusedBatchNormV3",
            "FusedBatchNormGradV3",
            "BiasAdd",
            "BiasAddGrad",
            "Relu",
            "ReluGrad",
            "MaxPool",
            "MaxPoolGrad",
            "AvgPool",
            "AvgPoolGrad",
            "ConcatV2",
            "MatMul",
            "AddV2",
            "SoftmaxCrossEntropyWithLogits",
            "ResourceApplyMomentum",
        ] {
            assert!(types.contains(t), "{t} missing from {types:?}");
        }
    }
}

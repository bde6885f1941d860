//! The layers the model zoo is built from: convolutions, normalisation, pooling, dense layers
//! and the softmax cross-entropy loss.

use tensorflow::{DataType, Output, Tensor};

use super::{tf_err, Inputs, Net};
use crate::error::Result;

impl Net {
    /// `Conv2D` (NHWC, SAME or VALID) with a new `[k, k, in, out]` kernel, He-initialised.
    pub(crate) fn conv2d(
        &mut self,
        x: Output,
        k: i64,
        cin: i64,
        cout: i64,
        stride: i64,
        padding: &str,
    ) -> Result<Output> {
        let std = (2.0 / (k * k * cin) as f32).sqrt();
        let w = self.variable("kernel", &[k, k, cin, cout], std, 0.0)?;
        self.op("Conv2D", "Conv2D", &[x, w.read], |d| {
            d.set_attr_type("T", DataType::Float)?;
            d.set_attr_int_list("strides", &[1, stride, stride, 1])?;
            d.set_attr_string("padding", padding)?;
            Ok(d.set_attr_string("data_format", "NHWC")?)
        })
        .map(Self::out)
    }

    /// `DepthwiseConv2dNative` with a new `[k, k, c, 1]` kernel.
    pub(crate) fn depthwise(&mut self, x: Output, k: i64, c: i64, stride: i64) -> Result<Output> {
        let std = (2.0 / (k * k) as f32).sqrt();
        let w = self.variable("depthwise_kernel", &[k, k, c, 1], std, 0.0)?;
        self.op("DepthwiseConv2dNative", "depthwise", &[x, w.read], |d| {
            d.set_attr_type("T", DataType::Float)?;
            d.set_attr_int_list("strides", &[1, stride, stride, 1])?;
            d.set_attr_string("padding", "SAME")?;
            Ok(d.set_attr_string("data_format", "NHWC")?)
        })
        .map(Self::out)
    }

    /// `BiasAdd` with a new zero bias of `c` channels.
    pub(crate) fn bias_add(&mut self, x: Output, c: i64) -> Result<Output> {
        let b = self.variable("bias", &[c], 0.0, 0.0)?;
        self.op("BiasAdd", "BiasAdd", &[x, b.read], |d| {
            d.set_attr_type("T", DataType::Float)?;
            Ok(d.set_attr_string("data_format", "NHWC")?)
        })
        .map(Self::out)
    }

    /// `FusedBatchNormV3` in training mode with new scale (1) and offset (0) of `c` channels.
    pub(crate) fn batch_norm(&mut self, x: Output, c: i64) -> Result<Output> {
        let gamma = self.variable("gamma", &[c], 0.0, 1.0)?;
        let beta = self.variable("beta", &[c], 0.0, 0.0)?;
        let empty = self.const_f32("empty", &[0], &[])?;
        self.op(
            "FusedBatchNormV3",
            "FusedBatchNormV3",
            &[x, gamma.read, beta.read, empty.clone(), empty],
            |d| {
                d.set_attr_type("T", DataType::Float)?;
                d.set_attr_type("U", DataType::Float)?;
                d.set_attr_float("epsilon", 1e-3)?;
                d.set_attr_string("data_format", "NHWC")?;
                Ok(d.set_attr_bool("is_training", true)?)
            },
        )
        .map(Self::out)
    }

    /// `Relu`.
    pub(crate) fn relu(&mut self, x: Output) -> Result<Output> {
        self.op("Relu", "Relu", &[x], |d| {
            Ok(d.set_attr_type("T", DataType::Float)?)
        })
        .map(Self::out)
    }

    /// `MaxPool` or `AvgPool` (`kind`), square window `k`, stride `s`.
    pub(crate) fn pool(
        &mut self,
        kind: &str,
        x: Output,
        k: i64,
        s: i64,
        padding: &str,
    ) -> Result<Output> {
        self.op(kind, kind, &[x], |d| {
            d.set_attr_type("T", DataType::Float)?;
            d.set_attr_int_list("ksize", &[1, k, k, 1])?;
            d.set_attr_int_list("strides", &[1, s, s, 1])?;
            d.set_attr_string("padding", padding)?;
            Ok(d.set_attr_string("data_format", "NHWC")?)
        })
        .map(Self::out)
    }

    /// Element-wise `AddV2`.
    pub(crate) fn add(&mut self, a: Output, b: Output) -> Result<Output> {
        self.op("AddV2", "add", &[a, b], |d| {
            Ok(d.set_attr_type("T", DataType::Float)?)
        })
        .map(Self::out)
    }

    /// `ConcatV2` along `axis`.
    pub(crate) fn concat(&mut self, xs: &[Output], axis: i32) -> Result<Output> {
        let t = Tensor::<i32>::new(&[])
            .with_values(&[axis])
            .map_err(|e| tf_err("concat/axis", e))?;
        let ax = self.op("Const", "concat/axis", &[], |d| {
            d.set_attr_type("dtype", DataType::Int32)?;
            Ok(d.set_attr_tensor("value", t)?)
        })?;
        let n = xs.len() as i64;
        let name = self.name("concat");
        self.op_inputs(
            "ConcatV2",
            &name,
            &[Inputs::List(xs), Inputs::Each(&[Self::out(ax)])],
            |d| {
                d.set_attr_int("N", n)?;
                d.set_attr_type("T", DataType::Float)?;
                Ok(d.set_attr_type("Tidx", DataType::Int32)?)
            },
        )
        .map(Self::out)
    }

    /// `Mean` over `axes`.
    pub(crate) fn mean(&mut self, x: Output, axes: &[i32], keep_dims: bool) -> Result<Output> {
        let ax = self.const_i32("Mean/reduction_indices", axes)?;
        self.op("Mean", "Mean", &[x, ax], |d| {
            d.set_attr_type("T", DataType::Float)?;
            d.set_attr_type("Tidx", DataType::Int32)?;
            Ok(d.set_attr_bool("keep_dims", keep_dims)?)
        })
        .map(Self::out)
    }

    /// `Reshape` to `shape`.
    pub(crate) fn reshape(&mut self, x: Output, shape: &[i32]) -> Result<Output> {
        let s = self.const_i32("Reshape/shape", shape)?;
        self.op("Reshape", "Reshape", &[x, s], |d| {
            d.set_attr_type("T", DataType::Float)?;
            Ok(d.set_attr_type("Tshape", DataType::Int32)?)
        })
        .map(Self::out)
    }

    /// Fully connected layer: `MatMul` with a new `[cin, cout]` kernel plus a bias.
    pub(crate) fn dense(&mut self, x: Output, cin: i64, cout: i64) -> Result<Output> {
        let std = (2.0 / cin as f32).sqrt();
        let w = self.variable("kernel", &[cin, cout], std, 0.0)?;
        let y = self.op("MatMul", "MatMul", &[x, w.read], |d| {
            d.set_attr_type("T", DataType::Float)?;
            d.set_attr_bool("transpose_a", false)?;
            Ok(d.set_attr_bool("transpose_b", false)?)
        })?;
        let b = self.variable("bias", &[cout], 0.0, 0.0)?;
        self.op("BiasAdd", "BiasAdd", &[Self::out(y), b.read], |d| {
            d.set_attr_type("T", DataType::Float)?;
            Ok(d.set_attr_string("data_format", "NHWC")?)
        })
        .map(Self::out)
    }

    /// Mean softmax cross-entropy of `logits` against one-hot `labels`, as the op named `name`.
    pub(crate) fn softmax_xent_loss(
        &mut self,
        logits: Output,
        labels: Output,
        name: &str,
    ) -> Result<Output> {
        let xent = self.op(
            "SoftmaxCrossEntropyWithLogits",
            "xent",
            &[logits, labels],
            |d| Ok(d.set_attr_type("T", DataType::Float)?),
        )?;
        let ax = self.const_i32(&format!("{name}/reduction_indices"), &[0])?;
        self.op("Mean", name, &[Self::out(xent), ax], |d| {
            d.set_attr_type("T", DataType::Float)?;
            d.set_attr_type("Tidx", DataType::Int32)?;
            Ok(d.set_attr_bool("keep_dims", false)?)
        })
        .map(Self::out)
    }
}

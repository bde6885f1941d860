//! The model zoo: training graphs for `mlp`, `lenet` (MNIST shapes), `resnet20`, `mobilenet` and
//! `inception` (CIFAR-10 shapes), built in Rust, trained with synthetic data.

use tensorflow::Output;

use super::builder::{Net, TowerLoss};
use crate::error::{Error, Result};
use crate::graph::Sidecar;

/// Names of the zoo's models.
pub const MODELS: &[&str] = &["mlp", "lenet", "resnet20", "mobilenet", "inception"];

/// A built model: the graph and how to train it.
#[derive(Debug)]
pub struct Model {
    /// Name in [`MODELS`].
    pub name: String,
    /// The built graph and its named tensors.
    pub net: Net,
    /// How to train it: inputs, loss, train op, batch shapes.
    pub sidecar: Sidecar,
}

/// Shape of one input image of model `name` (without the batch), and its number of classes.
///
/// # Errors
/// [`Error::UnknownModel`] listing the zoo.
pub fn input_shape(name: &str) -> Result<(Vec<i64>, i64)> {
    match name {
        "mlp" => Ok((vec![784], 10)),
        "lenet" => Ok((vec![28, 28, 1], 10)),
        "resnet20" | "mobilenet" | "inception" => Ok((vec![32, 32, 3], 10)),
        other => Err(Error::UnknownModel {
            name: other.into(),
            known: MODELS.join(", "),
        }),
    }
}

/// Adds model `name`'s layers on input `x`, returning the logits.
///
/// # Errors
/// [`Error::UnknownModel`]; [`Error::TensorFlow`] if TensorFlow rejects an op.
pub fn logits(net: &mut Net, name: &str, x: Output) -> Result<Output> {
    let (_, classes) = input_shape(name)?;
    match name {
        "mlp" => mlp(net, x, classes),
        "lenet" => lenet(net, x, classes),
        "resnet20" => resnet20(net, x, classes),
        "mobilenet" => mobilenet(net, x, classes),
        _ => inception(net, x, classes),
    }
}

/// Checks a batch size.
pub(crate) fn check_batch(batch: usize) -> Result<()> {
    if batch == 0 || batch > 1 << 16 {
        return Err(Error::InvalidArgument {
            what: "batch".into(),
            reason: format!("{batch} is not in 1..=65536"),
        });
    }
    Ok(())
}

/// Builds model `name` for a fixed `batch`, initialisers seeded with `seed`: placeholders `x`
/// and `y` (one-hot), loss `loss`, momentum SGD `train`, `init`.
///
/// # Errors
/// [`Error::UnknownModel`]; [`Error::InvalidArgument`] for a batch outside 1..=65536;
/// [`Error::TensorFlow`] if TensorFlow rejects an op.
pub fn build(name: &str, batch: usize, seed: u64) -> Result<Model> {
    let (shape, classes) = input_shape(name)?;
    assemble(name, batch, seed, &shape, classes, |net, x| {
        logits(net, name, x)
    })
}

/// Builds a training graph around `body` (input `x` → logits over `classes`): placeholders
/// `x` (`batch` images of `image` shape) and `y` (one-hot), loss `loss`, momentum SGD `train`,
/// `init`, and its sidecar.
///
/// # Errors
/// [`Error::InvalidArgument`] for a batch outside 1..=65536; errors of `body`;
/// [`Error::TensorFlow`] if TensorFlow rejects an op.
pub(crate) fn assemble(
    name: &str,
    batch: usize,
    seed: u64,
    image: &[i64],
    classes: i64,
    body: impl FnOnce(&mut Net, Output) -> Result<Output>,
) -> Result<Model> {
    check_batch(batch)?;
    let b = batch as i64;
    let image: Vec<i64> = std::iter::once(b).chain(image.iter().copied()).collect();
    let mut net = Net::new(seed);
    let x = net.placeholder("x", &image)?;
    let y = net.placeholder("y", &[b, classes])?;
    let logits = body(&mut net, x)?;
    let named = net.op("Identity", LOGITS, std::slice::from_ref(&logits), |d| {
        Ok(d.set_attr_type("T", tensorflow::DataType::Float)?)
    })?;
    debug_assert_eq!(named.name().ok().as_deref(), Some(LOGITS));
    let loss = net.softmax_xent_loss(logits, y, "loss")?;
    let tower = TowerLoss {
        loss,
        weight: 1.0,
        prefix: String::new(),
        device: None,
    };
    net.minimize_momentum(&[tower], LEARNING_RATE, MOMENTUM)?;
    let sidecar = Sidecar {
        inputs: [
            ("x".to_string(), image),
            ("y".to_string(), vec![b, classes]),
        ]
        .into_iter()
        .collect(),
        init: "init".into(),
        train: "train".into(),
        loss: "loss".into(),
        one_hot: vec!["y".into()],
        batch: Some(batch),
        logits: Some(LOGITS.into()),
        label: Some("y".into()),
    };
    Ok(Model {
        name: name.into(),
        net,
        sidecar,
    })
}

/// Name of the op that gives a zoo model's logits (`[batch, classes]`), for evaluation.
pub(crate) const LOGITS: &str = "logits";

/// Learning rate of the zoo's momentum SGD.
pub(crate) const LEARNING_RATE: f32 = 0.01;
/// Momentum of the zoo's momentum SGD.
pub(crate) const MOMENTUM: f32 = 0.9;

fn mlp(net: &mut Net, x: Output, classes: i64) -> Result<Output> {
    let h = net.scoped("dense", |n| n.dense(x, 784, 256))?;
    let h = net.relu(h)?;
    let h = net.scoped("dense_1", |n| n.dense(h, 256, 128))?;
    let h = net.relu(h)?;
    net.scoped("logits", |n| n.dense(h, 128, classes))
}

pub(crate) fn conv_relu(
    net: &mut Net,
    scope: &str,
    x: Output,
    k: i64,
    cin: i64,
    cout: i64,
    padding: &str,
) -> Result<Output> {
    net.scoped(scope, |n| {
        let y = n.conv2d(x, k, cin, cout, 1, padding)?;
        let y = n.bias_add(y, cout)?;
        n.relu(y)
    })
}

fn lenet(net: &mut Net, x: Output, classes: i64) -> Result<Output> {
    let h = conv_relu(net, "conv1", x, 5, 1, 6, "SAME")?; // 28x28x6
    let h = net.pool("MaxPool", h, 2, 2, "VALID")?; // 14x14x6
    let h = conv_relu(net, "conv2", h, 5, 6, 16, "VALID")?; // 10x10x16
    let h = net.pool("MaxPool", h, 2, 2, "VALID")?; // 5x5x16
    let h = net.reshape(h, &[-1, 400])?;
    let h = net.scoped("fc1", |n| n.dense(h, 400, 120))?;
    let h = net.relu(h)?;
    let h = net.scoped("fc2", |n| n.dense(h, 120, 84))?;
    let h = net.relu(h)?;
    net.scoped("logits", |n| n.dense(h, 84, classes))
}

/// A square convolution: kernel size, input and output channels, stride.
#[derive(Clone, Copy)]
pub(crate) struct Conv {
    pub k: i64,
    pub cin: i64,
    pub cout: i64,
    pub stride: i64,
}

/// conv → batch norm → (relu).
pub(crate) fn conv_bn(
    net: &mut Net,
    scope: &str,
    x: Output,
    c: Conv,
    relu: bool,
) -> Result<Output> {
    net.scoped(scope, |n| {
        let y = n.conv2d(x, c.k, c.cin, c.cout, c.stride, "SAME")?;
        let y = n.batch_norm(y, c.cout)?;
        if relu {
            n.relu(y)
        } else {
            Ok(y)
        }
    })
}

/// ResNet-20 for CIFAR-10 (He et al. 2016): 3 stages of 3 basic blocks, 16/32/64 channels,
/// 1×1 projection shortcuts where the shape changes.
fn resnet20(net: &mut Net, x: Output, classes: i64) -> Result<Output> {
    let mut h = conv_bn(
        net,
        "conv1",
        x,
        Conv {
            k: 3,
            cin: 3,
            cout: 16,
            stride: 1,
        },
        true,
    )?;
    let mut cin = 16;
    for (stage, cout) in [16i64, 32, 64].into_iter().enumerate() {
        for block in 0..3 {
            let stride = if stage > 0 && block == 0 { 2 } else { 1 };
            let scope = format!("stage{}_block{}", stage + 1, block + 1);
            let input = h.clone();
            h = net.scoped(&scope, |n| {
                let y = conv_bn(
                    n,
                    "conv_a",
                    input.clone(),
                    Conv {
                        k: 3,
                        cin,
                        cout,
                        stride,
                    },
                    true,
                )?;
                let y = conv_bn(
                    n,
                    "conv_b",
                    y,
                    Conv {
                        k: 3,
                        cin: cout,
                        cout,
                        stride: 1,
                    },
                    false,
                )?;
                let shortcut = if stride != 1 || cin != cout {
                    conv_bn(
                        n,
                        "shortcut",
                        input,
                        Conv {
                            k: 1,
                            cin,
                            cout,
                            stride,
                        },
                        false,
                    )?
                } else {
                    input
                };
                let s = n.add(y, shortcut)?;
                n.relu(s)
            })?;
            cin = cout;
        }
    }
    let h = net.mean(h, &[1, 2], false)?;
    net.scoped("logits", |n| n.dense(h, 64, classes))
}

/// MobileNet (Howard et al. 2017) shrunk for CIFAR: a 3×3 stem, then depthwise-separable blocks.
fn mobilenet(net: &mut Net, x: Output, classes: i64) -> Result<Output> {
    let mut h = conv_bn(
        net,
        "conv1",
        x,
        Conv {
            k: 3,
            cin: 3,
            cout: 32,
            stride: 1,
        },
        true,
    )?;
    let mut cin = 32;
    let blocks: [(i64, i64); 6] = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2)];
    for (i, (cout, stride)) in blocks.into_iter().enumerate() {
        let input = h.clone();
        h = net.scoped(&format!("block{}", i + 1), |n| {
            let y = n.scoped("dw", |n| {
                let y = n.depthwise(input, 3, cin, stride)?;
                let y = n.batch_norm(y, cin)?;
                n.relu(y)
            })?;
            conv_bn(
                n,
                "pw",
                y,
                Conv {
                    k: 1,
                    cin,
                    cout,
                    stride: 1,
                },
                true,
            )
        })?;
        cin = cout;
    }
    let h = net.mean(h, &[1, 2], false)?;
    net.scoped("logits", |n| n.dense(h, cin, classes))
}

/// One GoogLeNet inception module: 1×1 | 1×1→3×3 | 1×1→5×5 | 3×3 max-pool→1×1, concatenated.
fn inception_module(
    net: &mut Net,
    scope: &str,
    x: Output,
    cin: i64,
    c: [i64; 6],
) -> Result<(Output, i64)> {
    let [c1, c3r, c3, c5r, c5, cp] = c;
    let out = net.scoped(scope, |n| {
        let b1 = conv_relu(n, "branch1x1", x.clone(), 1, cin, c1, "SAME")?;
        let b3 = conv_relu(n, "branch3x3_reduce", x.clone(), 1, cin, c3r, "SAME")?;
        let b3 = conv_relu(n, "branch3x3", b3, 3, c3r, c3, "SAME")?;
        let b5 = conv_relu(n, "branch5x5_reduce", x.clone(), 1, cin, c5r, "SAME")?;
        let b5 = conv_relu(n, "branch5x5", b5, 5, c5r, c5, "SAME")?;
        let bp = n.pool("MaxPool", x, 3, 1, "SAME")?;
        let bp = conv_relu(n, "branch_pool", bp, 1, cin, cp, "SAME")?;
        n.concat(&[b1, b3, b5, bp], 3)
    })?;
    Ok((out, c1 + c3 + c5 + cp))
}

/// A GoogLeNet-style network for CIFAR shapes: stem, 3 inception modules, pooling, classifier.
fn inception(net: &mut Net, x: Output, classes: i64) -> Result<Output> {
    let h = conv_relu(net, "stem", x, 3, 3, 64, "SAME")?; // 32x32x64
    let h = net.pool("MaxPool", h, 3, 2, "SAME")?; // 16x16x64
    let (h, c) = inception_module(net, "inception3a", h, 64, [32, 48, 64, 8, 16, 16])?; // 128
    let (h, c) = inception_module(net, "inception3b", h, c, [64, 64, 96, 16, 48, 32])?; // 240
    let h = net.pool("MaxPool", h, 3, 2, "SAME")?; // 8x8
    let (h, c) = inception_module(net, "inception4a", h, c, [96, 48, 104, 8, 24, 32])?; // 256
    let h = net.mean(h, &[1, 2], false)?;
    net.scoped("logits", |n| n.dense(h, c, classes))
}

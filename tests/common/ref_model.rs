//! A user's CNN built the TensorFlow 1 way with the `tensorflow` crate: ref-typed variables
//! (`VariableV2`, the crate's `Variable` builder), gradients from `Graph::add_gradients` and
//! momentum SGD through `ApplyMomentum` with accumulators the user made (plain `VariableV2`s, no
//! `_class` colocation). Two 3×3 convolutions and two dense layers over 8×8 single-channel images
//! into 4 classes, int64 labels (or float one-hot rows, as a GraphDef for the command line).
#![allow(dead_code)]

use tf_iaware::tensorflow::{
    ops, DataType, Operation, Output, Scope, Shape, Status, Tensor, Variable,
};

/// Samples per step of the per-op tests (the placeholders take any batch).
pub const BATCH: u64 = 16;
/// Image side, pixels.
pub const SIDE: u64 = 8;
/// Convolution filters.
pub const FILTERS: u64 = 4;
/// Hidden units of the first dense layer.
pub const HIDDEN: u64 = 16;
/// Classes.
pub const CLASSES: u64 = 4;

/// The model's graph and the handles a training loop needs.
pub struct RefModel {
    pub scope: Scope,
    /// Float images `[batch, SIDE, SIDE, 1]`.
    pub x: Operation,
    /// Int64 class labels `[batch]` (float one-hot rows `[batch, CLASSES]` with
    /// [`build_with`]`(true)`).
    pub labels: Operation,
    /// Initialises every variable and accumulator.
    pub init: Operation,
    /// One momentum update of every variable.
    pub train: Operation,
    /// Mean cross-entropy (scalar float).
    pub loss: Output,
    /// The model's variables (not the accumulators), ref-typed.
    pub variables: Vec<Variable>,
    /// The logits `[batch, CLASSES]`, for accuracy.
    pub logits: Output,
}

fn variable(
    shape: &[u64],
    scale: f32,
    seed: i64,
    name: &str,
    scope: &mut Scope,
) -> Result<Variable, Status> {
    let dims: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
    let random = ops::TruncatedNormal::new()
        .dtype(DataType::Float)
        .seed(seed)
        .seed2(seed + 1)
        .build(ops::constant(&dims[..], scope)?, scope)?;
    let scaled = ops::mul(random, ops::constant(scale, scope)?, scope)?;
    Variable::builder()
        .initial_value(scaled)
        .data_type(DataType::Float)
        .shape(shape)
        .build(&mut scope.with_op_name(name))
}

fn zeros(shape: &[u64], name: &str, scope: &mut Scope) -> Result<Variable, Status> {
    Variable::builder()
        .const_initial_value(Tensor::<f32>::new(shape))
        .build(&mut scope.with_op_name(name))
}

/// Builds the model.
pub fn build() -> Result<RefModel, Status> {
    build_with(false)
}

/// Builds the model, its labels float one-hot rows with `one_hot_labels`.
pub fn build_with(one_hot_labels: bool) -> Result<RefModel, Status> {
    let mut scope = Scope::new_root_scope();
    let (x, labels) = inputs(one_hot_labels, &mut scope)?;
    let (variables, logits) = network(&x, &mut scope)?;
    let one_hot: Output = if one_hot_labels {
        labels.clone().into()
    } else {
        ops::OneHot::new()
            .build(
                labels.clone(),
                ops::constant(CLASSES as i32, &mut scope)?,
                ops::constant(1.0f32, &mut scope)?,
                ops::constant(0.0f32, &mut scope)?,
                &mut scope,
            )?
            .into()
    };
    let xent =
        ops::SoftmaxCrossEntropyWithLogits::new().build(logits.clone(), one_hot, &mut scope)?;
    let loss: Output = ops::mean(
        Output {
            operation: xent,
            index: 0,
        },
        ops::constant(&[0i32][..], &mut scope)?,
        &mut scope.with_op_name("loss"),
    )?
    .into();

    let (updates, accumulators) = momentum_updates(&variables, &loss, &mut scope)?;
    let train = ops::NoOp::new().build(
        &mut scope
            .with_control_dependencies(&updates)
            .with_op_name("train"),
    )?;
    let inits: Vec<Operation> = variables
        .iter()
        .chain(&accumulators)
        .map(|v| v.initializer().clone())
        .collect();
    let init = ops::NoOp::new()
        .build(&mut scope.with_control_dependencies(&inits).with_op_name("init"))?;
    Ok(RefModel {
        scope,
        x,
        labels,
        init,
        train,
        loss,
        variables,
        logits: logits.into(),
    })
}

/// The image and label placeholders (`labels`: one-hot float rows, or int64 classes).
fn inputs(one_hot_labels: bool, scope: &mut Scope) -> Result<(Operation, Operation), Status> {
    let x = ops::Placeholder::new()
        .dtype(DataType::Float)
        .shape(Shape::from(Some(vec![
            None,
            Some(SIDE as i64),
            Some(SIDE as i64),
            Some(1),
        ])))
        .build(&mut scope.with_op_name("x"))?;
    let labels = if one_hot_labels {
        ops::Placeholder::new()
            .dtype(DataType::Float)
            .shape(Shape::from(Some(vec![None, Some(CLASSES as i64)])))
            .build(&mut scope.with_op_name("labels"))?
    } else {
        ops::Placeholder::new()
            .dtype(DataType::Int64)
            .shape(Shape::from(Some(vec![None])))
            .build(&mut scope.with_op_name("labels"))?
    };

    Ok((x, labels))
}

/// Two convolutions and two dense layers over `x`: the variables (in the order of their
/// shapes in `build_with`) and the logits.
fn network(x: &Operation, scope: &mut Scope) -> Result<(Vec<Variable>, Operation), Status> {
    let filter = variable(&[3, 3, 1, FILTERS], 0.3, 1, "conv1/filter", scope)?;
    let conv_bias = zeros(&[FILTERS], "conv1/bias", scope)?;
    let conv = ops::Conv2D::new()
        .strides([1, 1, 1, 1])
        .padding("SAME")
        .build(x.clone(), filter.output().clone(), scope)?;
    let conv = ops::relu(
        ops::bias_add(conv, conv_bias.output().clone(), scope)?,
        scope,
    )?;
    let filter2 = variable(&[3, 3, FILTERS, FILTERS], 0.2, 7, "conv2/filter", scope)?;
    let conv_bias2 = zeros(&[FILTERS], "conv2/bias", scope)?;
    let conv = ops::Conv2D::new()
        .strides([1, 1, 1, 1])
        .padding("SAME")
        .build(conv, filter2.output().clone(), scope)?;
    let conv = ops::relu(
        ops::bias_add(conv, conv_bias2.output().clone(), scope)?,
        scope,
    )?;
    let flat_size = (SIDE * SIDE * FILTERS) as i64;
    let flat = ops::reshape(conv, ops::constant(&[-1i64, flat_size][..], scope)?, scope)?;
    let w1 = variable(&[SIDE * SIDE * FILTERS, HIDDEN], 0.1, 3, "dense1/w", scope)?;
    let b1 = zeros(&[HIDDEN], "dense1/b", scope)?;
    let hidden = ops::relu(
        ops::add(
            ops::mat_mul(flat, w1.output().clone(), scope)?,
            b1.output().clone(),
            scope,
        )?,
        scope,
    )?;
    let w2 = variable(&[HIDDEN, CLASSES], 0.3, 5, "dense2/w", scope)?;
    let b2 = zeros(&[CLASSES], "dense2/b", scope)?;
    let logits = ops::add(
        ops::mat_mul(hidden, w2.output().clone(), scope)?,
        b2.output().clone(),
        &mut scope.with_op_name("logits"),
    )?;
    let variables = vec![filter, conv_bias, filter2, conv_bias2, w1, b1, w2, b2];
    Ok((variables, logits))
}

/// Momentum updates of `variables` down the gradients of `loss`, and their accumulators.
fn momentum_updates(
    variables: &[Variable],
    loss: &Output,
    scope: &mut Scope,
) -> Result<(Vec<Operation>, Vec<Variable>), Status> {
    let shapes: [&[u64]; 8] = [
        &[3, 3, 1, FILTERS],
        &[FILTERS],
        &[3, 3, FILTERS, FILTERS],
        &[FILTERS],
        &[SIDE * SIDE * FILTERS, HIDDEN],
        &[HIDDEN],
        &[HIDDEN, CLASSES],
        &[CLASSES],
    ];
    let xs: Vec<Output> = variables.iter().map(|v| v.output().clone()).collect();
    let grads = scope.graph_mut().add_gradients(
        Some("gradients"),
        std::slice::from_ref(loss),
        &xs,
        None,
    )?;
    let lr = ops::constant(0.05f32, scope)?;
    let momentum = ops::constant(0.9f32, scope)?;
    let mut accumulators = Vec::new();
    let mut updates = Vec::new();
    for ((v, g), shape) in variables.iter().zip(grads).zip(shapes) {
        let Some(g) = g else {
            return Err(Status::new_set_lossy(
                tf_iaware::tensorflow::Code::Internal,
                &format!("no gradient for {}", v.name()),
            ));
        };
        let accum = zeros(shape, &format!("{}/accum", v.name()), scope)?;
        updates.push(ops::apply_momentum(
            v.output().clone(),
            accum.output().clone(),
            lr.clone(),
            g,
            momentum.clone(),
            scope,
        )?);
        accumulators.push(accum);
    }
    Ok((updates, accumulators))
}

/// `n` learnable samples: the label is the quadrant (0–3) of the image's brightest pixel.
/// Returns images `[n, SIDE, SIDE, 1]` and labels `[n]`.
pub fn samples(n: u64, seed: u64) -> (Tensor<f32>, Tensor<i64>) {
    let side = SIDE as usize;
    let mut x = Tensor::<f32>::new(&[n, SIDE, SIDE, 1]);
    let mut labels = Tensor::<i64>::new(&[n]);
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(1);
    let mut next = || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 33) as usize
    };
    for i in 0..n as usize {
        let image = &mut x[i * side * side..(i + 1) * side * side];
        for p in image.iter_mut() {
            *p = (next() % 100) as f32 / 400.0;
        }
        let (r, c) = (next() % side, next() % side);
        image[r * side + c] = 1.0;
        labels[i] = ((r >= side / 2) as i64) * 2 + (c >= side / 2) as i64;
    }
    (x, labels)
}

/// The model's graph, analysed, and its sidecar (dynamic batch, int64 labels, logits).
pub fn graph() -> (
    tf_iaware::graph::analyze::Analyzed,
    tf_iaware::graph::Sidecar,
) {
    let m = build().unwrap();
    let analyzed = tf_iaware::graph::analyze::analyze_graph(&m.scope.graph()).unwrap();
    let sidecar = tf_iaware::graph::Sidecar {
        inputs: std::collections::BTreeMap::from([
            ("x".to_string(), vec![-1, SIDE as i64, SIDE as i64, 1]),
            ("labels".to_string(), vec![-1]),
        ]),
        init: "init".into(),
        train: "train".into(),
        loss: "loss".into(),
        one_hot: Vec::new(),
        batch: None,
        logits: Some("logits".into()),
        label: None,
    };
    (analyzed, sidecar)
}

/// [`samples`] as rows a trainer reads (`x`, `labels`), named `name`.
pub fn rows(name: &str, n: u64, seed: u64) -> tf_iaware::data::InMemory {
    use tf_iaware::data::HostTensor;
    let (x, labels) = samples(n, seed);
    tf_iaware::data::InMemory::from_tensors(
        name,
        [
            (
                "x",
                HostTensor::new(vec![n, SIDE, SIDE, 1], x.to_vec().into()).unwrap(),
            ),
            (
                "labels",
                HostTensor::new(vec![n], labels.to_vec().into()).unwrap(),
            ),
        ],
    )
    .unwrap()
}

/// The trainer's job: 1,024 training rows, 256 held out.
pub fn job() -> tf_iaware::Job {
    let (analyzed, sidecar) = graph();
    tf_iaware::Job::new(
        "ref cnn",
        analyzed,
        sidecar,
        Box::new(rows("train", 1024, 1)),
    )
    .unwrap()
    .with_held_out(Box::new(rows("held out", 256, 2)))
    .unwrap()
}

/// Writes the model with float one-hot labels as the user would export it: `ref_cnn.pb` and its
/// sidecar `ref_cnn.json` in `dir`. Returns the GraphDef's path.
pub fn export(dir: &std::path::Path) -> std::path::PathBuf {
    let m = build_with(true).unwrap();
    let path = dir.join("ref_cnn.pb");
    std::fs::write(&path, m.scope.graph().graph_def().unwrap()).unwrap();
    let sidecar = format!(
        r#"{{"inputs": {{"x": [-1, {SIDE}, {SIDE}, 1], "labels": [-1, {CLASSES}]}},
           "init": "init", "train": "train", "loss": "loss", "one_hot": ["labels"]}}"#
    );
    std::fs::write(dir.join("ref_cnn.json"), sidecar).unwrap();
    path
}

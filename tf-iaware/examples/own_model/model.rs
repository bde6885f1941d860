// A user's own model, built with the `tensorflow` crate (re-exported as `tf_iaware::tensorflow`;
// not a tf-iaware zoo model): a two-layer classifier over 16 features into 4 classes with int64
// labels, trained by gradient descent, plus a two-output op (`TopKV2`) to fetch. Shared by the
// `own_model` example, the crate-level doctest and the tests (plain comments, no inner
// attributes, so that it can be `include!`d).

use tf_iaware::tensorflow::train::{GradientDescentOptimizer, MinimizeOptions, Optimizer};
use tf_iaware::tensorflow::{ops, DataType, Operation, Output, Scope, Status, Tensor, Variable};

/// Samples per step.
pub const BATCH: u64 = 32;
/// Input features.
pub const FEATURES: u64 = 16;
/// Classes.
pub const CLASSES: u64 = 4;

/// The model's graph and the handles a training loop needs.
pub struct Model {
    pub scope: Scope,
    /// Float input `[BATCH, FEATURES]`.
    pub x: Operation,
    /// Int64 class labels `[BATCH]`.
    pub labels: Operation,
    /// Initialises every variable.
    pub init: Operation,
    /// One gradient-descent update.
    pub train: Operation,
    /// Mean cross-entropy (scalar float).
    pub loss: Output,
    /// `TopKV2` over the logits: output 0 the top-2 scores, output 1 their class indices
    /// (int32).
    pub top2: Operation,
}

fn dense(
    input: Output,
    inputs: u64,
    outputs: u64,
    name: &str,
    scope: &mut Scope,
) -> Result<(Vec<Variable>, Output), Status> {
    let mut scope = scope.new_sub_scope(name);
    let shape = ops::constant(&[inputs as i64, outputs as i64][..], &mut scope)?;
    let init = ops::RandomStandardNormal::new()
        .dtype(DataType::Float)
        .seed(7)
        .seed2(11)
        .build(shape, &mut scope)?;
    let scaled = ops::mul(init, ops::constant(0.3f32, &mut scope)?, &mut scope)?;
    let w = Variable::builder()
        .initial_value(scaled)
        .data_type(DataType::Float)
        .shape([inputs, outputs])
        .build(&mut scope.with_op_name("w"))?;
    let b = Variable::builder()
        .const_initial_value(Tensor::<f32>::new(&[outputs]))
        .build(&mut scope.with_op_name("b"))?;
    let y = ops::add(
        ops::mat_mul(input, w.output().clone(), &mut scope)?,
        b.output().clone(),
        &mut scope,
    )?;
    Ok((vec![w, b], y.into()))
}

/// Builds the model.
pub fn build() -> Result<Model, Status> {
    let mut scope = Scope::new_root_scope();
    let x = ops::Placeholder::new()
        .dtype(DataType::Float)
        .shape([BATCH, FEATURES])
        .build(&mut scope.with_op_name("x"))?;
    let labels = ops::Placeholder::new()
        .dtype(DataType::Int64)
        .shape([BATCH])
        .build(&mut scope.with_op_name("labels"))?;
    let (mut vars, h) = dense(x.clone().into(), FEATURES, 32, "hidden", &mut scope)?;
    let h = ops::relu(h, &mut scope)?;
    let (out_vars, logits) = dense(h.into(), 32, CLASSES, "logits", &mut scope)?;
    vars.extend(out_vars);
    // One-hot rows from the int64 labels (TensorFlow's C++ gradients cover the dense
    // cross-entropy, not the sparse one).
    let one_hot = ops::OneHot::new().build(
        labels.clone(),
        ops::constant(CLASSES as i32, &mut scope)?,
        ops::constant(1.0f32, &mut scope)?,
        ops::constant(0.0f32, &mut scope)?,
        &mut scope,
    )?;
    let xent =
        ops::SoftmaxCrossEntropyWithLogits::new().build(logits.clone(), one_hot, &mut scope)?;
    let loss = ops::mean(
        Output {
            operation: xent,
            index: 0,
        },
        ops::constant(&[0i32][..], &mut scope)?,
        &mut scope.with_op_name("loss"),
    )?;
    let top2 = ops::TopKV2::new().build(
        logits,
        ops::constant(2i32, &mut scope)?,
        &mut scope.with_op_name("top2"),
    )?;
    let optimizer = GradientDescentOptimizer::new(ops::constant(0.5f32, &mut scope)?);
    let (_, train) = optimizer.minimize(
        &mut scope.with_op_name("train"),
        loss.clone().into(),
        MinimizeOptions::default().with_variables(&vars),
    )?;
    let inits: Vec<Operation> = vars.iter().map(|v| v.initializer().clone()).collect();
    let init = ops::NoOp::new()
        .build(&mut scope.with_control_dependencies(&inits).with_op_name("init"))?;
    Ok(Model {
        scope,
        x,
        labels,
        init,
        train,
        loss: loss.into(),
        top2,
    })
}

/// A learnable batch: the label is the index of the largest of the first `CLASSES` features.
pub fn batch(seed: u64) -> (Tensor<f32>, Tensor<i64>) {
    let mut x = Tensor::<f32>::new(&[BATCH, FEATURES]);
    let mut labels = Tensor::<i64>::new(&[BATCH]);
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    for row in 0..BATCH as usize {
        for f in 0..FEATURES as usize {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            x[row * FEATURES as usize + f] =
                ((state >> 33) as f32 / (1u64 << 31) as f32) * 2.0 - 1.0;
        }
        let first = &x[row * FEATURES as usize..row * FEATURES as usize + CLASSES as usize];
        let best = (0..CLASSES as usize)
            .max_by(|&a, &b| first[a].total_cmp(&first[b]))
            .unwrap_or(0);
        labels[row] = best as i64;
    }
    (x, labels)
}

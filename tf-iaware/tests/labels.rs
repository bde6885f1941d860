//! Labels named, not guessed: a text classifier of the user's own (built with the `tensorflow`
//! crate) has two integer inputs, token ids and labels. With the sidecar's `label` it trains and
//! reports held-out accuracy, its labels are checked against the logits' classes and its token
//! ids are not; without `label` the label cannot be told from the token ids and the error asks
//! for one.

use std::collections::BTreeMap;

use tf_iaware::cluster::tf_config::{TaskId, TfConfig};
use tf_iaware::data::{HostTensor, InMemory, Values};
use tf_iaware::graph::analyze::{analyze_graph, Analyzed};
use tf_iaware::graph::Sidecar;
use tf_iaware::runtime::replicated::Workload;
use tf_iaware::runtime::tf::Server;
use tf_iaware::tensorflow::train::{GradientDescentOptimizer, MinimizeOptions, Optimizer};
use tf_iaware::tensorflow::{ops, DataType, Operation, Output, Scope, Shape, Status, Variable};
use tf_iaware::{connect, Error, Job, Metric, TrainingOptions};

/// Rows of the embedding table: token ids are `0..VOCAB`.
const VOCAB: u64 = 12;
/// Token ids per row.
const TOKENS: u64 = 4;
/// Embedding width.
const WIDTH: u64 = 8;
/// Classes: a row's label is its first token id modulo `CLASSES`.
const CLASSES: u64 = 3;

/// The classifier: `tokens` (int32 `[batch, TOKENS]`) looked up in a `[VOCAB, WIDTH]` embedding
/// (`GatherV2`), one dense layer into `logits` (`[batch, CLASSES]`), int64 labels `y`
/// (`[batch]`) one-hot into a softmax cross-entropy; gradient descent.
fn build() -> Result<Scope, Status> {
    let mut scope = Scope::new_root_scope();
    let tokens = ops::Placeholder::new()
        .dtype(DataType::Int32)
        .shape(Shape::from(Some(vec![None, Some(TOKENS as i64)])))
        .build(&mut scope.with_op_name("tokens"))?;
    let y = ops::Placeholder::new()
        .dtype(DataType::Int64)
        .shape(Shape::from(Some(vec![None])))
        .build(&mut scope.with_op_name("y"))?;
    let random = |shape: &[i64], seed: i64, scope: &mut Scope| -> Result<Output, Status> {
        let r = ops::RandomStandardNormal::new()
            .dtype(DataType::Float)
            .seed(seed)
            .seed2(seed + 1)
            .build(ops::constant(shape, scope)?, scope)?;
        Ok(ops::mul(r, ops::constant(0.3f32, scope)?, scope)?.into())
    };
    let table_value = random(&[VOCAB as i64, WIDTH as i64], 3, &mut scope)?;
    let table = Variable::builder()
        .initial_value(table_value)
        .data_type(DataType::Float)
        .shape([VOCAB, WIDTH])
        .build(&mut scope.with_op_name("embedding"))?;
    let looked_up = ops::gather_v2(
        table.output().clone(),
        tokens,
        ops::constant(0i32, &mut scope)?,
        &mut scope.with_op_name("lookup"),
    )?;
    let flat = ops::reshape(
        looked_up,
        ops::constant(&[-1i64, (TOKENS * WIDTH) as i64][..], &mut scope)?,
        &mut scope,
    )?;
    let w_value = random(&[(TOKENS * WIDTH) as i64, CLASSES as i64], 5, &mut scope)?;
    let w = Variable::builder()
        .initial_value(w_value)
        .data_type(DataType::Float)
        .shape([TOKENS * WIDTH, CLASSES])
        .build(&mut scope.with_op_name("dense/w"))?;
    let logits = ops::mat_mul(flat, w.output().clone(), &mut scope.with_op_name("logits"))?;
    // One-hot rows from the int64 labels (TensorFlow's C++ gradients cover the dense
    // cross-entropy, not the sparse one): no classification op takes `y` itself.
    let one_hot = ops::OneHot::new().build(
        y,
        ops::constant(CLASSES as i32, &mut scope)?,
        ops::constant(1.0f32, &mut scope)?,
        ops::constant(0.0f32, &mut scope)?,
        &mut scope,
    )?;
    let xent = ops::SoftmaxCrossEntropyWithLogits::new().build(logits, one_hot, &mut scope)?;
    let loss = ops::mean(
        Output {
            operation: xent,
            index: 0,
        },
        ops::constant(&[0i32][..], &mut scope)?,
        &mut scope.with_op_name("loss"),
    )?;
    let variables = [table, w];
    let optimizer = GradientDescentOptimizer::new(ops::constant(0.5f32, &mut scope)?);
    optimizer.minimize(
        &mut scope.with_op_name("train"),
        loss.into(),
        MinimizeOptions::default().with_variables(&variables),
    )?;
    let inits: Vec<Operation> = variables.iter().map(|v| v.initializer().clone()).collect();
    ops::NoOp::new().build(&mut scope.with_control_dependencies(&inits).with_op_name("init"))?;
    Ok(scope)
}

/// The analysed graph and its sidecar, naming `label` or not.
fn text_model(label: Option<&str>) -> (Analyzed, Sidecar) {
    let scope = build().unwrap();
    let analyzed = analyze_graph(&scope.graph()).unwrap();
    let sidecar = Sidecar {
        inputs: BTreeMap::from([
            ("tokens".to_string(), vec![-1, TOKENS as i64]),
            ("y".to_string(), vec![-1]),
        ]),
        init: "init".into(),
        train: "train".into(),
        loss: "loss".into(),
        one_hot: Vec::new(),
        batch: None,
        logits: Some("logits".into()),
        label: label.map(String::from),
    };
    (analyzed, sidecar)
}

/// `n` rows of token ids drawn from `0..VOCAB` (seeded), each labelled with its first id
/// modulo `CLASSES`; `labels` overrides the labels of the first rows.
fn rows(name: &str, n: u64, seed: u64, labels: &[i64]) -> InMemory {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(1);
    let mut next = || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 33) % VOCAB
    };
    let tokens: Vec<i32> = (0..n * TOKENS).map(|_| next() as i32).collect();
    let mut y: Vec<i64> = tokens
        .chunks(TOKENS as usize)
        .map(|row| i64::from(row[0]) % CLASSES as i64)
        .collect();
    y[..labels.len()].copy_from_slice(labels);
    InMemory::from_tensors(
        name,
        [
            (
                "tokens",
                HostTensor::new(vec![n, TOKENS], Values::I32(tokens)).unwrap(),
            ),
            ("y", HostTensor::new(vec![n], Values::I64(y)).unwrap()),
        ],
    )
    .unwrap()
}

/// A cluster of one ps and one worker task, TensorFlow gRPC servers in this process on free
/// ports of 127.0.0.1 (no metrics agents: their figures are warnings). Returns the cluster spec
/// (`tf-config:PATH`, its TF_CONFIG written in `dir`).
fn in_process_cluster(dir: &std::path::Path) -> String {
    let port = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    };
    let (ps, worker) = (port(), port());
    let text =
        format!(r#"{{"cluster": {{"ps": ["127.0.0.1:{ps}"], "worker": ["127.0.0.1:{worker}"]}}}}"#);
    let config = TfConfig::parse(&text, "test").unwrap();
    for job in ["ps", "worker"] {
        let task = TaskId {
            job: job.into(),
            index: 0,
        };
        // Never dropped: TensorFlow's gRPC server serves until the process exits.
        std::mem::forget(Server::start(&config.server_def(&task).unwrap()).unwrap());
    }
    let path = dir.join("tf_config.json");
    std::fs::write(&path, text).unwrap();
    format!("tf-config:{}", path.display())
}

#[test]
fn a_named_label_gives_a_text_model_held_out_accuracy() {
    let (analyzed, sidecar) = text_model(Some("y"));
    let job = Job::new(
        "text",
        analyzed,
        sidecar,
        Box::new(rows("train", 512, 1, &[])),
    )
    .unwrap()
    .with_held_out(Box::new(rows("held out", 128, 2, &[])))
    .unwrap();
    assert_eq!(
        job.metric(),
        Some(&Metric::Accuracy {
            logits: "logits".into(),
            label: "y".into(),
        })
    );
    let dir = tempfile::tempdir().unwrap();
    let cluster = connect(&in_process_cluster(dir.path())).unwrap();
    let options = TrainingOptions {
        // A number of updates, not of seconds: a busy machine takes longer, not less far.
        steps: Some(150),
        epochs: None,
        max_seconds: Some(300.0),
        eval_every_s: 600.0,
        seed: 1,
        ..TrainingOptions::default()
    };
    let report = cluster
        .plan_data_parallel(job.workload(), "replica-setter".parse().unwrap(), Some(32))
        .unwrap()
        .fit(&job, &options)
        .unwrap();
    eprintln!(
        "accuracy {:?} after {} updates",
        report.final_metric, report.updates
    );
    assert_eq!(report.metric.as_deref(), Some("accuracy"));
    // Three classes: chance is 1/3; the label is a function of the first token id.
    assert!(
        report.final_metric.is_some_and(|a| a > 0.6),
        "accuracy {:?} after {} updates",
        report.final_metric,
        report.updates
    );
}

#[test]
fn without_a_label_two_integer_inputs_ask_for_one() {
    let (analyzed, sidecar) = text_model(None);
    let job = Job::new(
        "text",
        analyzed,
        sidecar,
        Box::new(rows("train", 64, 1, &[])),
    )
    .unwrap();
    let e = job
        .with_held_out(Box::new(rows("held out", 32, 2, &[])))
        .unwrap_err();
    assert!(matches!(e, Error::Sidecar { .. }), "{e:?}");
    let text = e.to_string();
    assert!(
        text.contains("names `logits` but no label input: name it with `label`")
            && text.contains("(inputs: tokens, y)"),
        "{text}"
    );
}

#[test]
fn the_named_label_is_checked_against_the_classes_and_token_ids_are_not() {
    // Token ids up to VOCAB - 1 = 11, beyond the 3 classes, are features: no error.
    let (analyzed, sidecar) = text_model(Some("y"));
    Job::new(
        "text",
        analyzed,
        sidecar,
        Box::new(rows("train", 64, 1, &[])),
    )
    .unwrap();
    // A label of 3 is not one of the logits' 3 classes, though no classification op takes `y`
    // (it is one-hot before the cross-entropy).
    let (analyzed, sidecar) = text_model(Some("y"));
    let e = Job::new(
        "text",
        analyzed,
        sidecar,
        Box::new(rows("train", 64, 1, &[0, 1, 3])),
    )
    .unwrap_err();
    assert!(
        matches!(&e, Error::DataValue { input, row: 2, .. } if input == "y"),
        "{e:?}"
    );
    assert!(
        e.to_string()
            .contains("label 3 is outside the 3 classes [0, 3) of `logits`"),
        "{e}"
    );
    // Naming the token ids the label is refused: several ids per row are no class.
    let (analyzed, sidecar) = text_model(Some("tokens"));
    let e = Job::new(
        "text",
        analyzed,
        sidecar,
        Box::new(rows("train", 64, 1, &[])),
    )
    .unwrap_err();
    assert!(
        e.to_string().contains(
            "`label`: `tokens` is int32 of shape [-1, 4]: integer labels are one class per row"
        ),
        "{e}"
    );
}

#[test]
fn synthetic_token_ids_stay_below_the_tables_rows_and_labels_within_the_classes() {
    let (analyzed, sidecar) = text_model(Some("y"));
    let workload = Workload::graph("text", analyzed, sidecar).unwrap();
    let job = Job::synthetic(&workload, 256, 1).unwrap();
    let rows = job
        .train_data()
        .rows(&(0..256).collect::<Vec<_>>(), job.inputs())
        .unwrap();
    let Values::I32(tokens) = &rows.tensors["tokens"].values else {
        panic!("tokens are int32")
    };
    let Values::I64(y) = &rows.tensors["y"].values else {
        panic!("labels are int64")
    };
    // Ids span the embedding's 12 rows (the GatherV2 of `embedding`), not the 3 classes.
    assert!(tokens.iter().all(|&t| (0..VOCAB as i32).contains(&t)));
    assert!(tokens.iter().any(|&t| t >= CLASSES as i32), "{tokens:?}");
    assert!(y.iter().all(|&c| (0..CLASSES as i64).contains(&c)), "{y:?}");
}

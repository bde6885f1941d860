//! The user's own job of the trainer tests: the `own_model` example's graph (built with the
//! `tensorflow` crate: int64 labels, fed placeholders) and rows of a learnable task in memory.
#![allow(dead_code)]

pub mod model {
    include!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tf-iaware/examples/own_model/model.rs"
    ));
}

use std::collections::BTreeMap;

use tf_iaware::data::{HostTensor, InMemory};
use tf_iaware::graph::analyze::analyze_graph;
use tf_iaware::graph::Sidecar;
use tf_iaware::Job;

/// `n` rows of a learnable task: `features` values uniform in [-1, 1) from a seeded
/// generator, and each row's class, the index of the largest of its first `classes` values.
pub fn learnable(n: usize, features: usize, classes: usize, seed: u64) -> (Vec<f32>, Vec<usize>) {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15).wrapping_add(1);
    let mut x = Vec::with_capacity(n * features);
    let mut labels = Vec::with_capacity(n);
    for _ in 0..n {
        let row: Vec<f32> = (0..features)
            .map(|_| {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((state >> 33) as f32 / (1u64 << 31) as f32) * 2.0 - 1.0
            })
            .collect();
        let label = (0..classes)
            .max_by(|&a, &b| row[a].total_cmp(&row[b]))
            .unwrap_or(0);
        x.extend(row);
        labels.push(label);
    }
    (x, labels)
}

/// `n` rows of the model's task: 16 features in [-1, 1), the label (int64) the index of the
/// largest of the first four.
pub fn rows(name: &str, n: usize, seed: u64) -> InMemory {
    let (f, c) = (model::FEATURES as usize, model::CLASSES as usize);
    let (x, classes) = learnable(n, f, c, seed);
    let labels: Vec<i64> = classes.into_iter().map(|c| c as i64).collect();
    InMemory::from_tensors(
        name,
        [
            (
                "x",
                HostTensor::new(vec![n as u64, f as u64], x.into()).unwrap(),
            ),
            (
                "labels",
                HostTensor::new(vec![n as u64], labels.into()).unwrap(),
            ),
        ],
    )
    .unwrap()
}

/// The model's graph and its sidecar (dynamic batch, int64 labels, logits for accuracy).
pub fn graph() -> (tf_iaware::graph::analyze::Analyzed, Sidecar) {
    let m = model::build().unwrap();
    let analyzed = analyze_graph(&m.scope.graph()).unwrap();
    let sidecar = Sidecar {
        inputs: BTreeMap::from([
            ("x".to_string(), vec![-1, model::FEATURES as i64]),
            ("labels".to_string(), vec![-1]),
        ]),
        init: "init".into(),
        train: m.train.name().unwrap(),
        loss: "loss".into(),
        one_hot: Vec::new(),
        batch: None,
        logits: Some("logits/Add".into()),
        label: None,
    };
    (analyzed, sidecar)
}

/// The job: 2,048 training rows, 512 held out; and the graph's GraphDef as the user would export
/// it.
pub fn job() -> (Job, Vec<u8>) {
    let m = model::build().unwrap();
    let graph_def = m.scope.graph().graph_def().unwrap();
    let (analyzed, sidecar) = graph();
    let job = Job::new(
        "own model",
        analyzed,
        sidecar,
        Box::new(rows("train", 2048, 1)),
    )
    .unwrap()
    .with_held_out(Box::new(rows("held out", 512, 2)))
    .unwrap();
    (job, graph_def)
}

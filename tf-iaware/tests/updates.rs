//! Asynchronous and backup-worker updates of a replicated graph, against real TensorFlow in one
//! process with two CPU devices: each replica's own train target moves the shared variables by
//! itself, and the accumulators aggregate only gradients of the current step (a stale one is
//! dropped, as SyncReplicasOptimizer drops it).

use std::collections::BTreeMap;

use prost::Message;
use tf_iaware::graph::analyze::{analyze_bytes, analyze_graph};
use tf_iaware::graph::proto::NodeDef;
use tf_iaware::parallel::replicate::{replica_name, replicate, BatchData, Replication};
use tf_iaware::parallel::updates::{add_async_updates, add_backup_accumulators, BACKUP_PREFIX};
use tf_iaware::parallel::{DataParallelPlan, Replica};
use tf_iaware::runtime::{PlacedSession, SessionConfig};
use tf_iaware::tensorflow::{SessionRunArgs, Tensor};

const CPU: &str = "/job:localhost/replica:0/task:0/device:CPU";

fn replicated() -> Replication {
    let m = tf_iaware::models::build("mlp", 8, 3).unwrap();
    let analyzed = analyze_graph(m.net.graph()).unwrap();
    let plan = DataParallelPlan {
        strategy: "test".into(),
        replicas: (0..2)
            .map(|k| Replica {
                device: format!("{CPU}:{k}"),
                batch: 4,
            })
            .collect(),
        variable_devices: BTreeMap::new(),
        global_device: format!("{CPU}:0"),
        predicted_step_ms: None,
    };
    replicate(
        &analyzed.graph_def,
        &analyzed.signatures,
        &m.sidecar,
        &plan,
        BatchData::Feed,
    )
    .unwrap()
}

fn session(rep: &Replication) -> PlacedSession {
    let bytes = rep.graph_def.encode_to_vec();
    let graph = analyze_bytes(&bytes, "test graph")
        .unwrap()
        .import("test graph")
        .unwrap();
    let s = PlacedSession::new(graph, &SessionConfig::local_cpus(2)).unwrap();
    let init = s.op("init", "test").unwrap();
    s.run(&[], &[init], &[], false).unwrap();
    s
}

/// Replica `k`'s inputs: noise images, one-hot labels.
fn inputs(k: usize) -> (Tensor<f32>, Tensor<f32>) {
    let x = Tensor::<f32>::new(&[4, 784])
        .with_values(
            &(0..4 * 784)
                .map(|i| ((i * 7 + k) % 13) as f32 / 13.0)
                .collect::<Vec<_>>(),
        )
        .unwrap();
    let mut y = Tensor::<f32>::new(&[4, 10]);
    for r in 0..4 {
        y[r * 10 + (r + k) % 10] = 1.0;
    }
    (x, y)
}

/// Runs `target` with replica `k`'s inputs and any int feeds.
fn step(s: &PlacedSession, k: usize, target: &str, ints: &[(&str, Tensor<i64>)]) {
    let (x, y) = inputs(k);
    let (xo, yo) = (
        s.op(&replica_name(k, "x"), "t").unwrap(),
        s.op(&replica_name(k, "y"), "t").unwrap(),
    );
    let ops: Vec<_> = ints.iter().map(|(n, _)| s.op(n, "t").unwrap()).collect();
    let mut args = SessionRunArgs::new();
    args.add_feed(&xo, 0, &x);
    args.add_feed(&yo, 0, &y);
    for (op, (_, t)) in ops.iter().zip(ints) {
        args.add_feed(op, 0, t);
    }
    let t = s.op(target, "t").unwrap();
    args.add_target(&t);
    s.run_args(&mut args, false, target).unwrap();
}

/// The first variable's values.
fn weights(s: &PlacedSession, rep: &Replication) -> Vec<f32> {
    let read = s.op(&rep.state[0].read, "t").unwrap();
    s.run(&[], &[], &[read], false).unwrap().fetched[0].to_vec()
}

#[test]
fn each_replica_updates_the_shared_variables_on_its_own() {
    let mut rep = replicated();
    let targets = add_async_updates(&mut rep).unwrap();
    assert_eq!(targets.train.len(), 2);
    let s = session(&rep);
    let w0 = weights(&s, &rep);
    step(&s, 0, &targets.train[0], &[]);
    let w1 = weights(&s, &rep);
    assert_ne!(w0, w1, "replica 0's step alone moved the variables");
    step(&s, 1, &targets.train[1], &[]);
    let w2 = weights(&s, &rep);
    assert_ne!(w1, w2, "and replica 1's alone, on top");
}

#[test]
fn backup_accumulators_take_the_first_gradients_and_drop_stale_ones() {
    let mut rep = replicated();
    let update = rep.gradients[0].update.clone();
    let targets = add_backup_accumulators(&mut rep, "test").unwrap();
    // A probe of how many gradients the first accumulator holds.
    let probe = NodeDef {
        name: "probe".into(),
        op: "AccumulatorNumAccumulated".into(),
        input: vec![format!("{BACKUP_PREFIX}/updates/{update}/accumulator")],
        ..NodeDef::default()
    };
    rep.graph_def.node.push(probe);
    let s = session(&rep);
    let held = || -> i32 {
        let p = s.op("probe", "t").unwrap();
        let mut args = SessionRunArgs::new();
        let token = args.request_fetch(&p, 0);
        s.run_args(&mut args, false, "probe").unwrap();
        args.fetch::<i32>(token).unwrap()[0]
    };
    let at = |step: i64| Tensor::<i64>::new(&[]).with_values(&[step]).unwrap();
    let w0 = weights(&s, &rep);
    step(&s, 0, &targets.push[0], &[(&targets.local_step[0], at(0))]);
    assert_eq!(held(), 1);
    // The chief takes one gradient (one backup worker of two) and applies it.
    let n = Tensor::<i32>::new(&[]).with_values(&[1]).unwrap();
    let chief = s.op(&targets.train, "t").unwrap();
    let num = s.op(&targets.num_required, "t").unwrap();
    let mut args = SessionRunArgs::new();
    args.add_feed(&num, 0, &n);
    args.add_target(&chief);
    s.run_args(&mut args, false, "chief").unwrap();
    assert_ne!(
        weights(&s, &rep),
        w0,
        "the aggregated step moved the variables"
    );
    assert_eq!(held(), 0, "taken");
    // Replica 1's gradient of step 0 arrives late: dropped.
    step(&s, 1, &targets.push[1], &[(&targets.local_step[1], at(0))]);
    assert_eq!(held(), 0, "a stale gradient is not aggregated");
    step(&s, 1, &targets.push[1], &[(&targets.local_step[1], at(1))]);
    assert_eq!(held(), 1, "a gradient of the current step is");
}

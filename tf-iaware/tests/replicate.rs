//! Data-parallel replication of any training graph, against real TensorFlow: one replicated step
//! with unequal shares leaves every trainable variable and optimizer slot where one step of the
//! original graph on the same samples, concatenated, leaves it — for zoo models and for graphs
//! exported by Python TensorFlow — and what cannot be replicated is refused naming the op.

use std::collections::BTreeMap;
use std::path::Path;

use prost::Message;
use tf_iaware::graph::analyze::{analyze_bytes, Analyzed};
use tf_iaware::graph::Sidecar;
use tf_iaware::parallel::replicate::{BatchData, Role};
use tf_iaware::parallel::{DataParallelPlan, Replica};
use tf_iaware::placer::apply;
use tf_iaware::runtime::replicated::{self, Workload};
use tf_iaware::runtime::stats::executed_nodes;
use tf_iaware::runtime::{PlacedSession, SessionConfig};
use tf_iaware::tensorflow::{Operation, SessionRunArgs, Tensor};
use tf_iaware::{connect, Error};

const CPU: &str = "/job:localhost/replica:0/task:0/device:CPU";

fn fixture(name: &str) -> (Vec<u8>, Sidecar) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures");
    let bytes = std::fs::read(dir.join(format!("{name}.pb"))).unwrap();
    let sidecar = Sidecar::load(&dir.join(format!("{name}.json"))).unwrap();
    (bytes, sidecar)
}

fn zoo(name: &str, batch: usize) -> (Vec<u8>, Sidecar) {
    let m = tf_iaware::models::build(name, batch, 3).unwrap();
    (m.net.graph().graph_def().unwrap(), m.sidecar)
}

/// `n` rows of every sidecar input: uniform noise, or one-hot rows for label inputs (seeded).
fn batch(sidecar: &Sidecar, n: usize) -> BTreeMap<String, (Vec<u64>, Vec<f32>)> {
    let mut state = 12345u64;
    let mut next = || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 33) as f32 / (1u64 << 31) as f32
    };
    sidecar
        .inputs
        .iter()
        .map(|(name, shape)| {
            let mut dims: Vec<u64> = shape.iter().map(|&d| d.max(1) as u64).collect();
            dims[0] = n as u64;
            let row: usize = dims[1..].iter().product::<u64>() as usize;
            let mut v = vec![0f32; n * row];
            if sidecar.one_hot.contains(name) {
                for r in 0..n {
                    let c = ((next() * row as f32) as usize).min(row - 1);
                    v[r * row + c] = 1.0;
                }
            } else {
                v.iter_mut().for_each(|x| *x = next() * 2.0 - 1.0);
            }
            (name.clone(), (dims, v))
        })
        .collect()
}

/// Rows `from..to` of a batch tensor.
fn rows(dims: &[u64], v: &[f32], from: usize, to: usize) -> Tensor<f32> {
    let row: usize = dims[1..].iter().product::<u64>() as usize;
    let mut d = dims.to_vec();
    d[0] = (to - from) as u64;
    Tensor::new(&d)
        .with_values(&v[from * row..to * row])
        .unwrap()
}

/// The op that reads variable `var` in `graph`: its first `ReadVariableOp` (resource
/// variables) or the variable itself (reference variables).
fn reader(analyzed: &Analyzed, var: &str) -> String {
    let def = &analyzed.graph_def;
    let node = def.node.iter().find(|n| n.name == var).unwrap();
    if node.op != "VarHandleOp" {
        return var.into();
    }
    def.node
        .iter()
        .find(|n| n.op == "ReadVariableOp" && n.input.first().map(String::as_str) == Some(var))
        .unwrap_or_else(|| panic!("no read of {var}"))
        .name
        .clone()
}

fn run(
    session: &PlacedSession,
    feeds: &[(String, Tensor<f32>)],
    targets: &[&str],
    fetch: &[String],
) -> Vec<Vec<f32>> {
    let op = |n: &str| -> Operation { session.op(n, "test").unwrap() };
    let mut args = SessionRunArgs::new();
    for (name, t) in feeds {
        args.add_feed(&op(name), 0, t);
    }
    for t in targets {
        args.add_target(&op(t));
    }
    let tokens: Vec<_> = fetch
        .iter()
        .map(|f| args.request_fetch(&op(f), 0))
        .collect();
    session.run_args(&mut args, false, "test").unwrap();
    tokens
        .into_iter()
        .map(|t| args.fetch::<f32>(t).unwrap().to_vec())
        .collect()
}

fn plan(shares: &[usize]) -> DataParallelPlan {
    DataParallelPlan {
        strategy: "test".into(),
        replicas: shares
            .iter()
            .enumerate()
            .map(|(k, &b)| Replica {
                device: format!("{CPU}:{}", k + 1),
                batch: b,
            })
            .collect(),
        variable_devices: BTreeMap::new(),
        global_device: format!("{CPU}:0"),
        predicted_step_ms: None,
    }
}

/// One step of the original graph on `global` samples and one replicated step with `shares`
/// of the same samples; returns (variable, original, replicated) values of every state variable.
fn one_step_both_ways(
    bytes: &[u8],
    sidecar: &Sidecar,
    shares: &[usize],
) -> Vec<(String, Vec<f32>, Vec<f32>)> {
    let global: usize = shares.iter().sum();
    let data = batch(sidecar, global);
    let single = analyze_bytes(bytes, "original").unwrap();
    let mut config = SessionConfig::local_cpus(4);
    config.inter_op_threads = 1;
    let mut plan = plan(shares);
    for v in replicated::variables(&single.op_graph) {
        plan.variable_devices.insert(v.name, format!("{CPU}:0"));
    }

    let workload =
        match Workload::graph_with("test", single, sidecar.clone(), BatchData::Feed).unwrap() {
            Workload::Graph(g) => g,
            Workload::Zoo(_) => unreachable!(),
        };
    let cluster = connect("local:cpu=4").unwrap();
    let built = replicated::build(&workload, &plan, cluster.cluster()).unwrap();
    let state = built.replication.state.clone();
    assert!(!state.is_empty());

    // The original: one step on every sample.
    let original_def = &workload.analyzed;
    let session = PlacedSession::new(
        apply::import(&original_def.graph_def, "original").unwrap(),
        &config,
    )
    .unwrap();
    let feeds: Vec<(String, Tensor<f32>)> = data
        .iter()
        .map(|(n, (d, v))| (n.clone(), rows(d, v, 0, global)))
        .collect();
    run(&session, &[], &[&sidecar.init], &[]);
    run(&session, &feeds, &[&sidecar.train], &[]);
    let reads: Vec<String> = state
        .iter()
        .map(|v| reader(original_def, &v.name))
        .collect();
    let before = run(&session, &[], &[], &reads);

    // Replicated: each replica its consecutive rows.
    let placed = apply::apply(
        &built.analyzed.graph_def,
        &built.analyzed.op_graph,
        cluster.cluster(),
        &built.placement,
    )
    .unwrap();
    let session = PlacedSession::new(placed.graph, &config).unwrap();
    let mut feeds = Vec::new();
    let mut from = 0;
    for (k, r) in built.replication.replicas.iter().enumerate() {
        for (n, (d, v)) in &data {
            feeds.push((format!("replica_{k}/{n}"), rows(d, v, from, from + r.batch)));
        }
        from += r.batch;
    }
    run(&session, &[], &[&sidecar.init], &[]);
    let traced_loss = run(
        &session,
        &feeds,
        &[&sidecar.train],
        std::slice::from_ref(&sidecar.loss),
    );
    assert!(traced_loss[0][0].is_finite());
    let reads: Vec<String> = state.iter().map(|v| v.read.clone()).collect();
    let after = run(&session, &[], &[], &reads);
    state
        .iter()
        .zip(before.into_iter().zip(after))
        .map(|(v, (a, b))| (v.name.clone(), a, b))
        .collect()
}

fn assert_equal(values: &[(String, Vec<f32>, Vec<f32>)], what: &str) {
    for (name, a, b) in values {
        assert_eq!(a.len(), b.len(), "{what}: {name}");
        for (x, y) in a.iter().zip(b) {
            assert!(
                (x - y).abs() <= 1e-5 * x.abs().max(1.0),
                "{what}: {name}: {x} (original) vs {y} (replicated)"
            );
        }
    }
}

#[test]
fn zoo_models_replicated_step_equals_the_global_step() {
    for name in ["mlp", "lenet"] {
        let (bytes, sidecar) = zoo(name, 8);
        assert_equal(
            &one_step_both_ways(&bytes, &sidecar, &[5, 3]),
            &format!("{name} 5+3"),
        );
        assert_equal(
            &one_step_both_ways(&bytes, &sidecar, &[7, 1, 0]),
            &format!("{name} 7+1+0"),
        );
    }
}

#[test]
fn python_momentum_graph_replicated_step_equals_the_global_step() {
    let (bytes, sidecar) = fixture("tf1_mlp_momentum");
    let values = one_step_both_ways(&bytes, &sidecar, &[5, 3]);
    // Weights and their momentum slots.
    assert!(
        values.iter().any(|(n, _, _)| n.contains("Momentum")),
        "{:?}",
        values.iter().map(|v| &v.0).collect::<Vec<_>>()
    );
    assert_equal(&values, "tf1_mlp_momentum 5+3");
    assert_equal(
        &one_step_both_ways(&bytes, &sidecar, &[7, 1, 0]),
        "tf1_mlp_momentum 7+1+0",
    );
}

#[test]
fn python_adam_batch_norm_graph_replicates() {
    // One replica of the whole batch is the original step exactly (Adam's slots and its beta
    // powers, updated once); with two replicas FusedBatchNormV3 normalises each share by its
    // own statistics, so only the step's finiteness is checked.
    let (bytes, sidecar) = fixture("tf1_cnn_adam");
    let values = one_step_both_ways(&bytes, &sidecar, &[8]);
    assert!(values.iter().any(|(n, _, _)| n.contains("Adam")));
    assert_equal(&values, "tf1_cnn_adam 8");
    for (name, _, b) in one_step_both_ways(&bytes, &sidecar, &[5, 3]) {
        assert!(b.iter().all(|x| x.is_finite()), "{name}");
    }
}

#[test]
fn replicas_run_on_their_workers_and_updates_with_their_variables() {
    let (bytes, sidecar) = fixture("tf1_mlp_momentum");
    let single = analyze_bytes(&bytes, "original").unwrap();
    let mut plan = plan(&[5, 3]);
    for v in replicated::variables(&single.op_graph) {
        plan.variable_devices.insert(v.name, format!("{CPU}:0"));
    }
    let Workload::Graph(g) =
        Workload::graph_with("test", single, sidecar.clone(), BatchData::Feed).unwrap()
    else {
        unreachable!()
    };
    let cluster = connect("local:cpu=4").unwrap();
    let built = replicated::build(&g, &plan, cluster.cluster()).unwrap();
    let r = &built.replication;
    let device_of = |op: &str| {
        built
            .placement
            .device_of(&built.analyzed.op_graph, cluster.cluster(), op)
    };
    assert_eq!(r.updates.len(), 4, "{:?}", r.updates);
    assert_eq!(r.sidecar.inputs["replica_0/x"], vec![5, 32]);
    assert_eq!(r.sidecar.inputs["replica_1/y"], vec![3, 10]);
    assert!(r.sidecar.one_hot.contains(&"replica_1/y".to_string()));
    for (name, role) in &r.roles {
        let device = device_of(name).unwrap();
        match role {
            Role::Replica(k) if !name.contains("ReadVariableOp") => {
                assert_eq!(device, format!("{CPU}:{}", k + 1), "{name}")
            }
            Role::Combine { .. } => assert_eq!(device, format!("{CPU}:0"), "{name}"),
            _ => {}
        }
    }
    for u in &r.updates {
        assert_eq!(device_of(u), Some(format!("{CPU}:0").as_str()));
    }
    // And TensorFlow runs them there (step stats).
    let placed = apply::apply(
        &built.analyzed.graph_def,
        &built.analyzed.op_graph,
        cluster.cluster(),
        &built.placement,
    )
    .unwrap();
    let session = PlacedSession::new(placed.graph, &SessionConfig::local_cpus(4)).unwrap();
    let trainer = tf_iaware::runtime::Trainer::new(session, &r.sidecar, None, 1).unwrap();
    let report = trainer
        .train(
            4,
            0,
            Some((
                &built.placement,
                &built.analyzed.op_graph,
                cluster.cluster(),
            )),
        )
        .unwrap();
    assert!(report.loss_last < report.loss_first, "{:?}", report.losses);
    assert_eq!(report.mismatches, vec![]);
    let ran = executed_nodes(report.step_stats.as_ref().unwrap());
    let on = |d: usize| ran.get(&format!("{CPU}:{d}")).cloned().unwrap_or_default();
    assert!(on(1).iter().any(|n| n.starts_with("replica_0/")));
    assert!(on(2).iter().any(|n| n.starts_with("replica_1/")));
    assert!(on(0).iter().any(|n| r.updates.contains(n)), "{:?}", on(0));
}

#[test]
fn what_cannot_be_replicated_is_refused_naming_the_op() {
    let (bytes, mut sidecar) = fixture("tf1_mlp_momentum");
    let single = analyze_bytes(&bytes, "original").unwrap();
    let p = plan(&[4, 4]);
    let replicate = |sidecar: &Sidecar| {
        tf_iaware::parallel::replicate::replicate(
            &single.graph_def,
            &single.signatures,
            sidecar,
            &p,
            BatchData::Feed,
        )
    };
    // A sidecar input that is not a placeholder.
    let mut bad = sidecar.clone();
    bad.inputs.insert("loss".into(), vec![8]);
    let e = replicate(&bad).unwrap_err();
    assert!(
        matches!(&e, Error::Replication { op, .. } if op == "loss"),
        "{e}"
    );
    // A "train" op that updates nothing from the batch.
    let mut bad = sidecar.clone();
    bad.train = "init".into();
    // (`init` is no optimizer update: the graph's updates still are found from the batch.)
    assert!(replicate(&bad).is_ok());
    // No inputs at all: no gradient depends on a batch.
    sidecar.inputs.clear();
    let e = replicate(&sidecar).unwrap_err();
    assert!(matches!(e, Error::Replication { .. }), "{e}");
    // An empty plan.
    let e = tf_iaware::parallel::replicate::replicate(
        &single.graph_def,
        &single.signatures,
        &fixture("tf1_mlp_momentum").1,
        &plan(&[0, 0]),
        BatchData::Feed,
    )
    .unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e}");
    // A stateful op of unknown kind inside the tower.
    let (bytes, sidecar) = fixture("tf1_mlp_momentum");
    let mut def = tf_iaware::graph::proto::GraphDef::decode(bytes.as_slice()).unwrap();
    let relu = def.node.iter().position(|n| n.op == "Relu").unwrap();
    let relu_name = def.node[relu].name.clone();
    let mut queue = tf_iaware::graph::proto::NodeDef {
        name: "my_queue".into(),
        op: "FIFOQueueV2".into(),
        ..Default::default()
    };
    let types = tf_iaware::graph::proto::AttrValue {
        list: Some(tf_iaware::graph::proto::ListValue {
            r#type: vec![1],
            ..Default::default()
        }),
        ..Default::default()
    };
    queue
        .attr
        .insert("component_types".into(), types.encode_to_vec());
    let mut enqueue = tf_iaware::graph::proto::NodeDef {
        name: "my_enqueue".into(),
        op: "QueueEnqueueV2".into(),
        input: vec!["my_queue".into(), relu_name.clone()],
        ..Default::default()
    };
    enqueue
        .attr
        .insert("Tcomponents".into(), types.encode_to_vec());
    def.node.push(queue);
    def.node.push(enqueue);
    // Make the loss wait for it, so it is inside the step.
    let loss = def.node.iter_mut().find(|n| n.name == "loss").unwrap();
    loss.input.push("^my_enqueue".into());
    let analyzed = analyze_bytes(&def.encode_to_vec(), "with a queue").unwrap();
    let e = tf_iaware::parallel::replicate::replicate(
        &analyzed.graph_def,
        &analyzed.signatures,
        &sidecar,
        &p,
        BatchData::Feed,
    )
    .unwrap_err();
    assert!(
        matches!(&e, Error::Replication { op, .. } if op == "my_enqueue"),
        "{e}"
    );
}

#[test]
fn labels_of_a_cross_entropy_are_found_without_a_sidecar_key() {
    for name in ["tf1_mlp_momentum", "tf1_cnn_adam"] {
        let (bytes, mut sidecar) = fixture(name);
        // Neither `one_hot` nor a float `label` (which is marked for being named).
        sidecar.one_hot.clear();
        sidecar.label = None;
        let analyzed = analyze_bytes(&bytes, name).unwrap();
        let marked = sidecar.infer_one_hot(&analyzed.op_graph, &analyzed.signatures);
        assert_eq!(marked, vec!["y".to_string()], "{name}");
        assert_eq!(sidecar.one_hot, vec!["y".to_string()]);
    }
}

#[test]
fn sparse_updates_and_a_batch_fixed_elsewhere_are_refused_naming_the_op() {
    use tf_iaware::graph::proto::{AttrValue, NodeDef, TensorAttr, TensorProto, TensorShapeProto};
    let (bytes, sidecar) = fixture("tf1_mlp_momentum");
    let single = analyze_bytes(&bytes, "original").unwrap();
    let p = plan(&[5, 3]);
    // An update of the sparse family (as embeddings have), seen by the pure transform.
    let mut def = single.graph_def.clone();
    let update = def
        .node
        .iter_mut()
        .find(|n| n.op == "ResourceApplyMomentum")
        .unwrap();
    update.op = "ResourceSparseApplyMomentum".into();
    let name = update.name.clone();
    let mut signatures = single.signatures.clone();
    let dense = signatures["ResourceApplyMomentum"].clone();
    signatures.insert("ResourceSparseApplyMomentum".into(), dense);
    let e =
        tf_iaware::parallel::replicate::replicate(&def, &signatures, &sidecar, &p, BatchData::Feed)
            .unwrap_err();
    assert!(
        matches!(&e, Error::Replication { op, .. } if *op == name),
        "{e}"
    );

    // A batch fixed in a shape no rule recognises: x flattened to [256] and back.
    let mut def = single.graph_def.clone();
    let int32 = |values: &[i32]| {
        let t = TensorProto {
            dtype: 3,
            tensor_shape: Some(TensorShapeProto {
                dim: vec![tf_iaware::graph::proto::graph::Dim {
                    size: values.len() as i64,
                    name: String::new(),
                }],
                unknown_rank: false,
            }),
            int_val: values.to_vec(),
            ..TensorProto::default()
        };
        TensorAttr { tensor: Some(t) }.encode_to_vec()
    };
    let type_attr = |t: i32| {
        AttrValue {
            r#type: Some(t),
            ..AttrValue::default()
        }
        .encode_to_vec()
    };
    let node = |name: &str, op: &str, input: &[&str], attrs: Vec<(&str, Vec<u8>)>| {
        let mut n = NodeDef {
            name: name.into(),
            op: op.into(),
            input: input.iter().map(|s| s.to_string()).collect(),
            ..NodeDef::default()
        };
        for (k, v) in attrs {
            n.attr.insert(k.into(), v);
        }
        n
    };
    def.node.push(node(
        "flat_shape",
        "Const",
        &[],
        vec![("dtype", type_attr(3)), ("value", int32(&[256]))],
    ));
    def.node.push(node(
        "flat",
        "Reshape",
        &["x", "flat_shape"],
        vec![("T", type_attr(1)), ("Tshape", type_attr(3))],
    ));
    def.node.push(node(
        "back_shape",
        "Const",
        &[],
        vec![("dtype", type_attr(3)), ("value", int32(&[8, 32]))],
    ));
    def.node.push(node(
        "back",
        "Reshape",
        &["flat", "back_shape"],
        vec![("T", type_attr(1)), ("Tshape", type_attr(3))],
    ));
    let matmul = def
        .node
        .iter_mut()
        .find(|n| n.op == "MatMul" && n.input.first().map(String::as_str) == Some("x"))
        .unwrap();
    matmul.input[0] = "back".into();
    let analyzed = analyze_bytes(&def.encode_to_vec(), "flattened").unwrap();
    let Workload::Graph(g) =
        Workload::graph_with("flattened", analyzed, sidecar.clone(), BatchData::Feed).unwrap()
    else {
        unreachable!()
    };
    let cluster = connect("local:cpu=4").unwrap();
    let e = replicated::build(&g, &p, cluster.cluster())
        .expect_err("the fixed [256] cannot hold 5 rows");
    assert!(
        matches!(&e, Error::Replication { op, .. } if op.contains("flat")),
        "{e}"
    );
}

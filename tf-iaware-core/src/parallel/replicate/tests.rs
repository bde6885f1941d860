//! The transform on hand-built GraphDefs: a linear model `loss = mean((x·w − y)²)` with a batch
//! of 4 fixed in the graph, its gradient written out by hand (with the batch folded into a shape
//! constant and a float divisor, as Python's `tf.gradients` leaves them) and one plain gradient
//! descent update.

use std::collections::BTreeMap;

use prost::Message;

use super::*;
use crate::proto::attr::{DT_INT32, DT_INT64};
use crate::proto::{AttrValue, TensorAttr, TensorProto};

fn sig(inputs: &[&str], stateful: bool) -> OpSignature {
    OpSignature {
        inputs: Some(inputs.iter().map(|s| s.to_string()).collect()),
        stateful,
    }
}

fn signatures() -> BTreeMap<String, OpSignature> {
    [
        ("Placeholder", sig(&[], false)),
        ("Const", sig(&[], false)),
        ("VariableV2", sig(&[], true)),
        ("Identity", sig(&["input"], false)),
        ("MatMul", sig(&["a", "b"], false)),
        ("Sub", sig(&["x", "y"], false)),
        ("Square", sig(&["x"], false)),
        ("Mean", sig(&["input", "reduction_indices"], false)),
        ("Reshape", sig(&["tensor", "shape"], false)),
        ("RealDiv", sig(&["x", "y"], false)),
        ("NoOp", sig(&[], false)),
        ("Assign", sig(&["ref", "value"], true)),
        (
            "ApplyGradientDescent",
            sig(&["var", "alpha", "delta"], true),
        ),
        (
            "SparseApplyGradientDescent",
            sig(&["var", "alpha", "grad", "indices"], true),
        ),
        ("QueueEnqueueV2", sig(&["handle"], true)),
    ]
    .into_iter()
    .map(|(op, s)| (op.to_string(), s))
    .collect()
}

fn n(name: &str, op: &str, inputs: &[&str], attrs: Vec<(&str, Vec<u8>)>) -> NodeDef {
    attr::node(
        name,
        op,
        inputs.iter().map(|s| s.to_string()).collect(),
        attrs,
    )
}

fn float() -> (&'static str, Vec<u8>) {
    ("T", attr::dtype(DT_FLOAT))
}

fn placeholder(name: &str, dims: &[i64]) -> NodeDef {
    n(
        name,
        "Placeholder",
        &[],
        vec![
            ("dtype", attr::dtype(DT_FLOAT)),
            ("shape", attr::shape(attr::shape_of(dims))),
        ],
    )
}

/// The linear model (see the module docs).
fn linear() -> GraphDef {
    let w_shape = attr::shape(attr::shape_of(&[2, 1]));
    let node = vec![
        placeholder("x", &[4, 2]),
        placeholder("y", &[4, 1]),
        n(
            "w",
            "VariableV2",
            &[],
            vec![("dtype", attr::dtype(DT_FLOAT)), ("shape", w_shape)],
        ),
        n("w/read", "Identity", &["w"], vec![float()]),
        n("pred", "MatMul", &["x", "w/read"], vec![float()]),
        n("diff", "Sub", &["pred", "y"], vec![float()]),
        n("sq", "Square", &["diff"], vec![float()]),
        n(
            "axes",
            "Const",
            &[],
            vec![("value", attr::int32_vector(&[0, 1]))],
        ),
        n("loss", "Mean", &["sq", "axes"], vec![float()]),
        n(
            "grad/shape",
            "Const",
            &[],
            vec![("value", attr::int32_vector(&[4, 1]))],
        ),
        n(
            "grad/shaped",
            "Reshape",
            &["diff", "grad/shape"],
            vec![float()],
        ),
        n(
            "grad/scale",
            "Const",
            &[],
            vec![("value", attr::float_scalar(DT_FLOAT, 4.0))],
        ),
        n(
            "grad/div",
            "RealDiv",
            &["grad/shaped", "grad/scale"],
            vec![float()],
        ),
        n("grad", "MatMul", &["x", "grad/div"], vec![float()]),
        n(
            "lr",
            "Const",
            &[],
            vec![("value", attr::float_scalar(DT_FLOAT, 0.1))],
        ),
        n(
            "update",
            "ApplyGradientDescent",
            &["w", "lr", "grad"],
            vec![float()],
        ),
        n("train", "NoOp", &["^update"], vec![]),
        n(
            "w/value",
            "Const",
            &[],
            vec![("value", attr::float_scalar(DT_FLOAT, 0.0))],
        ),
        n("w/assign", "Assign", &["w", "w/value"], vec![float()]),
        n("init", "NoOp", &["^w/assign"], vec![]),
    ];
    GraphDef {
        node,
        ..GraphDef::default()
    }
}

fn sidecar() -> Sidecar {
    Sidecar {
        inputs: [
            ("x".to_string(), vec![-1, 2]),
            ("y".to_string(), vec![-1, 1]),
        ]
        .into(),
        init: "init".into(),
        train: "train".into(),
        loss: "loss".into(),
        one_hot: Vec::new(),
        batch: None,
        logits: Some("pred".into()),
        label: Some("y".into()),
    }
}

/// Shares 3 and 1, and an empty one between them that is left out.
fn plan() -> DataParallelPlan {
    let replica = |k: usize, batch| Replica {
        device: format!("/job:worker/task:{k}/device:CPU:0"),
        batch,
    };
    DataParallelPlan {
        strategy: "test".into(),
        replicas: vec![replica(0, 3), replica(1, 0), replica(2, 1)],
        variable_devices: BTreeMap::new(),
        global_device: "/job:ps/task:0/device:CPU:0".into(),
        predicted_step_ms: None,
    }
}

fn run(def: &GraphDef, sidecar: &Sidecar) -> Result<Replication> {
    replicate(def, &signatures(), sidecar, &plan(), BatchData::Feed)
}

fn node<'a>(r: &'a Replication, name: &str) -> &'a NodeDef {
    r.graph_def
        .node
        .iter()
        .find(|n| n.name == name)
        .unwrap_or_else(|| panic!("no node {name}"))
}

fn tensor(node: &NodeDef) -> TensorProto {
    TensorAttr::decode(node.attr["value"].as_slice())
        .unwrap()
        .tensor
        .unwrap()
}

fn refused_op(e: Error) -> String {
    match e {
        Error::Replication { op, .. } => op,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn tower_ops_are_copied_per_replica_and_state_is_shared() {
    let r = run(&linear(), &sidecar()).unwrap();
    assert_eq!(r.replicas.len(), 2, "the empty share is left out");
    assert_eq!(r.replicas[1].batch, 1);
    for op in ["x", "pred", "diff", "sq", "loss", "grad/div", "grad"] {
        for k in 0..2 {
            assert_eq!(r.roles[&replica_name(k, op)], Role::Replica(k), "{op}");
        }
        assert!(!r.roles.contains_key(&replica_name(2, op)));
    }
    for op in ["w", "w/read", "update", "train", "init", "lr", "axes"] {
        assert_eq!(r.roles[op], Role::Shared, "{op}");
        assert!(!r.roles.contains_key(&replica_name(0, op)), "{op}");
    }
    // A copy reads its own replica's copies and the shared variable.
    assert_eq!(node(&r, "replica_1/pred").input, ["replica_1/x", "w/read"]);
    assert_eq!(r.updates, ["update"]);
    assert!(r.once.is_empty());
    // Every node has a role.
    assert_eq!(r.roles.len(), r.graph_def.node.len());
}

#[test]
fn placeholders_and_the_sidecar_take_each_share() {
    let r = run(&linear(), &sidecar()).unwrap();
    let dims = |name: &str| {
        attr::get(node(&r, name), "shape")
            .and_then(|a| a.shape)
            .and_then(|s| s.dims())
    };
    assert_eq!(dims("replica_0/x"), Some(vec![3, 2]));
    assert_eq!(dims("replica_1/x"), Some(vec![1, 2]));
    assert_eq!(dims("replica_1/y"), Some(vec![1, 1]));
    let s = &r.sidecar;
    assert_eq!(s.batch, Some(4));
    assert_eq!(s.inputs["replica_0/x"], [3, 2]);
    assert_eq!(s.inputs["replica_1/y"], [1, 1]);
    assert_eq!(s.inputs.len(), 4);
    assert_eq!(
        (s.init.as_str(), s.train.as_str(), s.loss.as_str()),
        ("init", "train", "loss")
    );
    assert_eq!(s.logits.as_deref(), Some("replica_0/pred"));
    // The label that goes with those logits.
    assert_eq!(s.label.as_deref(), Some("replica_0/y"));
}

#[test]
fn each_gradient_is_combined_by_share_before_its_one_update() {
    let r = run(&linear(), &sidecar()).unwrap();
    let update = node(&r, "update");
    assert_eq!(update.input, ["w", "lr", "tf_iaware_combine/update/sum"]);
    let sum = node(&r, "tf_iaware_combine/update/sum");
    assert_eq!(sum.op, "AddN");
    assert_eq!(attr::get(sum, "N").and_then(|a| a.i), Some(2));
    assert_eq!(
        sum.input,
        [
            "tf_iaware_combine/update/mul_0",
            "tf_iaware_combine/update/mul_1"
        ]
    );
    let mul = node(&r, "tf_iaware_combine/update/mul_1");
    assert_eq!(
        mul.input,
        ["replica_1/grad", "tf_iaware_combine/update/weight_1"]
    );
    let weight = |k: usize| tensor(node(&r, &format!("tf_iaware_combine/update/weight_{k}")));
    assert_eq!(weight(0).float_val, [0.75]);
    assert_eq!(weight(1).float_val, [0.25]);
    let combine = Role::Combine {
        update: "update".into(),
    };
    assert_eq!(r.roles["tf_iaware_combine/update/sum"], combine);
    assert_eq!(
        r.gradients,
        [UpdateGradients {
            update: "update".into(),
            grad_input: 2,
            per_replica: vec!["replica_0/grad".into(), "replica_1/grad".into()],
        }]
    );
}

#[test]
fn the_loss_is_combined_under_its_own_name() {
    let r = run(&linear(), &sidecar()).unwrap();
    let loss = node(&r, "loss");
    assert_eq!(loss.op, "AddN");
    assert_eq!(r.roles["loss"], Role::Loss);
    assert_eq!(
        node(&r, "tf_iaware_combine/loss/mul_0").input,
        ["replica_0/loss", "tf_iaware_combine/loss/weight_0"]
    );
    assert_eq!(node(&r, "replica_0/loss").op, "Mean");
}

#[test]
fn constants_that_hold_the_batch_take_each_share() {
    let r = run(&linear(), &sidecar()).unwrap();
    assert_eq!(tensor(node(&r, "replica_0/grad/shape")).int_val, [3, 1]);
    assert_eq!(tensor(node(&r, "replica_1/grad/shape")).int_val, [1, 1]);
    assert_eq!(tensor(node(&r, "replica_0/grad/scale")).float_val, [3.0]);
    assert_eq!(tensor(node(&r, "replica_1/grad/scale")).float_val, [1.0]);
    // Constants that do not hold the batch stay shared, unchanged.
    assert_eq!(tensor(node(&r, "axes")).int_val, [0, 1]);
    assert!(!r.roles.contains_key("replica_0/axes"));
}

#[test]
fn a_graph_without_a_fixed_batch_keeps_its_constants() {
    let mut def = linear();
    for name in ["x", "y"] {
        let i = def.node.iter().position(|n| n.name == name).unwrap();
        def.node[i] = placeholder(name, &[-1, if name == "x" { 2 } else { 1 }]);
    }
    let r = run(&def, &sidecar()).unwrap();
    assert!(!r.roles.contains_key("replica_0/grad/shape"));
    assert_eq!(tensor(node(&r, "grad/shape")).int_val, [4, 1]);
    assert_eq!(node(&r, "replica_0/grad/shaped").input[1], "grad/shape");
}

#[test]
fn a_plan_without_a_share_is_refused() {
    let mut p = plan();
    for r in &mut p.replicas {
        r.batch = 0;
    }
    let e = replicate(&linear(), &signatures(), &sidecar(), &p, BatchData::Feed).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e:?}");
}

#[test]
fn a_sidecar_op_the_graph_lacks_is_named() {
    let mut s = sidecar();
    s.loss = "no_such_loss".into();
    match run(&linear(), &s).unwrap_err() {
        Error::UnknownOp { op, context } => {
            assert_eq!(op, "no_such_loss");
            assert!(context.contains("loss"), "{context}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_input_that_names_no_node_is_an_invalid_graph() {
    let mut def = linear();
    def.node
        .push(n("dangling", "Identity", &["ghost:0"], vec![float()]));
    match run(&def, &sidecar()).unwrap_err() {
        Error::InvalidGraph { node, reason } => {
            assert_eq!(node, "dangling");
            assert!(reason.contains("ghost"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_sidecar_input_that_is_not_a_placeholder_is_refused() {
    let mut s = sidecar();
    s.inputs.insert("w/read".into(), vec![2, 1]);
    assert_eq!(refused_op(run(&linear(), &s).unwrap_err()), "w/read");
}

#[test]
fn a_graph_without_an_update_fed_by_the_batch_is_refused() {
    let mut def = linear();
    def.node.retain(|n| n.name != "update");
    let train = def.node.iter_mut().find(|n| n.name == "train").unwrap();
    train.input.clear();
    assert_eq!(refused_op(run(&def, &sidecar()).unwrap_err()), "train");
}

#[test]
fn sparse_updates_are_refused() {
    let mut def = linear();
    let i = def.node.iter().position(|n| n.name == "update").unwrap();
    def.node[i] = n(
        "update",
        "SparseApplyGradientDescent",
        &["w", "lr", "grad", "axes"],
        vec![float()],
    );
    assert_eq!(refused_op(run(&def, &sidecar()).unwrap_err()), "update");
}

#[test]
fn an_unknown_stateful_op_in_the_tower_is_refused() {
    let mut def = linear();
    def.node
        .push(n("enqueue", "QueueEnqueueV2", &["sq"], vec![]));
    let loss = def.node.iter_mut().find(|n| n.name == "loss").unwrap();
    loss.input.push("^enqueue".into());
    let e = run(&def, &sidecar()).unwrap_err();
    assert!(e.to_string().contains("QueueEnqueueV2"), "{e}");
    assert_eq!(refused_op(e), "enqueue");
}

#[test]
fn variable_writes_in_the_tower_run_once() {
    let mut def = linear();
    def.node
        .push(n("stat/assign", "Assign", &["w", "grad"], vec![float()]));
    let loss = def.node.iter_mut().find(|n| n.name == "loss").unwrap();
    loss.input.push("^stat/assign".into());
    let r = run(&def, &sidecar()).unwrap();
    assert_eq!(r.once, ["stat/assign"]);
    assert_eq!(r.roles["stat/assign"], Role::Shared);
    assert!(!r.roles.contains_key("replica_0/stat/assign"));
    // It reads replica 0's gradient, and every replica's loss waits for it.
    assert_eq!(node(&r, "stat/assign").input, ["w", "replica_0/grad"]);
    assert!(node(&r, "replica_1/loss")
        .input
        .contains(&"^stat/assign".to_string()));
}

#[test]
fn a_noop_that_groups_tower_ops_joins_the_tower() {
    let mut def = linear();
    def.node
        .push(n("group_deps", "NoOp", &["^grad/div", "^pred"], vec![]));
    let grad = def.node.iter_mut().find(|n| n.name == "grad").unwrap();
    grad.input.push("^group_deps".into());
    let r = run(&def, &sidecar()).unwrap();
    assert_eq!(r.roles["replica_1/group_deps"], Role::Replica(1));
    assert_eq!(
        node(&r, "replica_1/group_deps").input,
        ["^replica_1/grad/div", "^replica_1/pred"]
    );
    assert!(node(&r, "replica_1/grad")
        .input
        .contains(&"^replica_1/group_deps".to_string()));
}

#[test]
fn a_loss_that_is_not_float_is_refused() {
    let mut def = linear();
    let loss = def.node.iter_mut().find(|n| n.name == "loss").unwrap();
    loss.attr.insert("T".into(), attr::dtype(DT_INT32));
    assert_eq!(refused_op(run(&def, &sidecar()).unwrap_err()), "loss");
}

#[test]
fn synthetic_batches_replace_the_placeholders() {
    let p = plan();
    let r = replicate(
        &linear(),
        &signatures(),
        &sidecar(),
        &p,
        BatchData::Synthetic { seed: 5 },
    )
    .unwrap();
    let read = node(&r, "replica_0/x");
    assert_eq!(read.op, "ReadVariableOp");
    assert_eq!(read.input, ["tf_iaware_data/r0_b3/x/handle"]);
    let handle = node(&r, "tf_iaware_data/r1_b1/y/handle");
    let dims = attr::get(handle, "shape")
        .and_then(|a| a.shape)
        .and_then(|s| s.dims());
    assert_eq!(dims, Some(vec![1, 1]));
    assert_eq!(r.roles["tf_iaware_data/r1_b1/y/handle"], Role::Replica(1));
    // Nothing is fed; `init` and `init_data` both draw every batch.
    assert!(r.sidecar.inputs.is_empty());
    assert_eq!(r.sidecar.label, None, "no input to name");
    let assigns: Vec<&str> = node(&r, "init_data")
        .input
        .iter()
        .map(String::as_str)
        .collect();
    assert_eq!(assigns.len(), 4);
    assert!(assigns.contains(&"^tf_iaware_data/r0_b3/x/assign"));
    for a in &assigns {
        assert!(node(&r, "init").input.iter().any(|i| i == a), "{a}");
    }
}

#[test]
fn fed_graphs_get_an_empty_init_data() {
    let r = run(&linear(), &sidecar()).unwrap();
    let init_data = node(&r, "init_data");
    assert_eq!(init_data.op, "NoOp");
    assert!(init_data.input.is_empty());
    let mut def = linear();
    def.node.push(n("init_data", "Const", &[], vec![]));
    assert_eq!(refused_op(run(&def, &sidecar()).unwrap_err()), "init_data");
}

#[test]
fn float_variables_get_checkpoint_ops() {
    let mut def = linear();
    // An int64 step counter is not checkpointed.
    def.node.push(n(
        "step",
        "VariableV2",
        &[],
        vec![
            ("dtype", attr::dtype(DT_INT64)),
            ("shape", attr::shape(attr::shape_of(&[]))),
        ],
    ));
    let r = run(&def, &sidecar()).unwrap();
    assert_eq!(r.state.len(), 1);
    let w = &r.state[0];
    assert_eq!((w.name.as_str(), w.shape.as_slice()), ("w", &[2, 1][..]));
    assert_eq!(node(&r, &w.read).input, ["w"]);
    let restore = node(&r, crate::parallel::checkpoint::RESTORE_OP);
    assert_eq!(restore.input, ["^restore/w/assign"]);
    assert_eq!(node(&r, "restore/w/assign").op, "Assign");
    let flag = crate::parallel::checkpoint::initialized_op("w");
    assert_eq!(node(&r, &flag).op, "Cast");
    assert_eq!(r.roles[&flag], Role::Shared);
}

#[test]
fn colocation_follows_the_replicas() {
    let mut def = linear();
    let class = AttrValue {
        list: Some(crate::proto::ListValue {
            s: vec![b"loc:@pred".to_vec(), b"loc:@w".to_vec()],
            ..Default::default()
        }),
        ..AttrValue::default()
    };
    let diff = def.node.iter_mut().find(|n| n.name == "diff").unwrap();
    diff.attr.insert("_class".into(), class.encode_to_vec());
    let r = run(&def, &sidecar()).unwrap();
    let list = attr::get(node(&r, "replica_1/diff"), "_class")
        .and_then(|a| a.list)
        .unwrap();
    assert_eq!(
        list.s,
        [b"loc:@replica_1/pred".to_vec(), b"loc:@w".to_vec()]
    );
}

#[test]
fn synthetic_batches_take_each_inputs_element_type() {
    // Sparse labels: `y` an int64 placeholder of classes.
    let mut def = linear();
    let y = def.node.iter_mut().find(|n| n.name == "y").unwrap();
    y.attr.insert("dtype".into(), attr::dtype(DT_INT64));
    let r = replicate(
        &def,
        &signatures(),
        &sidecar(),
        &plan(),
        BatchData::Synthetic { seed: 5 },
    )
    .unwrap();
    let dtype = |name: &str| attr::get(node(&r, name), "dtype").and_then(|a| a.r#type);
    assert_eq!(dtype("replica_0/y"), Some(DT_INT64));
    assert_eq!(dtype("tf_iaware_data/r0_b3/y/handle"), Some(DT_INT64));
    let value = node(&r, "tf_iaware_data/r0_b3/y/value");
    assert_eq!(value.op, "RandomUniformInt");
    assert_eq!(
        attr::get(value, "Tout").and_then(|a| a.r#type),
        Some(DT_INT64)
    );
    // Float inputs keep their noise.
    assert_eq!(dtype("replica_0/x"), Some(DT_FLOAT));
    assert_eq!(
        node(&r, "tf_iaware_data/r0_b3/x/uniform").op,
        "RandomUniform"
    );
    // A string input has no synthetic batch: refused, naming it.
    let mut def = linear();
    let x = def.node.iter_mut().find(|n| n.name == "x").unwrap();
    x.attr.insert("dtype".into(), attr::dtype(7));
    let e = replicate(
        &def,
        &signatures(),
        &sidecar(),
        &plan(),
        BatchData::Synthetic { seed: 5 },
    )
    .unwrap_err();
    assert_eq!(refused_op(e), "x");
}

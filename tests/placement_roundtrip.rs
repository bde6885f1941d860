//! End-to-end against real TensorFlow: analyse → place → apply → export keeps every NodeDef but
//! its device; placed training steps run where they were placed; colocation is enforced.

use prost::Message;
use tf_iaware::cluster::{self, Cluster, ClusterSpec};
use tf_iaware::graph::analyze::{analyze_bytes, analyze_graph, Analyzed};
use tf_iaware::graph::proto::GraphDef;
use tf_iaware::models;
use tf_iaware::placer::apply;
use tf_iaware::placer::{self, resolve, Placement};
use tf_iaware::runtime::{PlacedSession, SessionConfig, Trainer};
use tf_iaware::Error;

fn four_cpus() -> (Cluster, SessionConfig) {
    cluster::connect(&ClusterSpec::LocalCpu(4)).expect("4 local CPU devices")
}

fn zoo(name: &str, batch: usize) -> (Analyzed, tf_iaware::graph::Sidecar) {
    let model = models::build(name, batch, 1).expect("zoo model builds");
    (
        analyze_graph(model.net.graph()).expect("zoo model analyses"),
        model.sidecar,
    )
}

fn round_robin(analyzed: &Analyzed, cluster: &Cluster) -> Placement {
    placer::by_name("round-robin")
        .unwrap()
        .place(&analyzed.op_graph, cluster)
        .unwrap()
}

#[test]
fn every_zoo_model_round_trips_with_only_devices_changed() {
    let (cluster, _) = four_cpus();
    for name in models::MODELS {
        let (analyzed, _) = zoo(name, 8);
        let placement = round_robin(&analyzed, &cluster);
        let placed = apply::apply(
            &analyzed.graph_def,
            &analyzed.op_graph,
            &cluster,
            &placement,
        )
        .unwrap();
        let exported = GraphDef::decode(placed.graph.graph_def().unwrap().as_slice()).unwrap();
        let original = &analyzed.graph_def;
        assert_eq!(
            exported.node.len(),
            original.node.len(),
            "{name}: node count"
        );
        assert_eq!(exported.versions, original.versions, "{name}: versions");
        assert_eq!(
            exported.library, original.library,
            "{name}: function library"
        );
        let by_name: std::collections::HashMap<_, _> =
            exported.node.iter().map(|n| (n.name.as_str(), n)).collect();
        let mut devices = std::collections::BTreeSet::new();
        for before in &original.node {
            let after = by_name
                .get(before.name.as_str())
                .unwrap_or_else(|| panic!("{name}: {} lost", before.name));
            assert_eq!(after.op, before.op, "{name}/{}: op", before.name);
            assert_eq!(after.input, before.input, "{name}/{}: inputs", before.name);
            assert_eq!(
                after.attr.keys().collect::<Vec<_>>(),
                before.attr.keys().collect::<Vec<_>>(),
                "{name}/{}: attribute names",
                before.name
            );
            for (key, value) in &before.attr {
                assert_eq!(
                    &after.attr[key], value,
                    "{name}/{}: attribute {key}",
                    before.name
                );
            }
            assert_eq!(
                Some(after.device.as_str()),
                placement.device_of(&analyzed.op_graph, &cluster, &before.name),
                "{name}/{}: device",
                before.name
            );
            devices.insert(after.device.clone());
        }
        assert_eq!(
            devices.len(),
            4,
            "{name}: round-robin uses all four devices"
        );
    }
}

#[test]
fn placed_training_runs_exactly_where_it_was_placed() {
    let (cluster, config) = four_cpus();
    for name in ["mlp", "lenet"] {
        let (analyzed, sidecar) = zoo(name, 16);
        let placement = round_robin(&analyzed, &cluster);
        let placed = apply::apply(
            &analyzed.graph_def,
            &analyzed.op_graph,
            &cluster,
            &placement,
        )
        .unwrap();
        let trainer = Trainer::new(
            PlacedSession::new(placed.graph, &config).unwrap(),
            &sidecar,
            None,
            3,
        )
        .unwrap();
        let report = trainer
            .train(3, 1, Some((&placement, &analyzed.op_graph, &cluster)))
            .unwrap();
        assert!(
            report.losses.iter().all(|l| l.is_finite()),
            "{name}: losses {:?}",
            report.losses
        );
        assert!(
            report.loss_last < report.loss_first,
            "{name}: a fixed batch is learned: {:?}",
            report.losses
        );
        assert_eq!(
            report.mismatches,
            vec![],
            "{name}: every placed op ran where it was placed"
        );
        assert_eq!(
            report.executed.len(),
            4,
            "{name}: ops ran on all four devices: {:?}",
            report.executed
        );
        // Each device ran at least the ops placed there that step stats record (not Grappler-folded).
        let stats = report.step_stats.as_ref().expect("last step traced");
        let ran = tf_iaware::runtime::stats::executed_nodes(stats);
        let matmul = analyzed
            .op_graph
            .nodes()
            .iter()
            .find(|n| n.op == "MatMul")
            .unwrap();
        let dev = placement
            .device_of(&analyzed.op_graph, &cluster, &matmul.name)
            .unwrap();
        assert!(
            ran[dev].contains(&matmul.name),
            "{name}: {} ran on {dev}",
            matmul.name
        );
    }
}

#[test]
fn variables_stay_with_their_readers_and_updaters() {
    let (cluster, _) = four_cpus();
    let (analyzed, _) = zoo("mlp", 4);
    let g = &analyzed.op_graph;
    let placement = round_robin(&analyzed, &cluster);
    let of = |op: &str| placement.device_of(g, &cluster, op);
    let var = g.id("dense/kernel").expect("variable handle");
    for &c in g.consumers(var) {
        let consumer = g.node(c);
        if matches!(
            consumer.op.as_str(),
            "ReadVariableOp" | "AssignVariableOp" | "ResourceApplyMomentum"
        ) {
            assert_eq!(of(&consumer.name), of("dense/kernel"), "{}", consumer.name);
        }
    }
    // The momentum slot is colocated through `_class`.
    assert_eq!(of("dense/kernel/Momentum"), of("dense/kernel"));

    let mut split = placement.clone();
    let reader = "dense/kernel/Read/ReadVariableOp";
    let other = cluster
        .devices
        .iter()
        .find(|d| Some(d.name.as_str()) != of(reader))
        .unwrap();
    split
        .set(g.id(reader).unwrap(), cluster.index_of(&other.name))
        .unwrap();
    match apply::apply(&analyzed.graph_def, g, &cluster, &split) {
        Err(Error::SplitColocation { group, .. }) => assert_eq!(group, "dense/kernel"),
        Err(e) => panic!("expected a split-colocation error, got {e}"),
        Ok(_) => panic!("a split colocation group was accepted"),
    }
}

#[test]
fn invalid_placements_are_refused_before_tensorflow_sees_them() {
    let (cluster, _) = four_cpus();
    let (analyzed, _) = zoo("mlp", 4);
    let g = &analyzed.op_graph;
    let base = round_robin(&analyzed, &cluster).to_names(g, &cluster);
    // Op names and device strings become a placement, which is checked against the cluster.
    let placed = |cluster: &Cluster, op: &str, device: &str| {
        let mut names = base.clone();
        names.insert(op.into(), device.into());
        Placement::from_names("round-robin", g, cluster, &names)
            .and_then(|p| resolve::check(g, cluster, &p))
            .unwrap_err()
    };
    let with = |op: &str, device: &str| placed(&cluster, op, device);
    assert!(matches!(
        with("dense/MatMul", "/device:CPU:9"),
        Error::UnknownDevice { .. }
    ));
    assert!(matches!(
        with("dense/MatMul", "/device:GPU:0"),
        Error::UnknownDevice { .. }
    ));
    assert!(matches!(
        with("dense/MatMul", "cpu0"),
        Error::MalformedDevice { .. }
    ));
    assert!(matches!(
        with("no/such/op", "/device:CPU:0"),
        Error::UnknownOp { .. }
    ));
    // A device type without a kernel: pretend the cluster has a TPU.
    let mut tpu = cluster.clone();
    let mut d = tpu.devices[0].clone();
    d.name = "/job:localhost/replica:0/task:0/device:TPU:0".into();
    d.device_type = "TPU".into();
    tpu.devices.push(d);
    let err = placed(&tpu, "dense/MatMul", "/device:TPU:0");
    assert!(
        matches!(err, Error::NoKernel { ref op, .. } if op == "dense/MatMul"),
        "{err}"
    );
}

#[test]
fn broken_graphdef_bytes_are_typed_errors() {
    let (analyzed, _) = zoo("mlp", 4);
    let bytes = analyzed.graph_def.encode_to_vec();
    assert!(matches!(
        analyze_bytes(b"\xff\xff\xff garbage", "garbage"),
        Err(Error::GraphDecode { .. })
    ));
    assert!(matches!(
        analyze_bytes(&bytes[..bytes.len() / 2], "truncated"),
        Err(Error::GraphDecode { .. } | Error::TensorFlow { .. })
    ));
    // Well-formed protobuf, but an input names a node that does not exist.
    let mut def = analyzed.graph_def.clone();
    def.node[3].input.push("ghost:0".into());
    assert!(matches!(
        analyze_bytes(&def.encode_to_vec(), "dangling"),
        Err(Error::TensorFlow { .. })
    ));
}

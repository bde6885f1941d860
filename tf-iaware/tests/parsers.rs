//! Property tests of every parser of user input, on stable Rust (the cargo-fuzz targets in
//! fuzz/ need nightly): GraphDef decoding and import, `--cluster` specs, device names,
//! TF_CONFIG, Prometheus exposition pages and sidecars. Arbitrary input is an error
//! or a value, never a panic; generated valid input parses to what was generated; generated
//! broken input is refused.

use std::path::Path;

use proptest::prelude::*;
use prost::Message;
use tf_iaware::cluster::monitor::exposition::Exposition;
use tf_iaware::cluster::tf_config::{TaskId, TfConfig};
use tf_iaware::cluster::ClusterSpec;
use tf_iaware::graph::analyze::analyze_bytes;
use tf_iaware::graph::graph_def::{decode_graph_def, structure};
use tf_iaware::graph::proto::{GraphDef, NodeDef};
use tf_iaware::graph::DeviceName;
use tf_iaware::graph::Sidecar;

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Text that looks a little like each format: brackets, quotes, colons, digits, escapes.
fn textish() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<String>(),
        "[a-z0-9:=,.@/{}\\[\\]\" \\\\_-]{0,80}",
        proptest::collection::vec(any::<u8>(), 0..200)
            .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
    ]
}

fn node(name: &str, op: &str, inputs: &[String]) -> NodeDef {
    NodeDef {
        name: name.into(),
        op: op.into(),
        input: inputs.to_vec(),
        ..NodeDef::default()
    }
}

/// A GraphDef of `n` NoOps where node i depends (control edge) on the nodes `deps` pick among
/// those before it: always acyclic and importable.
fn noop_dag() -> impl Strategy<Value = GraphDef> {
    (1usize..24).prop_flat_map(|n| {
        proptest::collection::vec(
            proptest::collection::vec(any::<prop::sample::Index>(), 0..3),
            n,
        )
        .prop_map(move |deps| {
            let nodes = deps
                .iter()
                .enumerate()
                .map(|(i, d)| {
                    let inputs: Vec<String> = if i == 0 {
                        Vec::new()
                    } else {
                        let mut v: Vec<String> =
                            d.iter().map(|x| format!("^n{}", x.index(i))).collect();
                        v.sort();
                        v.dedup();
                        v
                    };
                    node(&format!("n{i}"), "NoOp", &inputs)
                })
                .collect();
            GraphDef {
                node: nodes,
                ..GraphDef::default()
            }
        })
    })
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn arbitrary_bytes_are_a_graphdef_or_an_error(bytes in proptest::collection::vec(any::<u8>(), 0..512)) {
        if let Ok(def) = decode_graph_def(&bytes, "proptest") {
            if let Ok(g) = structure(&def) {
                let _ = g.topo_order();
            }
        }
    }

    #[test]
    fn a_generated_dag_decodes_imports_and_orders_every_node(def in noop_dag()) {
        let bytes = def.encode_to_vec();
        let decoded = decode_graph_def(&bytes, "proptest").unwrap();
        prop_assert_eq!(decoded.node.len(), def.node.len());
        let g = structure(&decoded).unwrap();
        prop_assert_eq!(g.topo_order().unwrap().len(), def.node.len());
        // Through TensorFlow's own importer.
        let analyzed = analyze_bytes(&bytes, "proptest").unwrap();
        prop_assert_eq!(analyzed.op_graph.len(), def.node.len());
    }

    #[test]
    fn a_dag_with_a_dangling_or_cyclic_edge_is_refused(def in noop_dag(), pick in any::<prop::sample::Index>(), cyclic in any::<bool>()) {
        let mut def = def;
        let n = def.node.len();
        let i = pick.index(n);
        if cyclic {
            // The first node waits for the node after it (or itself): a cycle.
            let last = format!("^n{}", n - 1);
            def.node[0].input.push(last.clone());
            if n > 1 {
                def.node[n - 1].input.push("^n0".into());
            }
        } else {
            def.node[i].input.push("^nosuch".into());
        }
        let bytes = def.encode_to_vec();
        prop_assert!(analyze_bytes(&bytes, "proptest").is_err());
    }

    #[test]
    fn arbitrary_text_is_a_cluster_spec_device_or_an_error(text in textish()) {
        if let Ok(spec) = ClusterSpec::parse(&text) {
            prop_assert_eq!(ClusterSpec::parse(&spec.to_string()).ok(), Some(spec));
        }
        let _ = DeviceName::parse(&text);
        let _ = TfConfig::parse(&text, "proptest");
        let _ = Exposition::parse(&text);
        let _ = Sidecar::parse(&text, Path::new("proptest.json"));
    }

    #[test]
    fn cluster_specs_round_trip(n in 1usize..=256, k in 0usize..3) {
        let text = match k {
            0 => format!("local:cpu={n}"),
            1 => "local".to_string(),
            _ => format!("tf-config:/tmp/tf{n}.json"),
        };
        let spec = ClusterSpec::parse(&text).unwrap();
        prop_assert_eq!(spec.to_string(), text);
    }

    #[test]
    fn out_of_range_local_cpus_are_refused(n in prop_oneof![Just(0usize), 257usize..100_000]) {
        let text = format!("local:cpu={n}");
        prop_assert!(ClusterSpec::parse(&text).is_err());
    }

    #[test]
    fn device_names_round_trip(job in "[a-z][a-z0-9_]{0,8}", replica in 0u32..4, task in 0u32..100, ty in prop_oneof![Just("CPU"), Just("GPU")], id in 0u32..8) {
        let text = format!("/job:{job}/replica:{replica}/task:{task}/device:{ty}:{id}");
        let d = DeviceName::parse(&text).unwrap();
        prop_assert!(d.is_full());
        prop_assert_eq!(d.to_string(), text);
    }

    #[test]
    fn generated_tf_configs_parse_and_name_every_task(
        jobs in proptest::collection::btree_map("[a-z]{1,6}", 1usize..6, 1..4),
        task in any::<prop::sample::Index>(),
    ) {
        let mut port = 2000;
        let mut cluster = Vec::new();
        let mut all = Vec::new();
        for (job, n) in &jobs {
            let addrs: Vec<String> = (0..*n)
                .map(|_| {
                    port += 1;
                    format!("\"127.0.0.1:{port}\"")
                })
                .collect();
            for i in 0..*n {
                all.push((job.clone(), i));
            }
            cluster.push(format!("\"{job}\": [{}]", addrs.join(", ")));
        }
        let (tjob, tindex) = all[task.index(all.len())].clone();
        let text = format!(
            r#"{{"cluster": {{{}}}, "task": {{"type": "{tjob}", "index": {tindex}}}}}"#,
            cluster.join(", ")
        );
        let c = TfConfig::parse(&text, "proptest").unwrap();
        prop_assert_eq!(c.tasks().len(), all.len());
        let me = TaskId { job: tjob, index: tindex };
        prop_assert_eq!(c.task.as_ref(), Some(&me));
        prop_assert!(c.address(&me).is_some());
    }

    #[test]
    fn tf_configs_with_a_bad_port_or_a_shared_address_are_refused(
        port in prop_oneof![Just(0u64), 65_536u64..10_000_000],
        shared in any::<bool>(),
    ) {
        let text = if shared {
            r#"{"cluster": {"worker": ["127.0.0.1:2222"], "ps": ["127.0.0.1:2222"]}}"#.to_string()
        } else {
            format!(r#"{{"cluster": {{"worker": ["127.0.0.1:{port}"]}}}}"#)
        };
        prop_assert!(TfConfig::parse(&text, "proptest").is_err());
    }

    #[test]
    fn exposition_samples_parse_to_their_labels_and_values(
        name in "[a-zA-Z_:][a-zA-Z0-9_:]{0,20}",
        label in "[a-zA-Z_][a-zA-Z0-9_]{0,10}",
        value in "[ -~]{0,20}",
        x in any::<f64>().prop_filter("finite", |v| v.is_finite()),
    ) {
        prop_assume!(!label.starts_with("__"));
        let escaped = value.replace('\\', "\\\\").replace('"', "\\\"");
        let text = format!("# TYPE {name} gauge\n{name}{{{label}=\"{escaped}\"}} {x:e}\n");
        let page = Exposition::parse(&text).unwrap();
        let s = &page.samples(&name)[0];
        prop_assert_eq!(s.label(&label), Some(value.as_str()));
        prop_assert_eq!(s.value, x);
        // And the page renders to text that parses to the same sample.
        let again = Exposition::parse(&page.render()).unwrap();
        prop_assert_eq!(again.samples(&name)[0].label(&label), Some(value.as_str()));
        prop_assert_eq!(again.samples(&name)[0].value, x);
    }

    #[test]
    fn generated_sidecars_parse_and_bad_dimensions_are_refused(
        shapes in proptest::collection::btree_map("[a-z]{1,5}", proptest::collection::vec(1i64..10_000, 1..5), 1..4),
        leading_batch in any::<bool>(),
        bad in prop_oneof![Just(0i64), -1_000_000i64..-1],
    ) {
        let render = |shapes: &std::collections::BTreeMap<String, Vec<i64>>| {
            let inputs: Vec<String> = shapes
                .iter()
                .map(|(k, v)| format!("\"{k}\": {v:?}"))
                .collect();
            format!(
                r#"{{"inputs": {{{}}}, "init": "init", "train": "train", "loss": "loss"}}"#,
                inputs.join(", ")
            )
        };
        let mut good = shapes.clone();
        if leading_batch {
            for v in good.values_mut() {
                v[0] = -1;
            }
        }
        let s = Sidecar::parse(&render(&good), Path::new("s.json")).unwrap();
        prop_assert_eq!(&s.inputs, &good);
        let mut broken = shapes;
        let first = broken.keys().next().unwrap().clone();
        broken.get_mut(&first).unwrap().push(bad);
        let e = Sidecar::parse(&render(&broken), Path::new("s.json")).unwrap_err();
        prop_assert!(e.to_string().contains(&first), "{}", e);
    }
}

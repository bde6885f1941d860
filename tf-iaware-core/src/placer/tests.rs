//! Strategy-level tests on hand-built graphs with known optimal answers.

use super::*;
use crate::cluster::{Device, DeviceId};
use crate::graph::{Attr, DType, OpGraphBuilder};
use crate::report::{evaluate, PlaceWithReport};
use crate::sim::lower_bound;
use crate::sim::synthetic::{self, LayeredDag};
use crate::sim::tests::{cluster, graph, ids, model};

/// Strategies that take costs, memory and kernels into account.
const AWARE: &[&str] = &["random", "single-fastest", "infra-aware", "etf", "heft"];

fn strategy(name: &str) -> Box<dyn Strategy> {
    by_name_with(
        name,
        &PlaceOptions {
            seed: 7,
            infra_threshold: 0.0,
            // The schedules themselves: the split margin has its own tests (`placer::split`).
            min_split_gain: 0.0,
        },
    )
    .unwrap()
}

fn devices_of(g: &OpGraph, c: &Cluster, p: &Placement) -> Vec<DeviceId> {
    resolve::assignment(g, c, p).unwrap()
}

#[test]
fn every_name_resolves_and_unknown_names_list_them() {
    for name in OpPlacementStrategy::names() {
        assert_eq!(by_name(name).unwrap().name(), name);
    }
    let err = by_name("magic").err().unwrap().to_string();
    assert!(err.contains("magic") && err.contains("heft"), "{err}");
    let bad = PlaceOptions {
        infra_threshold: 2.0,
        ..PlaceOptions::default()
    };
    assert!(by_name_with("heft", &bad).is_err());
    for gain in [-0.1, 1.0, f64::NAN] {
        let bad = PlaceOptions {
            min_split_gain: gain,
            ..PlaceOptions::default()
        };
        let err = by_name_with("etf", &bad).err().unwrap().to_string();
        assert!(err.contains("min split gain"), "{err}");
    }
}

#[test]
fn two_equal_chains_run_in_parallel_on_two_equal_devices() {
    // a0 → a1 → a2, b0 → b1 → b2; 1 s per op; a transfer costs 5 s.
    let g = graph(6, &[(0, 1, 10), (1, 2, 10), (3, 4, 10), (4, 5, 10)]);
    let c = cluster(2, 5.0, 1e9);
    let m = model(&g, &c, &[[1.0, 1.0]; 6]);
    for name in ["heft", "etf", "infra-aware"] {
        let (p, report) = strategy(name).place_with_report(&g, &c, &m).unwrap();
        let d = devices_of(&g, &c, &p);
        assert_eq!(d[0], d[1], "{name}");
        assert_eq!(d[1], d[2], "{name}");
        assert_eq!(d[3], d[4], "{name}");
        assert_eq!(d[4], d[5], "{name}");
        assert_ne!(d[0], d[3], "{name}: the chains run in parallel");
        assert_eq!(report.predicted_step_ms, 3000.0, "{name}");
        assert!((report.lower_bound_ms - 3000.0).abs() < 1e-5, "{name}");
    }
}

#[test]
fn a_ten_times_slower_device_gets_no_work_when_the_fast_one_finishes_first() {
    // Four independent 1 s ops (10 s on the slow device), cheap communication.
    let g = graph(4, &[]);
    let mut c = cluster(2, 1e-6, 1e12);
    c.devices[1].peak_flops /= 10.0;
    let m = model(&g, &c, &[[1.0, 10.0]; 4]);
    for name in ["heft", "single-fastest", "infra-aware"] {
        let (p, report) = strategy(name).place_with_report(&g, &c, &m).unwrap();
        assert_eq!(devices_of(&g, &c, &p), ids(&[0; 4]), "{name}");
        assert_eq!(report.predicted_step_ms, 4000.0, "{name}");
        assert_eq!(report.devices[&c.devices[1].name].ops, 0, "{name}");
    }
    // With eleven ops the slow device is worth one of them (10 s < 11 s).
    let g = graph(11, &[]);
    let m = model(&g, &c, &[[1.0, 10.0]; 11]);
    let (p, report) = strategy("heft").place_with_report(&g, &c, &m).unwrap();
    let d = devices_of(&g, &c, &p);
    assert_eq!(d.iter().filter(|&&x| x.index() == 1).count(), 1);
    assert_eq!(report.predicted_step_ms, 10000.0);
}

#[test]
fn a_chain_with_expensive_transfers_stays_on_one_device() {
    let g = graph(5, &[(0, 1, 1000), (1, 2, 1000), (2, 3, 1000), (3, 4, 1000)]);
    let c = cluster(3, 1.0, 1e3);
    let m = model(&g, &c, &[[1.0, 1.0, 1.0]; 5]);
    for name in ["heft", "etf", "infra-aware", "single-fastest"] {
        let (p, report) = strategy(name).place_with_report(&g, &c, &m).unwrap();
        let d = devices_of(&g, &c, &p);
        assert!(d.iter().all(|&x| x == d[0]), "{name}: {d:?}");
        assert_eq!(report.transfer_bytes, 0, "{name}");
        assert_eq!(report.predicted_step_ms, 5000.0, "{name}");
    }
}

#[test]
fn a_memory_cap_forces_a_split() {
    // A chain whose transfers are expensive, so every strategy would rather keep it together,
    // but 300 bytes of outputs do not fit in 250-byte devices.
    let g = graph(4, &[(0, 1, 100), (1, 2, 100), (2, 3, 100)]);
    let mut c = cluster(2, 10.0, 1e9);
    for d in &mut c.devices {
        d.memory_bytes = Some(250);
    }
    let m = model(&g, &c, &[[1.0, 1.0]; 4]);
    for &name in AWARE {
        let (p, report) = strategy(name).place_with_report(&g, &c, &m).unwrap();
        let d = devices_of(&g, &c, &p);
        assert!(
            d.contains(&DeviceId::new(0)) && d.contains(&DeviceId::new(1)),
            "{name}: {d:?}"
        );
        for load in report.devices.values() {
            assert!(load.memory_bytes <= 250, "{name}: {report:?}");
        }
    }
}

#[test]
fn an_impossible_memory_problem_names_the_group() {
    // One group (big + its colocated reader) needs 1000 bytes; devices hold 250.
    let mut b = OpGraphBuilder::new();
    let big = b.add("big", "Task").unwrap();
    b.output(big, DType::UINT8, Some(vec![1000]));
    let rd = b.add("big/read", "Task").unwrap();
    b.connect(big, 0, rd);
    b.node_mut(rd)
        .attrs
        .insert("_class".into(), Attr::Strs(vec!["loc:@big".into()]));
    let other = b.add("other", "Task").unwrap();
    b.connect(rd, 0, other);
    let g = b.build().unwrap();
    let mut c = cluster(2, 0.0, 1e9);
    for d in &mut c.devices {
        d.memory_bytes = Some(250);
    }
    let m = model(&g, &c, &[[1.0, 1.0]; 3]);
    for &name in AWARE {
        let err = strategy(name).place_with_cost(&g, &c, &m).unwrap_err();
        match &err {
            Error::Infeasible { group, reason } => {
                assert_eq!(group, "big", "{name}");
                assert!(reason.contains("1000 bytes"), "{name}: {reason}");
            }
            other => panic!("{name}: {other}"),
        }
    }
    // Each op fits alone, but three 100-byte ops do not fit in two 150-byte devices.
    let mut g2 = OpGraphBuilder::new();
    for i in 0..3 {
        let id = g2.add(&format!("t{i}"), "Task").unwrap();
        g2.output(id, DType::UINT8, Some(vec![100]));
    }
    let g2 = g2.build().unwrap();
    for d in &mut c.devices {
        d.memory_bytes = Some(150);
    }
    let m = model(&g2, &c, &[[1.0, 1.0]; 3]);
    for &name in AWARE {
        let err = strategy(name).place_with_cost(&g2, &c, &m).unwrap_err();
        assert!(
            matches!(&err, Error::Infeasible { group, reason } if group.starts_with('t') && reason.contains("100 bytes")),
            "{name}: {err}"
        );
    }
}

/// x → v/read (colocated with v) → three consumers; u is colocated with x.
fn colocated_graph() -> OpGraph {
    let mut b = OpGraphBuilder::new();
    let v = b.add("v", "VarHandleOp").unwrap();
    b.output(v, DType::RESOURCE, Some(vec![]));
    b.node_mut(v)
        .attrs
        .insert("dtype".into(), Attr::Type(DType::FLOAT));
    b.node_mut(v)
        .attrs
        .insert("shape".into(), Attr::Shape(Some(vec![256, 256])));
    let read = b.add("v/read", "ReadVariableOp").unwrap();
    b.connect(v, 0, read);
    b.output(read, DType::FLOAT, Some(vec![256, 256]));
    let x = b.add("x", "Placeholder").unwrap();
    b.output(x, DType::FLOAT, Some(vec![512, 256]));
    let mut prev = x;
    for i in 0..6 {
        let mm = b.add(&format!("mm{i}"), "MatMul").unwrap();
        b.connect(prev, 0, mm);
        b.connect(read, 0, mm);
        b.output(mm, DType::FLOAT, Some(vec![512, 256]));
        prev = mm;
    }
    let apply = b.add("v/apply", "ResourceApplyGradientDescent").unwrap();
    b.connect(v, 0, apply);
    b.connect(prev, 0, apply);
    let side = b.add("side", "Relu").unwrap();
    b.connect(x, 0, side);
    b.output(side, DType::FLOAT, Some(vec![512, 256]));
    b.node_mut(side)
        .attrs
        .insert("_class".into(), Attr::Strs(vec!["loc:@mm3".into()]));
    b.build().unwrap()
}

/// `n` nominal CPU devices of one local task (shared by the placers' own tests).
pub(super) fn cpus(n: usize) -> Cluster {
    Cluster::new(
        (0..n)
            .map(|i| {
                Device::nominal(
                    &format!("/job:localhost/replica:0/task:0/device:CPU:{i}"),
                    "CPU",
                    None,
                    "localhost",
                )
            })
            .collect(),
    )
}

#[test]
fn colocation_groups_are_never_split() {
    let g = colocated_graph();
    let big = LayeredDag::new(800, 30).build().unwrap();
    let c = synthetic::cluster(6, 2, 3);
    for graph in [&g, &big] {
        let m = CostModel::new(graph, &c).unwrap();
        for name in OpPlacementStrategy::names() {
            let p = strategy(name).place_with_cost(graph, &c, &m).unwrap();
            // resolve::assignment rejects split groups; check again directly.
            let d = devices_of(graph, &c, &p);
            for group in graph.groups() {
                let first = d[group.members[0]];
                assert!(
                    group.members.iter().all(|&x| d[x] == first),
                    "{name}: {}",
                    group.name
                );
            }
        }
    }
}

#[test]
fn free_variable_ops_follow_their_first_consumer() {
    // The variable group (v, v/read, v/apply) floats until mm0 is placed and then joins it.
    let g = colocated_graph();
    let c = cpus(3);
    let m = CostModel::new(&g, &c).unwrap();
    for name in ["heft", "etf"] {
        let p = strategy(name).place_with_cost(&g, &c, &m).unwrap();
        let of = |op: &str| p.device_of(&g, &c, op);
        assert_eq!(of("v"), of("mm0"), "{name}");
        assert_eq!(of("v/apply"), of("v"), "{name}");
        assert_eq!(of("side"), of("mm3"), "{name}");
    }
}

#[test]
fn a_device_without_the_kernel_is_never_chosen() {
    let mut b = OpGraphBuilder::new();
    let x = b.add("x", "Placeholder").unwrap();
    b.output(x, DType::FLOAT, Some(vec![256, 256]));
    let mut prev = x;
    for i in 0..8 {
        let id = b.add(&format!("op{i}"), "MatMul").unwrap();
        b.connect(prev, 0, id);
        b.connect(x, 0, id);
        b.output(id, DType::FLOAT, Some(vec![256, 256]));
        // Even ops: GPU only; op3: CPU only.
        if i % 2 == 0 {
            b.node_mut(id).kernel_device_types = vec!["GPU".into()];
        } else if i == 3 {
            b.node_mut(id).kernel_device_types = vec!["CPU".into()];
        }
        prev = id;
    }
    let g = b.build().unwrap();
    let mut c = cpus(2);
    c.devices.push(Device::nominal(
        "/job:localhost/replica:0/task:0/device:GPU:0",
        "GPU",
        Some(1 << 30),
        "localhost",
    ));
    let m = CostModel::new(&g, &c).unwrap();
    for name in OpPlacementStrategy::names() {
        let p = strategy(name).place_with_cost(&g, &c, &m).unwrap();
        let d = resolve::assignment(&g, &c, &p).unwrap();
        for i in 0..8 {
            let node = g.id(&format!("op{i}")).unwrap();
            let ty = &c.devices[d[node]].device_type;
            assert!(g.node(node).has_kernel_for(ty), "{name}: op{i} on {ty}");
        }
    }
    // No device at all for a TPU-only op.
    let mut b = OpGraphBuilder::new();
    let t = b.add("tpu_op", "X").unwrap();
    b.node_mut(t).kernel_device_types = vec!["TPU".into()];
    let g = b.build().unwrap();
    let m = CostModel::new(&g, &c).unwrap();
    for &name in AWARE {
        let err = strategy(name).place_with_cost(&g, &c, &m).unwrap_err();
        assert!(
            matches!(&err, Error::Infeasible { group, .. } if group == "tpu_op"),
            "{name}: {err}"
        );
    }
}

#[test]
fn predictions_respect_the_lower_bound_and_heft_beats_naive_placements() {
    let g = LayeredDag::new(1200, 40).build().unwrap();
    let c = synthetic::cluster(8, 4, 11);
    let m = CostModel::new(&g, &c).unwrap();
    let lb = lower_bound(&m).value();
    let mut predicted = std::collections::BTreeMap::new();
    for name in OpPlacementStrategy::names() {
        let (p, r) = strategy(name).place_with_report(&g, &c, &m).unwrap();
        assert!(
            r.predicted_step_ms + 1e-9 >= r.lower_bound_ms,
            "{name}: {r:?}"
        );
        assert!((r.lower_bound_ms - lb * 1e3).abs() < 1e-9);
        assert_eq!(r.devices.values().map(|l| l.ops).sum::<usize>(), g.len());
        assert_eq!(p.ops(), g.len());
        assert_eq!(
            p.placed_ops(),
            if name == "tf-default" { 0 } else { g.len() }
        );
        predicted.insert(name, r.predicted_step_ms);
    }
    assert!(
        predicted["heft"] < predicted["round-robin"],
        "{predicted:?}"
    );
    assert!(predicted["heft"] < predicted["random"], "{predicted:?}");
    assert!(
        predicted["infra-aware"] <= predicted["single-fastest"] + 1e-9,
        "{predicted:?}"
    );
}

#[test]
fn infra_aware_drops_devices_below_the_threshold() {
    let g = LayeredDag::new(400, 20).build().unwrap();
    let mut c = cpus(4);
    c.devices[2].availability = 0.05;
    let m = CostModel::new(&g, &c).unwrap();
    let ia = InfraAware {
        threshold: 0.2,
        min_split_gain: 0.0,
    };
    assert_eq!(ia.ranked_devices(&m), ids(&[0, 1, 3]));
    let p = ia.place_with_cost(&g, &c, &m).unwrap();
    assert!(p
        .placed()
        .all(|(_, d)| c.devices[d].name != c.devices[2].name));
}

#[test]
fn tf_default_is_simulated_where_tensorflow_would_place() {
    let mut b = OpGraphBuilder::new();
    let a = b.add("a", "Relu").unwrap();
    b.output(a, DType::FLOAT, Some(vec![1000]));
    let cpu_only = b.add("cpu_only", "Relu").unwrap();
    b.node_mut(cpu_only).kernel_device_types = vec!["CPU".into()];
    b.connect(a, 0, cpu_only);
    let pinned = b.add("pinned", "Relu").unwrap();
    b.node_mut(pinned).requested_device = "/device:CPU:1".into();
    let g = b.build().unwrap();
    let mut c = cpus(2);
    c.devices.push(Device::nominal(
        "/job:localhost/replica:0/task:0/device:GPU:0",
        "GPU",
        None,
        "localhost",
    ));
    let m = CostModel::new(&g, &c).unwrap();
    let ev = evaluate(&g, &c, &m, &Placement::new("tf-default", &g)).unwrap();
    assert_eq!(ev.assignment, ids(&[2, 0, 1]));
    assert_eq!(ev.sim.transfers.len(), 1);
    // A placement naming an unknown device or op, or splitting a group, is an error.
    assert!(matches!(
        Placement::from_names("x", &g, &c, [("a", "/device:CPU:9")]),
        Err(Error::UnknownDevice { .. })
    ));
    assert!(matches!(
        Placement::from_names("x", &g, &c, [("a", "/device:CPU:x")]),
        Err(Error::MalformedDevice { .. })
    ));
    assert!(matches!(
        Placement::from_names("x", &g, &c, [("nope", "/device:CPU:0")]),
        Err(Error::UnknownOp { .. })
    ));
    let p = Placement::from_names("x", &g, &c, [("cpu_only", &c.devices[2].name)]).unwrap();
    assert!(matches!(
        evaluate(&g, &c, &m, &p),
        Err(Error::NoKernel { .. })
    ));
    let cg = colocated_graph();
    let names = [("v", &c.devices[0].name), ("v/read", &c.devices[1].name)];
    let p = Placement::from_names("x", &cg, &c, names).unwrap();
    let cm = CostModel::new(&cg, &c).unwrap();
    assert!(matches!(
        evaluate(&cg, &c, &cm, &p),
        Err(Error::SplitColocation { .. })
    ));
    assert!(matches!(
        resolve::check(&cg, &c, &p),
        Err(Error::SplitColocation { .. })
    ));
    // A placement of another graph, or naming a device of a larger cluster, is refused too.
    assert!(matches!(
        evaluate(&g, &c, &m, &p),
        Err(Error::InvalidArgument { .. })
    ));
    let big = cpus(8);
    let mut far = Placement::new("x", &g);
    far.set(g.id("a").unwrap(), Some(big.device_id(7).unwrap()))
        .unwrap();
    assert!(matches!(
        evaluate(&g, &c, &m, &far),
        Err(Error::BadId {
            kind: "device",
            id: 7,
            ..
        })
    ));
    let other_node = cg.id("v/apply").unwrap();
    assert!(matches!(
        far.set(other_node, None),
        Err(Error::BadId { kind: "node", .. })
    ));
}

#[test]
fn from_groups_names_a_bad_device_instead_of_panicking() {
    let g = graph(3, &[(0, 1, 10), (1, 2, 10)]);
    let c = cluster(2, 0.0, 1e9);
    let groups = g.groups().len();
    let one = c.device_id(1).unwrap();
    let p = Placement::from_groups("x", &g, &c, &vec![one; groups]).unwrap();
    assert_eq!(p.device_of(&g, &c, "t0"), Some(c.devices[1].name.as_str()));
    assert_eq!(p.device(g.id("t0").unwrap()), Some(one));
    assert_eq!(p.to_names(&g, &c).len(), 3);
    // A user's number is checked where it becomes an id …
    let err = c.device_id(7).unwrap_err();
    assert!(
        matches!(
            err,
            Error::BadId {
                kind: "device",
                id: 7,
                len: 2
            }
        ),
        "{err}"
    );
    assert_eq!(c.device_ids().collect::<Vec<_>>(), ids(&[0, 1]));
    // … and an id of a larger cluster where it is used.
    let seven = cluster(8, 0.0, 1e9).device_id(7).unwrap();
    let err = Placement::from_groups("x", &g, &c, &vec![seven; groups]).unwrap_err();
    assert!(
        matches!(
            err,
            Error::BadId {
                kind: "device",
                id: 7,
                len: 2
            }
        ),
        "{err}"
    );
    assert!(Placement::from_groups("x", &g, &c, &ids(&[0])).is_err());
}

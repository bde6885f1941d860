//! Graphs built the TensorFlow 1 way — ref-typed variables (`VariableV2`), `add_gradients`,
//! `ApplyMomentum` with the user's own accumulators — placed across the tasks of a TF_CONFIG
//! cluster of real worker processes on 127.0.0.1: per-op strategies (TensorFlow 1's own layout,
//! variables on the ps and the rest on a worker, among them) and data-parallel plans train them,
//! with a short run deadline so that a hang fails in seconds. A placement TensorFlow cannot run
//! (an update apart from its variable) is refused before anything runs.

mod common;

#[path = "common/ref_model.rs"]
mod ref_model;

use common::cluster::{connection, serial};
use prost::Message;
use tf_iaware::cluster::Cluster;
use tf_iaware::cost::CostModel;
use tf_iaware::graph::proto::GraphDef;
use tf_iaware::graph::OpGraph;
use tf_iaware::placer::{Placement, Strategy};
use tf_iaware::{Error, Run, Step};

/// Run deadline of these tests, ms: a step of this model takes milliseconds; a hang fails the
/// test here instead of after the default ten minutes.
const RUN_MS: i64 = 20_000;

/// TensorFlow 1's between-graph layout as a user strategy: every colocation group that holds a
/// variable on `vars`, everything else on `rest` (devices by index in the cluster). With
/// `split_updates`, the optimizer's updates go to `rest` too, apart from their variables.
struct VariablesApart {
    vars: usize,
    rest: usize,
    split_updates: bool,
}

impl Strategy for VariablesApart {
    fn name(&self) -> &'static str {
        "variables-apart"
    }

    fn place_with_cost(
        &self,
        graph: &OpGraph,
        cluster: &Cluster,
        _: &CostModel,
    ) -> tf_iaware::Result<Placement> {
        let mut p = Placement::new(self.name(), graph);
        let (vars, rest) = (cluster.device_id(self.vars)?, cluster.device_id(self.rest)?);
        for group in graph.groups() {
            let holds_variable = group
                .members
                .iter()
                .any(|&m| graph.node(m).op == "VariableV2");
            for &m in &group.members {
                let node = graph.node(m);
                let update = self.split_updates && node.op.starts_with("Apply");
                let d = if holds_variable && !update {
                    vars
                } else {
                    rest
                };
                p.set(m, Some(d))?;
            }
        }
        Ok(p)
    }
}

/// Edges of `def` from a ref-typed variable (`VariableV2`) to an op on another device.
fn cross_device_variable_edges(def: &GraphDef) -> Vec<String> {
    let device = |name: &str| {
        def.node
            .iter()
            .find(|n| n.name == name)
            .map(|n| n.device.clone())
    };
    let mut out = Vec::new();
    for n in &def.node {
        for input in n.input.iter().filter(|i| !i.starts_with('^')) {
            let src = input.split(':').next().unwrap_or(input);
            let is_var = def
                .node
                .iter()
                .any(|m| m.name == src && m.op == "VariableV2");
            if is_var && device(src) != Some(n.device.clone()) {
                out.push(format!("{src} -> {}", n.name));
            }
        }
    }
    out
}

#[test]
fn a_ref_variable_model_trains_placed_per_op_across_tasks() {
    let _one = serial();
    let mut connection = connection("workers=1,1");
    connection.session_config_mut().run_timeout_ms = RUN_MS;
    let index = |prefix: &str| {
        connection
            .cluster()
            .devices
            .iter()
            .position(|d| d.name.starts_with(prefix))
            .unwrap()
    };
    let (ps, worker) = (index("/job:ps/"), index("/job:worker/"));
    let m = ref_model::build().unwrap();
    let (xs, ys) = ref_model::samples(ref_model::BATCH, 1);
    let step = Step::new().target(&m.train).fetch(&m.loss);
    let tf1_layout: Box<dyn Strategy> = Box::new(VariablesApart {
        vars: ps,
        rest: worker,
        split_updates: false,
    });
    let plans = [
        connection.place(&*m.scope.graph(), &step, tf1_layout),
        connection.place(&*m.scope.graph(), &step, "round-robin"),
        connection.place(&*m.scope.graph(), &step, "heft"),
    ];
    for plan in plans {
        let plan = plan.unwrap();
        let strategy = plan.placement().strategy.clone();
        let placed = GraphDef::decode(plan.placed_bytes().as_slice()).unwrap();
        assert_eq!(
            cross_device_variable_edges(&placed),
            Vec::<String>::new(),
            "{strategy}: a variable is read on another device only through its explicit read"
        );
        let session = plan.session().unwrap();
        session.run(Run::new().target(&m.init)).unwrap();
        let feeds = || Run::of(&step).feed(&m.x, &xs).feed(&m.labels, &ys);
        let losses: Vec<f32> = (0..8)
            .map(|_| {
                session
                    .run(feeds())
                    .unwrap()
                    .scalar::<f32>(&m.loss)
                    .unwrap()
            })
            .collect();
        assert!(
            losses.iter().all(|l| l.is_finite()),
            "{strategy}: {losses:?}"
        );
        assert!(losses[7] < losses[0], "{strategy}: {losses:?}");
        let check = session
            .verify(&session.run(feeds().traced()).unwrap())
            .unwrap();
        assert!(check.is_ok(), "{strategy}: {:?}", check.mismatches);
        if strategy == "variables-apart" {
            // The layout that deadlocked TensorFlow: variables on the ps, their readers (a
            // convolution and its bias, which oneDNN fuses) on the worker.
            assert_eq!(check.executed.len(), 2, "{:?}", check.executed);
            let reads = placed
                .node
                .iter()
                .filter(|n| n.name.ends_with("/tf_iaware_read"))
                .count();
            assert!(
                reads >= ref_model::build().unwrap().variables.len(),
                "{reads}"
            );
        }
    }
}

#[test]
fn an_update_placed_apart_from_its_ref_variable_is_refused_naming_it() {
    let connection = tf_iaware::connect("local:cpu=2").unwrap();
    let m = ref_model::build().unwrap();
    let step = Step::new().target(&m.train).fetch(&m.loss);
    let apart: Box<dyn Strategy> = Box::new(VariablesApart {
        vars: 0,
        rest: 1,
        split_updates: true,
    });
    let e = connection
        .place(&*m.scope.graph(), &step, apart)
        .expect_err("TensorFlow cannot update a ref variable from another device");
    let Error::SplitColocation { op, other, .. } = &e else {
        panic!("{e}");
    };
    assert!(
        op.starts_with("ApplyMomentum") || other.0.starts_with("ApplyMomentum"),
        "{e}"
    );
}

#[test]
fn a_ref_variable_model_trains_data_parallel() {
    let _one = serial();
    // Two ps tasks: the variables are spread over both, each with the accumulator its
    // ApplyMomentum updates (one colocation group, planned as one).
    let mut connection = connection("workers=1,1:ps=2");
    connection.session_config_mut().run_timeout_ms = RUN_MS;
    let job = ref_model::job();
    for strategy in ["replica-setter", "infra-aware"] {
        let planned = connection
            .plan_data_parallel(job.workload(), strategy.parse().unwrap(), Some(32))
            .unwrap();
        let options = tf_iaware::TrainingOptions {
            // A number of updates, not of seconds: a busy machine takes longer, not less far.
            steps: Some(60),
            max_seconds: Some(300.0),
            epochs: None,
            eval_every_s: 2.0,
            seed: 5,
            ..Default::default()
        };
        let planned_vars = &planned.plan().variable_devices;
        assert_eq!(planned_vars.len(), 8, "{strategy}: {planned_vars:?}");
        assert!(!planned_vars.keys().any(|v| v.ends_with("/accum")));
        let ps: std::collections::BTreeSet<&String> = planned_vars.values().collect();
        assert_eq!(ps.len(), 2, "{strategy}: {planned_vars:?}");
        let r = planned.fit(&job, &options).unwrap();
        eprintln!(
            "{strategy}: {} updates, loss {:?} -> {:?}, accuracy {:?}",
            r.updates, r.loss_first, r.loss_last, r.final_metric
        );
        assert!(r.updates > 0 && !r.evaluations.is_empty(), "{strategy}");
        let (first, last) = (r.loss_first.unwrap(), r.loss_last.unwrap());
        assert!(
            last.is_finite() && last < first,
            "{strategy}: {first} -> {last}"
        );
        let read: u64 = r.workers.iter().map(|w| w.samples).sum();
        assert_eq!(read, r.samples, "{strategy}");
    }
}

/// `tf-iaware args…` succeeds within three minutes (the command line has no run-deadline flag:
/// a step that hangs is killed here instead of after the default ten minutes); its stdout.
fn ok_within(args: &[&str]) -> String {
    use std::io::Read;
    use std::process::Stdio;
    use std::time::{Duration, Instant};
    let mut child = common::bin()
        .args(args)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Read both pipes while the command runs: a full pipe would stall it.
    let pipe = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            r.read_to_string(&mut s).unwrap();
            s
        })
    };
    let out = pipe(Box::new(child.stdout.take().unwrap()));
    let err = pipe(Box::new(child.stderr.take().unwrap()));
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > Duration::from_secs(180) {
            child.kill().unwrap();
            child.wait().unwrap();
            panic!("tf-iaware {args:?} still running after 180 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let (out, err) = (out.join().unwrap(), err.join().unwrap());
    assert!(status.success(), "tf-iaware {args:?} failed: {err}\n{out}");
    out
}

#[test]
fn the_command_line_trains_an_exported_ref_variable_graph_across_tasks() {
    let _one = serial();
    let dir = tempfile::tempdir().unwrap();
    let graph = ref_model::export(dir.path());
    let graph = graph.to_str().unwrap();
    for (strategy, parallel) in [("replica-setter", "data"), ("round-robin", "model")] {
        let out = ok_within(&[
            "run",
            "--graph",
            graph,
            "--cluster",
            "emulated:workers=1,1",
            "--strategy",
            strategy,
            "--parallel",
            parallel,
            "--steps",
            "4",
            "--batch",
            "16",
            "--json",
        ]);
        let report: serde_json::Value = serde_json::from_str(&out).unwrap();
        assert_eq!(report["strategy"], strategy, "{out}");
        let (first, last) = (
            report["loss_first"].as_f64().unwrap(),
            report["loss_last"].as_f64().unwrap(),
        );
        assert!(
            last.is_finite() && last < first,
            "{strategy}: {first} -> {last}"
        );
    }
}

//! Traced runs (FULL_TRACE) of several sessions in one process at once: TensorFlow allows one
//! profiling session per process, so without taking turns one of them fails with
//! "AlreadyExists: Another profiling session active".

use tf_iaware::runtime::{PlacedSession, SessionConfig};

#[test]
fn concurrent_traced_runs_of_two_sessions_all_succeed() {
    let sessions: Vec<PlacedSession> = (0..2)
        .map(|seed| {
            let m = tf_iaware::models::build("mlp", 4, seed).unwrap();
            PlacedSession::new(m.net.into_graph(), &SessionConfig::default()).unwrap()
        })
        .collect();
    std::thread::scope(|scope| {
        for s in &sessions {
            scope.spawn(move || {
                let init = s.op("init", "test").unwrap();
                for i in 0..40 {
                    let out = s
                        .run(&[], std::slice::from_ref(&init), &[], true)
                        .unwrap_or_else(|e| panic!("traced run {i}: {e}"));
                    assert!(out.step_stats.is_some(), "a traced run returns step stats");
                }
            });
        }
    });
}

/// Measured op times land on the user's ops whether or not TensorFlow fuses kernels: with
/// Grappler's remapper on (`exact_placement: false`), a CPU may fuse lenet's
/// `Conv2D`+`BiasAdd`+`Relu` into one `_FusedConv2D` named after the `Relu`; with it off, the ops
/// run one by one (unless a oneDNN build fuses them anyway). Either way, the attributed samples time every op of the
/// chain and add up to what the kernels took.
#[test]
fn measured_times_land_on_the_users_ops_fused_or_not() {
    use tf_iaware::cost::Measurements;
    use tf_iaware::graph::analyze::analyze_graph;
    use tf_iaware::runtime::Trainer;

    for fuse in [true, false] {
        let m = tf_iaware::models::build("lenet", 8, 3).unwrap();
        let graph = analyze_graph(m.net.graph()).unwrap().op_graph;
        let config = SessionConfig {
            exact_placement: !fuse,
            ..SessionConfig::default()
        };
        let session = PlacedSession::new(m.net.into_graph(), &config).unwrap();
        let trainer = Trainer::new(session, &m.sidecar, Some(8), 3).unwrap();
        trainer.init().unwrap();
        let mut raw = Measurements::new();
        for stats in trainer.traced_steps(0, 2).unwrap() {
            raw.add_step_stats(&stats);
        }
        let rewritten = |m: &Measurements| {
            m.samples
                .iter()
                .filter(|s| {
                    let own = graph.id(&s.node).map(|id| graph.node(id).op.as_str());
                    s.kernel
                        .as_deref()
                        .is_some_and(|k| k.starts_with('_') && own.is_some_and(|o| !k.contains(o)))
                })
                .count()
        };
        // Whether TensorFlow fuses depends on the CPU and build: the assertions below hold
        // either way (this machine's x86-64 CPUs fuse with the remapper on).
        eprintln!("fuse={fuse}: {} rewritten kernels", rewritten(&raw));
        let mapped = raw.attributed(&graph);
        assert_eq!(rewritten(&mapped), 0, "every fused kernel is attributed");
        for op in ["conv1/Conv2D", "conv1/BiasAdd", "conv2/Conv2D"] {
            assert!(
                mapped.samples.iter().any(|s| s.node == op),
                "fuse={fuse}: {op} is timed"
            );
        }
        let total = |m: &Measurements| m.samples.iter().map(|s| s.seconds).sum::<f64>();
        assert!(
            (total(&mapped) - total(&raw)).abs() <= 1e-9 * total(&raw).max(1.0),
            "nothing counted twice"
        );
    }
}

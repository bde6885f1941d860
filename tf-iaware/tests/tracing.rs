//! Traced runs (FULL_TRACE) of several sessions in one process at once: TensorFlow allows one
//! profiling session per process, so without taking turns one of them fails with
//! "AlreadyExists: Another profiling session active".

use tf_iaware::runtime::{PlacedSession, SessionConfig};

#[test]
fn concurrent_traced_runs_of_two_sessions_all_succeed() {
    let sessions: Vec<PlacedSession> = (0..2)
        .map(|seed| {
            let m = tf_iaware::models::zoo::build("mlp", 4, seed).unwrap();
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

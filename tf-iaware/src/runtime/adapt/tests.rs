//! The adapter's guards: gain, noise, the cost of a switch, held workers.

use super::*;
use crate::cluster::Device;
use crate::parallel::{DataParallelStrategy, VarInfo, WorkerCapacity};

/// A step-time detection first seen at `step`.
fn at(step: usize) -> Detection {
    Detection {
        trigger: Trigger::StepTime,
        moved: Vec::new(),
        first_signal_step: step,
        first_signal_unix_ms: 0,
        decided_unix_ms: 0,
    }
}

fn dev(i: usize) -> String {
    format!("/job:worker/replica:0/task:{i}/device:CPU:0")
}

/// An adapter over two calibrated workers of 1,000 samples/s, no metrics feed.
fn adapter() -> (Adapter, Cluster) {
    let ps = "/job:ps/replica:0/task:0/device:CPU:0".to_string();
    let cluster = Cluster::new(vec![
        Device::nominal(&dev(0), "CPU", None, "h0"),
        Device::nominal(&dev(1), "CPU", None, "h1"),
        Device::nominal(&ps, "CPU", None, "hp"),
    ]);
    let workers = vec![dev(0), dev(1)];
    let vars = vec![VarInfo {
        name: "w".into(),
        bytes: 4,
    }];
    let planner =
        DataParallelPlanner::new(DataParallelStrategy::InfraAware, &workers, &[ps], &vars, 64)
            .unwrap()
            .with_calibration(
                workers
                    .iter()
                    .map(|w| WorkerCapacity {
                        availability: Some(1.0),
                        ..WorkerCapacity::rate(w, 1000.0)
                    })
                    .collect(),
            );
    let replanning = Replanning {
        planner,
        metrics: None,
        tasks: None,
    };
    let a = Adapter::start(&replanning, &cluster, &AdaptOptions::default()).unwrap();
    (a, cluster)
}

#[test]
fn a_real_slowdown_pays_and_holds_the_slow_worker() {
    let (mut a, cluster) = adapter();
    let now = a.replanning.planner.plan(&cluster).unwrap();
    assert_eq!(
        now.replicas.iter().map(|r| r.batch).collect::<Vec<_>>(),
        [32, 32]
    );
    for s in 0..5 {
        a.recent_ms.push((s, 34.0 + s as f64 * 0.1));
    }
    // Worker 1 runs at a quarter of its speed.
    a.rescale(&[(dev(1), 0.25)]);
    let new = a.replanning.planner.plan(&cluster).unwrap();
    assert!(new.replicas[0].batch > 32, "{new:?}");
    assert_eq!(a.worth_it(&now, &new, &at(5)), Ok(()));
    a.hold(&now, &new, &[(dev(1), 0.25)]);
    assert_eq!(a.held, vec![dev(1)]);
    // Given more work again, it is released.
    a.hold(&new, &now, &[(dev(1), 2.0)]);
    assert!(a.held.is_empty());
}

#[test]
fn noise_small_gains_and_expensive_switches_keep_the_plan() {
    let (mut a, cluster) = adapter();
    let now = a.replanning.planner.plan(&cluster).unwrap();
    // The same shares: nothing to switch to.
    assert!(a.worth_it(&now, &now, &at(0)).is_err());
    // A 5 % slower worker: the best plan gains less than the 10 % guard.
    a.rescale(&[(dev(1), 0.95)]);
    let mut shifted = now.clone();
    shifted.replicas[0].batch += 1;
    shifted.replicas[1].batch -= 1;
    let e = a.worth_it(&now, &shifted, &at(0)).unwrap_err();
    assert!(e.contains("below"), "{e}");
    // A real gain hidden by steps that jitter by more than it before the signal.
    let (mut a, _) = adapter();
    a.rescale(&[(dev(1), 0.5)]);
    let new = a.replanning.planner.plan(&cluster).unwrap();
    // (The first three, a new session's warm-up, do not count.)
    let jittery = [400.0, 300.0, 200.0, 20.0, 60.0, 35.0, 90.0, 30.0];
    for (s, ms) in jittery.into_iter().enumerate() {
        a.recent_ms.push((s, ms));
    }
    let e = a.worth_it(&now, &new, &at(8)).unwrap_err();
    assert!(e.contains("noise"), "{e}");
    // A metrics move was held to its patience of readings: the step times' noise is not its.
    let metrics = Detection {
        trigger: Trigger::Metrics,
        ..at(8)
    };
    assert_eq!(a.worth_it(&now, &new, &metrics), Ok(()));
    // Quiet steps, but a switch that costs more than the saving over the payback steps.
    let (mut a, _) = adapter();
    a.rescale(&[(dev(1), 0.5)]);
    for s in 0..5 {
        a.recent_ms.push((s, 34.0));
    }
    assert_eq!(a.worth_it(&now, &new, &at(5)), Ok(()));
    a.switched(1e6);
    let e = a.worth_it(&now, &new, &at(5)).unwrap_err();
    assert!(e.contains("switch"), "{e}");
}

#[test]
fn the_noise_guard_leaves_out_a_new_sessions_first_steps() {
    // A first step ten times as long, then steady steps: no noise to clear.
    let steady: Vec<(usize, f64)> = [500.0, 50.0, 51.0, 49.0, 50.0, 52.0]
        .into_iter()
        .enumerate()
        .collect();
    assert!(
        gain_noise(&steady, 1, 6) < 0.05,
        "{}",
        gain_noise(&steady, 1, 6)
    );
    // Steps after the first signal do not count; fewer than three: nothing measured.
    assert_eq!(gain_noise(&steady, 1, 3), 0.0);
    // Steps that jitter by half their median: a guard of tens of percent, shrinking with more
    // steps.
    let jitter = |n: usize| -> Vec<(usize, f64)> {
        (0..n)
            .map(|i| (i, if i % 2 == 0 { 50.0 } else { 100.0 }))
            .collect()
    };
    let (few, many) = (gain_noise(&jitter(6), 0, 6), gain_noise(&jitter(24), 0, 24));
    assert!(few > 0.3 && many < few / 1.5, "{few} {many}");
}

use super::*;
use crate::cluster::Device;
use crate::parallel::plan_live;

fn dev(i: usize) -> String {
    format!("/job:worker/replica:0/task:{i}/device:CPU:0")
}

fn ps() -> Vec<String> {
    vec!["/job:ps/replica:0/task:0/device:CPU:0".to_string()]
}

fn vars() -> Vec<VarInfo> {
    vec![VarInfo {
        name: "w".into(),
        bytes: 400,
    }]
}

/// Four workers and a ps on their own hosts, availability as given.
fn cluster(availability: &[f64]) -> Cluster {
    let mut devices: Vec<Device> = availability
        .iter()
        .enumerate()
        .map(|(i, &a)| {
            let mut d = Device::nominal(&dev(i), "CPU", None, &format!("h{i}"));
            d.availability = a;
            d
        })
        .collect();
    devices.push(Device::nominal(&ps()[0], "CPU", None, "hp"));
    Cluster::new(devices)
}

fn workers(n: usize) -> Vec<String> {
    (0..n).map(dev).collect()
}

fn shares(p: &DataParallelPlan) -> Vec<usize> {
    p.replicas.iter().map(|r| r.batch).collect()
}

#[test]
fn stock_strategies_share_equally_and_name_the_plan() {
    let c = cluster(&[1.0, 0.1, 1.0, 1.0]);
    for s in [
        DataParallelStrategy::ReplicaSetter,
        DataParallelStrategy::AsyncPs,
        DataParallelStrategy::SyncBackup { backups: 1 },
    ] {
        let p = DataParallelPlanner::new(s, &workers(4), &ps(), &vars(), 64).unwrap();
        assert!(!p.sizes_shares());
        let plan = p.plan(&c).unwrap();
        assert_eq!(shares(&plan), vec![16; 4]);
        assert_eq!(plan.strategy, s.to_string());
    }
}

#[test]
fn bad_plans_are_refused_when_the_planner_is_made() {
    let backups = DataParallelStrategy::SyncBackup { backups: 2 };
    assert!(DataParallelPlanner::new(backups, &workers(2), &ps(), &vars(), 8).is_err());
    let rs = DataParallelStrategy::ReplicaSetter;
    assert!(DataParallelPlanner::new(rs, &workers(4), &ps(), &vars(), 3).is_err());
    assert!(DataParallelPlanner::new(rs, &[], &ps(), &vars(), 8).is_err());
    assert!(DataParallelPlanner::new(rs, &workers(2), &[], &vars(), 8).is_err());
    let ia = DataParallelStrategy::InfraAware;
    assert!(DataParallelPlanner::new(ia, &workers(2), &ps(), &vars(), 0).is_err());
}

#[test]
fn a_calibrated_plan_is_the_live_plan_of_its_calibration() {
    let c = cluster(&[1.0, 0.5, 1.0, 1.0]);
    let cal: Vec<WorkerCapacity> = workers(4)
        .iter()
        .enumerate()
        .map(|(i, w)| WorkerCapacity {
            fixed_ms: 3.0,
            availability: Some(1.0),
            ..WorkerCapacity::rate(w, 1000.0 * (i + 1) as f64)
        })
        .collect();
    let p = DataParallelPlanner::new(
        DataParallelStrategy::InfraAware,
        &workers(4),
        &ps(),
        &vars(),
        64,
    )
    .unwrap()
    .with_calibration(cal.clone());
    let mut expected = plan_live(
        &cal,
        &c,
        &ps(),
        &vars(),
        64,
        None,
        &InfraAwareOptions::default(),
    )
    .unwrap();
    expected.strategy = "infra-aware".into();
    assert_eq!(p.plan(&c).unwrap(), expected);
    assert!(p.predict_step_ms(&expected, &c).is_some());
    assert_eq!(p.calibration().map(<[_]>::len), Some(4));
}

#[test]
fn nominal_figures_follow_availability_and_keep_every_worker_measured() {
    // Worker 1 is held to an eighth of its machine (a 0.25-core quota on 2 cores).
    let c = cluster(&[1.0, 0.125, 1.0, 1.0]);
    let p = DataParallelPlanner::new(
        DataParallelStrategy::InfraAware,
        &workers(4),
        &ps(),
        &vars(),
        64,
    )
    .unwrap();
    assert!(p.calibration().is_none());
    let plan = p.plan(&c).unwrap();
    let s = shares(&plan);
    assert_eq!(s.iter().sum::<usize>(), 64);
    assert_eq!(s.len(), 4, "every worker keeps a share: {s:?}");
    assert!(s[1] >= 1 && s[1] * 4 < s[0], "{s:?}");
    assert_eq!(s[0], s[2]);
    assert_eq!(plan.predicted_step_ms, None);
    assert_eq!(p.predict_step_ms(&plan, &c), None);
    // Feedback starts from the same nominal figures.
    let f = p.feedback(&c, RESIZE_EVERY).unwrap();
    assert_eq!(f.capacity.len(), 4);
    assert!(f.capacity[1].samples_per_sec < f.capacity[0].samples_per_sec);
}

#[test]
fn feedback_only_for_synchronous_infra_aware() {
    let c = cluster(&[1.0, 1.0]);
    for (s, some) in [
        (DataParallelStrategy::InfraAware, true),
        (DataParallelStrategy::InfraAwareAsync, false),
        (DataParallelStrategy::ReplicaSetter, false),
    ] {
        let p = DataParallelPlanner::new(s, &workers(2), &ps(), &vars(), 8).unwrap();
        assert_eq!(p.feedback(&c, 4).is_some(), some, "{s}");
        assert!(p.feedback(&c, 0).is_none());
    }
}

#[test]
fn probes_are_a_share_of_the_batch_within_1_to_32() {
    let probe = |batch, n| {
        DataParallelPlanner::new(
            DataParallelStrategy::InfraAware,
            &workers(n),
            &ps(),
            &vars(),
            batch,
        )
        .unwrap()
        .probe()
    };
    assert_eq!(probe(64, 4).batch, 16);
    assert_eq!(probe(64, 4).global_batch, 64);
    assert_eq!(probe(2, 4).batch, 1);
    assert_eq!(probe(1000, 2).batch, MAX_PROBE_BATCH);
}

#[test]
fn lost_tasks_are_left_out_and_survivors_replanned() {
    let c = cluster(&[1.0, 1.0, 1.0]);
    let mut p = DataParallelPlanner::new(
        DataParallelStrategy::ReplicaSetter,
        &workers(3),
        &ps(),
        &vars(),
        30,
    )
    .unwrap();
    p.forget(&[dev(1)]);
    assert_eq!(p.workers(), &[dev(0), dev(2)]);
    assert_eq!(shares(&p.plan(&c).unwrap()), vec![15, 15]);
    let over = p.plan_over(&[dev(0)], &ps(), &c).unwrap();
    assert_eq!(shares(&over), vec![30]);
}

#[test]
fn a_measured_slowdown_rescales_the_worker_and_moves_its_share() {
    let c = cluster(&[1.0, 1.0]);
    let mut p = DataParallelPlanner::new(
        DataParallelStrategy::InfraAware,
        &workers(2),
        &ps(),
        &vars(),
        40,
    )
    .unwrap();
    assert_eq!(shares(&p.plan(&c).unwrap()), vec![20, 20]);
    p.rescale(&dev(1), 0.25, &c);
    let cal = p.calibration().unwrap();
    assert!((cal[1].samples_per_sec / cal[0].samples_per_sec - 0.25).abs() < 1e-9);
    let s = shares(&p.plan(&c).unwrap());
    assert!(s[0] > s[1], "{s:?}");
    // Nonsense factors and unknown workers change nothing.
    let before = p.clone();
    p.rescale(&dev(1), f64::NAN, &c);
    p.rescale(&dev(7), 0.5, &c);
    assert_eq!(p, before);
}

#[test]
fn proportional_shares_respect_memory_caps() {
    let mut cap = vec![
        WorkerCapacity::rate(&dev(0), 3.0),
        WorkerCapacity::rate(&dev(1), 1.0),
    ];
    assert_eq!(proportional_shares(&cap, 8), vec![6, 2]);
    cap[0].max_batch = Some(4);
    assert_eq!(proportional_shares(&cap, 8), vec![4, 4]);
    // Fewer samples than workers: no floor of one.
    assert_eq!(proportional_shares(&cap, 1).iter().sum::<usize>(), 1);
    // Zero or broken throughputs share the rest evenly.
    let broken = vec![
        WorkerCapacity::rate(&dev(0), f64::NAN),
        WorkerCapacity::rate(&dev(1), 0.0),
    ];
    assert_eq!(proportional_shares(&broken, 6), vec![3, 3]);
}

#[test]
fn nominal_figures_count_the_cores_of_each_workers_allotment() {
    // An emulated node of 0.5 core beside one of 2 cores, both idle.
    let mut c = cluster(&[1.0, 1.0]);
    c.devices[0].live.allotment = Some(2.0);
    c.devices[1].live.allotment = Some(0.5);
    let n = nominal_capacities(&workers(2), &c, None);
    assert!((n[0].samples_per_sec / n[1].samples_per_sec - 4.0).abs() < 1e-9);
    let p = DataParallelPlanner::new(
        DataParallelStrategy::InfraAware,
        &workers(2),
        &ps(),
        &vars(),
        50,
    )
    .unwrap();
    // One sample each, the rest 4 : 1.
    assert_eq!(shares(&p.plan(&c).unwrap()), vec![39, 11]);
    // Unknown workers get the nominal figures at full availability.
    assert_eq!(
        nominal_capacities(&[dev(9)], &c, None)[0].availability,
        Some(1.0)
    );
}

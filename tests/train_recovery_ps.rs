//! Training the user's job through lost parameter servers (`TrainingOptions::recover`): a ps
//! killed and restarted at its address (its variables gone) is waited for, and one that does not
//! come back has its variables and the global ops moved to the other ps — training goes on from
//! the driver's latest copy of the variables (a Python-exported graph's optimizer slots
//! included). Lost workers are tests/train_recovery.rs. Real worker processes on 127.0.0.1; the
//! faults land at an update count, never at a time; structure asserted.

#[path = "common/own_job.rs"]
mod own_job;
#[path = "common/recovery.rs"]
mod recovery;

use std::time::Duration;

use recovery::{at, device_of, python_job, serial, start, train_job, Training, STEPS};
use tf_iaware::parallel::DataParallelStrategy;
use tf_iaware::runtime::trainer::{CheckpointOptions, RecoverOptions};

#[test]
fn a_restarted_ps_is_waited_for_and_training_goes_on_from_the_drivers_copy() {
    let _one = serial();
    let mut cluster = start("workers=0.5,0.5");
    let training = Training::own(
        DataParallelStrategy::ReplicaSetter,
        Some(RecoverOptions {
            every_updates: 10,
            ps_wait: Duration::from_secs(60),
            ..RecoverOptions::default()
        }),
        STEPS,
    );
    let trained = train_job(
        &mut cluster,
        &training,
        // The ps (it also masters the session) dies and a cluster manager restarts it at its
        // address, without the variables it held.
        vec![at(40, |c| {
            c.kill_ps(0);
            c.restart_ps(0).unwrap();
        })],
    )
    .unwrap();
    let report = &trained.report;
    assert_eq!(report.updates, STEPS, "every update applied once");
    assert_eq!(report.recoveries.len(), 1, "{:?}", report.recoveries);
    let r = &report.recoveries[0];
    assert_eq!(r.lost, vec![device_of(report, "ps", 0)], "{r:?}");
    assert_eq!(r.update, 40, "{r:?}");
    // The ps's variables were gone: back to the latest copy, at most 10 updates old.
    assert!(r.restored_from <= r.update && r.redone <= 10, "{r:?}");
    assert!(r.restored_from >= 30, "{r:?}");
    trained.assert_redone_from_the_copy(r);
    assert_eq!(report.plan.global_batch(), 32);
    trained.assert_learns();
    assert!(report.final_metric.is_some_and(|a| a > 0.4));
    // The last update ran on the restarted ps and the workers, where it was placed.
    let traced = report.traced.as_ref().expect("the last update is traced");
    assert_eq!(traced.update, STEPS);
    assert_eq!(traced.mismatches, vec![]);
    let ps0 = device_of(report, "ps", 0);
    assert!(traced.executed.contains_key(&ps0), "{:?}", traced.executed);
}

#[test]
fn the_variables_and_global_ops_move_to_the_other_ps_when_the_master_ps_does_not_come_back() {
    let _one = serial();
    let mut cluster = start("workers=0.5,0.5:ps=2");
    let training = Training::own(
        DataParallelStrategy::ReplicaSetter,
        Some(RecoverOptions {
            every_updates: 2,
            // Not restarted: given up on after 2 s.
            ps_wait: Duration::from_secs(2),
            ..RecoverOptions::default()
        }),
        20,
    );
    // ps 0 holds variables and the global ops, and masters the session.
    let trained = train_job(&mut cluster, &training, vec![at(3, |c| c.kill_ps(0))]).unwrap();
    let report = &trained.report;
    let (ps0, ps1) = (device_of(report, "ps", 0), device_of(report, "ps", 1));
    assert_eq!(report.first_plan.global_device, ps0);
    assert!(
        report
            .first_plan
            .variable_devices
            .values()
            .any(|d| *d == ps1),
        "variables on both: {:?}",
        report.first_plan.variable_devices
    );
    assert_eq!(report.updates, 20, "every update applied once");
    assert_eq!(report.recoveries.len(), 1, "{:?}", report.recoveries);
    let r = &report.recoveries[0];
    assert_eq!(r.lost, vec![ps0.clone()], "{r:?}");
    // Copies after updates 0, 2, 4, …: the one after update 2 restored, update 3 trained again.
    assert_eq!((r.update, r.restored_from, r.redone), (3, 2, 1), "{r:?}");
    trained.assert_redone_from_the_copy(r);
    assert!(
        report.plan.variable_devices.values().all(|d| *d == ps1),
        "every variable moved to the surviving ps: {:?}",
        report.plan.variable_devices
    );
    assert_eq!(report.plan.global_device, ps1, "the global ops too");
    assert_eq!(report.plan.replicas.len(), 2, "both workers train on");
    assert_eq!(report.plan.global_batch(), 32);
    assert!(report.loss_last.is_some_and(f32::is_finite));
}

#[test]
fn a_python_graph_keeps_every_variable_and_slot_through_a_ps_loss() {
    let _one = serial();
    let mut cluster = start("workers=0.5,0.5");
    let dir = tempfile::tempdir().unwrap();
    let steps = 40;
    let training = Training {
        job: python_job(),
        strategy: DataParallelStrategy::ReplicaSetter,
        batch: 16,
        steps,
        recover: Some(RecoverOptions {
            every_updates: 2,
            ps_wait: Duration::from_secs(30),
            ..RecoverOptions::default()
        }),
        // Only the checkpoint at the end.
        checkpoints: Some(CheckpointOptions {
            every_steps: None,
            every_seconds: None,
            ..CheckpointOptions::new(dir.path())
        }),
    };
    let trained = train_job(
        &mut cluster,
        &training,
        vec![at(4, |c| {
            c.kill_ps(0);
            c.restart_ps(0).unwrap();
        })],
    )
    .unwrap();
    let report = &trained.report;
    assert_eq!(report.updates, steps, "every update applied once");
    assert_eq!(report.recoveries.len(), 1, "{:?}", report.recoveries);
    let r = &report.recoveries[0];
    assert_eq!(r.lost, vec![device_of(report, "ps", 0)], "{r:?}");
    // The fault landed before update 4's copy: back to the copy after update 2, updates 3 and
    // 4 trained again.
    assert_eq!((r.update, r.restored_from, r.redone), (4, 2, 2), "{r:?}");
    // Update 4's loss is that of the variables after update 3, which momentum moved by its
    // slots' values at update 2: equal to the first time only if the slots came back too.
    trained.assert_redone_from_the_copy(r);
    assert!(
        trained
            .losses
            .iter()
            .all(|(_, l)| l.is_finite() && *l > 0.0),
        "one-hot labels: {:?}",
        trained.losses
    );
    trained.assert_learns();
    // The checkpoint of the recovered run: the two weights and two biases and their four
    // momentum slots, all float32.
    let last = report.checkpoints.last().expect("a checkpoint at the end");
    assert_eq!(last.step, steps);
    let saved = tf_iaware::durable::read_bundle(&last.prefix).unwrap();
    let names: Vec<&str> = saved.iter().map(|t| t.name.as_str()).collect();
    let (variables, slots): (Vec<_>, Vec<_>) = saved
        .iter()
        .filter(|t| t.tensor.as_f32().is_some())
        .partition(|t| !t.name.ends_with("/Momentum"));
    assert_eq!((variables.len(), slots.len()), (4, 4), "{names:?}");
    for v in &variables {
        let slot = slots
            .iter()
            .find(|s| s.name == format!("{}/Momentum", v.name))
            .unwrap_or_else(|| panic!("{}'s slot in {names:?}", v.name));
        assert_eq!(slot.tensor.dims(), v.tensor.dims(), "{}", v.name);
    }
    let floats: usize = variables
        .iter()
        .map(|t| t.tensor.as_f32().map_or(0, <[f32]>::len))
        .sum();
    assert_eq!(floats, 32 * 64 + 64 + 64 * 10 + 10, "{names:?}");
}

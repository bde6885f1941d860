//! Durable training against real TensorFlow: checkpoints in TensorFlow's V2 format written and
//! read with `SaveV2`/`RestoreV2`, restored into a plain session of the user's original graph
//! (a graph exported by Python, a zoo model, a TF1 reference-variable graph), torn checkpoints
//! skipped for the previous whole one, and checkpoints that do not fit refused naming the variable.

use std::fs;
use std::path::Path;

use tf_iaware::durable::{
    graph_variables, list_bundle, read_bundle, read_variables, restore_graph, write_bundle,
    CheckpointDir, HostTensor, NamedTensor, TrainState,
};
use tf_iaware::graph::Sidecar;
use tf_iaware::tensorflow::{
    BFloat16, DataType, Graph, ImportGraphDefOptions, Operation, Session, SessionOptions,
    SessionRunArgs, Tensor,
};
use tf_iaware::Error;

fn fixture(name: &str) -> (Vec<u8>, Sidecar) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures");
    let bytes = fs::read(dir.join(format!("{name}.pb"))).unwrap();
    let sidecar = Sidecar::load(&dir.join(format!("{name}.json"))).unwrap();
    (bytes, sidecar)
}

fn op(graph: &Graph, name: &str) -> Operation {
    graph.operation_by_name_required(name).unwrap()
}

/// A session of `graph_def`, initialised and trained `steps` steps on seeded noise (one-hot
/// labels), so that weights and optimiser slots differ from their initial values.
fn trained(graph_def: &[u8], sidecar: &Sidecar, steps: usize) -> (Graph, Session) {
    let mut graph = Graph::new();
    graph
        .import_graph_def(graph_def, &ImportGraphDefOptions::new())
        .unwrap();
    let session = Session::new(&SessionOptions::new(), &graph).unwrap();
    let mut init = SessionRunArgs::new();
    init.add_target(&op(&graph, &sidecar.init));
    session.run(&mut init).unwrap();
    let mut seed = 7u64;
    let mut next = move || {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((seed >> 40) as f32 / (1u64 << 24) as f32) - 0.5
    };
    let feeds: Vec<(Operation, Tensor<f32>)> = sidecar
        .inputs
        .iter()
        .map(|(name, shape)| {
            let dims: Vec<u64> = shape.iter().map(|&d| d as u64).collect();
            let n: u64 = dims.iter().product();
            let values: Vec<f32> = if sidecar.one_hot.contains(name) {
                let classes = *dims.last().unwrap() as usize;
                (0..n as usize)
                    .map(|i| {
                        if i % classes == (i / classes) % classes {
                            1.0
                        } else {
                            0.0
                        }
                    })
                    .collect()
            } else {
                (0..n).map(|_| next()).collect()
            };
            (
                op(&graph, name),
                Tensor::new(&dims).with_values(&values).unwrap(),
            )
        })
        .collect();
    for _ in 0..steps {
        let mut args = SessionRunArgs::new();
        for (o, t) in &feeds {
            args.add_feed(o, 0, t);
        }
        args.add_target(&op(&graph, &sidecar.train));
        session.run(&mut args).unwrap();
    }
    (graph, session)
}

fn float(dims: &[u64], values: &[f32]) -> HostTensor {
    HostTensor::float(dims, values).unwrap()
}

#[test]
fn every_dtype_round_trips_through_save_v2_and_restore_v2() {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("model.ckpt");
    let tensors = vec![
        NamedTensor::new("a/float", float(&[2, 3], &[1.0, -2.0, 3.5, 0.0, 1e-7, 6.0])),
        NamedTensor::new(
            "b/double",
            Tensor::<f64>::new(&[2]).with_values(&[1.5, -2.25]).unwrap(),
        ),
        NamedTensor::new(
            "c/int64",
            Tensor::<i64>::new(&[]).with_values(&[1 << 40]).unwrap(),
        ),
        NamedTensor::new(
            "d/int32",
            Tensor::<i32>::new(&[3]).with_values(&[-1, 0, 7]).unwrap(),
        ),
        NamedTensor::new(
            "e/bool",
            Tensor::<bool>::new(&[2])
                .with_values(&[true, false])
                .unwrap(),
        ),
        NamedTensor::new(
            "f/uint8",
            Tensor::<u8>::new(&[1, 2]).with_values(&[255, 3]).unwrap(),
        ),
        NamedTensor::new(
            "g/bfloat16",
            Tensor::<BFloat16>::new(&[2])
                .with_values(&[BFloat16::from(1.5f32), BFloat16::from(-3.0f32)])
                .unwrap(),
        ),
        NamedTensor::new(
            "h/string",
            Tensor::<String>::new(&[2])
                .with_values(&["proportional".to_string(), String::new()])
                .unwrap(),
        ),
    ];
    // Not in name order: SaveV2 sorts its index; read_bundle returns name order.
    let mut shuffled = tensors.clone();
    shuffled.reverse();
    write_bundle(&prefix, &shuffled).unwrap();
    assert!(dir.path().join("model.ckpt.index").is_file());
    assert!(dir.path().join("model.ckpt.data-00000-of-00001").is_file());
    let listed = list_bundle(&prefix).unwrap();
    assert_eq!(listed.len(), tensors.len());
    assert_eq!(listed[0].dtype, DataType::Float);
    assert_eq!(listed[0].dims, vec![2, 3]);
    assert_eq!(read_bundle(&prefix).unwrap(), tensors);

    let err = write_bundle(&prefix, &[tensors[0].clone(), tensors[0].clone()]).unwrap_err();
    assert!(
        err.to_string().contains("`a/float` is given twice"),
        "{err}"
    );
    assert!(write_bundle(&prefix, &[]).is_err());
}

#[test]
fn a_python_graph_restores_into_a_fresh_plain_session_of_the_original_graph() {
    let (graph_def, sidecar) = fixture("tf1_cnn_adam");
    let (mut graph, session) = trained(&graph_def, &sidecar, 2);
    let saved = read_variables(&mut graph, &session).unwrap();
    // Weights, batch-norm parameters, Adam's slots and its beta powers: every variable.
    assert_eq!(saved.len(), graph_variables(&graph).unwrap().len());
    assert!(
        saved.iter().any(|t| t.name.ends_with("/Adam_1")),
        "{:?}",
        names(&saved)
    );

    let dir = tempfile::tempdir().unwrap();
    let checkpoints = CheckpointDir::open(dir.path(), 2).unwrap();
    let info = checkpoints.save(&TrainState::at_step(2), &saved).unwrap();

    // The user's GraphDef as they exported it, never initialised: every variable comes from
    // the checkpoint.
    let mut restored = restore_graph(&graph_def, &info.prefix).unwrap();
    assert_eq!(restored.variables, names(&saved));
    let back = read_variables(&mut restored.graph, &restored.session).unwrap();
    assert_eq!(back, saved);
}

fn names(tensors: &[NamedTensor]) -> Vec<String> {
    tensors.iter().map(|t| t.name.clone()).collect()
}

#[test]
fn a_zoo_model_restores_and_one_that_does_not_fit_is_refused_naming_the_variable() {
    let m = tf_iaware::models::build("mlp", 4, 3).unwrap();
    let graph_def = m.net.graph().graph_def().unwrap();
    let (mut graph, session) = trained(&graph_def, &m.sidecar, 1);
    let saved = read_variables(&mut graph, &session).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let checkpoints = CheckpointDir::open(dir.path(), 0).unwrap();
    let info = checkpoints.save(&TrainState::at_step(1), &saved).unwrap();
    let mut restored = restore_graph(&graph_def, &info.prefix).unwrap();
    assert_eq!(
        read_variables(&mut restored.graph, &restored.session).unwrap(),
        saved
    );

    // Another model's graph: its variables have other shapes or are missing.
    let other = tf_iaware::models::build("lenet", 4, 3).unwrap();
    let other_def = other.net.graph().graph_def().unwrap();
    let err = restore_graph(&other_def, &info.prefix).err().unwrap();
    match &err {
        Error::CheckpointMismatch { path, variable, .. } => {
            assert_eq!(path, &info.prefix);
            assert!(!variable.is_empty());
        }
        other => panic!("expected CheckpointMismatch, got {other}"),
    }
    let text = err.to_string();
    assert!(
        text.contains("does not fit") && text.contains(&info.prefix.display().to_string()),
        "{text}"
    );

    // One variable of another shape, the rest right: refused naming that variable.
    let mut wrong = saved.clone();
    let victim = wrong
        .iter()
        .position(|t| t.tensor.data_type() == DataType::Float)
        .unwrap();
    wrong[victim].tensor = float(&[1], &[0.0]);
    let info = checkpoints.save(&TrainState::at_step(2), &wrong).unwrap();
    let err = restore_graph(&graph_def, &info.prefix)
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains(&format!("`{}`", wrong[victim].name)) && err.contains("[1]"),
        "{err}"
    );
    // One missing.
    let mut missing = saved.clone();
    let gone = missing.remove(0).name;
    let info = checkpoints.save(&TrainState::at_step(3), &missing).unwrap();
    let err = restore_graph(&graph_def, &info.prefix)
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains(&format!("`{gone}` is not in the checkpoint")),
        "{err}"
    );
}

/// A TF1 graph of reference variables (`VariableV2` + `Assign`), built by hand.
fn ref_variable_graph() -> Vec<u8> {
    let mut g = Graph::new();
    let mut init = Vec::new();
    for (name, dims, dtype) in [
        ("w", vec![2i64, 2], DataType::Float),
        ("global_step", vec![], DataType::Int64),
    ] {
        let var = {
            let mut d = g.new_operation("VariableV2", name).unwrap();
            d.set_attr_type("dtype", dtype).unwrap();
            d.set_attr_shape("shape", &tf_iaware::tensorflow::Shape::from(&dims[..]))
                .unwrap();
            d.finish().unwrap()
        };
        let value = {
            let mut d = g
                .new_operation("Const", &format!("{name}/initial"))
                .unwrap();
            d.set_attr_type("dtype", dtype).unwrap();
            let udims: Vec<u64> = dims.iter().map(|&x| x as u64).collect();
            if dtype == DataType::Float {
                d.set_attr_tensor("value", Tensor::<f32>::new(&udims))
                    .unwrap();
            } else {
                d.set_attr_tensor("value", Tensor::<i64>::new(&udims))
                    .unwrap();
            }
            d.finish().unwrap()
        };
        let mut d = g
            .new_operation("Assign", &format!("{name}/Assign"))
            .unwrap();
        d.add_input(var);
        d.add_input(value);
        d.set_attr_type("T", dtype).unwrap();
        init.push(d.finish().unwrap());
    }
    let mut d = g.new_operation("NoOp", "init").unwrap();
    for i in init {
        d.add_control_input(&i);
    }
    d.finish().unwrap();
    g.graph_def().unwrap()
}

#[test]
fn reference_variables_of_any_dtype_restore_too() {
    let graph_def = ref_variable_graph();
    let dir = tempfile::tempdir().unwrap();
    let checkpoints = CheckpointDir::open(dir.path(), 1).unwrap();
    let tensors = vec![
        NamedTensor::new(
            "global_step",
            Tensor::<i64>::new(&[]).with_values(&[1234]).unwrap(),
        ),
        NamedTensor::new("w", float(&[2, 2], &[1.0, 2.0, 3.0, 4.0])),
    ];
    let info = checkpoints
        .save(&TrainState::at_step(1234), &tensors)
        .unwrap();
    let mut restored = restore_graph(&graph_def, &info.prefix).unwrap();
    assert_eq!(restored.variables, vec!["global_step", "w"]);
    assert_eq!(
        read_variables(&mut restored.graph, &restored.session).unwrap(),
        tensors
    );

    // A global step saved as int32 does not fit the graph's int64 one.
    let wrong = vec![
        NamedTensor::new(
            "global_step",
            Tensor::<i32>::new(&[]).with_values(&[1]).unwrap(),
        ),
        tensors[1].clone(),
    ];
    let info = checkpoints
        .save(&TrainState::at_step(1235), &wrong)
        .unwrap();
    let err = restore_graph(&graph_def, &info.prefix)
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("`global_step` is Int32 in the checkpoint but Int64"),
        "{err}"
    );
}

fn state(step: u64) -> TrainState {
    let mut s = TrainState::at_step(step);
    s.epoch = step / 10;
    s.position = step % 10 * 64;
    s
}

fn tensors(step: u64) -> Vec<NamedTensor> {
    vec![NamedTensor::new("v", float(&[3], &[step as f32, 1.0, 2.0]))]
}

#[test]
fn the_last_k_are_kept_and_the_state_file_names_them() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    fs::write(d.join("notes.txt"), "mine").unwrap();
    let checkpoints = CheckpointDir::open(d, 2).unwrap();
    for step in [10, 20, 30, 40] {
        checkpoints.save(&state(step), &tensors(step)).unwrap();
    }
    let steps: Vec<u64> = checkpoints.list().unwrap().iter().map(|c| c.step).collect();
    assert_eq!(steps, vec![40, 30]);
    let text = fs::read_to_string(d.join("checkpoint")).unwrap();
    assert_eq!(
        text,
        "model_checkpoint_path: \"ckpt-40/model.ckpt\"\n\
         all_model_checkpoint_paths: \"ckpt-30/model.ckpt\"\n\
         all_model_checkpoint_paths: \"ckpt-40/model.ckpt\"\n"
    );
    let latest = checkpoints.load_latest().unwrap().unwrap();
    assert_eq!(latest.state, state(40));
    assert_eq!(latest.tensors, tensors(40));
    assert!(latest.skipped.is_empty());
    // Files tf-iaware did not write are never deleted: one beside the checkpoints, one inside a
    // checkpoint that pruning then leaves in place.
    fs::write(d.join("ckpt-30/mine.txt"), "mine").unwrap();
    checkpoints.save(&state(50), &tensors(50)).unwrap();
    checkpoints.save(&state(60), &tensors(60)).unwrap();
    assert_eq!(fs::read_to_string(d.join("notes.txt")).unwrap(), "mine");
    assert_eq!(
        fs::read_to_string(d.join("ckpt-30/mine.txt")).unwrap(),
        "mine"
    );
    assert!(!d.join("ckpt-30/model.ckpt.index").exists());
    assert!(!d.join("ckpt-40").exists());
    // No temporary files are left behind; saving a step again replaces it.
    checkpoints.save(&state(60), &tensors(61)).unwrap();
    assert_eq!(
        checkpoints.load_latest().unwrap().unwrap().tensors,
        tensors(61)
    );
    let mut left: Vec<String> = fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    left.sort();
    assert_eq!(
        left,
        vec![
            ".tf-iaware.lock",
            "checkpoint",
            "ckpt-30",
            "ckpt-50",
            "ckpt-60",
            "notes.txt"
        ]
    );
}

#[test]
fn a_torn_latest_checkpoint_falls_back_to_the_previous_whole_one() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let checkpoints = CheckpointDir::open(d, 0).unwrap();
    let big = |step: u64| {
        vec![
            NamedTensor::new("a", float(&[256], &vec![step as f32; 256])),
            NamedTensor::new("b", float(&[256], &vec![-(step as f32); 256])),
        ]
    };
    let infos: Vec<_> = [100, 200, 300]
        .into_iter()
        .map(|s| checkpoints.save(&state(s), &big(s)).unwrap())
        .collect();
    // 300: the data file cut short (a crash mid-write on a file system without atomic rename).
    let data = infos[2].dir.join("model.ckpt.data-00000-of-00001");
    let len = fs::metadata(&data).unwrap().len();
    fs::OpenOptions::new()
        .write(true)
        .open(&data)
        .unwrap()
        .set_len(len / 2)
        .unwrap();
    let err = checkpoints.load(&infos[2]).unwrap_err();
    assert!(matches!(err, Error::CheckpointFile { .. }), "{err}");
    assert!(err.to_string().contains("ckpt-300"), "{err}");
    // 200: its index gone.
    fs::remove_file(infos[1].dir.join("model.ckpt.index")).unwrap();
    let err = checkpoints.load(&infos[1]).unwrap_err().to_string();
    assert!(
        err.contains("ckpt-200/model.ckpt.index") && err.contains("missing"),
        "{err}"
    );

    let loaded = checkpoints.load_latest().unwrap().unwrap();
    assert_eq!(loaded.info.step, 100);
    assert_eq!(loaded.state, state(100));
    assert_eq!(loaded.tensors, big(100));
    assert_eq!(loaded.skipped.len(), 2);
    // The torn ones are moved aside (kept, not deleted) and no longer listed.
    assert_eq!(checkpoints.list().unwrap().len(), 1);
    assert!(d
        .join(format!(".ckpt-300.torn-{}", std::process::id()))
        .join("model.ckpt.index")
        .exists());
    let text = fs::read_to_string(d.join("checkpoint")).unwrap();
    assert!(
        text.starts_with("model_checkpoint_path: \"ckpt-100/model.ckpt\""),
        "{text}"
    );

    // A corrupt (not truncated) data file: a flipped byte fails the tensor's checksum.
    let data = infos[0].dir.join("model.ckpt.data-00000-of-00001");
    let mut bytes = fs::read(&data).unwrap();
    bytes[10] ^= 0xff;
    fs::write(&data, bytes).unwrap();
    assert!(matches!(
        checkpoints.load(&infos[0]),
        Err(Error::CheckpointFile { .. })
    ));
    // None usable: an error naming the folder, never a silent start from step 0; nothing moved.
    let err = checkpoints.load_latest().unwrap_err();
    assert!(
        matches!(&err, Error::NoUsableCheckpoint { found: 1, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("ckpt-100"), "{err}");
    assert!(infos[0].dir.join("model.ckpt.index").exists());
}

#[test]
fn a_directory_of_another_tools_checkpoints_is_refused_and_stale_temporaries_are_cleared() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    fs::write(
        d.join("checkpoint"),
        "model_checkpoint_path: \"model.ckpt-20\"\nall_model_checkpoint_paths: \"model.ckpt-20\"\n",
    )
    .unwrap();
    let err = CheckpointDir::open(d, 3).unwrap_err().to_string();
    assert!(
        err.contains("model.ckpt-20") && err.contains("another tool"),
        "{err}"
    );
    fs::remove_file(d.join("checkpoint")).unwrap();

    // A temporary directory of a process that is gone (pid beyond pid_max) is removed on open.
    let stale = d.join(".ckpt-5.tmp-4294967295");
    fs::create_dir(&stale).unwrap();
    fs::write(stale.join("model.ckpt.index"), b"half").unwrap();
    fs::write(
        stale.join("model.ckpt.data-00000-of-00001.tempstate123"),
        b"half",
    )
    .unwrap();
    let stale_state = d.join(".checkpoint.tmp-4294967295");
    fs::write(&stale_state, b"model_checkpoint_path: \"ckpt-5/mo").unwrap();
    CheckpointDir::open(d, 3).unwrap();
    assert!(!stale.exists());
    assert!(!stale_state.exists());
}

#[test]
fn event_files_round_trip_through_the_projects_own_reader() {
    use tf_iaware::durable::events::{
        event_files, read_event_file, read_scalars, tags, EventWriter,
    };
    let dir = tempfile::tempdir().unwrap();
    let logdir = dir.path().join("logs");
    let mut w = EventWriter::create(&logdir).unwrap();
    let name = w.path().file_name().unwrap().to_string_lossy().into_owned();
    assert!(name.starts_with("events.out.tfevents."), "{name}");
    let share = tags::worker_share("/job:worker/task:1");
    for step in 1..=3i64 {
        w.scalars(
            step,
            &[
                (tags::LOSS, 2.0 / step as f32),
                (tags::IMAGES_PER_SEC, 500.0),
                (&share, 24.0),
            ],
        )
        .unwrap();
    }
    w.scalar(3, tags::HELD_OUT, 0.875).unwrap();
    // Each record is flushed as written: readable while the writer is open.
    let events = read_event_file(w.path()).unwrap();
    assert_eq!(events.len(), 5);
    assert_eq!(events[0].file_version.as_deref(), Some("brain.Event:2"));
    let points = read_scalars(w.path()).unwrap();
    assert_eq!(points.len(), 10);
    let loss: Vec<(i64, f32)> = points
        .iter()
        .filter(|p| p.tag == "loss")
        .map(|p| (p.step, p.value))
        .collect();
    assert_eq!(loss, vec![(1, 2.0), (2, 1.0), (3, 2.0 / 3.0)]);
    assert!(points
        .iter()
        .any(|p| p.tag == "share/job_worker_task_1" && p.value == 24.0));
    assert!(points
        .iter()
        .any(|p| p.tag == "held_out/accuracy" && p.step == 3));
    assert!(points.iter().all(|p| p.wall_time > 1.0e9));

    // A second writer (a resumed run) makes a new file beside the first, never over it.
    let w2 = EventWriter::create(&logdir).unwrap();
    assert_ne!(w2.path(), w.path());
    assert_eq!(event_files(&logdir).unwrap().len(), 2);

    // A torn last record (the driver killed mid-write) is a typed error naming the file.
    let path = w.path().to_path_buf();
    drop(w);
    let len = fs::metadata(&path).unwrap().len();
    fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(len - 3)
        .unwrap();
    let err = read_event_file(&path).unwrap_err().to_string();
    assert!(err.contains(&path.display().to_string()), "{err}");
}

#[test]
fn a_driver_memory_checkpoint_goes_to_disk_and_comes_back_as_one() {
    use tf_iaware::durable::{from_saved, PlanState, WorkerShare};
    use tf_iaware::parallel::checkpoint::{Checkpoint, SavedTensor};
    let memory = Checkpoint {
        step: 700,
        tensors: vec![
            SavedTensor {
                name: "dense/kernel".into(),
                shape: vec![2, 3],
                values: vec![0.5, -1.0, 2.0, 0.0, 3.0, 4.0],
            },
            SavedTensor {
                name: "dense/kernel/Momentum".into(),
                shape: vec![2, 3],
                values: vec![0.1; 6],
            },
        ],
    };
    let mut state = TrainState::at_step(700);
    state.plan = Some(PlanState {
        strategy: "proportional".into(),
        global_batch: 64,
        shares: vec![WorkerShare {
            worker: "/job:worker/task:0".into(),
            examples: 64,
        }],
        replans: 0,
    });
    let dir = tempfile::tempdir().unwrap();
    let checkpoints = CheckpointDir::open(dir.path(), 3).unwrap();
    checkpoints
        .save(&state, &from_saved(&memory.tensors).unwrap())
        .unwrap();
    let loaded = checkpoints.load_latest().unwrap().unwrap();
    assert_eq!(loaded.state, state);
    assert_eq!(loaded.memory_checkpoint(), memory);
}

/// Set in the child process of [`a_driver_killed_mid_save_leaves_the_previous_checkpoint_whole`].
const CHILD_DIR: &str = "TF_IAWARE_TEST_DURABLE_CHILD_DIR";

fn step_tensors(step: u64) -> Vec<NamedTensor> {
    // 4 MiB per checkpoint, every value the step: a kill lands mid-write often.
    (0..4)
        .map(|i| {
            NamedTensor::new(
                format!("layer{i}/kernel"),
                float(&[512, 512], &vec![step as f32; 512 * 512]),
            )
        })
        .collect()
}

/// The child: saves checkpoints of steps 1, 2, 3, … until it is killed.
#[test]
fn child_saving_until_killed() {
    let Some(dir) = std::env::var_os(CHILD_DIR) else {
        return;
    };
    let checkpoints = CheckpointDir::open(dir, 2).unwrap();
    for step in 1.. {
        checkpoints.save(&state(step), &step_tensors(step)).unwrap();
    }
}

#[test]
fn a_driver_killed_mid_save_leaves_the_previous_checkpoint_whole() {
    let root = tempfile::tempdir().unwrap();
    let mut killed_mid_write = 0;
    for (round, delay_ms) in [0u64, 37, 113].into_iter().enumerate() {
        let dir = root.path().join(format!("round{round}"));
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "child_saving_until_killed", "--nocapture"])
            .env(CHILD_DIR, &dir)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        // Wait until this round's child has written a checkpoint, then kill it (SIGKILL) a little
        // later, wherever it is in the next one.
        let first = dir.join("ckpt-2");
        while !first.exists() {
            assert!(
                child.try_wait().unwrap().is_none(),
                "the child ended on its own"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        std::thread::sleep(std::time::Duration::from_millis(delay_ms));
        child.kill().unwrap();
        child.wait().unwrap();
        let hidden = |dir: &Path| -> Vec<String> {
            fs::read_dir(dir)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with('.') && n != ".tf-iaware.lock")
                .collect()
        };
        if !hidden(&dir).is_empty() {
            killed_mid_write += 1;
        }

        let checkpoints = CheckpointDir::open(&dir, 2).unwrap();
        let loaded = checkpoints
            .load_latest()
            .unwrap()
            .expect("a whole checkpoint");
        let step = loaded.state.global_step;
        assert!(step >= 2, "round {round}: step {step}");
        assert_eq!(loaded.info.step, step);
        assert_eq!(
            loaded.tensors,
            step_tensors(step),
            "round {round}: step {step}"
        );
        assert!(
            loaded.skipped.is_empty(),
            "round {round}: {:?}",
            loaded.skipped
        );
        // Nothing half-written is left for the next run: opening cleared the dead child's
        // temporary directory.
        let temps = hidden(&dir);
        assert!(temps.is_empty(), "round {round}: {temps:?}");
    }
    eprintln!("{killed_mid_write} of 3 kills landed while a checkpoint was being written");
}

//! The library's entry point against real TensorFlow: a model of the user's own (built with the
//! `tensorflow` crate, not the zoo) placed with several strategies, trained with handles of the
//! original graph, int64 feeds, a two-output op, verification and the errors of bad handles.

#[allow(dead_code)]
#[path = "../examples/own_model/model.rs"]
mod model;

use tf_iaware::tensorflow::{Output, Tensor};
use tf_iaware::{connect, Error, Run, Step};
use tf_iaware::{TensorRef, Verification};

#[test]
fn own_model_trains_with_handles_of_the_original_graph() {
    let m = model::build().unwrap();
    let (xs, ys) = model::batch(3);
    let cluster = connect("local:cpu=4").unwrap();
    let step = Step::new().target(&m.train).fetch(&m.loss);
    for strategy in ["heft", "round-robin", "etf"] {
        let plan = cluster.place(&*m.scope.graph(), &step, strategy).unwrap();
        let report = plan.report();
        assert_eq!(report.strategy, strategy);
        assert!(report.predicted_step_ms >= report.lower_bound_ms);
        let session = plan.session().unwrap();
        session.run(Run::new().target(&m.init)).unwrap();
        let feeds = || Run::of(&step).feed(&m.x, &xs).feed(&m.labels, &ys);
        let losses: Vec<f32> = (0..25)
            .map(|_| {
                session
                    .run(feeds())
                    .unwrap()
                    .scalar::<f32>(&m.loss)
                    .unwrap()
            })
            .collect();
        assert!(
            losses[24] < 0.5 * losses[0],
            "{strategy}: loss {} -> {}",
            losses[0],
            losses[24]
        );
        // What ran where agrees with the plan, and the check covered the step's ops.
        let traced = session.run(feeds().traced()).unwrap();
        assert!(traced.step_stats.is_some());
        let check = session.verify(&traced).unwrap();
        assert!(check.is_ok(), "{strategy}: {:?}", check.mismatches);
        assert!(
            check.checked >= 20,
            "{strategy}: only {} ops checked",
            check.checked
        );
        if strategy == "round-robin" {
            assert!(check.executed.len() >= 2, "{:?}", check.executed);
        }
    }
}

#[test]
fn every_handle_of_the_user_graph_resolves_in_the_placed_graph() {
    let m = model::build().unwrap();
    let cluster = connect("local:cpu=2").unwrap();
    let step = Step::new().target(&m.train).fetch(&m.loss);
    let plan = cluster
        .place(&*m.scope.graph(), &step, "round-robin")
        .unwrap();
    let session = plan.session().unwrap();
    let graph = m.scope.graph();
    let mut n = 0;
    for op in graph.operation_iter() {
        let placed = session.op(&op).unwrap();
        assert_eq!(placed.name().unwrap(), op.name().unwrap());
        assert_eq!(placed.num_outputs(), op.num_outputs());
        // Its placed device is the plan's.
        if let Some(device) = plan.device_of(&op.name().unwrap()) {
            assert_eq!(placed.device().unwrap(), device);
        }
        n += 1;
    }
    assert_eq!(n, plan.analyzed().op_graph.len());

    // An op of another graph with a name this one lacks is an error naming it.
    let other = tf_iaware::tensorflow::Scope::new_root_scope();
    let stranger = tf_iaware::tensorflow::ops::Placeholder::new()
        .dtype(tf_iaware::tensorflow::DataType::Float)
        .build(&mut other.with_op_name("not_in_the_model"))
        .unwrap();
    let e = session.op(&stranger).unwrap_err();
    assert!(matches!(e, Error::Handle { .. }), "{e}");
    assert!(e.to_string().contains("not_in_the_model"), "{e}");
    let e = session
        .run(Run::new().target(&stranger))
        .expect_err("a run with a foreign op fails");
    assert!(e.to_string().contains("not_in_the_model"), "{e}");
}

#[test]
fn any_dtype_any_output_and_several_fetches() {
    let m = model::build().unwrap();
    let (xs, ys) = model::batch(5);
    let cluster = connect("local:cpu=2").unwrap();
    let plan = cluster
        .place(&*m.scope.graph(), &Step::new(), "heft")
        .unwrap();
    let session = plan.session().unwrap();
    session.run(Run::new().target(&m.init)).unwrap();
    let scores = Output {
        operation: m.top2.clone(),
        index: 0,
    };
    let classes = Output {
        operation: m.top2.clone(),
        index: 1,
    };
    let mut out = session
        .run(
            Run::new()
                .feed(&m.x, &xs)
                .feed(&m.labels, &ys)
                .fetch(&m.loss)
                .fetch(&scores)
                .fetch(&classes),
        )
        .unwrap();
    let classes_t: Tensor<i32> = out.get(&classes).unwrap();
    let scores_t: Tensor<f32> = out.get("top2:0").unwrap();
    assert_eq!(classes_t.dims(), &[model::BATCH, 2]);
    assert_eq!(scores_t.dims(), &[model::BATCH, 2]);
    for row in 0..model::BATCH as usize {
        assert!(scores_t[row * 2] >= scores_t[row * 2 + 1]);
        assert!((0..model::CLASSES as i32).contains(&classes_t[row * 2]));
    }
    assert!(out.scalar::<f32>(&m.loss).unwrap().is_finite());
    // Taken once; a tensor the run did not fetch; a wrong dtype.
    assert!(matches!(
        out.get::<i32>(&classes),
        Err(Error::Handle { .. })
    ));
    assert!(matches!(out.get::<f32>("x:0"), Err(Error::Handle { .. })));
    let mut again = session
        .run(Run::new().feed(&m.x, &xs).fetch(&classes))
        .unwrap();
    let e = again.get::<f32>(&classes).unwrap_err();
    assert!(e.to_string().contains("top2:1"), "{e}");
}

#[test]
fn bad_feeds_and_handles_are_typed_errors_not_crashes() {
    let m = model::build().unwrap();
    let (xs, _) = model::batch(1);
    let cluster = connect("local:cpu=2").unwrap();
    let step = Step::new().target(&m.train).fetch(&m.loss);
    let plan = cluster.place(&*m.scope.graph(), &step, "heft").unwrap();
    let session = plan.session().unwrap();
    session.run(Run::new().target(&m.init)).unwrap();
    // Float labels into the int64 placeholder: refused before TensorFlow sees them.
    let wrong = Tensor::<f32>::new(&[model::BATCH]);
    let e = session
        .run(Run::of(&step).feed(&m.x, &xs).feed(&m.labels, &wrong))
        .expect_err("a float feed of an int64 placeholder fails");
    assert!(e.to_string().contains("labels"), "{e}");
    // An output index beyond the op's outputs.
    let e = session
        .run(Run::new().fetch(TensorRef::new("top2", 7)))
        .expect_err("fetching output 7 of a two-output op fails");
    assert!(e.to_string().contains("top2:7"), "{e}");
    // A malformed tensor name.
    let e = session
        .run(Run::new().fetch("top2:x"))
        .expect_err("a malformed tensor name fails");
    assert!(e.to_string().contains("top2:x"), "{e}");
    // A missing feed is TensorFlow's error, reported, not a crash.
    assert!(matches!(
        session.run(Run::of(&step)),
        Err(Error::TensorFlow { .. })
    ));
    // A step naming an op the graph lacks is refused when placing.
    let e = cluster
        .place(&*m.scope.graph(), &Step::new().target("no_such_op"), "heft")
        .expect_err("an unknown step target fails");
    assert!(e.to_string().contains("no_such_op"), "{e}");
    // An unknown strategy names the known ones.
    let e = cluster
        .place(&*m.scope.graph(), &step, "fastest-please")
        .expect_err("an unknown strategy fails");
    assert!(e.to_string().contains("heft"), "{e}");
}

#[test]
fn verification_names_an_op_that_ran_elsewhere_than_planned() {
    let m = model::build().unwrap();
    let (xs, ys) = model::batch(2);
    let cluster = connect("local:cpu=2").unwrap();
    let step = Step::new().target(&m.train).fetch(&m.loss);
    let plan = cluster
        .place(&*m.scope.graph(), &step, "round-robin")
        .unwrap();
    let session = plan.session().unwrap();
    session.run(Run::new().target(&m.init)).unwrap();
    let traced = session
        .run(Run::of(&step).feed(&m.x, &xs).feed(&m.labels, &ys).traced())
        .unwrap();
    assert!(session.verify(&traced).unwrap().is_ok());
    // The same run checked against a plan that wanted the loss elsewhere.
    let mut wrong = plan.placement().clone();
    let loss_device = plan.device_of("loss").unwrap().to_string();
    assert_eq!(session.device_of("loss"), Some(loss_device.as_str()));
    let other = cluster
        .cluster()
        .devices
        .iter()
        .map(|d| d.name.clone())
        .find(|d| *d != loss_device)
        .unwrap();
    let loss = plan.analyzed().op_graph.id("loss").unwrap();
    wrong.set(loss, plan.cluster().index_of(&other)).unwrap();
    let check = Verification::of(
        traced.step_stats.as_ref().unwrap(),
        &wrong,
        &plan.analyzed().op_graph,
        plan.cluster(),
    );
    assert_eq!(check.mismatches.len(), 1, "{:?}", check.mismatches);
    assert_eq!(check.mismatches[0].op, "loss");
    assert_eq!(check.mismatches[0].placed, other);
    // An untraced run cannot be verified.
    let plain = session
        .run(Run::of(&step).feed(&m.x, &xs).feed(&m.labels, &ys))
        .unwrap();
    assert!(matches!(
        session.verify(&plain),
        Err(Error::InvalidArgument { .. })
    ));
}

#[test]
fn graphdef_bytes_place_like_the_graph_they_came_from() {
    let m = model::build().unwrap();
    let bytes = m.scope.graph().graph_def().unwrap();
    let cluster = connect("local:cpu=2").unwrap();
    let step = Step::new().target("train").fetch("loss:0");
    let from_bytes = cluster.place(&bytes, &step, "heft").unwrap();
    let from_graph = cluster.place(&*m.scope.graph(), &step, "heft").unwrap();
    assert_eq!(from_bytes.placement(), from_graph.placement());
    assert_eq!(
        from_bytes.report().predicted_step_ms,
        from_graph.report().predicted_step_ms
    );
    // Predictions cover the step, not the initialisers: fewer active ops than in the graph.
    let every_op = cluster.place(&bytes, &Step::new(), "heft").unwrap();
    assert!(every_op.report().lower_bound_ms >= from_bytes.report().lower_bound_ms);
    // Broken bytes are a decode error, not a crash inside TensorFlow.
    let e = cluster
        .place(&b"\xff\xff\xff not a graph"[..], &step, "heft")
        .expect_err("garbage bytes fail");
    assert!(matches!(e, Error::GraphDecode { .. }), "{e}");
}

#[test]
fn the_connection_builder_sets_live_options_calibration_and_deadlines() {
    use std::time::Duration;
    use tf_iaware::{CalibrationPolicy, Connection};

    let m = model::build().unwrap();
    let (xs, ys) = model::batch(2);
    let cluster = Connection::builder("local:cpu=2")
        .live_metrics(false)
        .calibration(CalibrationPolicy::Nominal)
        .run_deadline(Duration::from_secs(90))
        .operation_deadline(Duration::from_secs(20))
        .connect()
        .unwrap();
    let config = cluster.session_config();
    assert_eq!(
        (config.run_timeout_ms, config.operation_timeout_ms),
        (90_000, 20_000)
    );
    assert!(config.session_options().is_ok());
    // No live reading and no calibration: every device at its nominal figures.
    assert!(cluster
        .cluster()
        .devices
        .iter()
        .all(|d| !d.live.has_reading()));
    let status = cluster.calibration_status();
    assert!(!status.hit && cluster.calibration().is_none());
    assert!(
        status.reason.as_deref().unwrap_or("").contains("Nominal"),
        "{status:?}"
    );
    // The settings reach the sessions it opens.
    let step = Step::new().target(&m.train).fetch(&m.loss);
    let plan = cluster
        .place(
            &*m.scope.graph(),
            &step,
            tf_iaware::placer::OpPlacementStrategy::RoundRobin,
        )
        .unwrap();
    let session = plan.session().unwrap();
    session.run(Run::new().target(&m.init)).unwrap();
    let run = Run::of(&step).feed(&m.x, &xs).feed(&m.labels, &ys);
    // Every public type prints for debugging, TensorFlow handles left out.
    let printed = format!("{cluster:?} {plan:?} {session:?} {run:?}");
    for part in [
        "local:cpu=2",
        "run_timeout_ms: 90000",
        "predicted_step_ms",
        "placed_ops",
    ] {
        assert!(printed.contains(part), "{part}: {printed}");
    }
    let mut fetched = session.run(run).unwrap();
    assert!(format!("{fetched:?}").contains("wall"));
    assert!(fetched.scalar::<f32>(&m.loss).unwrap().is_finite());

    // `connect` is the builder at its defaults: live readings, the session's own deadlines.
    let short = connect("local:cpu=2").unwrap();
    let defaults = Connection::builder("local:cpu=2").connect().unwrap();
    assert!(short.cluster().devices.iter().any(|d| d.live.has_reading()));
    for c in [&short, &defaults] {
        let config = c.session_config();
        let default = tf_iaware::runtime::SessionConfig::default();
        assert_eq!(config.run_timeout_ms, default.run_timeout_ms);
        assert_eq!(config.operation_timeout_ms, default.operation_timeout_ms);
    }
}

#[test]
fn the_connection_builder_refuses_bad_settings_by_name() {
    use std::time::Duration;
    use tf_iaware::{CalibrationPolicy, Connection};

    let invalid = |b: tf_iaware::ConnectionBuilder, name: &str| match b.connect() {
        Err(Error::InvalidArgument { what, reason }) => {
            assert!(what.contains(name), "{what}: {reason}");
        }
        Err(other) => panic!("{name}: {other}"),
        Ok(_) => panic!("{name}: connected"),
    };
    let local = || Connection::builder("local");
    invalid(local().run_deadline(Duration::ZERO), "run deadline");
    invalid(
        local().run_deadline(Duration::from_secs(u64::MAX)),
        "run deadline",
    );
    invalid(
        local().operation_deadline(Duration::from_micros(10)),
        "operation deadline",
    );
    invalid(local().scrape_timeout(Duration::ZERO), "scrape timeout");
    invalid(
        Connection::builder("synthetic:workers=4").calibration(CalibrationPolicy::Recalibrate),
        "calibration policy",
    );
    // Without live metrics a scrape timeout is not used, so not checked.
    assert!(local()
        .live_metrics(false)
        .scrape_timeout(Duration::ZERO)
        .connect()
        .is_ok());
    let e = Connection::builder("nonsense:spec")
        .connect()
        .err()
        .unwrap();
    assert!(e.to_string().contains("nonsense"), "{e}");
}

//! Writes what `tests/fixtures/check_durable.py` checks with Python TensorFlow: the Python-exported
//! graph `tests/fixtures/tf1_cnn_adam.pb` trained three steps, its checkpoint in a checkpoint
//! directory, the values it should hold (`expected.json`) and an event file of scalars.
//!
//! ```text
//! cargo run -p tf-iaware --example durable_export -- OUT
//! python3 tests/fixtures/check_durable.py OUT
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tf_iaware::durable::events::{tags, EventWriter};
use tf_iaware::durable::{read_variables, CheckpointDir, HostTensor, TrainState};
use tf_iaware::graph::Sidecar;
use tf_iaware::tensorflow::{
    Graph, ImportGraphDefOptions, Session, SessionOptions, SessionRunArgs, Tensor,
};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let out = PathBuf::from(std::env::args().nth(1).ok_or("usage: durable_export OUT")?);
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures");
    let graph_def = std::fs::read(fixtures.join("tf1_cnn_adam.pb"))?;
    let sidecar = Sidecar::load(&fixtures.join("tf1_cnn_adam.json"))?;

    let mut graph = Graph::new();
    graph.import_graph_def(&graph_def, &ImportGraphDefOptions::new())?;
    let session = Session::new(&SessionOptions::new(), &graph)?;
    let mut init = SessionRunArgs::new();
    init.add_target(&graph.operation_by_name_required(&sidecar.init)?);
    session.run(&mut init)?;

    let mut feeds = Vec::new();
    for (name, shape) in &sidecar.inputs {
        let dims: Vec<u64> = shape.iter().map(|&d| d as u64).collect();
        let n = dims.iter().product::<u64>() as usize;
        let classes = *dims.last().unwrap_or(&1) as usize;
        let values: Vec<f32> = if sidecar.one_hot.contains(name) {
            (0..n)
                .map(|i| f32::from(i % classes == (i / classes) % classes))
                .collect()
        } else {
            (0..n)
                .map(|i| ((i * 7919) % 1000) as f32 / 1000.0 - 0.5)
                .collect()
        };
        feeds.push((
            graph.operation_by_name_required(name)?,
            Tensor::new(&dims).with_values(&values)?,
        ));
    }
    let train = graph.operation_by_name_required(&sidecar.train)?;
    let loss_op = graph.operation_by_name_required(&sidecar.loss)?;
    let mut events = EventWriter::create(&out.join("logs"))?;
    let steps = 3;
    for step in 1..=steps {
        let mut args = SessionRunArgs::new();
        for (op, t) in &feeds {
            args.add_feed(op, 0, t);
        }
        args.add_target(&train);
        let loss = args.request_fetch(&loss_op, 0);
        session.run(&mut args)?;
        let loss: f32 = args.fetch::<f32>(loss)?[0];
        events.scalars(
            step,
            &[
                (tags::LOSS, loss),
                (tags::IMAGES_PER_SEC, 100.0 * step as f32),
                (&tags::worker_share("/job:worker/task:0"), 5.0),
                (&tags::worker_availability("/job:worker/task:0"), 0.75),
                (tags::REPLANS, 0.0),
            ],
        )?;
    }
    events.scalar(steps, tags::HELD_OUT, 0.5)?;

    let tensors = read_variables(&mut graph, &session)?;
    let checkpoints = CheckpointDir::open(out.join("ckpt"), 2)?;
    let mut state = TrainState::at_step(steps as u64);
    state.position = 24;
    let info = checkpoints.save(&state, &tensors)?;

    let mut expected = BTreeMap::new();
    for t in &tensors {
        let HostTensor::Float(v) = &t.tensor else {
            return Err(format!("variable {} is not float", t.name).into());
        };
        expected.insert(
            t.name.clone(),
            serde_json::json!({"shape": v.dims(), "values": v.to_vec()}),
        );
    }
    std::fs::write(out.join("expected.json"), serde_json::to_string(&expected)?)?;
    println!(
        "{} variables at {}; events in {}",
        tensors.len(),
        info.prefix.display(),
        events.path().display()
    );
    Ok(())
}

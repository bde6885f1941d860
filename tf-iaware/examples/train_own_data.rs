//! Trains a GraphDef of your own (with its sidecar `.json` beside it) on your own data — `.npy`,
//! `.npz`, TFRecord files of `tf.train.Example` — over the TF_CONFIG cluster in the environment,
//! with any data-parallel strategy, evaluating on held-out data:
//!
//! `cargo run -p tf-iaware --example train_own_data -- model.pb train.npz held_out.npz infra-aware`
use tf_iaware::{Job, TrainingOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let [_, graph, data, held_out, strategy] = &args[..] else {
        return Err("usage: train_own_data GRAPH.pb TRAIN HELD_OUT STRATEGY".into());
    };
    let job =
        Job::load(graph.as_ref(), None, data.as_ref())?.with_held_out_file(held_out.as_ref())?;
    let cluster = tf_iaware::connect("tf-config")?;
    let plan = cluster.plan_data_parallel(job.workload(), strategy.parse()?, None)?;
    let options = TrainingOptions {
        epochs: Some(5.0),
        target: Some(0.9),
        ..Default::default()
    };
    let report = plan.fit(&job, &options)?;
    for e in &report.evaluations {
        println!(
            "{:.1} s, epoch {:.2}: held-out {:.3}",
            e.seconds, e.epoch, e.metric
        );
    }
    Ok(())
}

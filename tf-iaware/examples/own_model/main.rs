//! Places and trains a model of your own (built with the `tensorflow` crate, see `model.rs`)
//! with two strategies, on the cluster the first argument names: `local:cpu=4` (the default) or
//! `tf-config:PATH` for a TF_CONFIG cluster. The second argument is the number of steps.
//!
//! `cargo run -p tf-iaware --example own_model -- local:cpu=4 30`
#[allow(dead_code)]
mod model;

use tf_iaware::{Run, Step};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let spec = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "local:cpu=4".into());
    let steps: usize = std::env::args().nth(2).map_or(Ok(30), |s| s.parse())?;
    let m = model::build()?;
    let (xs, ys) = model::batch(1);

    // tf-iaware, ten lines: connect, describe the step, place, train, verify.
    let cluster = tf_iaware::connect(&spec)?;
    let step = Step::new().target(&m.train).fetch(&m.loss);
    for strategy in ["heft", "round-robin"] {
        let plan = cluster.place(&*m.scope.graph(), &step, strategy)?;
        let session = plan.session()?;
        session.run(Run::new().target(&m.init))?;
        let feeds = || Run::of(&step).feed(&m.x, &xs).feed(&m.labels, &ys);
        let losses = (0..steps)
            .map(|_| session.run(feeds())?.scalar::<f32>(&m.loss))
            .collect::<tf_iaware::Result<Vec<f32>>>()?;
        let check = session.verify(&session.run(feeds().traced())?)?;

        // Everything below is printing; a two-output op's second output (int32 indices):
        let mut top = session.run(Run::new().feed(&m.x, &xs).fetch("top2:1"))?;
        let classes = top.get::<i32>("top2:1")?;
        println!(
            "{strategy}: predicted {:.2} ms on {} devices; loss {:.4} -> {:.4} over {} steps; \
             {} placed ops verified, {} mismatches; top-2 classes of sample 0: {:?}",
            plan.report().predicted_step_ms,
            plan.report().devices.values().filter(|d| d.ops > 0).count(),
            losses.first().copied().unwrap_or(f32::NAN),
            losses.last().copied().unwrap_or(f32::NAN),
            losses.len(),
            check.checked,
            check.mismatches.len(),
            &classes[..2],
        );
    }
    Ok(())
}

//! What one checkpoint of ResNet-20 (batch 64; 130 variables and momentum slots, 2.1 MiB) costs
//! on this machine: `write_bundle` alone (a fresh `SaveV2` session each time), `CheckpointDir::save`
//! (cached session, temporary directory, fsync, rename, prune, state file) and `load_latest`.
//!
//! ```text
//! cargo run --release -p tf-iaware --example checkpoint_cost
//! ```

use std::time::Instant;
use tf_iaware::durable::{read_variables, write_bundle};
use tf_iaware::tensorflow::{Session, SessionOptions, SessionRunArgs};
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let m = tf_iaware::models::build("resnet20", 64, 1)?;
    let mut graph = m.net.into_graph();
    let session = Session::new(&SessionOptions::new(), &graph)?;
    let mut init = SessionRunArgs::new();
    init.add_target(&graph.operation_by_name_required("init")?);
    session.run(&mut init)?;
    let tensors = read_variables(&mut graph, &session)?;
    let dir = tempfile::tempdir()?;
    let mut wb = Vec::new();
    for s in 0..9u64 {
        let t = Instant::now();
        write_bundle(&dir.path().join(format!("raw{s}")), &tensors)?;
        wb.push(t.elapsed().as_secs_f64() * 1e3);
    }
    wb.sort_by(f64::total_cmp);
    println!("write_bundle: median {:.1} ms min {:.1}", wb[4], wb[0]);
    let ck = tf_iaware::durable::CheckpointDir::open(dir.path().join("d"), 3)?;
    let mut sv = Vec::new();
    for s in 0..9u64 {
        let t = Instant::now();
        ck.save(&tf_iaware::durable::TrainState::at_step(s), &tensors)?;
        sv.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let first = sv[0];
    sv.sort_by(f64::total_cmp);
    println!(
        "CheckpointDir::save: first {first:.1} ms, median {:.1} ms min {:.1}",
        sv[4], sv[0]
    );
    let mut ld = Vec::new();
    for _ in 0..5 {
        let t = Instant::now();
        ck.load_latest()?;
        ld.push(t.elapsed().as_secs_f64() * 1e3);
    }
    ld.sort_by(f64::total_cmp);
    println!("CheckpointDir::load_latest: median {:.1} ms", ld[2]);
    Ok(())
}

//! Starts an emulated scenario, lists its devices, trains a few data-parallel steps with both
//! strategies and tears everything down: `cargo run -p tf-iaware-emulate --example emulated_smoke -- \
//! /path/to/tf-iaware paper mlp`.
use tf_iaware::cluster::connect_tf_config;
use tf_iaware::models::replicated;
use tf_iaware::parallel;
use tf_iaware::runtime::calibrate::WorkerProbe;
use tf_iaware::runtime::data_parallel;
use tf_iaware_emulate::{EmulatedCluster, Scenario};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let exe = std::path::PathBuf::from(&args[1]);
    let scenario = Scenario::parse(args.get(2).map_or("paper", String::as_str))?;
    let model = args.get(3).map_or("mlp", String::as_str);
    let batch: usize = args.get(4).and_then(|b| b.parse().ok()).unwrap_or(64);
    let t = std::time::Instant::now();
    let cluster = EmulatedCluster::start(&scenario, &exe)?;
    println!(
        "started in {:?}: {:?}",
        t.elapsed(),
        cluster.tf_config().cluster
    );
    let (devices, mut config) = connect_tf_config(cluster.tf_config())?;
    config.isolate_state = true;
    let (workers, ps) = data_parallel::worker_and_ps_devices(&devices)?;
    let vars = replicated::variables(model)?;
    let stock = parallel::replica_setter(&workers, &ps, &vars, batch)?;
    let r = data_parallel::train(model, &stock, &devices, &config, 1, 0, 1)?;
    println!("replica-setter: {:.1} ms", r.step_ms.median);
    let probe = WorkerProbe {
        batch: 8,
        min_seconds: 1.0,
        global_batch: Some(batch),
    };
    let cal = data_parallel::calibrate_workers(model, &workers, &ps[0], &devices, &config, probe)?;
    println!(
        "calibration: {:?}",
        cal.iter().map(|c| c.samples_per_sec).collect::<Vec<_>>()
    );
    let ps_cap: Vec<(String, f64)> = ps.iter().map(|p| (p.clone(), 1.0)).collect();
    let ia = parallel::infra_aware(&cal, &ps_cap, &vars, batch, &Default::default())?;
    println!(
        "infra-aware shares: {:?}",
        ia.replicas.iter().map(|r| r.batch).collect::<Vec<_>>()
    );
    let r = data_parallel::train(model, &ia, &devices, &config, 3, 1, 1)?;
    println!("infra-aware: {:.1} ms", r.step_ms.median);
    Ok(())
}

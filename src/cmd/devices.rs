//! `tf-iaware devices`: the devices of a cluster.

use anyhow::Result;
use serde::Serialize;

use crate::common;

#[derive(clap::Args)]
pub struct Args {
    /// Cluster spec: local, local:cpu=N, tf-config[:PATH], emulated:SCENARIO.
    #[arg(long, default_value = "local")]
    cluster: String,
    /// Print one JSON document on stdout.
    #[arg(long)]
    json: bool,
    /// Time a MatMul micro-benchmark on every device through TensorFlow, store the fitted
    /// FLOP/s (cached per host and cluster, reused by place/simulate/run for 7 days) and show them.
    #[arg(long)]
    calibrate: bool,
}

#[derive(Serialize)]
struct Listing<'a> {
    cluster: &'a str,
    tensorflow: String,
    library: String,
    devices: &'a [tf_iaware::cluster::Device],
}

impl Args {
    /// Whether the command starts an emulated cluster (and so needs signal teardown).
    pub fn emulated(&self) -> bool {
        self.cluster.starts_with("emulated:")
    }
}

pub fn run(args: &Args) -> Result<()> {
    let mut connection = common::connect(&args.cluster)?;
    if args.calibrate {
        let path = connection.calibrate()?;
        log::info!("calibration stored in {}", path.display());
    }
    let cluster = connection.cluster();
    let (dir, file, _) = tf_iaware::tf::library_location();
    let listing = Listing {
        cluster: &args.cluster,
        tensorflow: tf_iaware::tf::version(),
        library: format!("{dir}/{file}"),
        devices: &cluster.devices,
    };
    if args.json {
        return common::print_json(&listing);
    }
    println!("TensorFlow {} ({})", listing.tensorflow, listing.library);
    println!(
        "{:<48} {:<5} {:>12} {:>12} {:>8}",
        "device", "type", "memory MiB", "GFLOP/s", "avail"
    );
    for d in &cluster.devices {
        let mem = d.memory_bytes.map_or("shared".to_string(), |b| {
            format!("{:.0}", b as f64 / (1u64 << 20) as f64)
        });
        println!(
            "{:<48} {:<5} {:>12} {:>12.1} {:>8.2}",
            d.name,
            d.device_type,
            mem,
            d.peak_flops / 1e9,
            d.availability
        );
    }
    Ok(())
}

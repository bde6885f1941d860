//! `tf-iaware devices`: the devices of a cluster, with capability and live availability.

use anyhow::Result;
use serde::Serialize;
use tf_iaware::runtime::calibrate::{self, CacheStatus, CalibrationOutcome};

use crate::common;

#[derive(clap::Args)]
pub struct Args {
    /// Cluster spec: local, local:cpu=N, tf-config[:PATH], emulated:SCENARIO.
    #[arg(long, default_value = "local")]
    cluster: String,
    /// Print one JSON document on stdout.
    #[arg(long)]
    json: bool,
    /// Calibrate every device through TensorFlow (MatMul rates, op-type costs, links) and cache
    /// the capabilities (per user, host, hardware and TensorFlow version; reused by
    /// place/simulate/run for 7 days) — unless co-tenants are taking much of a device.
    #[arg(long)]
    calibrate: bool,
    /// Drop this cluster's cached calibration and calibrate again.
    #[arg(long)]
    recalibrate: bool,
    /// List the cached calibrations of this user and exit.
    #[arg(long)]
    list_cache: bool,
}

#[derive(Serialize)]
struct Listing<'a> {
    cluster: &'a str,
    tensorflow: String,
    library: String,
    devices: &'a [tf_iaware::cluster::Device],
    /// Whether the cached calibration was used.
    calibration_cache: Option<CacheStatus>,
    /// What `--calibrate` did.
    calibration: Option<CalibrationOutcome>,
    /// Tasks whose live metrics could not be read.
    warnings: Vec<String>,
}

impl Args {
    /// Whether the command starts an emulated cluster (and so needs signal teardown).
    pub fn emulated(&self) -> bool {
        self.cluster.starts_with("emulated:")
    }
}

fn list_cache(json: bool) -> Result<()> {
    let cached = calibrate::list_cached()?;
    if json {
        return common::print_json(&cached);
    }
    outln!(
        "calibration cache: {}",
        calibrate::cache_dir().join("calibration").display()
    )?;
    for p in &cached {
        match &p.error {
            Some(e) => outln!("  {}  unreadable: {e}", p.path.display())?,
            None => outln!(
                "  {}  host {} TF {} format {} taken {} s ago, {} devices, {}",
                p.path.display(),
                p.host,
                p.tf_version,
                p.format,
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs())
                    .saturating_sub(p.created_unix_s),
                p.devices.len(),
                if p.fresh { "fresh" } else { "stale" }
            )?,
        }
    }
    Ok(())
}

pub fn run(args: &Args) -> Result<()> {
    if args.list_cache {
        return list_cache(args.json);
    }
    let mut connection = common::connect(&args.cluster)?;
    let mut outcome = None;
    if args.calibrate || args.recalibrate {
        if args.recalibrate && connection.forget_calibration()? {
            log::info!(
                "dropped {}",
                calibrate::profile_path(connection.cluster()).display()
            );
        }
        let o = connection.calibrate()?;
        match &o.cached {
            Some(p) => log::info!("calibration stored in {} ({:.1} s)", p.display(), o.seconds),
            None => eprintln!("warning: {}", o.warning.as_deref().unwrap_or("not cached")),
        }
        outcome = Some(o);
    }
    let cache = Some(connection.calibration_status().clone());
    let warnings = connection
        .warnings()
        .iter()
        .map(ToString::to_string)
        .collect();
    let cluster = connection.cluster();
    let (dir, file, _) = tf_iaware::runtime::tf::library_location();
    let listing = Listing {
        cluster: &args.cluster,
        tensorflow: tf_iaware::runtime::tf::version(),
        library: format!("{dir}/{file}"),
        devices: &cluster.devices,
        calibration_cache: cache,
        calibration: outcome,
        warnings,
    };
    if args.json {
        return common::print_json(&listing);
    }
    for w in &listing.warnings {
        eprintln!("warning: {w}");
    }
    outln!("TensorFlow {} ({})", listing.tensorflow, listing.library)?;
    if let Some(c) = &listing.calibration_cache {
        match &c.reason {
            None => outln!("capabilities: calibrated (cache hit {})", c.path.display())?,
            Some(r) => outln!("capabilities: nominal or measured now (cache miss: {r})")?,
        }
    }
    outln!(
        "{:<48} {:<5} {:>10} {:>10} {:>6} {:>10} {:>8} {:>8}  source",
        "device",
        "type",
        "memory MiB",
        "cap GF/s",
        "avail",
        "free MiB",
        "cotenant",
        "age s"
    )?;
    let mib = |b: u64| format!("{:.0}", b as f64 / (1u64 << 20) as f64);
    for d in &cluster.devices {
        let mem = d.memory_bytes.map_or("shared".to_string(), mib);
        let free = d.live.free_memory_bytes.map_or("-".to_string(), mib);
        let load = d
            .live
            .cotenant_load
            .map_or("-".to_string(), |l| format!("{l:.2}"));
        let age = d
            .live
            .age_ms
            .map_or("-".to_string(), |a| format!("{:.1}", a as f64 / 1e3));
        outln!(
            "{:<48} {:<5} {:>10} {:>10.1} {:>6.2} {:>10} {:>8} {:>8}  {}",
            d.name,
            d.device_type,
            mem,
            d.peak_flops / 1e9,
            d.availability,
            free,
            load,
            age,
            d.live.source
        )?;
    }
    Ok(())
}

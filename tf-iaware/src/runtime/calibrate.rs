//! Calibration through TensorFlow itself, cached as a [`CalibrationProfile`] (with the TensorFlow
//! version and host) until it is stale. Three measurements per cluster:
//!
//! 1. **compute rate** — a MatMul micro-benchmark of known FLOPs pinned to each device, fitted to a
//!    sustained FLOP/s;
//! 2. **op types** — the [calibration network](crate::models::calibration) trained op by op
//!    (FULL_TRACE step stats) on each device at two batch sizes: per op type a line
//!    `work = intercept + slope × size` ([`OpCostFitter`]); then the device's per-op overhead
//!    (the executor's own time between ops) is the one with which the simulator reproduces the
//!    network's measured step time;
//! 3. **links** — tensors of three sizes produced on one device and consumed on another, timed
//!    against the same consumer on the producing device: `latency + bytes / bandwidth` per
//!    ordered device pair.

use std::path::PathBuf;
use std::time::{SystemTime, UNIX_EPOCH};

use tensorflow::DataType;

use super::config::SessionConfig;
use super::session::PlacedSession;
use super::train::Trainer;
use crate::apply;
use crate::cluster::model::CalibrationProfile;
use crate::cluster::Cluster;
use crate::cost::{Measurements, OpCostFitter};
use crate::error::{Error, Result};
use crate::graph::analyze::analyze_graph;
use crate::models::builder::Net;
use crate::models::calibration;
use crate::placer::Placement;

/// Square MatMul sizes timed on every device.
const SIZES: [i64; 3] = [128, 256, 512];
/// Timed runs per size (the median counts), after one warm-up run.
const RUNS: usize = 5;
/// Untimed, wall-timed and traced training steps of the calibration network per batch size.
const NET_STEPS: (usize, usize, usize) = (2, 5, 3);
/// Tensor sizes `devices --calibrate` times on each link, bytes (float32 tensors).
pub const LINK_BYTES: [u64; 3] = [4 << 10, 256 << 10, 4 << 20];
/// Ordered device pairs timed at most; the rest keep their nominal links.
const MAX_LINKS: usize = 32;
/// A cached profile older than this is recalibrated, seconds (7 days).
pub const MAX_AGE_S: u64 = 7 * 24 * 3600;

fn now_s() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn host() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map_or_else(|_| "unknown".into(), |h| h.trim().to_string())
}

/// Calibrates every device of `cluster` (compute rate, op-type costs, per-op overhead) and its
/// links; see the module documentation.
///
/// # Errors
/// [`Error::TensorFlow`] if a benchmark cannot run; [`Error::Calibration`] if the times do not fit.
pub fn calibrate(cluster: &Cluster, config: &SessionConfig) -> Result<CalibrationProfile> {
    let mut profile = CalibrationProfile::new(&crate::tf::version(), &host(), now_s());
    for device in &cluster.devices {
        let samples = time_matmuls(cluster, config, &device.name)?;
        let fit = profile.add_device_samples(&device.name, &samples)?;
        log::info!(
            "calibration: {}: {:.2} GFLOP/s",
            device.name,
            fit.peak_flops / 1e9
        );
    }
    // The MatMul fit's intercept is the cost of a whole `Session::run` (a round trip through the
    // executor), not of one op inside a step; the network below measures that.
    for d in &mut profile.devices {
        d.op_overhead = None;
    }
    // Op types are fitted against the calibrated rates, so their work scales with them.
    let mut calibrated = cluster.clone();
    profile.apply(&mut calibrated)?;
    let mut fitter = OpCostFitter::new();
    let mut runs = Vec::new();
    for device in &cluster.devices {
        for batch in calibration::BATCHES {
            runs.push(time_network(
                &calibrated,
                config,
                &device.name,
                batch,
                &mut fitter,
            )?);
        }
    }
    profile.op_costs = fitter.fit();
    log::info!(
        "calibration: {} op-type cost lines from {} timed ops",
        profile.op_costs.len(),
        fitter.summary().ops_measured
    );
    // The executor's own time between ops: the per-op overhead that makes the simulator
    // reproduce each device's measured step of the calibration network.
    let mut with_costs = calibrated.clone();
    with_costs.op_costs = profile.op_costs.clone();
    for device in &cluster.devices {
        let mut gaps = runs
            .iter()
            .filter(|r| r.device == device.name)
            .map(|r| r.overhead_to_match(&with_costs))
            .collect::<Result<Vec<f64>>>()?;
        gaps.sort_by(f64::total_cmp);
        let gap = gaps.get(gaps.len() / 2).copied().unwrap_or(0.0);
        if let Some(d) = profile.devices.iter_mut().find(|d| d.name == device.name) {
            d.op_overhead = Some(gap);
        }
        log::info!(
            "calibration: {}: {:.1} µs executor overhead per op",
            device.name,
            gap * 1e6
        );
    }
    calibrate_links(&calibrated, config, &LINK_BYTES, &mut profile)?;
    Ok(profile)
}

/// One timed run of the calibration network on one device.
struct NetworkRun {
    device: String,
    graph: crate::graph::OpGraph,
    /// Ops of the training step.
    step: Vec<bool>,
    /// Median wall time of an untraced step, seconds.
    wall: f64,
}

impl NetworkRun {
    /// The per-op overhead (seconds) with which the simulator, using `cluster`'s figures and
    /// op-type costs, predicts this run's measured step time (0 if it already predicts more).
    fn overhead_to_match(&self, cluster: &Cluster) -> Result<f64> {
        let Some(d) = cluster.index_of(&self.device) else {
            return Ok(0.0);
        };
        let simulated = |overhead: f64| -> Result<f64> {
            let mut c = cluster.clone();
            c.devices[d].op_overhead = overhead;
            // The network ran one op at a time.
            c.devices[d].concurrency = 1;
            let mut cost = crate::cost::CostModel::new(&self.graph, &c)?;
            cost.restrict_to(&self.graph, self.step.clone())?;
            Ok(crate::sim::simulate(&cost, &vec![d; self.graph.len()])?.step_time)
        };
        if simulated(0.0)? >= self.wall {
            return Ok(0.0);
        }
        // The step grows with the overhead: bisect between 0 and the whole step per op.
        let (mut lo, mut hi) = (0.0, self.wall);
        for _ in 0..40 {
            let mid = 0.5 * (lo + hi);
            if simulated(mid)? < self.wall {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        Ok(0.5 * (lo + hi))
    }
}

/// Trains the calibration network at `batch` with every op on `device` and feeds its traced
/// steps to `fitter`; returns the run for the overhead fit.
fn time_network(
    cluster: &Cluster,
    config: &SessionConfig,
    device: &str,
    batch: usize,
    fitter: &mut OpCostFitter,
) -> Result<NetworkRun> {
    let model = calibration::build(batch, 11)?;
    let analyzed = analyze_graph(model.net.graph())?;
    let placement = Placement {
        strategy: "calibration".into(),
        devices: analyzed
            .op_graph
            .nodes()
            .iter()
            .map(|n| (n.name.clone(), device.to_string()))
            .collect(),
    };
    let placed = apply::apply(&analyzed.graph_def, &analyzed.op_graph, cluster, &placement)?;
    // One op at a time, so each op's time is its own, not shared with a concurrent one.
    let sequential = SessionConfig {
        inter_op_threads: 1,
        ..config.clone()
    };
    let trainer = Trainer::new(
        PlacedSession::new(placed.graph, &sequential)?,
        &model.sidecar,
        Some(batch),
        11,
    )?;
    trainer.init()?;
    let (warmup, timed, traced) = NET_STEPS;
    for i in 0..warmup {
        trainer.step(i, false)?;
    }
    let mut walls: Vec<f64> = (0..timed)
        .map(|i| trainer.step(warmup + i, false).map(|(_, ms, _)| ms * 1e-3))
        .collect::<Result<_>>()?;
    walls.sort_by(f64::total_cmp);
    let mut m = Measurements::new();
    for stats in trainer.traced_steps(warmup + timed, traced)? {
        m.add_step_stats(&stats);
    }
    fitter.add(&analyzed.op_graph, cluster, &m)?;
    let g = &analyzed.op_graph;
    let step = g.ancestors(&[
        g.require(&model.sidecar.train, "calibration network")?,
        g.require(&model.sidecar.loss, "calibration network")?,
    ]);
    log::debug!(
        "calibration: {device} batch {batch}: {} op samples, step {:.2} ms",
        m.len(),
        walls[timed / 2] * 1e3
    );
    Ok(NetworkRun {
        device: device.into(),
        step,
        wall: walls[timed / 2],
        graph: analyzed.op_graph,
    })
}

/// Times transfers of tensors of `sizes` bytes (at least two; multiples of 4) between ordered
/// device pairs of `cluster` (at most [`MAX_LINKS`]) — each against the same consumer on the
/// producing device — and records the fitted links in `profile`. A pair whose times do not grow
/// with size (the tensor is handed over, not copied — CPU devices of one process) keeps its
/// nominal link.
///
/// # Errors
/// [`Error::InvalidArgument`] for fewer than two sizes; [`Error::TensorFlow`] if a transfer
/// cannot run.
pub fn calibrate_links(
    cluster: &Cluster,
    config: &SessionConfig,
    sizes: &[u64],
    profile: &mut CalibrationProfile,
) -> Result<()> {
    if sizes.len() < 2 || sizes.iter().any(|&b| b < 4) {
        return Err(Error::InvalidArgument {
            what: "link calibration sizes".into(),
            reason: format!("need two or more sizes of at least 4 bytes, got {sizes:?}"),
        });
    }
    let n = cluster.devices.len();
    let pairs: Vec<(usize, usize)> = (0..n)
        .flat_map(|a| (0..n).filter(move |&b| b != a).map(move |b| (a, b)))
        .collect();
    if pairs.is_empty() {
        return Ok(());
    }
    if pairs.len() > MAX_LINKS {
        log::warn!(
            "calibration: timing {MAX_LINKS} of {} device pairs; the others keep nominal links",
            pairs.len()
        );
    }
    let pairs = &pairs[..pairs.len().min(MAX_LINKS)];
    let names: Vec<&str> = cluster.devices.iter().map(|d| d.name.as_str()).collect();
    // Per device and size a tensor; per (pair or device, size) a consumer reading one element.
    let mut net = Net::new(13);
    let mut sources = Vec::with_capacity(n);
    for (d, name) in names.iter().enumerate() {
        sources.push(net.on_device(Some(name.to_string()), |net| {
            sizes
                .iter()
                .map(|&b| {
                    net.synthetic_input(&format!("link_{d}/source_{b}"), &[b as i64 / 4], false)
                })
                .collect::<Result<Vec<_>>>()
        })?);
    }
    let consumer = |net: &mut Net, on: usize, from: usize, i: usize| {
        net.on_device(Some(names[on].to_string()), |net| {
            let begin = net.const_i32(&format!("link_{from}_{on}/begin_{i}"), &[0])?;
            let one = net.const_i32(&format!("link_{from}_{on}/size_{i}"), &[1])?;
            net.op(
                "Slice",
                &format!("link_{from}_{on}/corner_{i}"),
                &[sources[from][i].clone(), begin, one],
                |d| {
                    d.set_attr_type("T", DataType::Float)?;
                    Ok(d.set_attr_type("Index", DataType::Int32)?)
                },
            )
        })
    };
    let mut local = Vec::with_capacity(n);
    for d in 0..n {
        local.push(
            (0..sizes.len())
                .map(|i| consumer(&mut net, d, d, i))
                .collect::<Result<Vec<_>>>()?,
        );
    }
    let mut remote = Vec::with_capacity(pairs.len());
    for &(a, b) in pairs {
        remote.push(
            (0..sizes.len())
                .map(|i| consumer(&mut net, b, a, i))
                .collect::<Result<Vec<_>>>()?,
        );
    }
    net.on_device(Some(names[0].to_string()), |n| n.init_op())?;
    let analyzed = analyze_graph(net.graph())?;
    let placement = Placement {
        strategy: "calibration".into(),
        devices: net.placement().clone(),
    };
    let placed = apply::apply(&analyzed.graph_def, &analyzed.op_graph, cluster, &placement)?;
    let session = PlacedSession::new(placed.graph, config)?;
    session.run(&[], &[session.op("init", "calibration")?], &[], false)?;
    let median_run = |op: &tensorflow::Operation| -> Result<f64> {
        session.run(&[], &[], std::slice::from_ref(op), false)?;
        let mut t: Vec<f64> = (0..RUNS)
            .map(|_| {
                session
                    .run(&[], &[], std::slice::from_ref(op), false)
                    .map(|r| r.wall.as_secs_f64())
            })
            .collect::<Result<_>>()?;
        t.sort_by(f64::total_cmp);
        Ok(t[RUNS / 2])
    };
    let mut baseline = Vec::with_capacity(n);
    for ops in &local {
        baseline.push(ops.iter().map(&median_run).collect::<Result<Vec<_>>>()?);
    }
    for (&(a, b), ops) in pairs.iter().zip(&remote) {
        let mut samples = Vec::with_capacity(sizes.len());
        for (i, op) in ops.iter().enumerate() {
            let extra = median_run(op)? - baseline[a][i];
            samples.push((sizes[i], extra.max(0.0)));
        }
        match profile.add_link_samples(names[a], names[b], &samples) {
            Ok(fit) => log::info!(
                "calibration: {} → {}: {:.0} µs + {:.1} MB/s",
                names[a],
                names[b],
                fit.link.latency * 1e6,
                fit.link.bandwidth / 1e6
            ),
            Err(e) => log::info!("calibration: keeping the nominal link: {e}"),
        }
    }
    Ok(())
}

/// (FLOPs, seconds) of one MatMul per size on `device`.
fn time_matmuls(
    cluster: &Cluster,
    config: &SessionConfig,
    device: &str,
) -> Result<Vec<(f64, f64)>> {
    let mut net = Net::new(7);
    let sums = net.on_device(Some(device.to_string()), |n| {
        let mut sums = Vec::new();
        for size in SIZES {
            let a = n.synthetic_input(&format!("calibration_{size}/a"), &[size, size], false)?;
            let b = n.synthetic_input(&format!("calibration_{size}/b"), &[size, size], false)?;
            let c = n.op(
                "MatMul",
                &format!("calibration_{size}/matmul"),
                &[a, b],
                |d| {
                    d.set_attr_type("T", DataType::Float)?;
                    d.set_attr_bool("transpose_a", false)?;
                    Ok(d.set_attr_bool("transpose_b", false)?)
                },
            )?;
            // Fetch one element, so the timing is the MatMul's, not a transfer's.
            let c = tensorflow::Output {
                operation: c,
                index: 0,
            };
            let begin = n.const_i32(&format!("calibration_{size}/begin"), &[0, 0])?;
            let one = n.const_i32(&format!("calibration_{size}/size"), &[1, 1])?;
            sums.push(n.op(
                "Slice",
                &format!("calibration_{size}/corner"),
                &[c, begin, one],
                |d| {
                    d.set_attr_type("T", DataType::Float)?;
                    Ok(d.set_attr_type("Index", DataType::Int32)?)
                },
            )?);
        }
        Ok(sums)
    })?;
    net.on_device(Some(device.to_string()), |n| n.init_op())?;
    let analyzed = analyze_graph(net.graph())?;
    let placement = Placement {
        strategy: "calibration".into(),
        devices: net.placement().clone(),
    };
    let placed = apply::apply(&analyzed.graph_def, &analyzed.op_graph, cluster, &placement)?;
    let session = PlacedSession::new(placed.graph, config)?;
    session.run(&[], &[session.op("init", "calibration")?], &[], false)?;
    let mut out = Vec::with_capacity(SIZES.len());
    for (size, op) in SIZES.iter().zip(sums) {
        session.run(&[], &[], std::slice::from_ref(&op), false)?;
        let mut times: Vec<f64> = (0..RUNS)
            .map(|_| {
                session
                    .run(&[], &[], std::slice::from_ref(&op), false)
                    .map(|r| r.wall.as_secs_f64())
            })
            .collect::<Result<_>>()?;
        times.sort_by(f64::total_cmp);
        out.push((2.0 * (*size as f64).powi(3), times[RUNS / 2]));
    }
    Ok(out)
}

/// Where the profile of `cluster` is cached: `$TF_IAWARE_CACHE_DIR` (or `$XDG_CACHE_HOME/tf-iaware`,
/// or `~/.cache/tf-iaware`)`/calibration/<host>-<hash of the device names>.json`.
pub fn profile_path(cluster: &Cluster) -> PathBuf {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    cluster
        .devices
        .iter()
        .map(|d| &d.name)
        .collect::<Vec<_>>()
        .hash(&mut h);
    let root = std::env::var_os("TF_IAWARE_CACHE_DIR")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("XDG_CACHE_HOME").map(|x| PathBuf::from(x).join("tf-iaware")))
        .or_else(|| std::env::var_os("HOME").map(|x| PathBuf::from(x).join(".cache/tf-iaware")))
        .unwrap_or_else(|| PathBuf::from(".tf-iaware-cache"));
    root.join("calibration")
        .join(format!("{}-{:016x}.json", host(), h.finish()))
}

/// Applies the cached profile of `cluster` if there is a fresh one (same TensorFlow version and
/// host, younger than [`MAX_AGE_S`]); returns whether it did.
///
/// # Errors
/// [`Error::Json`] for a cached file that is not a profile; errors of [`CalibrationProfile::apply`].
pub fn apply_cached(cluster: &mut Cluster) -> Result<bool> {
    let path = profile_path(cluster);
    let Ok(text) = std::fs::read_to_string(&path) else {
        return Ok(false);
    };
    let profile = CalibrationProfile::from_json(&text, &path.display().to_string())?;
    if profile.is_stale(now_s(), MAX_AGE_S, &crate::tf::version(), &host()) {
        return Ok(false);
    }
    profile.apply(cluster)?;
    Ok(true)
}

/// Calibrates `cluster`, stores the profile in its cache file and applies it.
///
/// # Errors
/// As [`calibrate`]; [`Error::Io`] if the cache cannot be written.
pub fn calibrate_and_store(cluster: &mut Cluster, config: &SessionConfig) -> Result<PathBuf> {
    let profile = calibrate(cluster, config)?;
    let path = profile_path(cluster);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
    }
    std::fs::write(&path, profile.to_json()?).map_err(|e| Error::io(&path, e))?;
    profile.apply(cluster)?;
    Ok(path)
}

/// Scales each device's compute rate and memory bandwidth so that the cost model's time for one
/// whole training step of `graph` (the ops flagged in `step`, all on that device, one after
/// another) matches what the
/// device measured through TensorFlow: `fixed_ms + batch / samples_per_sec` of its
/// [`WorkerCapacity`] (from the data-parallel calibration). Devices without a capacity keep
/// their figures. Returns the factor applied per device (1 where unchanged).
///
/// # Errors
/// As [`CostModel::new`](crate::cost::CostModel::new); [`Error::Calibration`] for a capacity
/// that is not a positive throughput or a graph with no work.
pub fn scale_to_replicas(
    cluster: &mut Cluster,
    graph: &crate::graph::OpGraph,
    step: &[bool],
    batch: usize,
    capacity: &[crate::parallel::WorkerCapacity],
) -> Result<Vec<f64>> {
    let cost = crate::cost::CostModel::new(graph, cluster)?;
    let mut factors = vec![1.0; cluster.devices.len()];
    for c in capacity {
        let Some(d) = cluster.index_of(&c.device) else {
            continue;
        };
        if !(c.samples_per_sec.is_finite() && c.samples_per_sec > 0.0) {
            return Err(Error::Calibration {
                subject: c.device.clone(),
                reason: format!("throughput {} samples/s is not positive", c.samples_per_sec),
            });
        }
        let measured = (c.fixed_ms.max(0.0) + batch as f64 / c.samples_per_sec * 1e3) * 1e-3;
        let modelled: f64 = (0..graph.len())
            .filter(|&n| step.get(n).copied().unwrap_or(false))
            .map(|n| cost.op_time(n, d))
            .sum();
        if modelled <= 0.0 {
            return Err(Error::Calibration {
                subject: c.device.clone(),
                reason: "the graph has no work to scale against".into(),
            });
        }
        let f = modelled / measured;
        let dev = &mut cluster.devices[d];
        dev.peak_flops *= f;
        dev.memory_bandwidth *= f;
        factors[d] = f;
    }
    Ok(factors)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::Device;
    use crate::graph::{DType, OpGraphBuilder};
    use crate::parallel::WorkerCapacity;

    #[test]
    fn replicas_scale_device_speeds_to_their_measured_throughput() {
        let mut b = OpGraphBuilder::new();
        let x = b.add("x", "Placeholder").unwrap();
        b.output(x, DType::FLOAT, Some(vec![100, 100]));
        let mm = b.add("mm", "MatMul").unwrap();
        b.connect(x, 0, mm);
        b.connect(x, 0, mm);
        b.output(mm, DType::FLOAT, Some(vec![100, 100]));
        let graph = b.build().unwrap();
        let dev = |i: usize| {
            let mut d = Device::nominal(
                &format!("/job:worker/replica:0/task:{i}/device:CPU:0"),
                "CPU",
                None,
                "h",
            );
            d.peak_flops = 1e9;
            d.op_overhead = 0.0;
            d
        };
        let mut cluster = Cluster::new(vec![dev(0), dev(1), dev(2)]);
        // The MatMul (2e6 FLOPs) takes 2 ms at 1 GFLOP/s. Worker 0 measured 4 ms per replica of
        // 10 samples (half the modelled speed), worker 1 1 ms (twice); worker 2 was not timed.
        let caps = [
            WorkerCapacity::rate(&cluster.devices[0].name, 10.0 / 4e-3),
            WorkerCapacity {
                device: cluster.devices[1].name.clone(),
                samples_per_sec: 20.0 / 1e-3,
                fixed_ms: 0.5,
            },
        ];
        let step = vec![true; graph.len()];
        let f = scale_to_replicas(&mut cluster, &graph, &step, 10, &caps).unwrap();
        assert!(
            (f[0] - 0.5).abs() < 1e-9 && (f[1] - 2.0).abs() < 1e-9 && f[2] == 1.0,
            "{f:?}"
        );
        assert!((cluster.devices[1].peak_flops - 2e9).abs() < 1.0);
        let bad = [WorkerCapacity::rate(&cluster.devices[0].name, 0.0)];
        let err = scale_to_replicas(&mut cluster, &graph, &step, 10, &bad).unwrap_err();
        assert!(err.to_string().contains("worker/replica:0/task:0"), "{err}");
    }
}

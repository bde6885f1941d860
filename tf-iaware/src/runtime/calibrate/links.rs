//! Links: tensors produced on one device and consumed on another, timed against the same
//! consumer on the producer, fitted to `latency + bytes / bandwidth`.

use tensorflow::DataType;

use super::RUNS;
use crate::cluster::model::CalibrationProfile;
use crate::cluster::Cluster;
use crate::config::SessionConfig;
use crate::error::{Error, Result};
use crate::graph::analyze::analyze_graph;
use crate::models::builder::Net;
use crate::placer::apply;
use crate::placer::Placement;
use crate::runtime::session::PlacedSession;

/// Tensor sizes `devices --calibrate` times on each link, bytes (float32 tensors).
pub const LINK_BYTES: [u64; 3] = [4 << 10, 256 << 10, 4 << 20];
/// Ordered device pairs timed at most; the rest keep their nominal links.
const MAX_LINKS: usize = 32;

/// Times transfers of tensors of `sizes` bytes (at least two; multiples of 4) between ordered
/// device pairs of `cluster` (at most 32) — each against the same consumer on the
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
    let placement =
        Placement::from_names("calibration", &analyzed.op_graph, cluster, net.placement())?;
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

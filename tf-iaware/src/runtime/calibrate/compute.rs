//! Compute rate: square MatMuls of known FLOPs pinned to a device, timed through a session.

use tensorflow::DataType;

use super::RUNS;
use crate::cluster::Cluster;
use crate::config::SessionConfig;
use crate::error::Result;
use crate::graph::analyze::analyze_graph;
use crate::models::builder::Net;
use crate::placer::apply;
use crate::placer::Placement;
use crate::runtime::session::PlacedSession;

/// Square MatMul sizes timed on every device.
const SIZES: [i64; 3] = [128, 256, 512];

/// (FLOPs, seconds) of one MatMul per size on `device`.
pub(super) fn time_matmuls(
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
    let placement =
        Placement::from_names("calibration", &analyzed.op_graph, cluster, net.placement())?;
    let placed = apply::apply(&analyzed.graph_def, &analyzed.op_graph, cluster, &placement)?;
    let session = PlacedSession::new(placed.graph, config)?;
    session.run(&[], &[session.op("init", "calibration")?], &[], false)?;
    for op in &sums {
        session.run(&[], &[], std::slice::from_ref(op), false)?;
    }
    // Interleaved: one run of each size in turn, round after round, so a change of load on a
    // shared machine falls on every size alike instead of on whichever was being timed.
    let mut times = vec![Vec::with_capacity(RUNS); SIZES.len()];
    for _ in 0..RUNS {
        for (k, op) in sums.iter().enumerate() {
            let run = session.run(&[], &[], std::slice::from_ref(op), false)?;
            times[k].push(run.wall.as_secs_f64());
        }
    }
    Ok(SIZES
        .iter()
        .zip(times)
        .map(|(size, mut t)| {
            t.sort_by(f64::total_cmp);
            (2.0 * (*size as f64).powi(3), t[RUNS / 2])
        })
        .collect())
}

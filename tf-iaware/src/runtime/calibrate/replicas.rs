//! Device speeds from whole-replica timings: the data-parallel calibration's samples/s and fixed
//! cost per worker, turned into the cost model's compute rates.

use crate::cluster::Cluster;
use crate::error::{Error, Result};

/// Scales each device's compute rate and memory bandwidth so that the cost model's time for one
/// whole training step of `graph` (the ops flagged in `step`, all on that device, one after
/// another) matches what the
/// device measured through TensorFlow: `fixed_ms + batch / samples_per_sec` of its
/// [`WorkerCapacity`](crate::parallel::WorkerCapacity) (from the data-parallel calibration). Devices without a capacity keep
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
        let modelled: f64 = graph
            .node_ids()
            .filter(|&n| step.get(n.index()).copied().unwrap_or(false))
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
                ..WorkerCapacity::default()
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

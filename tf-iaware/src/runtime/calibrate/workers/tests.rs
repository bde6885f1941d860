use super::*;
use crate::cluster::Device;
use crate::parallel::WorkerCapacity;

#[test]
fn a_throughput_beyond_the_workers_cores_is_capped_at_the_probe_batch() {
    let mut d = Device::nominal(
        "/job:worker/replica:0/task:0/device:CPU:0",
        "CPU",
        None,
        "h",
    );
    d.live.allotment = Some(0.5);
    let mut gpu = Device::nominal(
        "/job:worker/replica:0/task:1/device:GPU:0",
        "GPU",
        None,
        "h",
    );
    gpu.live.allotment = Some(1.0);
    let cluster = Cluster::new(vec![d.clone(), gpu.clone()]);
    let degenerate = |dev: &Device| WorkerCapacity {
        fixed_ms: 9.0,
        ..WorkerCapacity::rate(&dev.name, 1e9)
    };
    let mut caps = vec![degenerate(&d), degenerate(&gpu)];
    let workload = Workload::from("mlp");
    let per_sample = workload.flops_per_sample().unwrap();
    bound_by_cores(&mut caps, &workload, &cluster, 12);
    let max = 0.5 * crate::cluster::calibration::MAX_CPU_CORE_FLOPS / per_sample;
    assert!((caps[0].samples_per_sec - max).abs() < 1e-6, "{caps:?}");
    let step = |c: &WorkerCapacity| c.step_ms(12);
    assert!((step(&caps[0]) - step(&degenerate(&d))).abs() < 1e-9);
    assert_eq!(caps[1], degenerate(&gpu), "no CPU-core bound on a GPU");
}

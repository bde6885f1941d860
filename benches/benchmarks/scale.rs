//! Planning at datacenter scale, on synthetic clusters (issue 15 targets): data-parallel
//! planning for 1,000 workers (target ≤ 50 ms), HEFT and m-ETF for 10,000 ops × 1,000 devices
//! (target ≤ 1 s each); and the peak heap of each, printed for op and device counts apart so
//! that its growth can be read (target: linear in ops + devices).

use std::hint::black_box;

use criterion::{criterion_group, BenchmarkId, Criterion, Throughput};
use tf_iaware::cluster::SyntheticSpec;
use tf_iaware::cost::CostModel;
use tf_iaware::parallel::DataParallelStrategy;
use tf_iaware::placer::{etf_schedule, heft_schedule};
use tf_iaware::sim::data_parallel::{self, DpWorkload};
use tf_iaware::sim::synthetic::LayeredDag;

use super::alloc::peak_during;

/// The cluster with `workers` workers.
fn spec(workers: usize, ps: usize) -> SyntheticSpec {
    SyntheticSpec::parse(&format!(
        "synthetic:workers={workers}:ps={ps}:avail=beta(2,2):cap=lognormal(0,0.5):net=10gbit/50us"
    ))
    .expect("the spec is valid")
}

fn data_parallel_planning(c: &mut Criterion) {
    let mut group = c.benchmark_group("scale-dp");
    group.sample_size(20);
    let workload = DpWorkload::resnet20();
    for workers in [64usize, 1000] {
        let cluster = spec(workers, workers.div_ceil(64)).build();
        let caps = data_parallel::worker_capacities(&cluster, &workload);
        let batch = 32 * workers;
        group.throughput(Throughput::Elements(workers as u64));
        for planner in DataParallelStrategy::all() {
            let (peak, _) = peak_during(|| {
                data_parallel::plan(planner, &cluster, &caps, &workload, batch).expect("plans")
            });
            eprintln!(
                "scale-dp/{planner}/{workers}-workers: peak heap {:.2} MiB ({:.0} B/worker)",
                peak as f64 / 1048576.0,
                peak as f64 / workers as f64
            );
            group.bench_with_input(
                BenchmarkId::new(planner.name(), format!("{workers}-workers")),
                &workers,
                |b, _| {
                    b.iter(|| {
                        black_box(
                            data_parallel::plan(planner, &cluster, &caps, &workload, batch)
                                .expect("plans"),
                        )
                    })
                },
            );
        }
    }
    group.finish();
}

/// (ops, devices) of the per-op cases; the last is the target.
const PER_OP: &[(usize, usize)] = &[(10_000, 64), (10_000, 256), (10_000, 1000)];

fn per_op_planning(c: &mut Criterion) {
    let mut group = c.benchmark_group("scale-per-op");
    group.sample_size(10);
    for &(ops, devices) in PER_OP {
        let graph = LayeredDag::new(ops, 100).build().expect("valid DAG");
        let cluster = spec(devices, 1).build().cluster;
        let cost = CostModel::new(&graph, &cluster).expect("valid cluster");
        let name = format!("{}k-ops-{}-dev", ops / 1000, cluster.devices.len());
        group.throughput(Throughput::Elements(ops as u64));
        group.bench_with_input(BenchmarkId::new("heft", &name), &ops, |b, _| {
            b.iter(|| black_box(heft_schedule(&graph, &cluster, &cost).expect("feasible")))
        });
        group.bench_with_input(BenchmarkId::new("etf", &name), &ops, |b, _| {
            b.iter(|| black_box(etf_schedule(&graph, &cluster, &cost).expect("feasible")))
        });
    }
    group.finish();
}

/// Peak heap of the cost model and of each scheduler, by ops (64 devices) and by devices
/// (10k ops): printed, not timed.
fn memory(_c: &mut Criterion) {
    let mib = |b: usize| b as f64 / 1048576.0;
    for &(ops, devices) in &[
        (1_000usize, 64usize),
        (10_000, 64),
        (100_000, 64),
        (10_000, 256),
        (10_000, 1000),
    ] {
        let graph = LayeredDag::new(ops, ((ops as f64).sqrt() as usize).max(1))
            .build()
            .expect("valid DAG");
        let cluster = spec(devices, 1).build().cluster;
        let (model_peak, cost) =
            peak_during(|| CostModel::new(&graph, &cluster).expect("valid cluster"));
        let (heft_peak, _) = peak_during(|| heft_schedule(&graph, &cluster, &cost).expect("ok"));
        let (etf_peak, _) = peak_during(|| etf_schedule(&graph, &cluster, &cost).expect("ok"));
        let n = cluster.devices.len();
        eprintln!(
            "scale-memory/{ops}-ops-{n}-dev: peak heap cost model {:.1} MiB, heft {:.1} MiB \
             ({:.0} B/op), etf {:.1} MiB ({:.0} B/op)",
            mib(model_peak),
            mib(heft_peak),
            heft_peak as f64 / ops as f64,
            mib(etf_peak),
            etf_peak as f64 / ops as f64,
        );
    }
}

criterion_group!(benches, data_parallel_planning, per_op_planning, memory);

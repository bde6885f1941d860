//! Simulator speed: one step of a 10,000-op graph placed by HEFT (few, local transfers) and at
//! random (many transfers sharing links) on 64 devices (target under 20 ms), the lower bound, and
//! building the cost model.

use std::hint::black_box;

use criterion::{criterion_group, BenchmarkId, Criterion, Throughput};
use tf_iaware::cost::CostModel;
use tf_iaware::placer::{self, heft_schedule, resolve, Strategy};
use tf_iaware::sim::{lower_bound, simulate};

use super::{problem, Case};

const CASES: &[Case] = &[
    Case {
        name: "10k-ops-64-dev",
        ops: 10_000,
        width: 100,
        devices: 64,
    },
    Case {
        name: "100k-ops-64-dev",
        ops: 100_000,
        width: 316,
        devices: 64,
    },
];

fn simulator(c: &mut Criterion) {
    let mut group = c.benchmark_group("simulator");
    group.sample_size(20);
    for case in CASES {
        let (graph, cluster, cost) = problem(case);
        let heft = heft_schedule(&graph, &cluster, &cost)
            .expect("the synthetic problem is feasible")
            .device;
        let placement = placer::Random { seed: 1 }
            .place_with_cost(&graph, &cluster, &cost)
            .expect("the synthetic problem is feasible");
        let random = resolve::assignment(&graph, &cluster, &placement)
            .expect("the placement names devices of the cluster");
        group.throughput(Throughput::Elements(case.ops as u64));
        for (name, assignment) in [("heft-placed", &heft), ("random-placed", &random)] {
            group.bench_with_input(BenchmarkId::new(name, case.name), case, |b, _| {
                b.iter(|| black_box(simulate(&cost, assignment).expect("a valid assignment")))
            });
        }
        group.bench_with_input(BenchmarkId::new("lower-bound", case.name), case, |b, _| {
            b.iter(|| black_box(lower_bound(&cost)))
        });
        group.bench_with_input(BenchmarkId::new("cost-model", case.name), case, |b, _| {
            b.iter(|| black_box(CostModel::new(&graph, &cluster).expect("a valid cluster")))
        });
    }
    group.finish();
}

criterion_group!(benches, simulator);

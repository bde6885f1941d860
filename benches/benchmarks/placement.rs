//! Placement speed: HEFT and m-ETF on synthetic layered DAGs (targets: 10,000 ops × 64 devices
//! under 50 ms, 100,000 ops under 1 s, memory linear in ops), and the full `heft` strategy
//! including the op-name → device map it returns.

use std::hint::black_box;

use criterion::{criterion_group, BenchmarkId, Criterion, Throughput};
use tf_iaware::placer::{self, etf_schedule, heft_schedule};

use super::alloc::peak_during;
use super::{problem, Case};

const CASES: &[Case] = &[
    Case {
        name: "1k-ops-16-dev",
        ops: 1_000,
        width: 32,
        devices: 16,
    },
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

fn placement(c: &mut Criterion) {
    let mut group = c.benchmark_group("placement");
    group.sample_size(10);
    for case in CASES {
        let (graph, cluster, cost) = problem(case);
        let feasible = "the synthetic problem is feasible";
        let (heft_peak, _) =
            peak_during(|| heft_schedule(&graph, &cluster, &cost).expect(feasible));
        let (etf_peak, _) = peak_during(|| etf_schedule(&graph, &cluster, &cost).expect(feasible));
        eprintln!(
            "placement/{}: peak heap heft {:.1} MiB ({:.0} B/op), etf {:.1} MiB ({:.0} B/op)",
            case.name,
            heft_peak as f64 / 1048576.0,
            heft_peak as f64 / case.ops as f64,
            etf_peak as f64 / 1048576.0,
            etf_peak as f64 / case.ops as f64,
        );
        group.throughput(Throughput::Elements(case.ops as u64));
        group.bench_with_input(BenchmarkId::new("heft", case.name), case, |b, _| {
            b.iter(|| black_box(heft_schedule(&graph, &cluster, &cost).expect(feasible)))
        });
        group.bench_with_input(BenchmarkId::new("etf", case.name), case, |b, _| {
            b.iter(|| black_box(etf_schedule(&graph, &cluster, &cost).expect(feasible)))
        });
        if case.ops <= 10_000 {
            let heft = placer::by_name("heft").expect("heft is a strategy");
            group.bench_with_input(
                BenchmarkId::new("heft-placement", case.name),
                case,
                |b, _| {
                    b.iter(|| {
                        black_box(
                            heft.place_with_cost(&graph, &cluster, &cost)
                                .expect(feasible),
                        )
                    })
                },
            );
        }
    }
    group.finish();
}

criterion_group!(benches, placement);

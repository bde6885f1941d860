//! Criterion benchmarks of the pure core: placement speed (HEFT, m-ETF on synthetic layered DAGs),
//! the step simulator, and planning on synthetic clusters of up to 1,000 workers (`scale`). Run
//! with `cargo bench --bench bench_main` (add `-- --quick` for a short run). The groups live in `benchmarks/`; the placement group also prints the peak heap
//! each scheduler uses, through the counting allocator below.

mod benchmarks;

#[global_allocator]
static ALLOC: benchmarks::alloc::Counting = benchmarks::alloc::Counting;

criterion::criterion_main!(
    benchmarks::placement::benches,
    benchmarks::simulator::benches,
    benchmarks::scale::benches
);

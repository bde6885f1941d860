//! Interleaved A/B timing of the refactored core paths: a = tf-iaware-core at BEFORE,
//! b = at AFTER (see ../run.sh). Each round times every case once on a then once on b (order alternating
//! by round); prints per-case medians and the median of the per-round b/a ratios.
use std::hint::black_box;
use std::time::Instant;

macro_rules! cases {
    ($k:ident) => {{
        use $k::cost::CostModel;
        use $k::placer::etf_schedule;
        use $k::sim::simulate;
        use $k::sim::synthetic::{cluster, LayeredDag};
        let g = LayeredDag::new(10_000, 100).build().unwrap();
        let c16 = cluster(16, 8, 1);
        let c64 = cluster(64, 8, 1);
        let m16 = CostModel::new(&g, &c16).unwrap();
        let m64 = CostModel::new(&g, &c64).unwrap();
        let s64 = etf_schedule(&g, &c64, &m64).unwrap();
        let mut out: Vec<(&'static str, f64)> = Vec::new();
        let t = Instant::now();
        black_box(CostModel::new(&g, &c64).unwrap());
        out.push(("CostModel::new 10k ops x 64 dev", t.elapsed().as_secs_f64()));
        let t = Instant::now();
        black_box(etf_schedule(&g, &c16, &m16).unwrap());
        out.push(("etf 10k ops x 16 dev (by_timeline)", t.elapsed().as_secs_f64()));
        let t = Instant::now();
        black_box(etf_schedule(&g, &c64, &m64).unwrap());
        out.push(("etf 10k ops x 64 dev (by_op)", t.elapsed().as_secs_f64()));
        let t = Instant::now();
        black_box(simulate(&m64, &s64.device).unwrap());
        out.push(("simulate 10k ops x 64 dev", t.elapsed().as_secs_f64()));
        out
    }};
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let rounds: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(15);
    let mut a: Vec<Vec<f64>> = Vec::new();
    let mut b: Vec<Vec<f64>> = Vec::new();
    let mut names = Vec::new();
    for r in 0..rounds {
        let (x, y) = if r % 2 == 0 {
            let x = cases!(core_a);
            (x, cases!(core_b))
        } else {
            let y = cases!(core_b);
            (cases!(core_a), y)
        };
        names = x.iter().map(|(n, _)| *n).collect();
        a.push(x.iter().map(|p| p.1).collect());
        b.push(y.iter().map(|p| p.1).collect());
    }
    println!("| case | before (ms, median) | after (ms, median) | after/before (median of {rounds} per-round ratios) |");
    println!("|---|---|---|---|");
    for (i, n) in names.iter().enumerate() {
        let ma = median(a.iter().map(|r| r[i]).collect()) * 1e3;
        let mb = median(b.iter().map(|r| r[i]).collect()) * 1e3;
        let ratio = median(a.iter().zip(&b).map(|(x, y)| y[i] / x[i]).collect());
        println!("| {n} | {ma:.1} | {mb:.1} | {ratio:.3} |");
    }
}

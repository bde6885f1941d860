//! `bench --simulate` and `bench --scale-study`: the planners on synthetic clusters, by
//! simulation only (no TensorFlow session, no worker processes) — thin callers of
//! [`tf_iaware::scale`].

use anyhow::{bail, Result};
use serde::Serialize;
use tf_iaware::cluster::{ClusterSpec, SyntheticSpec};
use tf_iaware::limits;
use tf_iaware::scale::{self, Growth, Planner, StudyOptions, StudyRow};
use tf_iaware::sim::data_parallel::DpWorkload;

use super::svg::{escape, COLORS};
use super::Args;
use crate::common::count;

/// Flags of the simulated modes.
#[derive(clap::Args)]
pub struct SimFlags {
    /// Plan and simulate only, on the synthetic cluster `--sim-cluster`: the data-parallel
    /// planners (replica-setter, infra-aware, sync-backup with --backup-workers, async-ps,
    /// infra-aware-async) and the per-op strategies of --strategies, no TensorFlow session, no
    /// workers.
    #[arg(long, conflicts_with = "scale_study")]
    pub simulate: bool,
    /// The scale study by simulation: data-parallel planners over --study-workers, per-op
    /// strategies over --study-ops (on 64 devices) and over --study-workers devices (10k ops);
    /// --json writes one row per (planner, size), --svg the cost growth on log axes.
    #[arg(long)]
    pub scale_study: bool,
    /// Synthetic cluster of --simulate (and the distributions and links of --scale-study).
    #[arg(
        long,
        value_name = "SPEC",
        default_value = "synthetic:workers=1000:ps=16:avail=beta(2,2):cap=lognormal(0,0.5):net=10gbit/50us"
    )]
    pub sim_cluster: String,
    /// Ops of the synthetic layered DAG the per-op strategies place (--simulate).
    #[arg(long, default_value_t = 10_000, value_parser = count::<1, { limits::MAX_OPS }>)]
    pub ops: usize,
    /// Global batch per worker of the data-parallel planners (--simulate, --scale-study).
    #[arg(long, default_value_t = 32, value_parser = count::<1, { limits::MAX_BATCH }>)]
    pub batch_per_worker: usize,
    /// Worker counts of --scale-study.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "4,16,64,256,1000",
        value_parser = count::<1, { limits::MAX_WORKERS }>
    )]
    pub study_workers: Vec<usize>,
    /// Op counts of --scale-study.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "1000,3000,10000,30000,100000",
        value_parser = count::<1, { limits::MAX_OPS }>
    )]
    pub study_ops: Vec<usize>,
}

impl SimFlags {
    /// Whether a simulated mode was asked for.
    pub fn active(&self) -> bool {
        self.simulate || self.scale_study
    }
}

/// The synthetic spec of `--sim-cluster`.
fn spec(text: &str) -> Result<SyntheticSpec> {
    match ClusterSpec::parse(text)? {
        ClusterSpec::Synthetic(s) => Ok(SyntheticSpec::parse(&s)?),
        other => bail!("--sim-cluster must be a synthetic:… spec, not `{other}`"),
    }
}

#[derive(Serialize)]
struct SimulatedReport<'a> {
    cluster: String,
    model: &'a str,
    ops: usize,
    rows: &'a [StudyRow],
}

pub fn run(args: &Args, flags: &SimFlags) -> Result<()> {
    let base = spec(&flags.sim_cluster)?;
    if flags.batch_per_worker == 0 || flags.ops == 0 {
        bail!("--batch-per-worker and --ops must be at least 1");
    }
    if args.model != "resnet20" || args.graph.is_some() {
        bail!("the simulated modes model ResNet-20 only (leave --model and --graph out)");
    }
    let workload = DpWorkload::resnet20();
    let repeats = args.repeats.max(1);
    if flags.scale_study {
        let (mut dp, mut per_op) = (Vec::new(), Vec::new());
        for s in planners(&args.strategies)? {
            match s {
                Planner::DataParallel(s) => dp.push(s),
                Planner::PerOp(s) => per_op.push(s),
            }
        }
        let options = StudyOptions {
            workers: flags.study_workers.clone(),
            ops: flags.study_ops.clone(),
            dp_planners: dp,
            per_op,
            base,
            batch_per_worker: flags.batch_per_worker,
            workload,
            repeats,
            backups: args.backup_workers,
            ..StudyOptions::default()
        };
        outln!("{}", header())?;
        let mut printed = Ok(());
        let study = scale::run(&options, &mut |r| {
            if printed.is_ok() {
                printed = outln!("{}", line(r));
            }
        })?;
        printed?;
        outln!()?;
        for g in &study.growth {
            outln!(
                "{:<16} plan time ∝ {}^{:.2} ({} points)",
                g.planner,
                g.sweep,
                g.exponent,
                g.points
            )?;
        }
        if let Some(path) = &args.json {
            crate::common::write_file(path, &(serde_json::to_string_pretty(&study)? + "\n"))?;
        }
        if let Some(path) = &args.svg {
            crate::common::write_file(path, &growth_chart(&study.rows, &study.growth))?;
        }
        return Ok(());
    }
    let cluster = base.build();
    let batch = cluster.workers.len() * flags.batch_per_worker;
    eprintln!(
        "{}: {} workers, {} ps; global batch {batch}; per-op strategies on a {}-op layered DAG",
        base,
        cluster.workers.len(),
        cluster.ps.len(),
        flags.ops
    );
    let rows = scale::compare(
        &cluster,
        &planners(&args.strategies)?,
        &workload,
        batch,
        args.backup_workers,
        flags.ops,
        repeats,
    )?;
    outln!("{}", header())?;
    for r in &rows {
        outln!("{}", line(r))?;
    }
    if let Some(path) = &args.json {
        let report = SimulatedReport {
            cluster: base.to_string(),
            model: &workload.name,
            ops: flags.ops,
            rows: &rows,
        };
        crate::common::write_file(path, &(serde_json::to_string_pretty(&report)? + "\n"))?;
    }
    Ok(())
}

/// `--strategies` as the library's planners (their names were checked when the flags were
/// parsed).
fn planners(names: &[String]) -> Result<Vec<Planner>> {
    Ok(names
        .iter()
        .map(|s| s.parse())
        .collect::<std::result::Result<_, _>>()?)
}

/// Column heads; `step ms` of an asynchronous plan (mode `async`) is the time the cluster takes
/// to process one global batch of samples, and `images/s` the samples whose gradients are
/// applied per second (throughput, not time to accuracy: asynchronous gradients are stale).
fn header() -> String {
    format!(
        "{:<18} {:<8} {:<6} {:>7} {:>8} {:>10} {:>12} {:>12} {:>7} {:>10} {:>13}",
        "planner",
        "sweep",
        "mode",
        "workers",
        "ops",
        "plan ms",
        "step ms",
        "bound ms",
        "ratio",
        "images/s",
        "workers used"
    )
}

fn line(r: &StudyRow) -> String {
    format!(
        "{:<18} {:<8} {:<6} {:>7} {:>8} {:>10.2} {:>12.2} {:>12.2} {:>7.3} {:>10} {:>6} ({:>3.0} %)",
        r.planner,
        r.sweep,
        r.mode.as_deref().unwrap_or("-"),
        r.workers,
        r.ops.map_or("-".to_string(), |o| o.to_string()),
        r.plan_ms,
        r.predicted_step_ms,
        r.lower_bound_ms,
        r.ratio_to_lower_bound,
        r.images_per_sec
            .map_or("-".to_string(), |v| format!("{v:.0}")),
        r.workers_used,
        r.share_used * 100.0
    )
}

/// One line of a chart: its label, its colour's index and its (size, ms) points.
type Series = (String, usize, Vec<(f64, f64)>);

const PANEL_W: f64 = 420.0;
const PANEL_H: f64 = 320.0;
const MARGIN: f64 = 60.0;

/// Powers of ten covering `lo..=hi` (both positive).
fn decades(lo: f64, hi: f64) -> (f64, f64) {
    (
        lo.log10().floor(),
        hi.log10().ceil().max(lo.log10().floor() + 1.0),
    )
}

/// One log-log panel at `(x0, y0)`: plan time against size, a line per planner.
fn panel(x0: f64, y0: f64, title: &str, x_label: &str, series: &[Series]) -> String {
    let pts = series.iter().flat_map(|s| s.2.iter());
    let (xs, ys): (Vec<f64>, Vec<f64>) = pts.cloned().unzip();
    if xs.is_empty() {
        return String::new();
    }
    let (x_lo, x_hi) = decades(
        xs.iter().cloned().fold(f64::INFINITY, f64::min),
        xs.iter().cloned().fold(0.0, f64::max),
    );
    let (y_lo, y_hi) = decades(
        ys.iter().cloned().fold(f64::INFINITY, f64::min),
        ys.iter().cloned().fold(0.0, f64::max),
    );
    let (w, h) = (PANEL_W - MARGIN - 10.0, PANEL_H - MARGIN - 40.0);
    let px = |x: f64| x0 + MARGIN + w * (x.log10() - x_lo) / (x_hi - x_lo);
    let py = |y: f64| y0 + 40.0 + h - h * (y.log10() - y_lo) / (y_hi - y_lo);
    let mut s = format!(
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\" font-size=\"13\">{}</text>\n",
        x0 + MARGIN + w / 2.0,
        y0 + 24.0,
        escape(title)
    );
    for e in (x_lo as i32)..=(x_hi as i32) {
        let x = px(10f64.powi(e));
        s += &format!(
            "<line x1=\"{x:.1}\" y1=\"{:.1}\" x2=\"{x:.1}\" y2=\"{:.1}\" stroke=\"#ddd\"/>\
             <text x=\"{x:.1}\" y=\"{:.1}\" text-anchor=\"middle\">1e{e}</text>\n",
            y0 + 40.0,
            y0 + 40.0 + h,
            y0 + 40.0 + h + 16.0
        );
    }
    for e in (y_lo as i32)..=(y_hi as i32) {
        let y = py(10f64.powi(e));
        s += &format!(
            "<line x1=\"{:.1}\" y1=\"{y:.1}\" x2=\"{:.1}\" y2=\"{y:.1}\" stroke=\"#ddd\"/>\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"end\">1e{e}</text>\n",
            x0 + MARGIN,
            x0 + MARGIN + w,
            x0 + MARGIN - 6.0,
            y + 4.0
        );
    }
    s += &format!(
        "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\n\
         <text x=\"{:.1}\" y=\"{:.1}\" transform=\"rotate(-90 {:.1} {:.1})\" text-anchor=\"middle\">time to plan (ms)</text>\n",
        x0 + MARGIN + w / 2.0,
        y0 + PANEL_H - 6.0,
        escape(x_label),
        x0 + 16.0,
        y0 + 40.0 + h / 2.0,
        x0 + 16.0,
        y0 + 40.0 + h / 2.0
    );
    for (k, (label, color, points)) in series.iter().enumerate() {
        let color = COLORS[color % COLORS.len()];
        let path: Vec<String> = points
            .iter()
            .map(|&(x, y)| format!("{:.1},{:.1}", px(x), py(y)))
            .collect();
        s += &format!(
            "<polyline points=\"{}\" fill=\"none\" stroke=\"{color}\" stroke-width=\"2\"/>\n",
            path.join(" ")
        );
        for &(x, y) in points {
            s += &format!(
                "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3\" fill=\"{color}\"/>\n",
                px(x),
                py(y)
            );
        }
        s += &format!(
            "<text x=\"{:.1}\" y=\"{:.1}\" fill=\"{color}\">{}</text>\n",
            x0 + MARGIN + 8.0,
            y0 + 54.0 + 14.0 * k as f64,
            escape(label)
        );
    }
    s
}

/// Time to plan against size on log axes: left, against workers (data-parallel planners) and
/// devices (per-op strategies at a fixed graph); right, against ops (per-op strategies on a
/// fixed cluster). Labels carry the fitted exponents.
pub fn growth_chart(rows: &[StudyRow], growth: &[Growth]) -> String {
    let mut planners: Vec<&str> = Vec::new();
    for r in rows {
        if !planners.contains(&r.planner.as_str()) {
            planners.push(&r.planner);
        }
    }
    let series = |sweeps: &[&str]| -> Vec<Series> {
        let mut out = Vec::new();
        for (color, p) in planners.iter().enumerate() {
            for sweep in sweeps {
                let pts: Vec<(f64, f64)> = rows
                    .iter()
                    .filter(|r| r.planner == *p && r.sweep == *sweep && r.plan_ms > 0.0)
                    .map(|r| (r.size as f64, r.plan_ms))
                    .collect();
                if pts.is_empty() {
                    continue;
                }
                let e = growth
                    .iter()
                    .find(|g| g.planner == *p && g.sweep == *sweep)
                    .map_or(String::new(), |g| format!(", ∝ n^{:.2}", g.exponent));
                out.push((format!("{p} ({sweep}{e})"), color, pts));
            }
        }
        out
    };
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{PANEL_H}\" font-family=\"sans-serif\" font-size=\"11\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
        2.0 * PANEL_W
    );
    s += &panel(
        0.0,
        0.0,
        "planning cost vs workers / devices",
        "workers (devices)",
        &series(&["workers", "devices"]),
    );
    s += &panel(
        PANEL_W,
        0.0,
        "planning cost vs graph size",
        "ops",
        &series(&["ops"]),
    );
    s + "</svg>\n"
}

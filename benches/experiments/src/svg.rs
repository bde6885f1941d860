//! Small SVG charts of benchmark results: median step time per strategy (bars with p10–p90
//! whiskers), step time over steps with and without adaptation, held-out accuracy over training
//! time, and the scale study's planning cost on log axes.

use tf_iaware::sim::scale::{Growth, StudyRow};
use tf_iaware::TrainingReport;

use crate::report::{AdaptationReport, StrategyResult};

const W: f64 = 640.0;
const H: f64 = 360.0;
const LEFT: f64 = 70.0;
const BOTTOM: f64 = 50.0;
const TOP: f64 = 40.0;
const COLORS: [&str; 6] = [
    "#888888", "#2a7ab0", "#d9822b", "#3a9a5b", "#9b59b6", "#c0392b",
];

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

fn frame(title: &str, y_max: f64, body: &str) -> String {
    frame_with(title, y_max, "step time (ms)", body)
}

fn frame_with(title: &str, y_max: f64, y_label: &str, body: &str) -> String {
    let mut s = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{}\" y=\"22\" text-anchor=\"middle\" font-size=\"14\">{}</text>\n",
        W / 2.0,
        escape(title)
    );
    let plot_h = H - TOP - BOTTOM;
    for i in 0..=4 {
        let v = y_max * f64::from(i) / 4.0;
        let y = H - BOTTOM - plot_h * f64::from(i) / 4.0;
        s += &format!(
            "<line x1=\"{LEFT}\" y1=\"{y:.1}\" x2=\"{}\" y2=\"{y:.1}\" stroke=\"#ddd\"/>\
             <text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{v:.0}</text>\n",
            W - 20.0,
            LEFT - 6.0,
            y + 4.0
        );
    }
    s += &format!(
        "<text x=\"16\" y=\"{:.1}\" transform=\"rotate(-90 16 {:.1})\" text-anchor=\"middle\">{}</text>\n",
        H / 2.0,
        H / 2.0,
        escape(y_label)
    );
    s += body;
    s + "</svg>\n"
}

/// Bars: median step time per strategy, whiskers p10–p90.
pub fn strategy_chart(results: &[StrategyResult], scenario: &str, model: &str) -> String {
    let y_max = results.iter().map(|r| r.step_ms.p90).fold(1.0, f64::max) * 1.1;
    let plot_h = H - TOP - BOTTOM;
    let slot = (W - LEFT - 20.0) / results.len().max(1) as f64;
    let y = |v: f64| H - BOTTOM - plot_h * v / y_max;
    let mut body = String::new();
    for (i, r) in results.iter().enumerate() {
        let x = LEFT + slot * i as f64 + slot * 0.2;
        let w = slot * 0.6;
        let color = COLORS[i % COLORS.len()];
        body += &format!(
            "<rect x=\"{x:.1}\" y=\"{:.1}\" width=\"{w:.1}\" height=\"{:.1}\" fill=\"{color}\"/>\n\
             <line x1=\"{:.1}\" y1=\"{:.1}\" x2=\"{:.1}\" y2=\"{:.1}\" stroke=\"black\"/>\n\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{}</text>\n\
             <text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{:.0} ms</text>\n",
            y(r.step_ms.median),
            H - BOTTOM - y(r.step_ms.median),
            x + w / 2.0,
            y(r.step_ms.p10),
            x + w / 2.0,
            y(r.step_ms.p90),
            x + w / 2.0,
            H - BOTTOM + 18.0,
            escape(&r.strategy),
            x + w / 2.0,
            y(r.step_ms.median) - 6.0,
            r.step_ms.median
        );
    }
    frame(
        &format!("{model} on emulated:{scenario} — median step time (p10–p90)"),
        y_max,
        &body,
    )
}

/// Lines: step time per step, with and without adaptation; a dashed line marks the drift and
/// another the fresh plan's step time.
pub fn drift_chart(a: &AdaptationReport, scenario: &str) -> String {
    let n = a.static_ms.len().max(a.adaptive_ms.len()).max(2);
    let y_max = a
        .static_ms
        .iter()
        .chain(&a.adaptive_ms)
        .fold(1.0f64, |m, &v| m.max(v))
        * 1.1;
    let plot_h = H - TOP - BOTTOM;
    let x = |i: usize| LEFT + (W - LEFT - 20.0) * i as f64 / (n - 1) as f64;
    let y = |v: f64| H - BOTTOM - plot_h * v / y_max;
    let line = |values: &[f64], color: &str| {
        let pts: Vec<String> = values
            .iter()
            .enumerate()
            .map(|(i, &v)| format!("{:.1},{:.1}", x(i), y(v)))
            .collect();
        format!(
            "<polyline points=\"{}\" fill=\"none\" stroke=\"{color}\" stroke-width=\"2\"/>\n",
            pts.join(" ")
        )
    };
    let mut body = line(&a.static_ms, COLORS[0]) + &line(&a.adaptive_ms, COLORS[1]);
    body += &format!(
        "<line x1=\"{0:.1}\" y1=\"{TOP}\" x2=\"{0:.1}\" y2=\"{1:.1}\" stroke=\"red\" stroke-dasharray=\"4 3\"/>\
         <text x=\"{0:.1}\" y=\"{2:.1}\" fill=\"red\">drift</text>\n",
        x(a.drift_step),
        H - BOTTOM,
        TOP - 4.0
    );
    body += &format!(
        "<line x1=\"{LEFT}\" y1=\"{0:.1}\" x2=\"{1:.1}\" y2=\"{0:.1}\" stroke=\"{2}\" stroke-dasharray=\"2 3\"/>\n",
        y(a.fresh_plan_ms),
        W - 20.0,
        COLORS[3]
    );
    for i in (0..n).step_by((n / 10).max(1)) {
        body += &format!(
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{i}</text>\n",
            x(i),
            H - BOTTOM + 16.0
        );
    }
    body += &format!(
        "<text x=\"{LEFT}\" y=\"{0:.1}\" fill=\"{1}\">— without adaptation</text>\
         <text x=\"{2:.1}\" y=\"{0:.1}\" fill=\"{3}\">— with adaptation</text>\
         <text x=\"{4:.1}\" y=\"{0:.1}\" fill=\"{5}\">- - fresh plan</text>\n",
        H - 10.0,
        COLORS[0],
        LEFT + 170.0,
        COLORS[1],
        LEFT + 330.0,
        COLORS[3]
    );
    frame(
        &format!("emulated:{scenario} — step time over steps"),
        y_max,
        &body,
    )
}

/// Lines: held-out accuracy (%) against training seconds, one per contender, the target dashed.
pub fn accuracy_chart(
    runs: &[&TrainingReport],
    scenario: &str,
    model: &str,
    target: f64,
) -> String {
    let x_max = runs
        .iter()
        .flat_map(|r| r.evaluations.iter().map(|p| p.seconds))
        .fold(1.0f64, f64::max);
    let plot_h = H - TOP - BOTTOM;
    let x = |t: f64| LEFT + (W - LEFT - 20.0) * t / x_max;
    let y = |a: f64| H - BOTTOM - plot_h * a;
    let mut body = String::new();
    for (i, r) in runs.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let pts: Vec<String> = std::iter::once((0.0, 0.0))
            .chain(r.evaluations.iter().map(|p| (p.seconds, p.metric)))
            .map(|(t, a)| format!("{:.1},{:.1}", x(t), y(a)))
            .collect();
        body += &format!(
            "<polyline points=\"{}\" fill=\"none\" stroke=\"{color}\" stroke-width=\"2\"/>\n\
             <text x=\"{:.1}\" y=\"{:.1}\" fill=\"{color}\">— {}</text>\n",
            pts.join(" "),
            // The legend sits bottom right, where late low accuracy never is.
            W - 190.0,
            H - BOTTOM - 10.0 - 16.0 * (runs.len() - 1 - i) as f64,
            escape(&r.strategy.to_string())
        );
    }
    body += &format!(
        "<line x1=\"{LEFT}\" y1=\"{0:.1}\" x2=\"{1:.1}\" y2=\"{0:.1}\" stroke=\"red\" stroke-dasharray=\"4 3\"/>\n",
        y(target),
        W - 20.0
    );
    for i in 0..=4 {
        let t = x_max * f64::from(i) / 4.0;
        body += &format!(
            "<text x=\"{:.1}\" y=\"{:.1}\" text-anchor=\"middle\">{t:.0} s</text>\n",
            x(t),
            H - BOTTOM + 16.0
        );
    }
    frame_with(
        &format!("emulated:{scenario} — {model} on digits, held-out accuracy over training time"),
        100.0,
        "held-out accuracy (%)",
        &body,
    )
}

/// One line of a growth chart: its label, its colour's index and its (size, ms) points.
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

#[cfg(test)]
mod tests {
    use super::*;
    use tf_iaware::runtime::StepTimes;

    fn result(strategy: &str, steps: &[f64]) -> StrategyResult {
        let step_ms = StepTimes::from_samples(steps).expect("steps");
        StrategyResult {
            strategy: strategy.into(),
            plan: None,
            ops_per_device: None,
            images_per_sec: 64.0 / (step_ms.median / 1e3),
            step_ms,
            step_ms_all: steps.to_vec(),
            images_per_sec_std: 0.0,
            time_to_train_s: 1.0,
            reduction_vs_stock: None,
            lower_bound_ms: 10.0,
            ratio_to_lower_bound: 2.0,
            predicted_step_ms: None,
            prediction_error: None,
            loss_first: 1.0,
            loss_last: 0.5,
        }
    }

    #[test]
    fn names_are_escaped() {
        assert_eq!(escape("a<b>&c"), "a&lt;b&gt;&amp;c");
    }

    #[test]
    fn a_bar_per_strategy_with_its_name() {
        let results = [
            result("replica-setter", &[30.0, 32.0]),
            result("<heft>", &[20.0]),
        ];
        let svg = strategy_chart(&results, "paper", "mlp");
        assert!(svg.starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("replica-setter") && svg.contains("&lt;heft&gt;"));
        assert!(!svg.contains("<heft>"));
    }

    #[test]
    fn the_growth_chart_has_a_line_per_planner_and_sweep() {
        let o = crate::SimOptions {
            cluster: crate::synthetic_cluster("synthetic:workers=8:ps=2").expect("spec"),
            strategies: vec!["replica-setter".parse().expect("planner")],
            ops: 50,
            batch_per_worker: 4,
            repeats: 1,
            backups: 1,
        };
        let study = crate::scale_study(&o, &[4, 8], &[], &mut |_| Ok(())).expect("study");
        let svg = growth_chart(&study.rows, &study.growth);
        assert_eq!(svg.matches("<polyline").count(), 1);
        assert!(svg.contains("replica-setter (workers"));
    }
}

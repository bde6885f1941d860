//! Small SVG charts of benchmark results: median step time per strategy (bars with p10–p90
//! whiskers), and step time over steps with and without adaptation.

use tf_iaware::runtime::trainer::TrainingReport;

use super::adapt::AdaptationReport;
use super::StrategyResult;

const W: f64 = 640.0;
const H: f64 = 360.0;
const LEFT: f64 = 70.0;
const BOTTOM: f64 = 50.0;
const TOP: f64 = 40.0;
pub(super) const COLORS: [&str; 6] = [
    "#888888", "#2a7ab0", "#d9822b", "#3a9a5b", "#9b59b6", "#c0392b",
];

pub(super) fn escape(s: &str) -> String {
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

//! The Prometheus text exposition format (version 0.0.4): [`Exposition`] as plain data, a
//! writer ([`Exposition::render`]) and a parser ([`Exposition::parse`]).
//!
//! The parser is strict where a mistake would corrupt readings — bad metric or label names,
//! broken quoting or escapes, values that are not numbers, duplicate series or labels,
//! conflicting HELP/TYPE lines, lines over [`MAX_LINE_BYTES`] — and tolerant of what real
//! exporters legitimately emit: extra labels and series, untyped samples, comments, blank lines,
//! CRLF line ends, trailing commas in label sets, timestamps, non-contiguous families.

mod parse;

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;

use parse::Parser;

use crate::error::{Error, Result};

/// Longest line the parser accepts, bytes.
pub const MAX_LINE_BYTES: usize = 64 * 1024;
/// Most labels one sample may carry.
pub(crate) const MAX_LABELS: usize = 128;
/// Content type of the format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4";

/// Metric type of a family (`# TYPE` line).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetricType {
    /// Monotonic counter.
    Counter,
    /// Gauge.
    Gauge,
    /// Histogram (`_bucket`, `_sum`, `_count` samples).
    Histogram,
    /// Summary (quantile, `_sum`, `_count` samples).
    Summary,
    /// No TYPE line, or `untyped`.
    Untyped,
}

impl MetricType {
    /// The keyword of the TYPE line.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            MetricType::Counter => "counter",
            MetricType::Gauge => "gauge",
            MetricType::Histogram => "histogram",
            MetricType::Summary => "summary",
            MetricType::Untyped => "untyped",
        }
    }

    fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "counter" => MetricType::Counter,
            "gauge" => MetricType::Gauge,
            "histogram" => MetricType::Histogram,
            "summary" => MetricType::Summary,
            "untyped" => MetricType::Untyped,
            _ => return None,
        })
    }
}

/// One sample line.
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// Sample name (for histograms and summaries it may carry a `_bucket`/`_sum`/`_count`
    /// suffix of its family's name).
    pub name: String,
    /// Labels in the order written.
    pub labels: Vec<(String, String)>,
    /// Value.
    pub value: f64,
    /// Optional timestamp, ms since the Unix epoch.
    pub timestamp_ms: Option<i64>,
    /// Line it was parsed from (1-based; 0 for samples built in code).
    pub line: usize,
}

impl Sample {
    /// A sample with `labels` and `value`, built in code.
    pub(crate) fn new(name: &str, labels: &[(&str, &str)], value: f64) -> Self {
        Sample {
            name: name.to_string(),
            labels: labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            value,
            timestamp_ms: None,
            line: 0,
        }
    }

    /// Value of label `name`.
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// A metric family: HELP, TYPE and its samples.
#[derive(Clone, Debug, PartialEq)]
pub struct Family {
    /// Metric name.
    pub name: String,
    /// Docstring (`# HELP`), unescaped.
    pub help: Option<String>,
    /// Type (`# TYPE`).
    pub kind: MetricType,
    /// Samples, in the order written.
    pub samples: Vec<Sample>,
}

impl Family {
    /// An empty family.
    pub(crate) fn new(name: &str, kind: MetricType, help: &str) -> Self {
        Family {
            name: name.to_string(),
            help: Some(help.to_string()),
            kind,
            samples: Vec::new(),
        }
    }

    /// Appends a sample named like the family.
    pub(crate) fn push(&mut self, labels: &[(&str, &str)], value: f64) {
        self.samples.push(Sample::new(&self.name, labels, value));
    }
}

/// A whole exposition page.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Exposition {
    families: Vec<Family>,
    index: HashMap<String, usize>,
}

/// Whether `s` is a valid metric name (`[a-zA-Z_:][a-zA-Z0-9_:]*`).
pub(crate) fn is_metric_name(s: &str) -> bool {
    let mut b = s.bytes();
    matches!(b.next(), Some(c) if c.is_ascii_alphabetic() || c == b'_' || c == b':')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_' || c == b':')
}

/// Whether `s` is a valid label name (`[a-zA-Z_][a-zA-Z0-9_]*`).
pub(crate) fn is_label_name(s: &str) -> bool {
    let mut b = s.bytes();
    matches!(b.next(), Some(c) if c.is_ascii_alphabetic() || c == b'_')
        && b.all(|c| c.is_ascii_alphanumeric() || c == b'_')
}

/// Formats a value the way Prometheus reads it back exactly: the shortest decimal that
/// round-trips (in exponent notation when very large or small, as `1e+22` would otherwise be
/// 23 digits), `NaN`, `+Inf`, `-Inf`.
pub(crate) fn format_value(v: f64, out: &mut String) {
    if v.is_nan() {
        out.push_str("NaN");
    } else if v == f64::INFINITY {
        out.push_str("+Inf");
    } else if v == f64::NEG_INFINITY {
        out.push_str("-Inf");
    } else if v != 0.0 && !(1e-4..1e15).contains(&v.abs()) {
        let _ = write!(out, "{v:e}");
    } else {
        let _ = write!(out, "{v}");
    }
}

fn escape_label_value(v: &str, out: &mut String) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

fn escape_help(v: &str, out: &mut String) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

impl Exposition {
    /// An empty page.
    pub fn new() -> Self {
        Exposition::default()
    }

    /// Adds a family (merging samples into an existing family of the same name).
    pub(crate) fn add(&mut self, family: Family) {
        match self.index.get(&family.name) {
            Some(&i) => self.families[i].samples.extend(family.samples),
            None => {
                self.index.insert(family.name.clone(), self.families.len());
                self.families.push(family);
            }
        }
    }

    /// Families in the order they first appear.
    pub fn families(&self) -> &[Family] {
        &self.families
    }

    /// The family named `name`.
    pub fn family(&self, name: &str) -> Option<&Family> {
        self.index.get(name).map(|&i| &self.families[i])
    }

    /// Samples of family `name` (none if absent).
    pub fn samples(&self, name: &str) -> &[Sample] {
        self.family(name).map_or(&[], |f| f.samples.as_slice())
    }

    /// Number of samples on the page.
    pub(crate) fn len(&self) -> usize {
        self.families.iter().map(|f| f.samples.len()).sum()
    }

    /// Whether the page has no samples.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Adds the families of another page (e.g. node_exporter and dcgm-exporter of one host).
    ///
    /// # Errors
    /// [`Error::Exposition`] if both pages carry the same series or declare one family with
    /// different types.
    pub fn merge(&mut self, other: Exposition) -> Result<()> {
        let mut seen: HashSet<(String, Vec<(String, String)>)> = self
            .families
            .iter()
            .flat_map(|f| f.samples.iter().map(series_key))
            .collect();
        for f in other.families {
            if let Some(mine) = self.family(&f.name) {
                if mine.kind != f.kind {
                    return Err(Error::Exposition {
                        line: f.samples.first().map_or(0, |s| s.line),
                        reason: format!(
                            "`{}` is a {} on one page and a {} on another",
                            f.name,
                            mine.kind.as_str(),
                            f.kind.as_str()
                        ),
                    });
                }
            }
            for s in &f.samples {
                if !seen.insert(series_key(s)) {
                    return Err(Error::Exposition {
                        line: s.line,
                        reason: format!("series {} appears on two pages", describe_series(s)),
                    });
                }
            }
            self.add(f);
        }
        Ok(())
    }

    /// Writes the page in the text format: HELP, TYPE and samples per family.
    pub fn render(&self) -> String {
        let mut out = String::with_capacity(self.len() * 64);
        for f in &self.families {
            if let Some(help) = &f.help {
                out.push_str("# HELP ");
                out.push_str(&f.name);
                out.push(' ');
                escape_help(help, &mut out);
                out.push('\n');
            }
            out.push_str("# TYPE ");
            out.push_str(&f.name);
            out.push(' ');
            out.push_str(f.kind.as_str());
            out.push('\n');
            for s in &f.samples {
                out.push_str(&s.name);
                if !s.labels.is_empty() {
                    out.push('{');
                    for (i, (k, v)) in s.labels.iter().enumerate() {
                        if i > 0 {
                            out.push(',');
                        }
                        out.push_str(k);
                        out.push_str("=\"");
                        escape_label_value(v, &mut out);
                        out.push('"');
                    }
                    out.push('}');
                }
                out.push(' ');
                format_value(s.value, &mut out);
                if let Some(ts) = s.timestamp_ms {
                    let _ = write!(out, " {ts}");
                }
                out.push('\n');
            }
        }
        out
    }

    /// Parses a page.
    ///
    /// # Errors
    /// [`Error::Exposition`] with the 1-based line number and what is wrong there.
    pub fn parse(text: &str) -> Result<Exposition> {
        Parser::default().run(text)
    }
}

fn series_key(s: &Sample) -> (String, Vec<(String, String)>) {
    let mut labels = s.labels.clone();
    labels.sort();
    (s.name.clone(), labels)
}

fn describe_series(s: &Sample) -> String {
    let mut out = s.name.clone();
    if !s.labels.is_empty() {
        out.push('{');
        for (i, (k, v)) in s.labels.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            let _ = write!(out, "{k}=\"");
            escape_label_value(v, &mut out);
            out.push('"');
        }
        out.push('}');
    }
    snippet(&out)
}

/// At most 80 characters of `s`, for error messages.
fn snippet(s: &str) -> String {
    if s.chars().count() <= 80 {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(77).collect();
        t.push_str("...");
        t
    }
}

#[cfg(test)]
mod tests {
    use super::parse::parse_value;
    use super::*;

    fn err_line(text: &str) -> (usize, String) {
        match Exposition::parse(text) {
            Err(Error::Exposition { line, reason }) => (line, reason),
            other => panic!("expected an exposition error for {text:?}, got {other:?}"),
        }
    }

    #[test]
    fn node_exporter_fixture() {
        let text = include_str!("../../tests/fixtures/monitor/node_exporter.prom");
        let page = Exposition::parse(text).unwrap();
        let cpu = page.family("node_cpu_seconds_total").unwrap();
        assert_eq!(cpu.kind, MetricType::Counter);
        assert_eq!(
            cpu.help.as_deref(),
            Some("Seconds the CPUs spent in each mode.")
        );
        assert_eq!(cpu.samples.len(), 16);
        assert_eq!(cpu.samples[0].label("cpu"), Some("0"));
        let avail = page.samples("node_memory_MemAvailable_bytes");
        assert_eq!(avail[0].value, 2.2897917952e+10);
        // A histogram's _bucket/_sum/_count samples belong to it.
        let h = page
            .family("node_scrape_collector_duration_histogram_seconds")
            .unwrap();
        assert_eq!(h.kind, MetricType::Histogram);
        assert_eq!(h.samples.len(), 5);
        assert_eq!(page.samples("node_network_receive_bytes_total").len(), 2);
    }

    #[test]
    fn dcgm_exporter_fixture() {
        let text = include_str!("../../tests/fixtures/monitor/dcgm_exporter.prom");
        let page = Exposition::parse(text).unwrap();
        let util = page.samples("DCGM_FI_DEV_GPU_UTIL");
        assert_eq!(util.len(), 2);
        assert_eq!(util[1].label("gpu"), Some("1"));
        assert_eq!(util[1].label("modelName"), Some("NVIDIA A100-SXM4-40GB"));
        assert_eq!(util[1].value, 87.0);
    }

    #[test]
    fn tolerant_of_what_exporters_emit() {
        let text = "# a comment\r\n\n  # TYPE up gauge\nup{job=\"x\",} 1 1700000000000\nup{job=\"y\"}\t0\n\
                    other{} 3\nother_no_labels 4e3\nweird{a=\"\\\\\\\"\\n\"} -Inf\nnan_value NaN\n# EOF\n";
        let page = Exposition::parse(text).unwrap();
        let up = page.samples("up");
        assert_eq!(up[0].timestamp_ms, Some(1_700_000_000_000));
        assert_eq!(up[1].value, 0.0);
        assert_eq!(page.samples("other_no_labels")[0].value, 4000.0);
        let w = &page.samples("weird")[0];
        assert_eq!(w.label("a"), Some("\\\"\n"));
        assert_eq!(w.value, f64::NEG_INFINITY);
        assert!(page.samples("nan_value")[0].value.is_nan());
        assert_eq!(page.family("other").unwrap().kind, MetricType::Untyped);
    }

    #[test]
    fn rejects_garbage_with_line_numbers() {
        let cases: &[(&str, usize, &str)] = &[
            ("ok 1\nbad_value abc\n", 2, "not a number"),
            ("x{a=\"1\" 2\n", 1, "expected `,` or `}`"),
            ("x{a=1} 2\n", 1, "not quoted"),
            ("x{a=\"1} 2\n", 1, "not closed"),
            ("x{a=\"\\t\"} 2\n", 1, "invalid escape"),
            ("x{1a=\"b\"} 2\n", 1, "label name"),
            ("x{a=\"1\",a=\"2\"} 2\n", 1, "twice"),
            ("x 1\nx 2\n", 2, "duplicate series"),
            (
                "x{a=\"1\",b=\"2\"} 1\nx{b=\"2\",a=\"1\"} 2\n",
                2,
                "duplicate series",
            ),
            ("9x 1\n", 1, "metric name"),
            ("x\n", 1, "expected a space"),
            ("x 1 2 3\n", 1, "unexpected"),
            ("x 1 1.5\n", 1, "timestamp"),
            ("# TYPE x countr\n", 1, "unknown metric type"),
            ("# TYPE x counter\n# TYPE x gauge\n", 2, "second TYPE"),
            ("x 1\n# TYPE x gauge\n", 2, "after its samples"),
            ("# HELP x a\n# HELP x b\n", 2, "second HELP"),
            ("# HELP\n", 1, "needs a metric name"),
            ("# HELP x bad \\t escape\n", 1, "invalid escape"),
            ("x 0x10\n", 1, "not a number"),
            ("x 1_000\n", 1, "not a number"),
            ("x{a=\"1\"}2\n", 1, "space before the value"),
        ];
        for (text, line, needle) in cases {
            let (l, reason) = err_line(text);
            assert_eq!(l, *line, "{text:?}: {reason}");
            assert!(reason.contains(needle), "{text:?}: {reason}");
        }
        let huge = format!("x{{a=\"{}\"}} 1\n", "y".repeat(MAX_LINE_BYTES));
        assert!(err_line(&huge).1.contains("bytes long"));
        let many: Vec<String> = (0..=MAX_LABELS).map(|i| format!("l{i}=\"v\"")).collect();
        assert!(err_line(&format!("x{{{}}} 1\n", many.join(",")))
            .1
            .contains("labels"));
    }

    #[test]
    fn render_then_parse_is_identity() {
        let mut page = Exposition::new();
        let mut f = Family::new("t_total", MetricType::Counter, "A \\ help\nline.");
        f.push(&[("a", "x\"y\\z\nw")], 1.0e-7);
        f.push(&[("a", "2")], 123456789012345.6);
        page.add(f);
        let mut g = Family::new("g", MetricType::Gauge, "");
        g.push(&[], f64::INFINITY);
        g.push(&[("k", "")], -0.1);
        page.add(g);
        let text = page.render();
        let back = Exposition::parse(&text).unwrap();
        assert_eq!(back.families().len(), 2);
        for (a, b) in page.families().iter().zip(back.families()) {
            assert_eq!(a.name, b.name);
            assert_eq!(a.help, b.help);
            assert_eq!(a.kind, b.kind);
            for (x, y) in a.samples.iter().zip(&b.samples) {
                assert_eq!((&x.name, &x.labels, x.value), (&y.name, &y.labels, y.value));
            }
        }
    }

    #[test]
    fn merge_pages() {
        let mut a = Exposition::parse("# TYPE x gauge\nx 1\n").unwrap();
        let b = Exposition::parse("y 2\n").unwrap();
        a.merge(b).unwrap();
        assert_eq!(a.len(), 2);
        let dup = Exposition::parse("x 3\n").unwrap();
        assert!(a.clone().merge(dup).is_err());
        let c = Exposition::parse("# TYPE x counter\nx{a=\"1\"} 3\n").unwrap();
        assert!(a.merge(c).is_err());
    }

    #[test]
    fn values() {
        assert_eq!(parse_value("+Inf"), Some(f64::INFINITY));
        assert_eq!(parse_value("-1.5e-3"), Some(-0.0015));
        assert_eq!(parse_value(""), None);
        assert_eq!(parse_value("1,5"), None);
        for v in [
            0.1 + 0.2,
            1e22,
            -1.5e-7,
            123456789012345.0,
            5e-324,
            f64::MAX,
            0.0,
            -0.0,
        ] {
            let mut s = String::new();
            format_value(v, &mut s);
            assert!(s.len() <= 24, "{s}");
            assert_eq!(parse_value(&s), Some(v), "{s}");
        }
        let mut s = String::new();
        format_value(1e22, &mut s);
        assert_eq!(s, "1e22");
    }
}

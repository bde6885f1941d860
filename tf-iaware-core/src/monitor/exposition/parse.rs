//! Reading a page of the text exposition format: comments (`# HELP`, `# TYPE`), samples with
//! their labels, escapes and values.

use std::collections::HashSet;

use super::{
    describe_series, is_label_name, is_metric_name, series_key, snippet, Exposition, Family,
    MetricType, Sample, MAX_LABELS, MAX_LINE_BYTES,
};
use crate::error::{Error, Result};

/// Reads a page line by line, remembering what a later line may not repeat.
#[derive(Default)]
pub(super) struct Parser {
    page: Exposition,
    typed: HashSet<String>,
    helped: HashSet<String>,
    series: HashSet<(String, Vec<(String, String)>)>,
}

struct Cursor<'a> {
    s: &'a str,
    pos: usize,
    line: usize,
}

impl<'a> Cursor<'a> {
    fn err(&self, reason: impl Into<String>) -> Error {
        Error::Exposition {
            line: self.line,
            reason: format!("column {}: {}", self.pos + 1, reason.into()),
        }
    }

    fn peek(&self) -> Option<u8> {
        self.s.as_bytes().get(self.pos).copied()
    }

    fn skip_blanks(&mut self) -> usize {
        let start = self.pos;
        while matches!(self.peek(), Some(b' ' | b'\t')) {
            self.pos += 1;
        }
        self.pos - start
    }

    fn take_while(&mut self, f: impl Fn(u8) -> bool) -> &'a str {
        let start = self.pos;
        while matches!(self.peek(), Some(c) if f(c)) {
            self.pos += 1;
        }
        &self.s[start..self.pos]
    }

    fn token(&mut self) -> &'a str {
        self.take_while(|c| c != b' ' && c != b'\t')
    }

    fn rest(&self) -> &'a str {
        &self.s[self.pos..]
    }
}

impl Parser {
    /// The page `text`.
    ///
    /// # Errors
    /// [`Error::Exposition`] naming the first line that does not parse.
    pub(super) fn run(mut self, text: &str) -> Result<Exposition> {
        for (i, raw) in text.split('\n').enumerate() {
            let line = i + 1;
            if raw.len() > MAX_LINE_BYTES {
                return Err(Error::Exposition {
                    line,
                    reason: format!(
                        "line is {} bytes long, more than the {MAX_LINE_BYTES} accepted",
                        raw.len()
                    ),
                });
            }
            let l = raw.strip_suffix('\r').unwrap_or(raw);
            let mut c = Cursor { s: l, pos: 0, line };
            c.skip_blanks();
            match c.peek() {
                None => continue,
                Some(b'#') => self.comment(&mut c)?,
                Some(_) => self.sample(&mut c)?,
            }
        }
        Ok(self.page)
    }

    fn comment(&mut self, c: &mut Cursor<'_>) -> Result<()> {
        c.pos += 1;
        c.skip_blanks();
        let keyword = c.token();
        if keyword != "HELP" && keyword != "TYPE" {
            return Ok(()); // a plain comment
        }
        if c.skip_blanks() == 0 {
            return Err(c.err(format!("`# {keyword}` needs a metric name")));
        }
        let name = c.token();
        if !is_metric_name(name) {
            return Err(c.err(format!("`{}` is not a metric name", snippet(name))));
        }
        if keyword == "HELP" {
            if !self.helped.insert(name.to_string()) {
                return Err(c.err(format!("second HELP line for `{name}`")));
            }
            // Trailing blanks (and a stray CR) carry no meaning in a docstring.
            let help = if c.skip_blanks() == 0 {
                String::new()
            } else {
                unescape_help(c.rest().trim_end_matches([' ', '\t', '\r'])).map_err(|r| c.err(r))?
            };
            self.family_mut(name, None).help = Some(help);
        } else {
            c.skip_blanks();
            let kind_s = c.token();
            let Some(kind) = MetricType::parse(kind_s) else {
                return Err(c.err(format!(
                    "unknown metric type `{}` for `{name}` (counter, gauge, histogram, summary, untyped)",
                    snippet(kind_s)
                )));
            };
            c.skip_blanks();
            if !c.rest().is_empty() {
                return Err(c.err(format!(
                    "unexpected `{}` after the type of `{name}`",
                    snippet(c.rest())
                )));
            }
            if !self.typed.insert(name.to_string()) {
                return Err(c.err(format!("second TYPE line for `{name}`")));
            }
            if self
                .page
                .family(name)
                .is_some_and(|f| !f.samples.is_empty())
            {
                return Err(c.err(format!("TYPE line for `{name}` after its samples")));
            }
            self.family_mut(name, None).kind = kind;
        }
        Ok(())
    }

    fn family_mut(&mut self, name: &str, kind: Option<MetricType>) -> &mut Family {
        let i = match self.page.index.get(name) {
            Some(&i) => i,
            None => {
                let i = self.page.families.len();
                self.page.families.push(Family {
                    name: name.to_string(),
                    help: None,
                    kind: kind.unwrap_or(MetricType::Untyped),
                    samples: Vec::new(),
                });
                self.page.index.insert(name.to_string(), i);
                i
            }
        };
        &mut self.page.families[i]
    }

    /// The family a sample named `name` belongs to: its own, or the histogram/summary whose
    /// name it extends with `_bucket`, `_sum` or `_count`.
    fn family_of(&self, name: &str) -> String {
        if self.page.index.contains_key(name) {
            return name.to_string();
        }
        for suffix in ["_bucket", "_sum", "_count"] {
            if let Some(base) = name.strip_suffix(suffix) {
                if let Some(f) = self.page.family(base) {
                    let fits = match f.kind {
                        MetricType::Histogram => true,
                        MetricType::Summary => suffix != "_bucket",
                        _ => false,
                    };
                    if fits {
                        return base.to_string();
                    }
                }
            }
        }
        name.to_string()
    }

    fn sample(&mut self, c: &mut Cursor<'_>) -> Result<()> {
        let name = c.take_while(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b':');
        if !is_metric_name(name) {
            let bad = if name.is_empty() { c.token() } else { name };
            return Err(c.err(format!("`{}` is not a metric name", snippet(bad))));
        }
        let blanks_after_name = c.skip_blanks();
        let mut labels: Vec<(String, String)> = Vec::new();
        if c.peek() == Some(b'{') {
            c.pos += 1;
            loop {
                c.skip_blanks();
                match c.peek() {
                    Some(b'}') => {
                        c.pos += 1;
                        break;
                    }
                    None => return Err(c.err("label set is not closed with `}`")),
                    _ => {}
                }
                let lname = c.take_while(|b| b.is_ascii_alphanumeric() || b == b'_');
                if !is_label_name(lname) {
                    return Err(c.err(format!(
                        "expected a label name, found `{}`",
                        snippet(c.rest())
                    )));
                }
                c.skip_blanks();
                if c.peek() != Some(b'=') {
                    return Err(c.err(format!("expected `=` after label `{lname}`")));
                }
                c.pos += 1;
                c.skip_blanks();
                if c.peek() != Some(b'"') {
                    return Err(c.err(format!("value of label `{lname}` is not quoted")));
                }
                c.pos += 1;
                let value = label_value(c)?;
                if labels.iter().any(|(k, _)| k == lname) {
                    return Err(c.err(format!("label `{lname}` appears twice")));
                }
                if labels.len() >= MAX_LABELS {
                    return Err(c.err(format!("more than {MAX_LABELS} labels")));
                }
                labels.push((lname.to_string(), value));
                c.skip_blanks();
                match c.peek() {
                    Some(b',') => c.pos += 1,
                    Some(b'}') => {}
                    _ => return Err(c.err("expected `,` or `}` after a label")),
                }
            }
            if c.skip_blanks() == 0 {
                return Err(c.err("expected a space before the value"));
            }
        } else if blanks_after_name == 0 {
            return Err(c.err(format!(
                "expected a space or `{{` after `{}`",
                snippet(name)
            )));
        }
        let value_s = c.token();
        let value = parse_value(value_s)
            .ok_or_else(|| c.err(format!("`{}` is not a number", snippet(value_s))))?;
        c.skip_blanks();
        let ts_s = c.token();
        let timestamp_ms = if ts_s.is_empty() {
            None
        } else {
            Some(
                ts_s.parse::<i64>()
                    .map_err(|_| c.err(format!("`{}` is not a timestamp", snippet(ts_s))))?,
            )
        };
        c.skip_blanks();
        if !c.rest().is_empty() {
            return Err(c.err(format!(
                "unexpected `{}` after the sample",
                snippet(c.rest())
            )));
        }
        let sample = Sample {
            name: name.to_string(),
            labels,
            value,
            timestamp_ms,
            line: c.line,
        };
        if !self.series.insert(series_key(&sample)) {
            return Err(Error::Exposition {
                line: c.line,
                reason: format!("duplicate series {}", describe_series(&sample)),
            });
        }
        let family = self.family_of(name);
        self.family_mut(&family, None).samples.push(sample);
        Ok(())
    }
}

fn label_value(c: &mut Cursor<'_>) -> Result<String> {
    let mut out = String::new();
    let bytes = c.s.as_bytes();
    let mut start = c.pos;
    while c.pos < bytes.len() {
        match bytes[c.pos] {
            b'"' => {
                out.push_str(&c.s[start..c.pos]);
                c.pos += 1;
                return Ok(out);
            }
            b'\\' => {
                out.push_str(&c.s[start..c.pos]);
                match bytes.get(c.pos + 1) {
                    Some(b'\\') => out.push('\\'),
                    Some(b'"') => out.push('"'),
                    Some(b'n') => out.push('\n'),
                    _ => {
                        return Err(c.err("invalid escape in label value (only \\\\, \\\" and \\n)"))
                    }
                }
                c.pos += 2;
                start = c.pos;
            }
            _ => c.pos += 1,
        }
    }
    Err(c.err("label value is not closed with `\"`"))
}

fn unescape_help(s: &str) -> std::result::Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(ch) = chars.next() {
        if ch == '\\' {
            match chars.next() {
                Some('\\') => out.push('\\'),
                Some('n') => out.push('\n'),
                _ => return Err("invalid escape in HELP text (only \\\\ and \\n)".into()),
            }
        } else {
            out.push(ch);
        }
    }
    Ok(out)
}

/// Parses a sample value: decimal or exponent notation, `NaN`, `+Inf`, `-Inf` (as Go's
/// `ParseFloat`, which Prometheus uses, less hexadecimal floats).
pub(crate) fn parse_value(s: &str) -> Option<f64> {
    if s.is_empty()
        || !s
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'+' | b'-'))
    {
        return None;
    }
    s.parse::<f64>().ok()
}

//! Fuzzes the Prometheus exposition parser: any input either parses or is an
//! `Error::Exposition` (never a panic or a hang); a page that parses renders to text that
//! parses back to the same page; the snapshot mapping never panics on a parsed page.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tf_iaware::cluster::monitor::exposition::{Exposition, MAX_LINE_BYTES};
use tf_iaware::cluster::monitor::metrics;
use tf_iaware::Error;

fn same_value(a: f64, b: f64) -> bool {
    a == b || (a.is_nan() && b.is_nan())
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let page = match Exposition::parse(text) {
        Ok(page) => page,
        Err(Error::Exposition { .. }) => return,
        Err(other) => panic!("the parser returned a non-exposition error: {other}"),
    };
    let _ = metrics::from_exposition(&page, "fuzz");
    let rendered = page.render();
    let again = match Exposition::parse(&rendered) {
        Ok(again) => again,
        // Rendering may lengthen a line (a value written as `1e300` by the input) past the
        // limit; anything else is a bug.
        Err(_) if rendered.lines().any(|l| l.len() > MAX_LINE_BYTES) => return,
        Err(e) => panic!("a rendered page does not parse: {e}\n{rendered}"),
    };
    assert_eq!(page.families().len(), again.families().len());
    for (a, b) in page.families().iter().zip(again.families()) {
        assert_eq!((&a.name, &a.help, a.kind), (&b.name, &b.help, b.kind));
        assert_eq!(a.samples.len(), b.samples.len());
        for (x, y) in a.samples.iter().zip(&b.samples) {
            assert_eq!(
                (&x.name, &x.labels, x.timestamp_ms),
                (&y.name, &y.labels, y.timestamp_ms)
            );
            assert!(same_value(x.value, y.value), "{} vs {}", x.value, y.value);
        }
    }
});

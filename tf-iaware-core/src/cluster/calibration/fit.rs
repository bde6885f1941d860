//! The pure least-squares fits that turn timed micro-benchmarks into calibrated figures:
//! lines constrained to their physical signs (`fit_affine`), links (`fit_link`) and compute
//! rates (`fit_compute`).

use serde::{Deserialize, Serialize};

use crate::cluster::link::Link;
use crate::error::{Error, Result};

/// A straight line `y = intercept + slope · x` fitted by least squares, constrained to
/// `intercept ≥ 0` and `slope ≥ 0`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct AffineFit {
    /// Value at `x = 0` (units of `y`).
    pub intercept: f64,
    /// Increase of `y` per unit of `x`.
    pub slope: f64,
    /// Root-mean-square residual (units of `y`).
    pub rms_residual: f64,
    /// Number of points fitted.
    pub points: usize,
}

/// Least-squares fit of `y = a + b·x` with `a ≥ 0`, `b ≥ 0` over `points` `(x, y)`.
///
/// When the unconstrained fit has `a < 0` the line is refitted through the origin; when it has
/// `b < 0`, `y` is taken as constant (its mean). One distinct `x` gives a line through the origin
/// and the mean point (`a = 0`), or a constant when that `x` is 0.
///
/// Returns `None` for no points or any non-finite value.
pub(crate) fn fit_affine(points: &[(f64, f64)]) -> Option<AffineFit> {
    if points.is_empty()
        || points
            .iter()
            .any(|&(x, y)| !x.is_finite() || !y.is_finite())
    {
        return None;
    }
    let n = points.len() as f64;
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mx) * (p.0 - mx)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let through_origin = || {
        let sxx0: f64 = points.iter().map(|p| p.0 * p.0).sum();
        if sxx0 > 0.0 {
            let b = points.iter().map(|p| p.0 * p.1).sum::<f64>() / sxx0;
            (0.0, b.max(0.0))
        } else {
            (my.max(0.0), 0.0)
        }
    };
    let (a, b) = if sxx <= f64::EPSILON * mx.abs().max(1.0) * n {
        // One distinct x.
        through_origin()
    } else {
        let b = sxy / sxx;
        let a = my - b * mx;
        if b < 0.0 {
            (my.max(0.0), 0.0)
        } else if a < 0.0 {
            through_origin()
        } else {
            (a, b)
        }
    };
    let rss: f64 = points
        .iter()
        .map(|&(x, y)| {
            let r = y - (a + b * x);
            r * r
        })
        .sum();
    Some(AffineFit {
        intercept: a,
        slope: b,
        rms_residual: (rss / n).sqrt(),
        points: points.len(),
    })
}

fn distinct_sizes(xs: impl Iterator<Item = f64>) -> usize {
    let mut v: Vec<f64> = xs.collect();
    v.sort_by(f64::total_cmp);
    v.dedup();
    v.len()
}

/// A [`Link`] fitted from timed transfers.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct LinkFit {
    /// Fitted latency (s) and bandwidth (bytes/s).
    pub link: Link,
    /// Root-mean-square residual of the fit, seconds.
    pub rms_residual: f64,
    /// Number of samples fitted.
    pub samples: usize,
}

/// Fits `seconds = latency + bytes / bandwidth` to timed transfers `(bytes, seconds)` by least
/// squares (latency ≥ 0).
///
/// `subject` names the link in errors (e.g. `"CPU:0 → CPU:1"`).
///
/// # Errors
/// [`Error::Calibration`] with fewer than two distinct sizes, a non-finite or negative time, or
/// times that do not grow with size (use larger tensors).
pub(crate) fn fit_link(subject: &str, samples: &[(u64, f64)]) -> Result<LinkFit> {
    let bad = |reason: String| Error::Calibration {
        subject: subject.into(),
        reason,
    };
    if let Some(&(b, s)) = samples.iter().find(|p| !(p.1.is_finite() && p.1 >= 0.0)) {
        return Err(bad(format!(
            "transfer of {b} bytes timed at {s} s, which is not a duration"
        )));
    }
    let distinct = distinct_sizes(samples.iter().map(|p| p.0 as f64));
    if distinct < 2 {
        return Err(bad(format!(
            "need transfers of at least two distinct sizes to separate latency from bandwidth, got {distinct}"
        )));
    }
    let points: Vec<(f64, f64)> = samples.iter().map(|&(b, s)| (b as f64, s)).collect();
    let fit = fit_affine(&points).ok_or_else(|| bad("samples are not finite".into()))?;
    if fit.slope <= 0.0 {
        return Err(bad(
            "transfer time does not grow with size; time larger tensors so bandwidth shows".into(),
        ));
    }
    Ok(LinkFit {
        link: Link::new(fit.intercept, 1.0 / fit.slope),
        rms_residual: fit.rms_residual,
        samples: samples.len(),
    })
}

/// A device's compute rate fitted from timed micro-benchmarks.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct ComputeFit {
    /// Sustained rate, FLOP/s.
    pub peak_flops: f64,
    /// Fixed cost per op, seconds.
    pub overhead: f64,
    /// Root-mean-square residual, seconds.
    pub rms_residual: f64,
    /// Number of samples fitted.
    pub samples: usize,
}

/// Fits `seconds = overhead + flops / peak_flops` to timed ops of known work `(flops, seconds)`
/// (MatMul/Conv2D micro-benchmarks) by least squares (overhead ≥ 0). With a single size the
/// overhead is taken as 0.
///
/// `subject` names the device in errors.
///
/// # Errors
/// [`Error::Calibration`] with no samples, a non-finite or non-positive FLOP count or time, or
/// times that do not grow with work.
pub(crate) fn fit_compute(subject: &str, samples: &[(f64, f64)]) -> Result<ComputeFit> {
    let bad = |reason: String| Error::Calibration {
        subject: subject.into(),
        reason,
    };
    if samples.is_empty() {
        return Err(bad("no timed ops".into()));
    }
    if let Some(&(f, s)) = samples
        .iter()
        .find(|p| !(p.0.is_finite() && p.0 > 0.0 && p.1.is_finite() && p.1 > 0.0))
    {
        return Err(bad(format!(
            "op of {f} FLOPs timed at {s} s: both must be positive"
        )));
    }
    let fit = fit_affine(samples).ok_or_else(|| bad("samples are not finite".into()))?;
    if fit.slope <= 0.0 {
        return Err(bad(
            "time does not grow with FLOPs; time larger ops so the compute rate shows".into(),
        ));
    }
    Ok(ComputeFit {
        peak_flops: 1.0 / fit.slope,
        overhead: fit.intercept,
        rms_residual: fit.rms_residual,
        samples: samples.len(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fit_link_recovers_latency_and_bandwidth() {
        // 100 µs + bytes / 1 GB/s, with ±1 % alternating noise.
        let samples: Vec<(u64, f64)> = [1u64 << 10, 1 << 16, 1 << 20, 1 << 24, 1 << 26]
            .iter()
            .enumerate()
            .map(|(i, &b)| {
                let t = 1e-4 + b as f64 / 1e9;
                (b, t * if i % 2 == 0 { 1.01 } else { 0.99 })
            })
            .collect();
        let fit = fit_link("a → b", &samples).unwrap();
        assert!((fit.link.bandwidth / 1e9 - 1.0).abs() < 0.03, "{fit:?}");
        assert!(
            fit.link.latency >= 0.0 && fit.link.latency < 1e-3,
            "{fit:?}"
        );
        let exact: Vec<(u64, f64)> = [1000u64, 2000, 4000]
            .iter()
            .map(|&b| (b, 2e-5 + b as f64 / 5e8))
            .collect();
        let fit = fit_link("a → b", &exact).unwrap();
        assert!((fit.link.latency - 2e-5).abs() < 1e-12);
        assert!((fit.link.bandwidth - 5e8).abs() / 5e8 < 1e-9);
        assert!(fit.rms_residual < 1e-15);
    }

    #[test]
    fn fit_link_rejects_unusable_samples() {
        let one_size = fit_link("x → y", &[(100, 1e-3), (100, 2e-3)]).unwrap_err();
        assert!(matches!(one_size, Error::Calibration { ref subject, .. } if subject == "x → y"));
        let flat = fit_link("x → y", &[(100, 1e-3), (200, 1e-3)]).unwrap_err();
        assert!(flat.to_string().contains("does not grow"), "{flat}");
        assert!(fit_link("x → y", &[(100, f64::NAN), (200, 1e-3)]).is_err());
    }

    #[test]
    fn fit_affine_respects_constraints() {
        // Negative intercept → through the origin.
        let f = fit_affine(&[(1.0, 0.5), (2.0, 2.0), (3.0, 3.5)]).unwrap();
        assert_eq!(f.intercept, 0.0);
        assert!(f.slope > 0.0);
        // Negative slope → constant mean.
        let f = fit_affine(&[(1.0, 3.0), (2.0, 1.0)]).unwrap();
        assert_eq!((f.intercept, f.slope), (2.0, 0.0));
        // One distinct x → through origin and mean point.
        let f = fit_affine(&[(2.0, 1.0), (2.0, 3.0)]).unwrap();
        assert_eq!((f.intercept, f.slope), (0.0, 1.0));
        assert!(fit_affine(&[]).is_none());
    }
}

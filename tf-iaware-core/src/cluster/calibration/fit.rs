//! The pure least-squares fits that turn timed micro-benchmarks into calibrated figures:
//! lines constrained to their physical signs (`fit_affine`), links (`fit_link`), compute
//! rates (`fit_compute`) and whole training steps against their batch ([`fit_step_line`]).

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
    /// Whether the time did not grow with size: the latency is what was measured, the
    /// bandwidth only as large as the probes can show ([`FLAT_LINE_RATIO`] × the largest
    /// tensor's bytes per second).
    #[serde(default)]
    pub latency_dominated: bool,
}

/// Fits `seconds = latency + bytes / bandwidth` to timed transfers `(bytes, seconds)` by least
/// squares (latency ≥ 0). Times that do not grow with size give a latency-dominated link
/// (the least-squares line whose bandwidth is at most [`FLAT_LINE_RATIO`] × the largest
/// tensor's bytes per second) rather than no link: a task that answers every Send/Recv late
/// is slow to reach whatever the tensor.
///
/// `subject` names the link in errors (e.g. `"CPU:0 → CPU:1"`).
///
/// # Errors
/// [`Error::Calibration`] with fewer than two distinct sizes, a non-finite or negative time, or
/// transfers that took no time at all (the tensor is handed over, not copied).
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
    if fit.slope > 0.0 {
        return Ok(LinkFit {
            link: Link::new(fit.intercept, 1.0 / fit.slope),
            rms_residual: fit.rms_residual,
            samples: samples.len(),
            latency_dominated: false,
        });
    }
    // The time does not grow with size: a latency-dominated link (a throttled task answers
    // every transfer late, whatever it carries) — unless nothing took any time at all (the
    // tensor is handed over, not copied: keep the nominal link).
    let largest = points.iter().map(|p| p.0).fold(0.0, f64::max);
    let at_largest: Vec<f64> = points
        .iter()
        .filter(|p| p.0 == largest)
        .map(|p| p.1)
        .collect();
    let t_largest = at_largest.iter().sum::<f64>() / at_largest.len() as f64;
    if !(t_largest > 0.0 && largest > 0.0) {
        return Err(bad(
            "transfers took no measurable time (the tensor is handed over, not copied)".into(),
        ));
    }
    let slope_min = t_largest / (FLAT_LINE_RATIO * largest);
    let (latency, slope) = constrained_line(&points, slope_min);
    let rss: f64 = points
        .iter()
        .map(|&(x, y)| (y - latency - slope * x).powi(2))
        .sum();
    Ok(LinkFit {
        link: Link::new(latency, 1.0 / slope),
        rms_residual: (rss / points.len() as f64).sqrt(),
        samples: samples.len(),
        latency_dominated: true,
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

/// Most FLOP/s one CPU core can do (fp32: AVX-512 with two FMA units, 32 FMA = 64 FLOP per
/// cycle, at 4 GHz): the physical ceiling on a calibrated CPU throughput.
pub const MAX_CPU_CORE_FLOPS: f64 = 2.56e11;

/// Without a device bound, a step-time fit claims at most this many times the whole-step
/// throughput at its largest batch as its marginal throughput: a step that is 99 % fixed cost
/// is as flat as the probes of a small model can show, so a flatter line is noise.
pub const FLAT_LINE_RATIO: f64 = 100.0;

/// A worker's step time against its batch: `ms = fixed_ms + batch / samples_per_sec × 1000`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct StepLine {
    /// Cost of a step whatever its batch, ms (≥ 0).
    pub fixed_ms: f64,
    /// Marginal throughput, samples/s (positive, finite).
    pub samples_per_sec: f64,
    /// Whether the throughput sits at its bound (the probes could not show a smaller slope).
    pub at_bound: bool,
}

/// Fits a [`StepLine`] to `(batch, step ms)` points by least squares within physical bounds:
/// the fixed cost is not negative and the throughput is at most `max_samples_per_sec` (what the
/// device's cores can do, when known) and at most [`FLAT_LINE_RATIO`] × the whole-step
/// throughput at the largest batch. An unconstrained fit outside the bounds is refitted on the
/// bound it crossed (through the origin, or at the largest throughput) and the better of the two
/// kept — the exact constrained least-squares line. A single distinct batch gives a line
/// through the origin (all of the step is per sample: the conservative reading).
///
/// Unbounded, two identical workers whose step time hardly grows with the batch were fitted
/// 343,745 samples/s + 9.0 ms and 1,314 samples/s + 0 ms (a slope just above 0, and one just
/// below it taken as "no fixed cost"); bounded, both read as what they are: a flat step.
///
/// Returns `None` without a point of positive batch and finite, positive time.
pub fn fit_step_line(
    points: &[(usize, f64)],
    max_samples_per_sec: Option<f64>,
) -> Option<StepLine> {
    let pts: Vec<(f64, f64)> = points
        .iter()
        .filter(|(b, ms)| *b > 0 && ms.is_finite() && *ms > 0.0)
        .map(|&(b, ms)| (b as f64, ms))
        .collect();
    let largest = pts.iter().map(|p| p.0).fold(f64::NAN, f64::max);
    if pts.is_empty() || !largest.is_finite() {
        return None;
    }
    let at_largest: Vec<f64> = pts.iter().filter(|p| p.0 == largest).map(|p| p.1).collect();
    let t_largest = at_largest.iter().sum::<f64>() / at_largest.len() as f64;
    let flat = FLAT_LINE_RATIO * largest / t_largest * 1e3;
    let max_rate = max_samples_per_sec
        .filter(|m| m.is_finite() && *m > 0.0)
        .map_or(flat, |m| m.min(flat));
    let b_min = 1e3 / max_rate;
    let (a, b) = constrained_line(&pts, b_min);
    Some(StepLine {
        fixed_ms: a,
        samples_per_sec: 1e3 / b,
        at_bound: b <= b_min * (1.0 + 1e-12),
    })
}

/// The least-squares line `y = a + b·x` over `pts` with `a ≥ 0` and `b ≥ b_min > 0`: the
/// unconstrained line when it is within the bounds, else the better of the line through the
/// origin and the line of slope `b_min` (the exact constrained optimum of a convex problem with
/// two bounds). A single distinct `x` gives the line through the origin.
fn constrained_line(pts: &[(f64, f64)], b_min: f64) -> (f64, f64) {
    let n = pts.len() as f64;
    let rss = |a: f64, b: f64| {
        pts.iter()
            .map(|&(x, y)| (y - a - b * x).powi(2))
            .sum::<f64>()
    };
    let (mx, my) = (
        pts.iter().map(|p| p.0).sum::<f64>() / n,
        pts.iter().map(|p| p.1).sum::<f64>() / n,
    );
    let sxx: f64 = pts.iter().map(|p| (p.0 - mx).powi(2)).sum();
    let sxy: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let origin = {
        let xx: f64 = pts.iter().map(|p| p.0 * p.0).sum();
        let b = pts.iter().map(|p| p.0 * p.1).sum::<f64>() / xx;
        (0.0, if b.is_finite() { b.max(b_min) } else { b_min })
    };
    if sxx <= f64::EPSILON * mx.max(1.0) * n {
        return origin;
    }
    let b = sxy / sxx;
    let a = my - b * mx;
    if a >= 0.0 && b >= b_min {
        return (a, b);
    }
    let flat = ((my - b_min * mx).max(0.0), b_min);
    if rss(origin.0, origin.1) <= rss(flat.0, flat.1) {
        origin
    } else {
        flat
    }
}

/// `line` with its throughput capped at `max_samples_per_sec` (what the device's cores can do),
/// keeping its step time at `at_batch` (the probe batch, the best-measured point): the fixed
/// cost takes what the capped throughput no longer explains, never below 0. A line within the
/// bound, or a bound that is not a positive number, is returned as it is.
pub fn bound_step_line(line: StepLine, max_samples_per_sec: f64, at_batch: usize) -> StepLine {
    if !(max_samples_per_sec.is_finite() && max_samples_per_sec > 0.0)
        || line.samples_per_sec <= max_samples_per_sec
    {
        return line;
    }
    let b = at_batch as f64;
    let step = line.fixed_ms + b / line.samples_per_sec * 1e3;
    StepLine {
        fixed_ms: (step - b / max_samples_per_sec * 1e3).max(0.0),
        samples_per_sec: max_samples_per_sec,
        at_bound: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn step_lines_keep_their_physical_bounds_on_degenerate_probes() {
        // Two identical workers of a small model: the step is ~9 ms whatever the batch (probes
        // at 3, 6 and 12 samples). Noise tilts one line up, the other down.
        let up = [(3, 8.95), (6, 8.97), (12, 9.05)];
        let down = [(3, 9.10), (6, 9.02), (12, 9.00)];
        let a = fit_step_line(&up, None).unwrap();
        let b = fit_step_line(&down, None).unwrap();
        for l in [a, b] {
            assert!(l.fixed_ms > 8.5 && l.fixed_ms < 9.1, "{l:?}");
            assert!(l.samples_per_sec.is_finite() && l.samples_per_sec > 0.0);
            // The step at the probe batch is what was measured, within the noise.
            let t = l.fixed_ms + 12.0 / l.samples_per_sec * 1e3;
            assert!((t - 9.0).abs() < 0.15, "{l:?} {t}");
        }
        // Unbounded these were 343,745 samples/s + 9.0 ms and 1,314 samples/s + 0 ms: the
        // second is now flat too, at the bound, and both predict the same for any batch.
        assert!(b.at_bound, "{b:?}");
        assert!(b.samples_per_sec <= FLAT_LINE_RATIO * 12.0 / 9.0e-3 + 1e-6);
        for batch in [1.0, 32.0, 64.0] {
            let ta = a.fixed_ms + batch / a.samples_per_sec * 1e3;
            let tb = b.fixed_ms + batch / b.samples_per_sec * 1e3;
            assert!((ta - tb).abs() / tb < 0.1, "batch {batch}: {ta} vs {tb}");
        }
        // A device bound tighter than the data's: the throughput stops there.
        let capped = fit_step_line(&up, Some(2_000.0)).unwrap();
        assert!(capped.at_bound && (capped.samples_per_sec - 2_000.0).abs() < 1e-9);
        assert!(capped.fixed_ms >= 0.0);
    }

    #[test]
    fn step_lines_recover_clean_lines_and_refuse_garbage() {
        let l = fit_step_line(&[(4, 140.0), (8, 180.0), (16, 260.0)], None).unwrap();
        assert!((l.samples_per_sec - 100.0).abs() < 1e-9 && (l.fixed_ms - 100.0).abs() < 1e-9);
        assert!(!l.at_bound);
        // A line that would cross 0 ms is refitted through the origin: no negative fixed cost.
        let l = fit_step_line(&[(4, 30.0), (8, 80.0), (16, 180.0)], None).unwrap();
        assert_eq!(l.fixed_ms, 0.0);
        assert!(l.samples_per_sec > 0.0);
        // One batch: all of the step per sample.
        let l = fit_step_line(&[(8, 80.0), (8, 80.0)], None).unwrap();
        assert!((l.samples_per_sec - 100.0).abs() < 1e-9 && l.fixed_ms == 0.0);
        assert_eq!(fit_step_line(&[], None), None);
        assert_eq!(
            fit_step_line(&[(0, 1.0), (4, f64::NAN), (4, -1.0)], None),
            None
        );
    }

    #[test]
    fn a_link_whose_time_does_not_grow_with_size_is_latency_dominated() {
        // A throttled task: ~2 ms per transfer of 4 KiB, 64 KiB or 512 KiB (recorded shape of
        // the `paper` scenario's 0.075-core workers).
        let samples = [(4 << 10, 2.1e-3), (64 << 10, 1.9e-3), (512 << 10, 2.0e-3)];
        let fit = fit_link("w3 → w0", &samples).unwrap();
        assert!(fit.latency_dominated);
        assert!((fit.link.latency - 2.0e-3).abs() < 0.2e-3, "{:?}", fit.link);
        // Not the nominal loopback (50 µs): every transfer costs the measured ~2 ms.
        assert!(fit.link.transfer_time(1 << 20) > 1.8e-3);
        assert!(fit.link.bandwidth <= FLAT_LINE_RATIO * (512 << 10) as f64 / 2.0e-3 * 1.0001);
        // Nothing measurable: handed over, the nominal link stays.
        let err = fit_link("cpu0 → cpu1", &[(4, 0.0), (8, 0.0)]).unwrap_err();
        assert!(err.to_string().contains("handed over"), "{err}");
        // A link where bandwidth shows is fitted as before.
        let clean = fit_link("a → b", &[(1000, 1e-3 + 1e-6), (2000, 1e-3 + 2e-6)]).unwrap();
        assert!(!clean.latency_dominated);
    }

    #[test]
    fn a_throughput_bound_keeps_the_step_at_the_probe_batch() {
        let l = StepLine {
            fixed_ms: 9.0,
            samples_per_sec: 343_745.0,
            at_bound: false,
        };
        let b = bound_step_line(l, 50_000.0, 12);
        assert_eq!(b.samples_per_sec, 50_000.0);
        let step = |l: StepLine| l.fixed_ms + 12.0 / l.samples_per_sec * 1e3;
        assert!((step(b) - step(l)).abs() < 1e-9);
        assert_eq!(bound_step_line(l, f64::NAN, 12), l);
        assert_eq!(bound_step_line(b, 60_000.0, 12), b);
        // Never a negative fixed cost: a bound far below the data takes the whole step.
        assert_eq!(bound_step_line(l, 10.0, 12).fixed_ms, 0.0);
    }

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
        let nothing = fit_link("x → y", &[(100, 0.0), (200, 0.0)]).unwrap_err();
        assert!(
            nothing.to_string().contains("no measurable time"),
            "{nothing}"
        );
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

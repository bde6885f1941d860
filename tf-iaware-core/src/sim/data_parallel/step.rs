//! One simulated data-parallel step in each of the three models (see the module docs of
//! [`data_parallel`](super)): the replicas' compute, the ps traffic, and for asynchronous steps
//! the delay a saturated ps link adds.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use super::DpMode;
use crate::error::{Error, Result};
use crate::parallel::{DataParallelPlan, PsNetwork, VarInfo, WorkerCapacity};

/// One simulated data-parallel step (asynchronous: the time per global batch of samples).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub(crate) struct DpStep {
    /// How the gradients were combined.
    pub mode: DpMode,
    /// Predicted step time, ms; asynchronous: the time the cluster takes to process one global
    /// batch of samples (`samples_per_step ÷ images_per_sec`).
    pub step_ms: f64,
    /// The compute the step waits for, ms: the slowest replica's (synchronous), the
    /// (N − k)-th fastest (backup), the slowest worker's own step compute (asynchronous).
    pub compute_ms: f64,
    /// Pull and push together, ms; asynchronous: one worker's per step, stretched by a
    /// saturated ps link.
    pub sync_ms: f64,
    /// Replicas with a share.
    pub replicas: usize,
    /// The device of the replica `compute_ms` is.
    pub slowest: Option<String>,
    /// Bytes on each ps, in the order given.
    pub ps_bytes: Vec<u64>,
    /// Samples whose gradients a step applies (asynchronous: the global batch).
    pub samples_per_step: usize,
    /// Samples whose gradients are applied per second.
    pub images_per_sec: f64,
    /// Asynchronous: the delay a saturated ps link adds to every worker's step, ms (0 when no
    /// ps link is saturated; 0 for the other modes).
    pub ps_delay_ms: f64,
}

/// Simulates one synchronous step of `plan` (see [`simulate`]).
///
/// # Errors
/// As [`simulate`].
#[cfg(test)]
pub(crate) fn simulate_step(
    plan: &DataParallelPlan,
    capacity: &[WorkerCapacity],
    vars: &[VarInfo],
    ps: &[String],
    network: &PsNetwork,
) -> Result<DpStep> {
    simulate(plan, DpMode::Sync, capacity, vars, ps, network)
}

/// Simulates `plan` combined in `mode` on workers of `capacity`, with its variables (`vars`;
/// the parts `name/part_K` of a sharded variable split it equally) on the ps tasks `ps` linked
/// by `network` (see the module docs for the three models).
///
/// # Errors
/// [`Error::InvalidArgument`] for a replica on a worker `capacity` lacks, a variable on a
/// device that is not one of `ps`, a variable name that is neither in `vars` nor a part of
/// one, or as many backup workers as replicas.
pub(crate) fn simulate(
    plan: &DataParallelPlan,
    mode: DpMode,
    capacity: &[WorkerCapacity],
    vars: &[VarInfo],
    ps: &[String],
    network: &PsNetwork,
) -> Result<DpStep> {
    let by_device: HashMap<&str, &WorkerCapacity> =
        capacity.iter().map(|c| (c.device.as_str(), c)).collect();
    // (compute ms, share, device) of each replica with a share.
    let mut replicas: Vec<(f64, usize, &str)> = Vec::with_capacity(plan.replicas.len());
    for r in &plan.replicas {
        let c = by_device
            .get(r.device.as_str())
            .ok_or_else(|| Error::InvalidArgument {
                what: format!("replica on `{}`", r.device),
                reason: "no capacity is known for this worker".into(),
            })?;
        if r.batch > 0 {
            replicas.push((c.step_ms(r.batch), r.batch, r.device.as_str()));
        }
    }
    let ps_bytes = ps_loads(plan, vars, ps)?;
    let n = replicas.len();
    /// The longest compute of `rs` and its device (the first of equals).
    fn slowest_of<'a>(rs: &[(f64, usize, &'a str)]) -> Option<(f64, &'a str)> {
        rs.iter()
            .fold(None, |best: Option<(f64, &str)>, &(t, _, d)| match best {
                Some((bt, _)) if bt >= t => best,
                _ => Some((t, d)),
            })
    }
    let step = match mode {
        DpMode::Sync | DpMode::Backup { .. } => {
            let backups = match mode {
                DpMode::Backup { backups } => backups,
                _ => 0,
            };
            if backups > 0 && backups >= n {
                return Err(Error::InvalidArgument {
                    what: "backup workers".into(),
                    reason: format!(
                        "{backups} of {n} replicas: at least one gradient must be aggregated"
                    ),
                });
            }
            // The fastest N − k replicas make the step (ties: plan order); synchronous: all.
            let mut by_time = replicas.clone();
            by_time.sort_by(|a, b| a.0.total_cmp(&b.0));
            let kept = &by_time[..n - backups];
            let (compute_ms, slowest) = slowest_of(kept).map_or((0.0, None), |(t, d)| (t, Some(d)));
            // Every replica pulls and pushes (a backup step drops the late ones' gradients).
            let sync_ms = network.sync_ms(n, &ps_bytes);
            let samples: usize = kept.iter().map(|r| r.1).sum();
            let step_ms = compute_ms + sync_ms;
            DpStep {
                mode,
                step_ms,
                compute_ms,
                sync_ms,
                replicas: n,
                slowest: slowest.map(String::from),
                ps_bytes,
                samples_per_step: samples,
                images_per_sec: rate(samples, step_ms),
                ps_delay_ms: 0.0,
            }
        }
        DpMode::Async => {
            let transfer_ms = network.sync_ms(usize::from(n > 0), &ps_bytes);
            let solo: Vec<f64> = replicas.iter().map(|r| r.0 + transfer_ms).collect();
            let delay_ms = saturation_delay_ms(&solo, &ps_bytes, &network.ps_bandwidth);
            let images_per_sec: f64 = replicas
                .iter()
                .zip(&solo)
                .map(|(r, t)| r.1 as f64 * 1e3 / (t + delay_ms))
                .sum();
            let samples = plan.global_batch();
            let (compute_ms, slowest) =
                slowest_of(&replicas).map_or((0.0, None), |(t, d)| (t, Some(d)));
            DpStep {
                mode,
                step_ms: if images_per_sec > 0.0 {
                    samples as f64 / images_per_sec * 1e3
                } else {
                    f64::INFINITY
                },
                compute_ms,
                sync_ms: transfer_ms + delay_ms,
                replicas: n,
                slowest: slowest.map(String::from),
                ps_bytes,
                samples_per_step: samples,
                images_per_sec,
                ps_delay_ms: delay_ms,
            }
        }
    };
    Ok(step)
}

/// Samples per second of `samples` every `ms` milliseconds (0 for an empty step).
fn rate(samples: usize, ms: f64) -> f64 {
    if ms > 0.0 {
        samples as f64 * 1e3 / ms
    } else {
        0.0
    }
}

/// Steps per second ps `p` carries each way at most: `bandwidth_p ÷ bytes_p`, the least over
/// the ps that hold anything (infinite when none does).
fn ps_step_rate(ps_bytes: &[u64], ps_bandwidth: &[f64]) -> f64 {
    ps_bytes
        .iter()
        .zip(ps_bandwidth)
        .filter(|(&b, _)| b > 0)
        .map(|(&b, &bw)| bw / b as f64)
        .fold(f64::INFINITY, f64::min)
}

/// Asynchronous workers of solo step times `solo` (ms) send `Σ 1/Tᵢ` steps per second through
/// the ps links: the least delay `d ≥ 0` (ms) added to every step that keeps that within the
/// ps links' step rate (`ps_step_rate`). 0 when no link is saturated.
fn saturation_delay_ms(solo: &[f64], ps_bytes: &[u64], ps_bandwidth: &[f64]) -> f64 {
    let limit = ps_step_rate(ps_bytes, ps_bandwidth);
    let steps_per_sec = |d: f64| solo.iter().map(|t| 1e3 / (t + d)).sum::<f64>();
    if solo.is_empty() || !limit.is_finite() || steps_per_sec(0.0) <= limit {
        return 0.0;
    }
    // At d = N / limit every worker's step is at least that long: within the limit.
    let (mut lo, mut hi) = (0.0f64, solo.len() as f64 * 1e3 / limit);
    for _ in 0..200 {
        let mid = 0.5 * (lo + hi);
        if mid <= lo || mid >= hi {
            break;
        }
        if steps_per_sec(mid) > limit {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    hi
}

/// Bytes each ps of `ps` holds under `plan` (the parts `name/part_K` of a sharded variable of
/// `vars` split it equally).
///
/// # Errors
/// [`Error::InvalidArgument`] for a variable on a device that is not one of `ps`, or a
/// variable name that is neither in `vars` nor a part of one.
pub(super) fn ps_loads(
    plan: &DataParallelPlan,
    vars: &[VarInfo],
    ps: &[String],
) -> Result<Vec<u64>> {
    let bytes: HashMap<&str, u64> = vars.iter().map(|v| (v.name.as_str(), v.bytes)).collect();
    let mut parts: HashMap<&str, u64> = HashMap::new();
    for key in plan.variable_devices.keys() {
        if let Some((base, _)) = split_part(key) {
            *parts.entry(base).or_default() += 1;
        }
    }
    let ps_index: HashMap<&str, usize> = ps
        .iter()
        .enumerate()
        .map(|(i, p)| (p.as_str(), i))
        .collect();
    let mut ps_bytes = vec![0u64; ps.len()];
    for (key, dev) in &plan.variable_devices {
        let p = *ps_index
            .get(dev.as_str())
            .ok_or_else(|| Error::InvalidArgument {
                what: format!("variable `{key}`"),
                reason: format!("is on `{dev}`, which is not one of the ps tasks"),
            })?;
        let b = match (bytes.get(key.as_str()), split_part(key)) {
            (Some(&b), _) => b,
            (None, Some((base, k))) if bytes.contains_key(base) => {
                let (total, n) = (bytes[base], parts[base]);
                total / n + u64::from(k < total % n)
            }
            _ => {
                return Err(Error::InvalidArgument {
                    what: format!("variable `{key}`"),
                    reason: "is not a variable of the workload (nor a part of one)".into(),
                })
            }
        };
        ps_bytes[p] += b;
    }
    Ok(ps_bytes)
}

/// `name/part_K` → (`name`, K).
fn split_part(key: &str) -> Option<(&str, u64)> {
    let (base, k) = key.rsplit_once("/part_")?;
    Some((base, k.parse().ok()?))
}

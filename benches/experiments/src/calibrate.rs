//! The workers' calibration of a benchmark: measured once per workload and cluster (or read from
//! the per-user cache) and rescaled to each worker's availability now.

use tf_iaware::cluster::Cluster;
use tf_iaware::parallel::{self, WorkerCapacity};
use tf_iaware::runtime::calibrate::{self, CalibrateOptions, WorkerCalibration};
use tf_iaware::runtime::replicated::Workload;
use tf_iaware::runtime::SessionConfig;

use crate::error::Result;
use crate::event::{emit, note, Event, OnEvent};

/// Per-replica synchronisation cost assumed by predictions, ms.
pub(crate) const OVERHEAD_MS: f64 = 5.0;

/// Samples per probe step of a calibration at global batch `batch` over `workers` workers.
pub(crate) fn probe_batch(batch: usize, workers: usize) -> usize {
    (batch / workers.max(1)).clamp(3, 12)
}

/// What a calibration needs.
pub(crate) struct Calibration<'a> {
    pub workload: &'a Workload,
    pub devices: &'a Cluster,
    pub config: &'a SessionConfig,
    pub workers: &'a [String],
    pub ps: &'a [String],
    pub batch: usize,
    /// Drop the cached calibration first.
    pub recalibrate: bool,
}

/// Calibrates the workers (or reads the per-user cache) and returns the calibration and the
/// capacities at each worker's availability now.
pub(crate) fn calibrate(
    c: &Calibration,
    on_event: &mut OnEvent<'_>,
) -> Result<(WorkerCalibration, Vec<WorkerCapacity>)> {
    let probe = probe_batch(c.batch, c.workers.len());
    note(
        on_event,
        &format!(
            "calibrating {} workers with {probe}-sample steps of {} (and at the shares a plan can give them)…",
            c.workers.len(),
            c.workload.name()
        ),
    )?;
    let probe = calibrate::WorkerProbe {
        batch: probe,
        min_seconds: 1.0,
        global_batch: Some(c.batch),
    };
    if c.recalibrate {
        calibrate::invalidate_workers(c.workload, probe, c.devices, c.workers, &c.ps[0])?;
    }
    let busy = format!("calibrating {}", c.workload.name());
    emit(on_event, Event::Busy(Some(&busy)))?;
    let calibrated = calibrate::calibrate_workers_cached(
        c.workload,
        c.workers,
        &c.ps[0],
        c.devices,
        c.config,
        probe,
        &CalibrateOptions::default(),
    );
    emit(on_event, Event::Busy(None))?;
    let calibrated = calibrated?;
    if calibrated.cache_hit {
        note(
            on_event,
            &format!(
                "calibration: cache hit ({}, {:.2} s): capabilities reused, rescaled to the live availability",
                calibrated.path.display(),
                calibrated.seconds
            ),
        )?;
    } else {
        note(
            on_event,
            &format!(
                "calibration: measured in {:.1} s{}",
                calibrated.seconds,
                calibrated
                    .note
                    .as_deref()
                    .map_or(String::new(), |n| format!(" ({n})"))
            ),
        )?;
    }
    // At each worker's availability now (a cached calibration may have seen another).
    let calibration = parallel::live_capacities(&calibrated.capacity, c.devices, None);
    for w in &calibration {
        let timed_at = match w.probed_batches.as_slice() {
            [] => String::new(),
            batches => format!(
                "; timed at {} samples",
                batches
                    .iter()
                    .map(usize::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        };
        note(
            on_event,
            &format!(
                "  {:<45} {:>8.1} images/sec + {:.0} ms per step (availability {:.2}{timed_at})",
                w.device,
                w.samples_per_sec,
                w.fixed_ms,
                w.availability.unwrap_or(1.0)
            ),
        )?;
    }
    Ok((calibrated, calibration))
}

#[cfg(test)]
mod tests {
    use super::probe_batch;

    #[test]
    fn probe_is_a_share_of_the_batch_within_3_to_12() {
        assert_eq!(probe_batch(64, 4), 12);
        assert_eq!(probe_batch(32, 4), 8);
        assert_eq!(probe_batch(4, 4), 3);
        assert_eq!(probe_batch(64, 0), 12);
    }
}

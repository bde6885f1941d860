//! The workers' calibration of a benchmark: measured once per workload and cluster (or read from
//! the per-user cache) and rescaled to each worker's availability now.

use tf_iaware::cluster::Cluster;
use tf_iaware::parallel::{self, DataParallelPlanner, WorkerCapacity};
use tf_iaware::runtime::calibrate::{self, CalibrateOptions, WorkerCalibration};
use tf_iaware::runtime::replicated::Workload;
use tf_iaware::runtime::SessionConfig;

use crate::error::Result;
use crate::event::{emit, note, Event, OnEvent};

/// What a calibration needs.
pub(crate) struct Calibration<'a> {
    pub workload: &'a Workload,
    pub devices: &'a Cluster,
    pub config: &'a SessionConfig,
    /// The planner of the job: its workers, ps and the probe size of their calibration.
    pub planner: &'a DataParallelPlanner,
    /// Drop the cached calibration first.
    pub recalibrate: bool,
}

/// Calibrates the workers (or reads the per-user cache) and returns the calibration and the
/// capacities at each worker's availability now.
pub(crate) fn calibrate(
    c: &Calibration,
    on_event: &mut OnEvent<'_>,
) -> Result<(WorkerCalibration, Vec<WorkerCapacity>)> {
    let (workers, ps) = (c.planner.workers(), &c.planner.ps()[0]);
    let probe = calibrate::WorkerProbe::from(c.planner.probe());
    note(
        on_event,
        &format!(
            "calibrating {} workers with {}-sample steps of {} (and at the shares a plan can give them)…",
            workers.len(),
            probe.batch,
            c.workload.name()
        ),
    )?;
    if c.recalibrate {
        calibrate::invalidate_workers(c.workload, probe, c.devices, workers, ps)?;
    }
    let busy = format!("calibrating {}", c.workload.name());
    emit(on_event, Event::Busy(Some(&busy)))?;
    let calibrated = calibrate::calibrate_workers_cached(
        c.workload,
        workers,
        ps,
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

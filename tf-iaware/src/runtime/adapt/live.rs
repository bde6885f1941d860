//! The live metrics of a cluster, read on a background thread (`LiveWatcher`).

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::cluster::{Cluster, LiveSource, MetricsFeed};
use crate::error::Result;

/// A reading of one device: (device, availability, taken Unix ms).
pub(crate) type Reading = (String, f64, u64);

/// Reads a cluster's live metrics on a background thread and keeps the latest view, and every
/// fresh reading since it was last drained (so patience counts agent samples, not steps).
pub(crate) struct LiveWatcher {
    latest: Arc<Mutex<(Cluster, u64)>>,
    pending: Arc<Mutex<Vec<Reading>>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<JoinHandle<()>>,
    tid: Arc<Mutex<Option<u32>>>,
    started: Instant,
}

impl std::fmt::Debug for LiveWatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LiveWatcher").finish_non_exhaustive()
    }
}

impl LiveWatcher {
    /// Starts refreshing `cluster` from `feed` every `interval`.
    ///
    /// # Errors
    /// [`Error::MonitorThread`](crate::Error::MonitorThread) if the thread cannot start.
    pub(crate) fn spawn(
        mut feed: MetricsFeed,
        cluster: Cluster,
        interval: Duration,
    ) -> Result<Self> {
        let latest = Arc::new(Mutex::new((cluster, 0u64)));
        let pending = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let tid = Arc::new(Mutex::new(None));
        let (l, p, s, t) = (latest.clone(), pending.clone(), stop.clone(), tid.clone());
        let thread = std::thread::Builder::new()
            .name("tf-iaware-live".into())
            .spawn(move || {
                *t.lock() = crate::cluster::monitor::sampler::current_tid();
                while !s.load(std::sync::atomic::Ordering::Relaxed) {
                    let mut c = l.lock().0.clone();
                    let before: Vec<Option<u64>> =
                        c.devices.iter().map(|d| d.live.taken_unix_ms).collect();
                    let _ = feed.refresh(&mut c);
                    let fresh: Vec<Reading> = c
                        .devices
                        .iter()
                        .zip(before)
                        .filter(|(d, was)| {
                            d.live.source != LiveSource::Stale
                                && d.live.taken_unix_ms.is_some()
                                && d.live.taken_unix_ms != *was
                        })
                        .map(|(d, _)| {
                            (
                                d.name.clone(),
                                d.availability,
                                d.live.taken_unix_ms.unwrap_or(0),
                            )
                        })
                        .collect();
                    p.lock().extend(fresh);
                    {
                        let mut g = l.lock();
                        g.0 = c;
                        g.1 += 1;
                    }
                    let end = Instant::now() + interval;
                    while Instant::now() < end && !s.load(std::sync::atomic::Ordering::Relaxed) {
                        std::thread::sleep(Duration::from_millis(20).min(interval));
                    }
                }
            })
            .map_err(|source| crate::Error::MonitorThread {
                what: "live metrics watcher".into(),
                source,
            })?;
        Ok(LiveWatcher {
            latest,
            pending,
            stop,
            thread: Some(thread),
            tid,
            started: Instant::now(),
        })
    }

    /// The cluster as last refreshed, and how many refreshes there have been.
    pub(crate) fn latest(&self) -> (Cluster, u64) {
        self.latest.lock().clone()
    }

    /// Every fresh reading since the last call, oldest first.
    pub(crate) fn drain(&self) -> Vec<Reading> {
        std::mem::take(&mut *self.pending.lock())
    }

    /// CPU time the reader thread used ÷ wall time since it started: what reading the metrics
    /// costs this process (`None` where thread CPU time cannot be read).
    pub(crate) fn cost_share(&self) -> Option<f64> {
        let tid = (*self.tid.lock())?;
        let cpu = crate::cluster::monitor::sampler::thread_cpu_time(tid)?;
        Some(cpu.as_secs_f64() / self.started.elapsed().as_secs_f64().max(1e-9))
    }
}

impl Drop for LiveWatcher {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

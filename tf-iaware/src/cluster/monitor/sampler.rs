//! [`Monitor`]: a background thread that reads `/proc`, the cgroup and NVML every interval and
//! publishes the latest [`Snapshot`] behind a `parking_lot` lock, cheap to read from any thread.

use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex, RwLock};

use crate::cluster::monitor::cgroup_source::CgroupSource;
use crate::cluster::monitor::derive::{Deriver, Reading};
use crate::cluster::monitor::gpu::GpuSource;
use crate::cluster::monitor::metrics;
use crate::cluster::monitor::proc::{ticks_per_second, ProcSource};
use crate::cluster::monitor::snapshot::{unix_now_ms, Snapshot};
use crate::error::{Error, Result};

/// How a [`Monitor`] samples.
#[derive(Clone, Debug, PartialEq)]
pub struct MonitorConfig {
    /// Time between readings (default 1 s).
    pub interval: Duration,
    /// Time constant of the EWMAs (default 10 s).
    pub ewma_tau: Duration,
    /// Span of the min/mean/max window (default 60 s).
    pub window: Duration,
    /// Process whose own CPU use and cgroup are reported (default: this process).
    pub pid: Option<u32>,
    /// File-system root under which `/proc` and the cgroup mounts are read (default `/`;
    /// tests point it at a fixture tree).
    pub root: PathBuf,
    /// Read GPUs through NVML (default true).
    pub gpus: bool,
    /// Name of the source in snapshots (default `local`).
    pub source: String,
}

impl Default for MonitorConfig {
    fn default() -> Self {
        MonitorConfig {
            interval: Duration::from_secs(1),
            ewma_tau: Duration::from_secs(10),
            window: Duration::from_secs(60),
            pid: None,
            root: PathBuf::from("/"),
            gpus: true,
            source: "local".to_string(),
        }
    }
}

/// Sources and derivation state: one reading → one snapshot.
struct Sampler {
    proc: ProcSource,
    cgroup: CgroupSource,
    gpu: Option<GpuSource>,
    deriver: Deriver,
    epoch: Instant,
    ticks_per_second: u64,
}

impl Sampler {
    fn new(config: &MonitorConfig) -> Result<Sampler> {
        if config.interval.is_zero() {
            return Err(Error::InvalidArgument {
                what: "monitor interval".into(),
                reason: "must be more than 0".into(),
            });
        }
        if let Some(pid) = config.pid {
            let dir = config.root.join("proc").join(pid.to_string());
            if pid == 0 || !dir.is_dir() {
                return Err(Error::InvalidArgument {
                    what: format!("pid {pid}"),
                    reason: format!("no such process ({} does not exist)", dir.display()),
                });
            }
        }
        let proc = ProcSource::new(&config.root, config.pid);
        let cgroup = CgroupSource::new(&config.root, proc.proc_dir(), proc.process_dir());
        let host = proc.hostname().unwrap_or_else(|| "localhost".to_string());
        let pid = config.pid.unwrap_or_else(std::process::id);
        Ok(Sampler {
            cgroup,
            gpu: config.gpus.then(GpuSource::new),
            deriver: Deriver::new(
                &config.source,
                &host,
                Some(pid),
                config.ewma_tau.as_secs_f64(),
                config.window.as_secs_f64(),
            ),
            proc,
            epoch: Instant::now(),
            ticks_per_second: ticks_per_second(),
        })
    }

    fn sample(&mut self) -> Result<Snapshot> {
        let t_s = self.epoch.elapsed().as_secs_f64();
        let unix_ms = unix_now_ms();
        let proc = self.proc.read()?;
        let cgroup = self
            .cgroup
            .read()
            .map_err(|e| format!("cgroup unavailable: {e}"));
        let gpus = match &mut self.gpu {
            Some(g) => g.read(),
            None => Err("GPU metrics unavailable: GPU monitoring is switched off".to_string()),
        };
        Ok(self.deriver.push(Reading {
            t_s,
            unix_ms,
            ticks_per_second: self.ticks_per_second,
            proc,
            cgroup,
            gpus,
        }))
    }
}

/// Takes two readings `span` apart and returns the second snapshot (utilisation and rates over
/// `span`), without a background thread.
///
/// # Errors
/// [`Error::InvalidArgument`] for a zero interval; [`Error::Io`] / [`Error::ProcFormat`] if
/// `/proc/stat` cannot be read.
pub fn sample_once(config: &MonitorConfig, span: Duration) -> Result<Snapshot> {
    let mut s = Sampler::new(config)?;
    s.sample()?;
    std::thread::sleep(span);
    s.sample()
}

/// The published reading.
struct Latest {
    snapshot: Arc<Snapshot>,
    /// When it was taken.
    at: Instant,
    /// Bumped whenever `snapshot` is replaced.
    generation: u64,
}

struct Shared {
    latest: RwLock<Latest>,
    /// Page without the age family, for a generation of `latest`.
    page: Mutex<Option<(u64, Arc<str>)>>,
    stop: Mutex<bool>,
    wake: Condvar,
    samples: Mutex<u64>,
    sampled: Condvar,
    sampler_tid: Mutex<Option<u32>>,
}

/// A background sampler of this host, its cgroup and its GPUs.
///
/// ```no_run
/// use tf_iaware::cluster::monitor::{Monitor, MonitorConfig};
/// let monitor = Monitor::start(MonitorConfig::default())?;
/// let s = monitor.snapshot();
/// println!("{} of {} cores available", s.cpu.available_cores.map_or(0.0, |a| a.ewma), s.cpu.limit_cores);
/// # Ok::<(), tf_iaware::Error>(())
/// ```
pub struct Monitor {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
    interval: Duration,
}

impl std::fmt::Debug for Monitor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Monitor")
            .field("interval", &self.interval)
            .field("samples", &*self.shared.samples.lock())
            .finish()
    }
}

/// Delay between the first two readings, so the first snapshot already has utilisation.
const WARM_UP: Duration = Duration::from_millis(250);

impl Monitor {
    /// Starts sampling: takes two readings (at most 250 ms apart, so utilisation is known when
    /// this returns), then one every `config.interval` on a background thread.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a zero interval; [`Error::Io`] / [`Error::ProcFormat`] if
    /// `/proc/stat` cannot be read (every other source that fails is reported in the
    /// snapshots); [`Error::MonitorThread`] if the thread cannot be spawned.
    pub fn start(config: MonitorConfig) -> Result<Monitor> {
        let mut sampler = Sampler::new(&config)?;
        sampler.sample()?;
        std::thread::sleep(config.interval.min(WARM_UP));
        let first = sampler.sample()?;
        let shared = Arc::new(Shared {
            latest: RwLock::new(Latest {
                snapshot: Arc::new(first),
                at: Instant::now(),
                generation: 0,
            }),
            page: Mutex::new(None),
            stop: Mutex::new(false),
            wake: Condvar::new(),
            samples: Mutex::new(2),
            sampled: Condvar::new(),
            sampler_tid: Mutex::new(None),
        });
        let thread_shared = Arc::clone(&shared);
        let interval = config.interval;
        let thread = std::thread::Builder::new()
            .name("tf-iaware-monitor".into())
            .spawn(move || run(sampler, thread_shared, interval))
            .map_err(|source| Error::MonitorThread {
                what: "sampler thread".into(),
                source,
            })?;
        Ok(Monitor {
            shared,
            thread: Some(thread),
            interval,
        })
    }

    /// The latest snapshot, its age set to now.
    pub fn snapshot(&self) -> Snapshot {
        let (snap, at) = {
            let g = self.shared.latest.read();
            (Arc::clone(&g.snapshot), g.at)
        };
        let mut s = (*snap).clone();
        s.set_age_ms(age_ms(at));
        s
    }

    /// The latest snapshot without copying it (its `age_ms` is as of when it was taken).
    pub fn latest(&self) -> Arc<Snapshot> {
        Arc::clone(&self.shared.latest.read().snapshot)
    }

    /// The latest snapshot as a Prometheus page, its age set to now. The page is rendered once
    /// per reading and reused.
    pub fn metrics_page(&self) -> String {
        let (snap, at, generation) = {
            let g = self.shared.latest.read();
            (Arc::clone(&g.snapshot), g.at, g.generation)
        };
        let body = {
            let mut cache = self.shared.page.lock();
            match &*cache {
                Some((n, body)) if *n == generation => Arc::clone(body),
                _ => {
                    let body: Arc<str> = metrics::render_without_age(&snap).into();
                    *cache = Some((generation, Arc::clone(&body)));
                    body
                }
            }
        };
        let mut page = String::with_capacity(body.len() + 160);
        page.push_str(&body);
        page.push_str(&metrics::render_age(age_ms(at)));
        page
    }

    /// Readings taken so far.
    pub fn samples(&self) -> u64 {
        *self.shared.samples.lock()
    }

    /// Sampling interval.
    pub fn interval(&self) -> Duration {
        self.interval
    }

    /// Blocks until at least `n` readings have been taken or `timeout` passes; true if they
    /// have.
    pub fn wait_for_samples(&self, n: u64, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut count = self.shared.samples.lock();
        while *count < n {
            if self
                .shared
                .sampled
                .wait_until(&mut count, deadline)
                .timed_out()
            {
                return *count >= n;
            }
        }
        true
    }

    /// CPU time used by the sampler thread so far (from `/proc/self/task/<tid>/schedstat`, ns
    /// resolution, or `stat`, tick resolution); `None` where the kernel does not say.
    pub fn sampler_cpu_time(&self) -> Option<Duration> {
        let tid = (*self.shared.sampler_tid.lock())?;
        thread_cpu_time(tid)
    }

    /// Stops the sampler thread and waits for it.
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        *self.shared.stop.lock() = true;
        self.shared.wake.notify_all();
        if let Some(t) = self.thread.take() {
            if t.join().is_err() {
                log::error!("the monitor's sampler thread panicked");
            }
        }
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        self.shutdown();
    }
}

fn age_ms(at: Instant) -> u64 {
    u64::try_from(at.elapsed().as_millis()).unwrap_or(u64::MAX)
}

/// CPU time of thread `tid` of this process.
pub(crate) fn thread_cpu_time(tid: u32) -> Option<Duration> {
    let task = PathBuf::from(format!("/proc/self/task/{tid}"));
    if let Ok(t) = std::fs::read_to_string(task.join("schedstat")) {
        if let Some(ns) = t
            .split_ascii_whitespace()
            .next()
            .and_then(|v| v.parse().ok())
        {
            return Some(Duration::from_nanos(ns));
        }
    }
    let stat = std::fs::read_to_string(task.join("stat")).ok()?;
    let ticks =
        crate::cluster::monitor::proc::parse_process_ticks(&stat, &task.join("stat")).ok()?;
    Some(Duration::from_secs_f64(
        ticks as f64 / ticks_per_second() as f64,
    ))
}

/// Kernel id of the calling thread (from `/proc/thread-self`).
pub(crate) fn current_tid() -> Option<u32> {
    let link = std::fs::read_link("/proc/thread-self").ok()?;
    link.file_name()?.to_str()?.parse().ok()
}

fn run(mut sampler: Sampler, shared: Arc<Shared>, interval: Duration) {
    *shared.sampler_tid.lock() = current_tid();
    let mut next = Instant::now() + interval;
    let mut failing = false;
    loop {
        {
            let mut stop = shared.stop.lock();
            while !*stop {
                if shared.wake.wait_until(&mut stop, next).timed_out() {
                    break;
                }
            }
            if *stop {
                return;
            }
        }
        match sampler.sample() {
            Ok(snap) => {
                if failing {
                    log::info!("monitor: readings are back");
                    failing = false;
                }
                let mut latest = shared.latest.write();
                latest.snapshot = Arc::new(snap);
                latest.at = Instant::now();
                latest.generation += 1;
            }
            Err(e) => {
                // Keep serving the last good reading, marked stale with the reason.
                if !failing {
                    log::warn!("monitor: reading failed: {e}");
                    failing = true;
                }
                let mut latest = shared.latest.write();
                if !latest.snapshot.stale {
                    let mut s = (*latest.snapshot).clone();
                    s.mark_stale(format!("reading failed: {e}"));
                    latest.snapshot = Arc::new(s);
                    latest.generation += 1;
                }
            }
        }
        *shared.samples.lock() += 1;
        shared.sampled.notify_all();
        next += interval;
        let now = Instant::now();
        if next < now {
            // Overran (suspended, overloaded): skip missed ticks rather than bursting.
            next = now + interval;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monitor_samples_and_stops() {
        let m = Monitor::start(MonitorConfig {
            interval: Duration::from_millis(50),
            gpus: false,
            ..Default::default()
        })
        .unwrap();
        let s = m.snapshot();
        assert!(
            s.cpu.utilisation.is_some(),
            "warm-up gives a first utilisation"
        );
        assert!(s.cpu.logical_cores >= 1);
        // The reading thread is ours and runnable at every reading.
        let own = s.cpu.own_runnable_tasks.unwrap();
        assert!(own.min >= 1.0, "{own:?}");
        assert!(s.gpus.is_empty());
        assert!(s
            .gpus_unavailable
            .as_deref()
            .unwrap()
            .starts_with("GPU metrics unavailable"));
        assert!(m.wait_for_samples(4, Duration::from_secs(5)));
        assert!(m.latest().samples >= 3);
        let page = m.metrics_page();
        assert!(page.contains("tf_iaware_reading_age_seconds"));
        assert!(page.contains("node_cpu_seconds_total{cpu=\"0\",mode=\"user\"}"));
        assert!(m.sampler_cpu_time().is_some());
        // `stop` wakes the sampler and joins its thread: once it returns, the thread's handle on
        // the shared state is gone and nothing samples any more.
        let shared = Arc::clone(&m.shared);
        m.stop();
        assert!(*shared.stop.lock());
        assert_eq!(
            Arc::strong_count(&shared),
            1,
            "the sampler thread has ended"
        );
    }

    #[test]
    fn zero_interval_is_rejected() {
        let err = Monitor::start(MonitorConfig {
            interval: Duration::ZERO,
            ..Default::default()
        })
        .unwrap_err();
        assert!(err.to_string().contains("interval"), "{err}");
    }

    #[test]
    fn missing_proc_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let err = sample_once(
            &MonitorConfig {
                root: dir.path().to_path_buf(),
                gpus: false,
                ..Default::default()
            },
            Duration::ZERO,
        )
        .unwrap_err();
        assert!(err.to_string().contains("proc/stat"), "{err}");
    }

    #[test]
    fn sample_once_gives_rates() {
        let s = sample_once(
            &MonitorConfig {
                gpus: false,
                ..Default::default()
            },
            Duration::from_millis(100),
        )
        .unwrap();
        assert!(s.cpu.utilisation.is_some());
        assert!(s.interval_ms.is_some());
        assert_eq!(s.samples, 2);
    }
}

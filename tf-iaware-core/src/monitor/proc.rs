//! Host and process readings from `/proc`: [`ProcReading::parse`] makes a reading from the files'
//! text (pure parsers, arithmetic over two readings); `ProcSource` in `tf-iaware` is the thin
//! layer that says where the live files are and reads them.
//!
//! `procfs` parses the process files, load averages, interface counters and mount tables. Two
//! files are parsed here instead: `/proc/stat`, because procfs drops the CPU numbers of the
//! `cpuN` lines (they are not contiguous when CPUs are offline, and node_exporter's `cpu` label
//! needs them), and `/proc/meminfo`, because procfs requires twenty-odd fields that virtualised
//! meminfo files (LXCFS, gVisor) omit while we need three.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use procfs_core::FromRead;

use crate::error::{Error, Result};
use crate::monitor::snapshot::{CpuModeSeconds, LoadAverage};

/// Ticks spent in each mode since boot by one CPU or by all (`/proc/stat`), in USER_HZ ticks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CpuTicks {
    /// User mode (includes `guest`).
    pub user: u64,
    /// Niced user mode (includes `guest_nice`).
    pub nice: u64,
    /// Kernel mode.
    pub system: u64,
    /// Idle.
    pub idle: u64,
    /// Waiting for I/O (Linux ≥ 2.5.41).
    pub iowait: Option<u64>,
    /// Hard interrupts (Linux ≥ 2.6.0).
    pub irq: Option<u64>,
    /// Soft interrupts (Linux ≥ 2.6.0).
    pub softirq: Option<u64>,
    /// Stolen by the hypervisor (Linux ≥ 2.6.11).
    pub steal: Option<u64>,
    /// Guest virtual CPU (part of `user`; Linux ≥ 2.6.24).
    pub guest: Option<u64>,
    /// Niced guest virtual CPU (part of `nice`; Linux ≥ 2.6.33).
    pub guest_nice: Option<u64>,
}

impl CpuTicks {
    /// The same counters in seconds, given the kernel's ticks per second (USER_HZ).
    pub(crate) fn to_seconds(self, ticks_per_second: u64) -> CpuModeSeconds {
        let tps = ticks_per_second.max(1) as f64;
        let s = |t: u64| t as f64 / tps;
        CpuModeSeconds {
            user: s(self.user),
            nice: s(self.nice),
            system: s(self.system),
            idle: s(self.idle),
            iowait: self.iowait.map(s),
            irq: self.irq.map(s),
            softirq: self.softirq.map(s),
            steal: self.steal.map(s),
            guest: self.guest.map(s),
            guest_nice: self.guest_nice.map(s),
        }
    }
}

/// The CPU lines of `/proc/stat`, and its run-queue count.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StatCpus {
    /// The `cpu` line: all CPUs together.
    pub total: CpuTicks,
    /// The `cpuN` lines, as (N, ticks), in file order.
    pub cores: Vec<(u32, CpuTicks)>,
    /// `procs_running`: tasks (threads) runnable on the host at the instant of reading — on a
    /// CPU or waiting for one — the reader included (Linux ≥ 2.5.45; `None` when absent).
    pub procs_running: Option<u32>,
}

/// Parses the `cpu`, `cpuN` and `procs_running` lines of `/proc/stat` (other lines are ignored).
///
/// # Errors
/// [`Error::ProcFormat`] naming `path` if there is no `cpu` line, or a CPU line has fewer than
/// four counters or a counter that is not an unsigned integer.
pub(crate) fn parse_stat_cpus(text: &str, path: &Path) -> Result<StatCpus> {
    let mut total = None;
    let mut cores = Vec::new();
    let mut procs_running = None;
    for (n, line) in text.lines().enumerate() {
        let mut fields = line.split_ascii_whitespace();
        let Some(label) = fields.next() else { continue };
        let bad = |reason: String| Error::ProcFormat {
            path: path.to_path_buf(),
            reason: format!("line {}: {reason}", n + 1),
        };
        if label == "procs_running" {
            let v = fields.next().unwrap_or("");
            procs_running = Some(
                v.parse::<u32>()
                    .map_err(|_| bad(format!("procs_running `{v}` is not a task count")))?,
            );
            continue;
        }
        let Some(suffix) = label.strip_prefix("cpu") else {
            continue;
        };
        let mut values = Vec::with_capacity(10);
        for f in fields.take(10) {
            values.push(
                f.parse::<u64>()
                    .map_err(|_| bad(format!("`{f}` in the {label} line is not a tick count")))?,
            );
        }
        if values.len() < 4 {
            return Err(bad(format!(
                "the {label} line has {} counters, expected at least 4",
                values.len()
            )));
        }
        let get = |i: usize| values.get(i).copied();
        let ticks = CpuTicks {
            user: values[0],
            nice: values[1],
            system: values[2],
            idle: values[3],
            iowait: get(4),
            irq: get(5),
            softirq: get(6),
            steal: get(7),
            guest: get(8),
            guest_nice: get(9),
        };
        if suffix.is_empty() {
            total = Some(ticks);
        } else {
            let id = suffix
                .parse::<u32>()
                .map_err(|_| bad(format!("`{label}` is not a CPU label")))?;
            cores.push((id, ticks));
        }
    }
    let total = total.ok_or_else(|| Error::ProcFormat {
        path: path.to_path_buf(),
        reason: "no `cpu` line".into(),
    })?;
    Ok(StatCpus {
        total,
        cores,
        procs_running,
    })
}

/// The `some` line of a pressure-stall file (`/proc/pressure/cpu`, a cgroup v2
/// `cpu.pressure`): the share of time at least one task waited for a CPU.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CpuPressure {
    /// `some avg10`: share of the last ~10 s (an exponential average) in which some runnable
    /// task waited for a CPU, 0–1 (the file says percent).
    pub some_avg10: f64,
    /// `some avg60`, 0–1.
    pub some_avg60: f64,
    /// `some total`: time some task waited since boot (or since the cgroup was made), µs.
    pub some_total_us: u64,
}

/// Parses the `some` line of a pressure-stall file (PSI, Linux ≥ 4.20; `full` is ignored).
///
/// # Errors
/// [`Error::ProcFormat`] naming `path` if there is no `some` line or its `avg10`, `avg60` or
/// `total` field is missing or not a number, or an average lies outside 0–100.
pub fn parse_cpu_pressure(text: &str, path: &Path) -> Result<CpuPressure> {
    let bad = |reason: String| Error::ProcFormat {
        path: path.to_path_buf(),
        reason,
    };
    let line = text
        .lines()
        .find(|l| l.starts_with("some "))
        .ok_or_else(|| bad("no `some` line".into()))?;
    let field = |key: &str| -> Result<&str> {
        line.split_ascii_whitespace()
            .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
            .ok_or_else(|| bad(format!("the `some` line has no `{key}`")))
    };
    let percent = |key: &str| -> Result<f64> {
        let v = field(key)?;
        match v.parse::<f64>() {
            Ok(p) if (0.0..=100.0).contains(&p) => Ok(p / 100.0),
            _ => Err(bad(format!("`{key}={v}` is not a percentage"))),
        }
    };
    let total = field("total")?;
    Ok(CpuPressure {
        some_avg10: percent("avg10")?,
        some_avg60: percent("avg60")?,
        some_total_us: total
            .parse::<u64>()
            .map_err(|_| bad(format!("`total={total}` is not a count of µs")))?,
    })
}

/// Busy share of a CPU between two readings, 0–1: Δ(busy) / Δ(total), where busy excludes
/// idle and iowait and guest time is not counted twice.
///
/// `None` when no time elapsed or a counter went backwards (CPU hot-plugged, counters reset).
pub(crate) fn utilisation(prev: &CpuModeSeconds, cur: &CpuModeSeconds) -> Option<f64> {
    let total = cur.total() - prev.total();
    let busy = cur.busy() - prev.busy();
    if total.is_nan() || total <= 0.0 || busy < -1e-9 || cur.idle < prev.idle {
        return None;
    }
    Some((busy / total).clamp(0.0, 1.0))
}

/// Rate of a monotonically increasing counter, units per second; `None` if `dt_s` is not
/// positive or the counter went backwards (reset, wrap).
pub(crate) fn counter_rate(prev: f64, cur: f64, dt_s: f64) -> Option<f64> {
    if dt_s.is_nan() || dt_s <= 0.0 || cur < prev {
        return None;
    }
    Some((cur - prev) / dt_s)
}

/// The three `/proc/meminfo` fields the monitor uses, bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemInfo {
    /// `MemTotal`, bytes.
    pub total_bytes: u64,
    /// `MemFree`, bytes.
    pub free_bytes: u64,
    /// `MemAvailable`, bytes (Linux ≥ 3.14).
    pub available_bytes: Option<u64>,
}

/// Parses `MemTotal`, `MemFree` and `MemAvailable` out of `/proc/meminfo` (values in kB).
///
/// # Errors
/// [`Error::ProcFormat`] naming `path` if `MemTotal` or `MemFree` is missing or a value of
/// those fields is not a number.
pub(crate) fn parse_meminfo(text: &str, path: &Path) -> Result<MemInfo> {
    let mut total = None;
    let mut free = None;
    let mut available = None;
    for line in text.lines() {
        let mut fields = line.split_ascii_whitespace();
        let (Some(key), Some(value)) = (fields.next(), fields.next()) else {
            continue;
        };
        let slot = match key {
            "MemTotal:" => &mut total,
            "MemFree:" => &mut free,
            "MemAvailable:" => &mut available,
            _ => continue,
        };
        let number = value.parse::<u64>().map_err(|_| Error::ProcFormat {
            path: path.to_path_buf(),
            reason: format!("`{key}` has value `{value}`, not a number"),
        })?;
        let scale = match fields.next() {
            None | Some("B") => 1,
            Some("kB") | Some("KiB") | Some("KB") => 1024,
            Some("MB") | Some("MiB") => 1024 * 1024,
            Some(unit) => {
                return Err(Error::ProcFormat {
                    path: path.to_path_buf(),
                    reason: format!("`{key}` has unknown unit `{unit}`"),
                })
            }
        };
        *slot = Some(number.saturating_mul(scale));
    }
    let missing = |field: &str| Error::ProcFormat {
        path: path.to_path_buf(),
        reason: format!("no `{field}` line"),
    };
    Ok(MemInfo {
        total_bytes: total.ok_or_else(|| missing("MemTotal"))?,
        free_bytes: free.ok_or_else(|| missing("MemFree"))?,
        available_bytes: available,
    })
}

/// Parses `/proc/loadavg`.
///
/// # Errors
/// [`Error::ProcFormat`] naming `path` if the text is not a load-average line.
pub(crate) fn parse_loadavg(text: &str, path: &Path) -> Result<LoadAverage> {
    let l =
        procfs_core::LoadAverage::from_read(text.as_bytes()).map_err(|e| Error::ProcFormat {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
    Ok(LoadAverage {
        one: f64::from(l.one),
        five: f64::from(l.five),
        fifteen: f64::from(l.fifteen),
    })
}

/// Byte counters of one network interface.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NetCounters {
    /// Interface name.
    pub name: String,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Bytes transmitted.
    pub tx_bytes: u64,
}

/// Parses `/proc/net/dev` into per-interface byte counters, sorted by name.
///
/// # Errors
/// [`Error::ProcFormat`] naming `path` if an interface line does not parse.
pub(crate) fn parse_net_dev(text: &str, path: &Path) -> Result<Vec<NetCounters>> {
    let status =
        procfs_core::net::InterfaceDeviceStatus::from_read(text.as_bytes()).map_err(|e| {
            Error::ProcFormat {
                path: path.to_path_buf(),
                reason: e.to_string(),
            }
        })?;
    let mut out: Vec<NetCounters> = status
        .0
        .into_values()
        .map(|d| NetCounters {
            name: d.name,
            rx_bytes: d.recv_bytes,
            tx_bytes: d.sent_bytes,
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// CPU time of a process (user + system, all threads, living and exited) from its
/// `/proc/<pid>/stat`, in ticks.
///
/// # Errors
/// [`Error::ProcFormat`] naming `path` if the text is not a process stat line.
pub fn parse_process_ticks(text: &str, path: &Path) -> Result<u64> {
    let stat =
        procfs_core::process::Stat::from_read(text.as_bytes()).map_err(|e| Error::ProcFormat {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })?;
    Ok(stat.utime.saturating_add(stat.stime))
}

/// The ids of the threads described by `text` that are runnable (state `R`: on a CPU or
/// waiting for one): `text` holds one `/proc/<pid>/task/<tid>/stat` line per thread, as
/// [`ProcFile::ProcessTasks`] gives them.
///
/// # Errors
/// [`Error::ProcFormat`] naming `path` if there is no thread line, or a line has no thread id
/// before its `(comm)` or no state after it.
pub fn parse_runnable_threads(text: &str, path: &Path) -> Result<BTreeSet<u32>> {
    let mut threads = 0;
    let mut runnable = BTreeSet::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let bad = || Error::ProcFormat {
            path: path.to_path_buf(),
            reason: format!(
                "line {}: not a thread stat line (`tid (comm) state …`)",
                n + 1
            ),
        };
        // The command name may hold spaces and parentheses: the state follows the last `)`.
        let (open, close) = line.find(" (").zip(line.rfind(')')).ok_or_else(bad)?;
        let tid = line[..open].trim().parse::<u32>().map_err(|_| bad())?;
        let state = line
            .get(close + 1..)
            .and_then(|rest| rest.split_ascii_whitespace().next())
            .filter(|s| s.len() == 1)
            .ok_or_else(bad)?;
        threads += 1;
        if state == "R" {
            runnable.insert(tid);
        }
    }
    if threads == 0 {
        return Err(Error::ProcFormat {
            path: path.to_path_buf(),
            reason: "no thread stat line".into(),
        });
    }
    Ok(runnable)
}

/// CPUs a process may run on (`Cpus_allowed_list` of `/proc/<pid>/status`: affinity ∩ cpuset),
/// ascending; `None` if the kernel does not report it.
///
/// # Errors
/// [`Error::ProcFormat`] naming `path` if the text is not a process status file.
pub(crate) fn parse_cpus_allowed(text: &str, path: &Path) -> Result<Option<Vec<u32>>> {
    let status = procfs_core::process::Status::from_read(text.as_bytes()).map_err(|e| {
        Error::ProcFormat {
            path: path.to_path_buf(),
            reason: e.to_string(),
        }
    })?;
    Ok(status.cpus_allowed_list.map(|ranges| {
        let mut cpus: Vec<u32> = ranges.iter().flat_map(|&(a, b)| a..=b).collect();
        cpus.sort_unstable();
        cpus.dedup();
        cpus
    }))
}

/// Everything read from `/proc` at one instant. Each optional part carries the reason it is
/// missing (`path: error`).
#[derive(Clone, Debug)]
pub struct ProcReading {
    /// CPU counters (the one part without which there is nothing to monitor).
    pub cpus: StatCpus,
    /// Host memory.
    pub memory: std::result::Result<MemInfo, String>,
    /// Load averages.
    pub load: std::result::Result<LoadAverage, String>,
    /// Network interfaces.
    pub net: std::result::Result<Vec<NetCounters>, String>,
    /// CPU ticks used by the observed process.
    pub process_ticks: std::result::Result<u64, String>,
    /// Threads of the observed process runnable when `/proc/stat` was read — state `R` just
    /// before it or just after it, each thread once — the reading thread included: the tasks of
    /// `procs_running` that are not competitors ([`ProcFile::ProcessTasksBefore`],
    /// [`ProcFile::ProcessTasks`]).
    pub own_runnable: std::result::Result<u32, String>,
    /// CPUs the observed process may run on.
    pub allowed_cpus: std::result::Result<Option<Vec<u32>>, String>,
    /// Host CPU pressure (`/proc/pressure/cpu`); `Ok(None)` where the kernel has no PSI.
    pub cpu_pressure: std::result::Result<Option<CpuPressure>, String>,
}

/// The files a [`ProcReading`] is made of, as [`ProcReading::parse`] asks for them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProcFile {
    /// `/proc/stat`: the CPU counters.
    Stat,
    /// `/proc/meminfo`.
    Meminfo,
    /// `/proc/loadavg`.
    Loadavg,
    /// `/proc/net/dev`.
    NetDev,
    /// `/proc/<pid>/stat` of the observed process.
    ProcessStat,
    /// `/proc/<pid>/status` of the observed process.
    ProcessStatus,
    /// `/proc/pressure/cpu` (absent on kernels without PSI, or with `psi=0`).
    Pressure,
    /// `/proc/<pid>/task/*/stat` of the observed process, one line per thread, read right
    /// after [`ProcFile::Stat`]; when the reading thread is not one of them (an agent observing
    /// another process), its own `/proc/thread-self/stat` line is added, so the runnable ones
    /// are the tasks `procs_running` counted that are ours.
    ProcessTasks,
    /// The same as [`ProcFile::ProcessTasks`], read right *before* [`ProcFile::Stat`]: a
    /// thread of ours that was runnable at either read is taken as counted in
    /// `procs_running` (TensorFlow's pool threads spin before they sleep, and a count taken
    /// on one side only would leave the ones that went to sleep in between to the
    /// competitors).
    ProcessTasksBefore,
}

impl ProcReading {
    /// A reading from the files `read` returns, each as its text and the path it was read from
    /// (named in errors).
    ///
    /// # Errors
    /// `read`'s error or [`Error::ProcFormat`] for [`ProcFile::Stat`] only; every other file that
    /// cannot be read or parsed leaves its part of the reading as `Err(reason)`.
    pub fn parse(
        mut read: impl FnMut(ProcFile) -> Result<(String, PathBuf)>,
    ) -> Result<ProcReading> {
        // Our runnable threads on both sides of `procs_running`, nothing else read between.
        let before = part(
            &mut read,
            ProcFile::ProcessTasksBefore,
            parse_runnable_threads,
        );
        let (text, path) = read(ProcFile::Stat)?;
        let cpus = parse_stat_cpus(&text, &path)?;
        let after = part(&mut read, ProcFile::ProcessTasks, parse_runnable_threads);
        let own_runnable = match (before, after) {
            (Ok(b), Ok(a)) => Ok(b.union(&a).count()),
            (Ok(one), Err(_)) | (Err(_), Ok(one)) => Ok(one.len()),
            (Err(_), Err(e)) => Err(e),
        }
        .map(|n| u32::try_from(n).unwrap_or(u32::MAX));
        Ok(ProcReading {
            cpus,
            own_runnable,
            memory: part(&mut read, ProcFile::Meminfo, parse_meminfo),
            load: part(&mut read, ProcFile::Loadavg, parse_loadavg),
            net: part(&mut read, ProcFile::NetDev, parse_net_dev),
            process_ticks: part(&mut read, ProcFile::ProcessStat, parse_process_ticks),
            allowed_cpus: part(&mut read, ProcFile::ProcessStatus, parse_cpus_allowed),
            cpu_pressure: match read(ProcFile::Pressure) {
                Ok((text, path)) => parse_cpu_pressure(&text, &path)
                    .map(Some)
                    .map_err(|e| e.to_string()),
                // No PSI on this kernel: a normal state, not a fault.
                Err(Error::Io { source, .. })
                    if matches!(
                        source.kind(),
                        std::io::ErrorKind::NotFound | std::io::ErrorKind::Unsupported
                    ) =>
                {
                    Ok(None)
                }
                Err(e) => Err(e.to_string()),
            },
        })
    }
}

/// One optional part of a reading: `file` read and parsed, or the reason it could not be.
fn part<T>(
    read: &mut impl FnMut(ProcFile) -> Result<(String, PathBuf)>,
    file: ProcFile,
    parse: impl FnOnce(&str, &Path) -> Result<T>,
) -> std::result::Result<T, String> {
    read(file)
        .and_then(|(text, path)| parse(&text, &path))
        .map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "cpu  10132153 290696 3084719 46828483 16683 0 25195 0 175628 0\n\
cpu0 1393280 32966 572056 13343292 6130 0 17875 0 23933 0\n\
cpu2 1393280 32966 572056 13343292 6130 0 17875 0 23933 0\n\
intr 1462898 0 0 0\n\
ctxt 115315\n\
btime 769041601\n\
processes 86031\n\
procs_running 6\n\
procs_blocked 2\n\
softirq 229245889 94 60001584 13619 5175704 2471304 28 51212741 59130143 0 51240672\n";

    fn p() -> &'static Path {
        Path::new("/proc/stat")
    }

    #[test]
    fn a_reading_is_parsed_from_the_files_asked_for_and_names_the_missing_ones() {
        let mut asked = Vec::new();
        let r = ProcReading::parse(|file| {
            asked.push(file);
            let path = PathBuf::from(format!("/fixture/{file:?}"));
            match file {
                ProcFile::Stat => Ok((STAT.to_string(), path)),
                _ => Err(Error::io(path, std::io::ErrorKind::NotFound.into())),
            }
        })
        .unwrap();
        assert_eq!(r.cpus.cores.len(), 2);
        assert!(r.memory.unwrap_err().contains("/fixture/Meminfo"));
        assert!(r
            .allowed_cpus
            .unwrap_err()
            .contains("/fixture/ProcessStatus"));
        assert_eq!(asked.len(), 9);
        assert_eq!(
            asked[..3],
            [
                ProcFile::ProcessTasksBefore,
                ProcFile::Stat,
                ProcFile::ProcessTasks
            ],
            "our threads are counted on both sides of the run queue"
        );
        assert!(r.own_runnable.unwrap_err().contains("ProcessTasks"));
        assert_eq!(r.cpus.procs_running, Some(6));
        assert_eq!(r.cpu_pressure, Ok(None), "no PSI is not a fault");
        let err =
            ProcReading::parse(|file| Ok((String::new(), PathBuf::from(format!("{file:?}")))))
                .unwrap_err();
        assert!(err.to_string().contains("Stat"), "{err}");
    }
    #[test]
    fn runnable_threads_are_counted_by_state() {
        // Recorded from a TensorFlow process starting its pools (comm with spaces and
        // parentheses, as `tf_Compute (1)` could be), and the reading thread.
        let text = "4242 (tf-iaware) S 1 4242 4242 0 -1 4194560 1 0 0 0 5 2 0 0 20 0 9 0\n\
4250 (tf_Compute (1)) R 1 4242 4242 0 -1 4194368 0 0 0 0 3 0 0 0 20 0 9 0\n\
4251 (tf_Compute) S 1 4242 4242 0 -1 4194368 0 0 0 0 0 0 0 0 20 0 9 0\n\
4252 (tf-iaware-moni) R 1 4242 4242 0 -1 4194368 0 0 0 0 0 0 0 0 20 0 9 0\n\
4253 (tf_Compute) D 1 4242 4242 0 -1 4194368 0 0 0 0 0 0 0 0 20 0 9 0\n";
        let p = Path::new("/proc/self/task");
        let ids = |t: &str| parse_runnable_threads(t, p).unwrap();
        assert_eq!(ids(text), BTreeSet::from([4250, 4252]));
        assert!(ids("1 (sleep) S 0\n").is_empty());
        for bad in [
            "",
            "\n",
            "4242 tf-iaware R 1\n",
            "4242 (x)\n",
            "4242 (x) Run 1\n",
            "x (x) R 1\n",
        ] {
            let err = parse_runnable_threads(bad, p).unwrap_err();
            assert!(
                err.to_string().contains("/proc/self/task"),
                "{bad:?}: {err}"
            );
        }
    }

    #[test]
    fn our_threads_runnable_on_either_side_of_the_run_queue_count_once() {
        // Thread 11 (the reader) is runnable in both reads, 12 was spinning before and went to
        // sleep, 13 woke up after: three of ours may be in `procs_running`.
        let before = "10 (tf) S 1\n11 (reader) R 1\n12 (tf_pool) R 1\n13 (tf_pool) S 1\n";
        let after = "10 (tf) S 1\n11 (reader) R 1\n12 (tf_pool) S 1\n13 (tf_pool) R 1\n";
        let reading = |before: Option<&'static str>, after: Option<&'static str>| {
            ProcReading::parse(|file| {
                let path = PathBuf::from(format!("/fixture/{file:?}"));
                let text = match file {
                    ProcFile::Stat => Some(STAT),
                    ProcFile::ProcessTasksBefore => before,
                    ProcFile::ProcessTasks => after,
                    _ => None,
                };
                text.map(|t| (t.to_string(), path.clone()))
                    .ok_or_else(|| Error::io(&path, std::io::ErrorKind::NotFound.into()))
            })
            .unwrap()
            .own_runnable
        };
        assert_eq!(reading(Some(before), Some(after)), Ok(3));
        assert_eq!(reading(None, Some(after)), Ok(2), "one side: its count");
        assert_eq!(reading(Some(before), None), Ok(2));
        let neither = reading(None, None).unwrap_err();
        assert!(neither.contains("ProcessTasks"), "{neither}");
    }

    #[test]
    fn stat_keeps_cpu_numbers() {
        let s = parse_stat_cpus(STAT, p()).unwrap();
        assert_eq!(s.total.user, 10132153);
        assert_eq!(s.total.guest, Some(175628));
        assert_eq!(
            s.cores.iter().map(|c| c.0).collect::<Vec<_>>(),
            vec![0, 2],
            "offline cpu1 must not shift cpu2's number"
        );
    }

    #[test]
    fn cpu_pressure_some_line() {
        // Recorded on this project's 2-core build host (kernel 6.x).
        let text = "some avg10=18.34 avg60=29.52 avg300=14.65 total=62590289\n\
                    full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";
        let psi = parse_cpu_pressure(text, Path::new("/proc/pressure/cpu")).unwrap();
        assert!((psi.some_avg10 - 0.1834).abs() < 1e-12);
        assert!((psi.some_avg60 - 0.2952).abs() < 1e-12);
        assert_eq!(psi.some_total_us, 62590289);
        for bad in [
            "",
            "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n",
            "some avg10=x avg60=1 total=1\n",
            "some avg10=101 avg60=1 total=1\n",
            "some avg10=1 avg60=1\n",
        ] {
            let err = parse_cpu_pressure(bad, Path::new("/proc/pressure/cpu")).unwrap_err();
            assert!(err.to_string().contains("/proc/pressure/cpu"), "{err}");
        }
        assert!(parse_stat_cpus("cpu 1 2 3 4\nprocs_running x\n", p()).is_err());
    }

    #[test]
    fn stat_old_kernel_has_optional_fields() {
        let s = parse_stat_cpus("cpu 1 2 3 4\ncpu0 1 2 3 4\n", p()).unwrap();
        assert_eq!(s.total.iowait, None);
        assert_eq!(s.cores[0].1.steal, None);
    }

    #[test]
    fn stat_rejects_garbage() {
        for bad in [
            "",
            "intr 1 2\n",
            "cpu 1 2 x 4\n",
            "cpu 1 2\n",
            "cpu 1 2 3 4\ncpuX 1 2 3 4\n",
            "cpu 1 2 3 99999999999999999999999\n",
        ] {
            let err = parse_stat_cpus(bad, p()).unwrap_err();
            assert!(err.to_string().contains("/proc/stat"), "{err}");
        }
    }

    #[test]
    fn utilisation_is_delta_and_ignores_guest_double_count() {
        let tps = 100;
        let a = CpuTicks {
            user: 1000,
            nice: 0,
            system: 500,
            idle: 8000,
            iowait: Some(500),
            guest: Some(0),
            ..Default::default()
        }
        .to_seconds(tps);
        // 100 ticks elapse: 30 user (of which 20 guest), 10 system, 50 idle, 10 iowait.
        let b = CpuTicks {
            user: 1030,
            nice: 0,
            system: 510,
            idle: 8050,
            iowait: Some(510),
            guest: Some(20),
            ..Default::default()
        }
        .to_seconds(tps);
        let u = utilisation(&a, &b).unwrap();
        assert!((u - 0.4).abs() < 1e-12, "{u}");
        assert_eq!(utilisation(&a, &a), None);
        assert_eq!(utilisation(&b, &a), None, "counters going backwards");
    }

    #[test]
    fn counter_rates() {
        assert_eq!(counter_rate(100.0, 300.0, 2.0), Some(100.0));
        assert_eq!(counter_rate(300.0, 100.0, 2.0), None);
        assert_eq!(counter_rate(1.0, 2.0, 0.0), None);
    }

    #[test]
    fn meminfo() {
        let text = "MemTotal:       24568324 kB\nMemFree:        23001000 kB\nMemAvailable:   23500000 kB\nBuffers:  1 kB\n";
        let m = parse_meminfo(text, Path::new("/proc/meminfo")).unwrap();
        assert_eq!(m.total_bytes, 24568324 * 1024);
        assert_eq!(m.available_bytes, Some(23500000 * 1024));
        let old = parse_meminfo("MemTotal: 10 kB\nMemFree: 5 kB\n", Path::new("m")).unwrap();
        assert_eq!(old.available_bytes, None);
        assert!(parse_meminfo("MemFree: 5 kB\n", Path::new("m")).is_err());
        assert!(parse_meminfo("MemTotal: x kB\nMemFree: 5 kB\n", Path::new("m")).is_err());
        assert!(parse_meminfo("MemTotal: 1 parsecs\nMemFree: 5 kB\n", Path::new("m")).is_err());
    }

    #[test]
    fn loadavg_and_net_dev() {
        let l = parse_loadavg("0.52 0.58 0.59 2/345 12345\n", Path::new("l")).unwrap();
        assert_eq!(l.one, f64::from(0.52f32));
        assert!(parse_loadavg("garbage\n", Path::new("l")).is_err());
        let dev = "Inter-|   Receive                                                |  Transmit\n face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    lo:  123456     100    0    0    0     0          0         0   123456     100    0    0    0     0       0          0\n  eth0: 987654321  5000    0    0    0     0          0         0 12345678    4000    0    0    0     0       0          0\n";
        let n = parse_net_dev(dev, Path::new("d")).unwrap();
        assert_eq!(n[0].name, "eth0");
        assert_eq!(n[0].rx_bytes, 987654321);
        assert_eq!(n[0].tx_bytes, 12345678);
        assert_eq!(n[1].name, "lo");
        assert!(parse_net_dev("h\nh\n  eth0: 1 2\n", Path::new("d")).is_err());
    }

    #[test]
    fn process_files() {
        let stat = "4242 (my (odd) name) S 1 4242 4242 0 -1 4194304 94 0 0 0 150 50 0 0 20 0 1 0 201288208 5738496 225 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 4 0 0 0 0 0 0 0 0 0 0 0 0 0";
        assert_eq!(parse_process_ticks(stat, Path::new("s")).unwrap(), 200);
        assert!(parse_process_ticks("nonsense", Path::new("s")).is_err());
        let status = "Name:\tx\nUmask:\t0022\nState:\tS (sleeping)\nTgid:\t1\nNgid:\t0\nPid:\t1\nPPid:\t0\nTracerPid:\t0\nUid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\nFDSize:\t64\nGroups:\t\nNStgid:\t1\nNSpid:\t1\nNSpgid:\t1\nNSsid:\t1\nThreads:\t1\nSigQ:\t0/1\nSigPnd:\t0\nShdPnd:\t0\nSigBlk:\t0\nSigIgn:\t0\nSigCgt:\t0\nCapInh:\t0\nCapPrm:\t0\nCapEff:\t0\nCapBnd:\t0\nCapAmb:\t0\nCpus_allowed:\t3b\nCpus_allowed_list:\t0-1,3-5\n";
        assert_eq!(
            parse_cpus_allowed(status, Path::new("s")).unwrap(),
            Some(vec![0, 1, 3, 4, 5])
        );
    }
}

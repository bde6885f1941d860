//! The observed process's control group, v1 and v2: where its CPU and memory controllers are
//! ([`locate`], pure over `/proc/<pid>/cgroup` and `/proc/self/mountinfo`), what a reading is
//! made of ([`CgroupLayout::read`], pure over the controller files' text), and (in `tf-iaware`)
//! `CgroupSource`, the thin layer that reads the files.
//!
//! Containers and emulated nodes are defined by these files, so the limit is taken over the
//! whole ancestry: a CFS quota (v1 `cpu.cfs_quota_us / cpu.cfs_period_us`, v2 `cpu.max`) or a
//! memory limit on any ancestor bounds the process as much as one on its own cgroup.
//! In hybrid layouts (v1 and v2 mounted together) a v1 controller wins over the unified tree.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use procfs_core::FromRead;

use crate::error::{Error, Result};

/// Memory limits at or above this many bytes mean "unlimited" (v1 reports
/// `PAGE_COUNTER_MAX × page size`, 9223372036854771712 on x86-64).
pub(crate) const UNLIMITED_MEMORY_BYTES: u64 = 1 << 62;

/// Parses a cpuset/affinity list such as `0-3,5,7-8` into ascending CPU numbers.
///
/// # Errors
/// [`Error::ProcFormat`] naming `path` for anything but comma-separated numbers and ranges.
pub(crate) fn parse_cpu_list(text: &str, path: &Path) -> Result<Vec<u32>> {
    let bad = |reason: String| Error::ProcFormat {
        path: path.to_path_buf(),
        reason,
    };
    let mut cpus = Vec::new();
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (a, b),
            None => (part, part),
        };
        let a: u32 = a
            .parse()
            .map_err(|_| bad(format!("`{part}` is not a CPU number or range")))?;
        let b: u32 = b
            .parse()
            .map_err(|_| bad(format!("`{part}` is not a CPU number or range")))?;
        if b < a || b - a > 65_535 {
            return Err(bad(format!("`{part}` is not a valid CPU range")));
        }
        cpus.extend(a..=b);
    }
    cpus.sort_unstable();
    cpus.dedup();
    Ok(cpus)
}

/// Parses one unsigned integer (a whole file such as `cpuacct.usage`).
///
/// # Errors
/// [`Error::ProcFormat`] naming `path` if the text is not one unsigned integer.
pub(crate) fn parse_u64(text: &str, path: &Path) -> Result<u64> {
    let t = text.trim();
    t.parse().map_err(|_| Error::ProcFormat {
        path: path.to_path_buf(),
        reason: format!("`{t}` is not an unsigned integer"),
    })
}

/// The thread ids a cgroup's thread list names (v1 `tasks`, v2 `cgroup.threads`: one id per
/// line), in file order.
///
/// # Errors
/// [`Error::ProcFormat`] naming `path` for a line that is not a thread id.
pub fn parse_thread_ids(text: &str, path: &Path) -> Result<Vec<u32>> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(|l| parse_u64(l, path).and_then(|v| u32::try_from(v).map_err(|_| bad_tid(path, l))))
        .collect()
}

fn bad_tid(path: &Path, line: &str) -> Error {
    Error::ProcFormat {
        path: path.to_path_buf(),
        reason: format!("`{line}` is not a thread id"),
    }
}

/// CPU quota in cores from v1 `cpu.cfs_quota_us` and `cpu.cfs_period_us` (µs);
/// `None` when the quota is `-1` (unlimited).
///
/// # Errors
/// [`Error::ProcFormat`] naming `path` if either value is not a number or the period is 0.
pub(crate) fn parse_cfs_quota(quota: &str, period: &str, path: &Path) -> Result<Option<f64>> {
    let q = quota.trim();
    let q: i64 = q.parse().map_err(|_| Error::ProcFormat {
        path: path.to_path_buf(),
        reason: format!("cpu.cfs_quota_us is `{q}`, not a number"),
    })?;
    if q < 0 {
        return Ok(None);
    }
    let p = parse_u64(period, path)?;
    if p == 0 {
        return Err(Error::ProcFormat {
            path: path.to_path_buf(),
            reason: "cpu.cfs_period_us is 0".into(),
        });
    }
    Ok(Some(q as f64 / p as f64))
}

/// CPU quota in cores from v2 `cpu.max` (`$MAX $PERIOD`, µs); `None` when `$MAX` is `max`.
///
/// # Errors
/// [`Error::ProcFormat`] naming `path` for any other format or a zero period.
pub(crate) fn parse_cpu_max(text: &str, path: &Path) -> Result<Option<f64>> {
    let bad = |reason: String| Error::ProcFormat {
        path: path.to_path_buf(),
        reason,
    };
    let mut f = text.split_ascii_whitespace();
    let (Some(max), period) = (f.next(), f.next()) else {
        return Err(bad("empty cpu.max".into()));
    };
    if max == "max" {
        return Ok(None);
    }
    let max: u64 = max
        .parse()
        .map_err(|_| bad(format!("quota `{max}` is not a number")))?;
    let period: u64 = match period {
        None => 100_000,
        Some(p) => p
            .parse()
            .map_err(|_| bad(format!("period `{p}` is not a number")))?,
    };
    if period == 0 {
        return Err(bad("period is 0".into()));
    }
    Ok(Some(max as f64 / period as f64))
}

/// Memory limit in bytes from v1 `memory.limit_in_bytes` or v2 `memory.max`; `None` when
/// unlimited (`max`, or at least `UNLIMITED_MEMORY_BYTES`).
///
/// # Errors
/// [`Error::ProcFormat`] naming `path` if the text is neither `max` nor a number.
pub(crate) fn parse_memory_limit(text: &str, path: &Path) -> Result<Option<u64>> {
    if text.trim() == "max" {
        return Ok(None);
    }
    let v = parse_u64(text, path)?;
    Ok((v < UNLIMITED_MEMORY_BYTES).then_some(v))
}

/// Parses a flat keyed file (`cpu.stat`, `memory.stat`: `key value` per line). Lines whose
/// value is not an unsigned integer are skipped.
pub(crate) fn parse_keyed(text: &str) -> BTreeMap<&str, u64> {
    text.lines()
        .filter_map(|line| {
            let mut f = line.split_ascii_whitespace();
            let key = f.next()?;
            let value = f.next()?.parse().ok()?;
            Some((key, value))
        })
        .collect()
}

/// One controller's place in the file system.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ControllerDir {
    /// 1 or 2.
    pub version: u8,
    /// Path of the process's cgroup within the hierarchy (`/` is the hierarchy's root).
    pub path: String,
    /// Where the hierarchy is mounted (under the monitor's file-system root).
    pub mount: PathBuf,
    /// The cgroup's directory (`mount` + `path`).
    pub dir: PathBuf,
}

impl ControllerDir {
    /// The cgroup's directory and its ancestors up to the mount point, leaf first.
    pub(crate) fn levels(&self) -> Vec<PathBuf> {
        let mut out = vec![self.dir.clone()];
        let mut cur = self.dir.as_path();
        while cur != self.mount {
            match cur.parent() {
                Some(p) if p.starts_with(&self.mount) => {
                    out.push(p.to_path_buf());
                    cur = p;
                }
                _ => break,
            }
        }
        out
    }
}

/// Where the process's CPU, CPU-accounting and memory controllers are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CgroupLayout {
    /// The CPU controller (v1 `cpu`, or the unified v2 tree).
    pub cpu: ControllerDir,
    /// v1 `cpuacct`, when mounted (on v2 usage is in `cpu.stat`).
    pub cpuacct: Option<ControllerDir>,
    /// v1 `memory` or the unified v2 tree.
    pub memory: Option<ControllerDir>,
}

/// Finds the process's CPU, cpuacct and memory cgroups from the text of `/proc/<pid>/cgroup`
/// and `/proc/self/mountinfo`; mount points are taken relative to `root`.
///
/// # Errors
/// [`Error::ProcFormat`] if either text does not parse or no mounted hierarchy carries the
/// CPU controller (or the unified tree) for this process.
pub fn locate(
    cgroup_text: &str,
    cgroup_path: &Path,
    mountinfo_text: &str,
    mountinfo_path: &Path,
    root: &Path,
) -> Result<CgroupLayout> {
    let groups = procfs_core::ProcessCGroups::from_read(cgroup_text.as_bytes()).map_err(|e| {
        Error::ProcFormat {
            path: cgroup_path.to_path_buf(),
            reason: e.to_string(),
        }
    })?;
    let mounts =
        procfs_core::process::MountInfos::from_read(mountinfo_text.as_bytes()).map_err(|e| {
            Error::ProcFormat {
                path: mountinfo_path.to_path_buf(),
                reason: e.to_string(),
            }
        })?;
    let find_v1 = |controller: &str| -> Option<ControllerDir> {
        let group = groups
            .0
            .iter()
            .find(|g| g.hierarchy != 0 && g.controllers.iter().any(|c| c == controller))?;
        mounts
            .iter()
            .filter(|m| m.fs_type == "cgroup" && m.super_options.contains_key(controller))
            .find_map(|m| controller_dir(1, &group.pathname, &m.root, &m.mount_point, root))
    };
    let unified = || -> Option<ControllerDir> {
        let group = groups
            .0
            .iter()
            .find(|g| g.hierarchy == 0 && g.controllers.is_empty())?;
        mounts
            .iter()
            .filter(|m| m.fs_type == "cgroup2")
            .find_map(|m| controller_dir(2, &group.pathname, &m.root, &m.mount_point, root))
    };
    let (cpu, cpuacct) = match find_v1("cpu") {
        Some(cpu) => (cpu, find_v1("cpuacct")),
        None => match unified() {
            Some(u) => (u, None),
            None => {
                return Err(Error::ProcFormat {
                    path: cgroup_path.to_path_buf(),
                    reason: "the process is in no mounted cgroup hierarchy with the cpu \
                             controller (v1) and in no mounted unified (v2) hierarchy"
                        .into(),
                })
            }
        },
    };
    let memory = find_v1("memory").or_else(unified);
    Ok(CgroupLayout {
        cpu,
        cpuacct,
        memory,
    })
}

/// The cgroup dir of `pathname` in a hierarchy whose mount shows `mount_root` at `mount_point`;
/// `None` if the cgroup is outside what that mount shows.
fn controller_dir(
    version: u8,
    pathname: &str,
    mount_root: &str,
    mount_point: &Path,
    root: &Path,
) -> Option<ControllerDir> {
    let rel = if mount_root == "/" {
        pathname
    } else {
        let rest = pathname.strip_prefix(mount_root)?;
        if !(rest.is_empty() || rest.starts_with('/')) {
            return None;
        }
        rest
    };
    let rel = rel.trim_start_matches('/');
    if rel.split('/').any(|c| c == "..") {
        return None;
    }
    let mount = root.join(mount_point.strip_prefix("/").unwrap_or(mount_point));
    let dir = if rel.is_empty() {
        mount.clone()
    } else {
        mount.join(rel)
    };
    Some(ControllerDir {
        version,
        path: format!("/{rel}"),
        mount,
        dir,
    })
}

/// Reads one cgroup file for [`CgroupLayout::read`]: its text, `Ok(None)` when it does not
/// exist, `Err(reason)` (naming the file) when it cannot be read.
pub type FileReader<'a> = dyn FnMut(&Path) -> std::result::Result<Option<String>, String> + 'a;

impl CgroupLayout {
    /// Reads every file of the located cgroup through `read` (a file's text, `Ok(None)` when it
    /// does not exist, `Err(reason)` naming it when it cannot be read). For a v1 CPU cgroup
    /// without a matching `cpuacct` group, `summed_seconds(dir)` gives the CPU time of the
    /// processes in the cgroup at `dir` instead. Files that cannot be read or parsed leave their
    /// fields `None` with a note.
    pub fn read(
        &self,
        mut read: impl FnMut(&Path) -> std::result::Result<Option<String>, String>,
        summed_seconds: impl FnOnce(&Path) -> std::result::Result<f64, String>,
    ) -> CgroupReading {
        let layout = self;
        let mut r = CgroupReading {
            version: layout.cpu.version,
            path: layout.cpu.path.clone(),
            ..Default::default()
        };
        let cpu = &layout.cpu;
        // cpuacct mirrors the cpu hierarchy when co-mounted or when both show the same path (the
        // systemd layout); otherwise its numbers describe a different group and are not used.
        let cpuacct = layout
            .cpuacct
            .as_ref()
            .filter(|a| a.path == cpu.path || a.mount == cpu.mount);
        for (depth, level) in cpu.levels().into_iter().enumerate() {
            let mut lv = CpuLevel::default();
            let note = |r: &mut CgroupReading, e: String| {
                if depth == 0 {
                    r.notes.push(e)
                }
            };
            if cpu.version == 1 {
                let q = level.join("cpu.cfs_quota_us");
                match (read(&q), read(&level.join("cpu.cfs_period_us"))) {
                    (Ok(Some(quota)), Ok(Some(period))) => {
                        match parse_cfs_quota(&quota, &period, &q) {
                            Ok(v) => lv.quota_cores = v,
                            Err(e) => note(&mut r, e.to_string()),
                        }
                    }
                    (Err(e), _) | (_, Err(e)) => note(&mut r, e),
                    _ => {}
                }
                if let Some(acct) = cpuacct {
                    let rel = level.strip_prefix(&cpu.mount).unwrap_or(Path::new(""));
                    let p = acct.mount.join(rel).join("cpuacct.usage");
                    match read(&p) {
                        Ok(Some(t)) => match parse_u64(&t, &p) {
                            Ok(ns) => lv.usage_seconds = Some(ns as f64 / 1e9),
                            Err(e) => note(&mut r, e.to_string()),
                        },
                        Ok(None) => {}
                        Err(e) => note(&mut r, e),
                    }
                }
            } else {
                let p = level.join("cpu.max");
                match read(&p) {
                    Ok(Some(t)) => match parse_cpu_max(&t, &p) {
                        Ok(v) => lv.quota_cores = v,
                        Err(e) => note(&mut r, e.to_string()),
                    },
                    Ok(None) => {}
                    Err(e) => note(&mut r, e),
                }
                if let Ok(Some(t)) = read(&level.join("cpu.stat")) {
                    lv.usage_seconds = parse_keyed(&t).get("usage_usec").map(|us| *us as f64 / 1e6);
                }
            }
            if depth == 0 && cpu.version == 2 {
                // PSI per cgroup (Linux ≥ 4.20 with PSI on): how long this group's tasks waited.
                let p = level.join("cpu.pressure");
                match read(&p) {
                    Ok(Some(t)) => match crate::monitor::proc::parse_cpu_pressure(&t, &p) {
                        Ok(v) => r.cpu_pressure = Some(v),
                        Err(e) => r.notes.push(e.to_string()),
                    },
                    Ok(None) => {}
                    Err(e) => r.notes.push(e),
                }
            }
            if depth == 0 {
                let p = level.join("cpu.stat");
                match read(&p) {
                    Ok(Some(t)) => {
                        let k = parse_keyed(&t);
                        r.periods = k.get("nr_periods").copied();
                        r.throttled_periods = k.get("nr_throttled").copied();
                        r.throttled_seconds = if cpu.version == 1 {
                            k.get("throttled_time").map(|ns| *ns as f64 / 1e9)
                        } else {
                            k.get("throttled_usec").map(|us| *us as f64 / 1e6)
                        };
                    }
                    Ok(None) => {}
                    Err(e) => r.notes.push(e),
                }
            }
            r.levels.push(lv);
        }
        // v1 without a matching cpuacct group (it is mounted apart and the process sits elsewhere
        // in it): sum the CPU time of the cgroup's processes instead.
        if cpu.version == 1 && r.levels.first().is_some_and(|l| l.usage_seconds.is_none()) {
            match summed_seconds(&cpu.dir) {
                Ok(s) => r.levels[0].usage_seconds = Some(s),
                Err(e) => r.notes.push(format!(
                    "cgroup CPU usage unknown: no cpuacct group matches the cpu cgroup {} and {e}",
                    cpu.path
                )),
            }
        }
        if let Some(mem) = &layout.memory {
            read_memory(mem, &mut read, &mut r);
        }
        r
    }
}

impl ControllerDir {
    /// What the processes of this memory cgroup may still allocate before a limit on it or on an
    /// enclosing cgroup stops them: the least, over the levels with a limit, of the limit less
    /// that level's working set (usage less inactive file cache, which the kernel reclaims
    /// first), bytes; `None` when no level has a limit. Files are read through `read` (see
    /// [`CgroupLayout::read`]); a level whose usage cannot be read counts its whole limit.
    pub fn memory_headroom(&self, read: &mut FileReader<'_>) -> Option<u64> {
        let (limit_file, usage_file, inactive_key) = memory_files(self.version);
        let value = |read: &mut FileReader<'_>, p: PathBuf| read(&p).ok().flatten();
        self.levels()
            .into_iter()
            .filter_map(|level| {
                let text = value(read, level.join(limit_file))?;
                let limit = parse_memory_limit(&text, &level).ok()??;
                let usage = value(read, level.join(usage_file))
                    .and_then(|t| parse_u64(&t, &level).ok())
                    .unwrap_or(0);
                let inactive = value(read, level.join("memory.stat"))
                    .and_then(|t| parse_keyed(&t).get(inactive_key).copied())
                    .unwrap_or(0);
                Some(limit.saturating_sub(usage.saturating_sub(inactive)))
            })
            .min()
    }
}

/// The limit file, the usage file and `memory.stat`'s inactive-file key of cgroup `version`.
fn memory_files(version: u8) -> (&'static str, &'static str, &'static str) {
    if version == 1 {
        (
            "memory.limit_in_bytes",
            "memory.usage_in_bytes",
            "total_inactive_file",
        )
    } else {
        ("memory.max", "memory.current", "inactive_file")
    }
}

fn read_memory(mem: &ControllerDir, read: &mut FileReader<'_>, r: &mut CgroupReading) {
    let (limit_file, usage_file, inactive_key) = memory_files(mem.version);
    for level in mem.levels() {
        let p = level.join(limit_file);
        match read(&p) {
            Ok(Some(t)) => match parse_memory_limit(&t, &p) {
                Ok(Some(v)) => {
                    r.memory_limit_bytes = Some(r.memory_limit_bytes.map_or(v, |cur| cur.min(v)))
                }
                Ok(None) => {}
                Err(e) => r.notes.push(e.to_string()),
            },
            Ok(None) => {}
            Err(e) => r.notes.push(e),
        }
    }
    let p = mem.dir.join(usage_file);
    match read(&p) {
        Ok(Some(t)) => match parse_u64(&t, &p) {
            Ok(v) => r.memory_usage_bytes = Some(v),
            Err(e) => r.notes.push(e.to_string()),
        },
        Ok(None) => {}
        Err(e) => r.notes.push(e),
    }
    if let Ok(Some(t)) = read(&mem.dir.join("memory.stat")) {
        let k = parse_keyed(&t);
        r.memory_inactive_file_bytes = k
            .get(inactive_key)
            .or_else(|| k.get("inactive_file"))
            .copied();
    }
}

/// CPU quota and usage of one level of the CPU hierarchy.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CpuLevel {
    /// Quota of this level, cores (`None`: none set).
    pub quota_cores: Option<f64>,
    /// CPU time used by all tasks below this level, seconds (`None`: not measurable).
    pub usage_seconds: Option<f64>,
}

/// One reading of the process's cgroup.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CgroupReading {
    /// 1 or 2 (of the CPU controller).
    pub version: u8,
    /// Path of the CPU cgroup within its hierarchy.
    pub path: String,
    /// The CPU cgroup and its ancestors, leaf first.
    pub levels: Vec<CpuLevel>,
    /// `nr_periods` of the leaf.
    pub periods: Option<u64>,
    /// `nr_throttled` of the leaf.
    pub throttled_periods: Option<u64>,
    /// Throttled time of the leaf, seconds.
    pub throttled_seconds: Option<f64>,
    /// CPU pressure of the leaf (v2 `cpu.pressure`; `None` on v1 or without PSI).
    pub cpu_pressure: Option<crate::monitor::proc::CpuPressure>,
    /// Threads of the leaf that were runnable (state `R`) when it was read and are neither the
    /// observed process's nor the reader's: the co-tenants competing for its quota, counted as
    /// the host's run queue is (`None`: not counted — no quota, the root group, or its thread
    /// list unreadable, with a note).
    pub others_runnable: Option<u32>,
    /// Tightest memory limit over the memory cgroup's ancestry, bytes.
    pub memory_limit_bytes: Option<u64>,
    /// Memory charged to the memory cgroup, bytes.
    pub memory_usage_bytes: Option<u64>,
    /// Inactive file cache of the memory cgroup, bytes.
    pub memory_inactive_file_bytes: Option<u64>,
    /// Why parts of the reading are missing.
    pub notes: Vec<String>,
}

impl CgroupReading {
    /// Tightest quota over all levels, cores.
    pub fn quota_cores(&self) -> Option<f64> {
        self.levels
            .iter()
            .filter_map(|l| l.quota_cores)
            .reduce(f64::min)
    }

    /// CPU time used by the leaf cgroup, seconds.
    pub fn usage_seconds(&self) -> Option<f64> {
        self.levels.first().and_then(|l| l.usage_seconds)
    }

    /// Usage less inactive file cache, bytes.
    pub fn memory_working_set_bytes(&self) -> Option<u64> {
        self.memory_usage_bytes
            .map(|u| u.saturating_sub(self.memory_inactive_file_bytes.unwrap_or(0)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_v2_reading_is_made_from_the_files_text() {
        let dir = ControllerDir {
            version: 2,
            path: "/job".into(),
            mount: PathBuf::from("/sys/fs/cgroup"),
            dir: PathBuf::from("/sys/fs/cgroup/job"),
        };
        let layout = CgroupLayout {
            cpu: dir.clone(),
            cpuacct: None,
            memory: Some(dir),
        };
        let files: BTreeMap<&str, &str> = [
            ("/sys/fs/cgroup/job/cpu.max", "50000 100000\n"),
            (
                "/sys/fs/cgroup/job/cpu.stat",
                "usage_usec 2000000\nnr_periods 10\nnr_throttled 2\nthrottled_usec 500000\n",
            ),
            ("/sys/fs/cgroup/job/memory.max", "max\n"),
            ("/sys/fs/cgroup/job/memory.current", "1000\n"),
            ("/sys/fs/cgroup/job/memory.stat", "inactive_file 100\n"),
            ("/sys/fs/cgroup/cpu.max", "garbage"),
        ]
        .into();
        let r = layout.read(
            |path| Ok(files.get(path.to_str().unwrap()).map(|t| t.to_string())),
            |_| panic!("v2 never sums processes"),
        );
        assert_eq!(r.levels.len(), 2);
        assert_eq!(r.quota_cores(), Some(0.5));
        assert_eq!(r.usage_seconds(), Some(2.0));
        assert_eq!((r.periods, r.throttled_periods), (Some(10), Some(2)));
        assert_eq!(r.throttled_seconds, Some(0.5));
        assert_eq!(r.memory_limit_bytes, None);
        assert_eq!(r.memory_working_set_bytes(), Some(900));
        // The root's unparsable cpu.max is not the leaf's: no note, no quota from it.
        assert!(r.notes.is_empty(), "{:?}", r.notes);
    }

    #[test]
    fn memory_headroom_is_the_tightest_level_less_its_working_set() {
        let leaf = |version, mount: &str, rel: &str| ControllerDir {
            version,
            path: format!("/{rel}"),
            mount: PathBuf::from(mount),
            dir: PathBuf::from(format!("{mount}/{rel}")),
        };
        let headroom = |dir: &ControllerDir, files: &[(&str, &str)]| {
            let files: BTreeMap<&str, &str> = files.iter().copied().collect();
            dir.memory_headroom(&mut |path: &Path| {
                Ok(files.get(path.to_str().unwrap()).map(|t| t.to_string()))
            })
        };
        // v1: the parent's 1 GiB with 600 MiB working set is tighter than the leaf's 2 GiB.
        let v1 = leaf(1, "/m", "a/b");
        let got = headroom(
            &v1,
            &[
                ("/m/a/b/memory.limit_in_bytes", "2147483648\n"),
                ("/m/a/b/memory.usage_in_bytes", "104857600\n"),
                ("/m/a/memory.limit_in_bytes", "1073741824\n"),
                ("/m/a/memory.usage_in_bytes", "734003200\n"),
                (
                    "/m/a/memory.stat",
                    "total_inactive_file 104857600\ncache 5\n",
                ),
                ("/m/memory.limit_in_bytes", "9223372036854771712\n"),
            ],
        );
        assert_eq!(got, Some((1024 - 600) << 20));
        // v2: `max` everywhere is no limit; usage above the limit is no headroom, not a wrap.
        let v2 = leaf(2, "/u", "job");
        assert_eq!(headroom(&v2, &[("/u/job/memory.max", "max\n")]), None);
        let over = [
            ("/u/job/memory.max", "1000\n"),
            ("/u/job/memory.current", "5000\n"),
        ];
        assert_eq!(headroom(&v2, &over), Some(0));
        // A limit whose usage cannot be read counts whole; garbage limits are no limit.
        assert_eq!(headroom(&v2, &[("/u/job/memory.max", "4096")]), Some(4096));
        assert_eq!(headroom(&v2, &[("/u/job/memory.max", "lots")]), None);
    }

    fn p() -> &'static Path {
        Path::new("f")
    }

    #[test]
    fn thread_lists() {
        let path = Path::new("/sys/fs/cgroup/cpu/w/tasks");
        assert_eq!(
            parse_thread_ids("4242\n4250\n\n17\n", path).unwrap(),
            [4242, 4250, 17]
        );
        assert!(parse_thread_ids("", path).unwrap().is_empty());
        for bad in ["x\n", "-1\n", "4294967296\n", "12 13\n"] {
            let err = parse_thread_ids(bad, path).unwrap_err().to_string();
            assert!(err.contains("w/tasks"), "{bad:?}: {err}");
        }
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(
            parse_cpu_list("0-3,5,7-8\n", p()).unwrap(),
            vec![0, 1, 2, 3, 5, 7, 8]
        );
        assert_eq!(parse_cpu_list("\n", p()).unwrap(), Vec::<u32>::new());
        for bad in ["a", "3-1", "1-", "0-99999999"] {
            assert!(parse_cpu_list(bad, p()).is_err(), "{bad}");
        }
    }

    #[test]
    fn quotas() {
        assert_eq!(
            parse_cfs_quota("50000\n", "100000\n", p()).unwrap(),
            Some(0.5)
        );
        assert_eq!(parse_cfs_quota("-1\n", "100000\n", p()).unwrap(), None);
        assert!(parse_cfs_quota("x", "100000", p()).is_err());
        assert!(parse_cfs_quota("1", "0", p()).is_err());
        assert_eq!(parse_cpu_max("150000 100000\n", p()).unwrap(), Some(1.5));
        assert_eq!(parse_cpu_max("max 100000\n", p()).unwrap(), None);
        assert!(parse_cpu_max("", p()).is_err());
        assert!(parse_cpu_max("1 0", p()).is_err());
        assert!(parse_cpu_max("lots 100000", p()).is_err());
    }

    #[test]
    fn memory_limits() {
        assert_eq!(parse_memory_limit("max\n", p()).unwrap(), None);
        assert_eq!(
            parse_memory_limit("9223372036854771712\n", p()).unwrap(),
            None
        );
        assert_eq!(
            parse_memory_limit("536870912\n", p()).unwrap(),
            Some(536870912)
        );
        assert!(parse_memory_limit("-5", p()).is_err());
    }

    #[test]
    fn keyed_files() {
        let k = parse_keyed("nr_periods 10\nnr_throttled 3\nthrottled_time 12345\nbad x\n\n");
        assert_eq!(k.get("nr_throttled"), Some(&3));
        assert_eq!(k.get("bad"), None);
    }

    const MOUNTINFO_HYBRID: &str =
        include_str!("../../tests/fixtures/monitor/mountinfo_hybrid.txt");

    #[test]
    fn locate_v1_separate_hierarchies() {
        let cg = "4:memory:/box\n2:cpuacct:/\n1:cpu:/box/inner\n0::/\n";
        let l = locate(cg, p(), MOUNTINFO_HYBRID, p(), Path::new("/")).unwrap();
        assert_eq!(l.cpu.version, 1);
        assert_eq!(l.cpu.path, "/box/inner");
        assert_eq!(l.cpu.dir, PathBuf::from("/sys/fs/cgroup/cpu/box/inner"));
        assert_eq!(
            l.cpu.levels(),
            vec![
                PathBuf::from("/sys/fs/cgroup/cpu/box/inner"),
                PathBuf::from("/sys/fs/cgroup/cpu/box"),
                PathBuf::from("/sys/fs/cgroup/cpu"),
            ]
        );
        assert_eq!(l.cpuacct.as_ref().unwrap().path, "/");
        assert_eq!(
            l.memory.as_ref().unwrap().dir,
            PathBuf::from("/sys/fs/cgroup/memory/box")
        );
    }

    #[test]
    fn locate_v1_comounted_and_container_root() {
        let mi = "\
100 99 0:40 /docker/abc /sys/fs/cgroup/cpu,cpuacct ro,nosuid - cgroup cgroup rw,cpu,cpuacct
101 99 0:41 /docker/abc /sys/fs/cgroup/memory ro,nosuid - cgroup cgroup rw,memory
";
        let cg = "5:cpu,cpuacct:/docker/abc\n3:memory:/docker/abc\n";
        let l = locate(cg, p(), mi, p(), Path::new("/")).unwrap();
        assert_eq!(l.cpu.path, "/");
        assert_eq!(l.cpu.dir, PathBuf::from("/sys/fs/cgroup/cpu,cpuacct"));
        assert_eq!(l.cpuacct.as_ref().unwrap().dir, l.cpu.dir);
        assert_eq!(l.cpu.levels().len(), 1);
    }

    #[test]
    fn locate_v2_only() {
        let mi = "30 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime - cgroup2 cgroup2 rw,nsdelegate\n";
        let cg = "0::/user.slice/user-1000.slice/session-3.scope\n";
        let l = locate(cg, p(), mi, p(), Path::new("/tmp/root")).unwrap();
        assert_eq!(l.cpu.version, 2);
        assert_eq!(
            l.cpu.dir,
            PathBuf::from("/tmp/root/sys/fs/cgroup/user.slice/user-1000.slice/session-3.scope")
        );
        assert_eq!(l.memory.as_ref().unwrap().version, 2);
        assert!(l.cpuacct.is_none());
    }

    #[test]
    fn locate_failures_name_the_file() {
        let err = locate(
            "0::/\n",
            Path::new("/proc/7/cgroup"),
            "",
            p(),
            Path::new("/"),
        )
        .unwrap_err();
        assert!(err.to_string().contains("/proc/7/cgroup"), "{err}");
        assert!(locate("garbage", p(), MOUNTINFO_HYBRID, p(), Path::new("/")).is_err());
        // A cgroup outside what the mount shows is not resolved.
        let mi = "100 99 0:40 /docker/abc /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n";
        assert!(locate("1:cpu:/other\n", p(), mi, p(), Path::new("/")).is_err());
    }
}

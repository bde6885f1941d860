//! The observed process's control group, v1 and v2: where its CPU and memory controllers are
//! ([`locate`], pure over `/proc/<pid>/cgroup` and `/proc/self/mountinfo`), pure parsers for
//! the controller files, and [`CgroupSource`], the thin layer that reads them.
//!
//! Containers and emulated nodes are defined by these files, so the limit is taken over the
//! whole ancestry: a CFS quota (v1 `cpu.cfs_quota_us / cpu.cfs_period_us`, v2 `cpu.max`) or a
//! memory limit on any ancestor bounds the process as much as one on its own cgroup.
//! In hybrid layouts (v1 and v2 mounted together) a v1 controller wins over the unified tree.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use procfs::FromRead;

use crate::error::{Error, Result};
use crate::monitor::proc::read_text;

/// Memory limits at or above this many bytes mean "unlimited" (v1 reports
/// `PAGE_COUNTER_MAX × page size`, 9223372036854771712 on x86-64).
pub const UNLIMITED_MEMORY_BYTES: u64 = 1 << 62;

/// Parses a cpuset/affinity list such as `0-3,5,7-8` into ascending CPU numbers.
///
/// # Errors
/// [`Error::ProcFormat`] naming `path` for anything but comma-separated numbers and ranges.
pub fn parse_cpu_list(text: &str, path: &Path) -> Result<Vec<u32>> {
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
pub fn parse_u64(text: &str, path: &Path) -> Result<u64> {
    let t = text.trim();
    t.parse().map_err(|_| Error::ProcFormat {
        path: path.to_path_buf(),
        reason: format!("`{t}` is not an unsigned integer"),
    })
}

/// CPU quota in cores from v1 `cpu.cfs_quota_us` and `cpu.cfs_period_us` (µs);
/// `None` when the quota is `-1` (unlimited).
///
/// # Errors
/// [`Error::ProcFormat`] naming `path` if either value is not a number or the period is 0.
pub fn parse_cfs_quota(quota: &str, period: &str, path: &Path) -> Result<Option<f64>> {
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
pub fn parse_cpu_max(text: &str, path: &Path) -> Result<Option<f64>> {
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
/// unlimited (`max`, or at least [`UNLIMITED_MEMORY_BYTES`]).
///
/// # Errors
/// [`Error::ProcFormat`] naming `path` if the text is neither `max` nor a number.
pub fn parse_memory_limit(text: &str, path: &Path) -> Result<Option<u64>> {
    if text.trim() == "max" {
        return Ok(None);
    }
    let v = parse_u64(text, path)?;
    Ok((v < UNLIMITED_MEMORY_BYTES).then_some(v))
}

/// Parses a flat keyed file (`cpu.stat`, `memory.stat`: `key value` per line). Lines whose
/// value is not an unsigned integer are skipped.
pub fn parse_keyed(text: &str) -> BTreeMap<&str, u64> {
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
    pub fn levels(&self) -> Vec<PathBuf> {
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
    let groups = procfs::ProcessCGroups::from_read(cgroup_text.as_bytes()).map_err(|e| {
        Error::ProcFormat {
            path: cgroup_path.to_path_buf(),
            reason: e.to_string(),
        }
    })?;
    let mounts =
        procfs::process::MountInfos::from_read(mountinfo_text.as_bytes()).map_err(|e| {
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

/// Reads the live cgroup files of one process. Re-reads `/proc/<pid>/cgroup` every time and
/// locates the controllers again when the process has moved.
#[derive(Debug)]
pub struct CgroupSource {
    root: PathBuf,
    proc_dir: PathBuf,
    cgroup_file: PathBuf,
    mountinfo_file: PathBuf,
    located: Option<(String, CgroupLayout)>,
}

impl CgroupSource {
    /// Reads the cgroup of the process whose `/proc` directory is `process_dir`, resolving mount
    /// points (from `<proc_dir>/self/mountinfo`) under `root`.
    pub fn new(root: &Path, proc_dir: &Path, process_dir: &Path) -> Self {
        CgroupSource {
            root: root.to_path_buf(),
            proc_dir: proc_dir.to_path_buf(),
            cgroup_file: process_dir.join("cgroup"),
            mountinfo_file: proc_dir.join("self/mountinfo"),
            located: None,
        }
    }

    /// Locates (if needed) and reads the cgroup.
    ///
    /// # Errors
    /// [`Error::Io`] / [`Error::ProcFormat`] if the process's cgroup cannot be located; files of
    /// the cgroup that cannot be read leave their fields `None` with a note.
    pub fn read(&mut self) -> Result<CgroupReading> {
        let cgroup_text = read_text(&self.cgroup_file)?;
        let layout = match &self.located {
            Some((text, layout)) if *text == cgroup_text => layout.clone(),
            _ => {
                let mountinfo = read_text(&self.mountinfo_file)?;
                let layout = locate(
                    &cgroup_text,
                    &self.cgroup_file,
                    &mountinfo,
                    &self.mountinfo_file,
                    &self.root,
                )?;
                self.located = Some((cgroup_text, layout.clone()));
                layout
            }
        };
        Ok(read_layout(&layout, &self.proc_dir))
    }
}

/// Reads a file that may legitimately be absent: `Ok(None)` when it does not exist.
fn read_optional(path: &Path) -> std::result::Result<Option<String>, String> {
    match std::fs::read_to_string(path) {
        Ok(t) => Ok(Some(t)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io(path, e).to_string()),
    }
}

/// Most processes whose CPU times are summed when a v1 cgroup has no `cpuacct` of its own.
const MAX_SUMMED_PROCESSES: usize = 1024;

/// CPU time of the processes now in the cgroup at `dir` (from their `<proc_dir>/<pid>/stat`),
/// seconds. Processes that exit meanwhile are skipped.
fn summed_task_seconds(dir: &Path, proc_dir: &Path) -> std::result::Result<f64, String> {
    let procs = dir.join("cgroup.procs");
    let text = read_text(&procs).map_err(|e| e.to_string())?;
    let pids: Vec<&str> = text.split_ascii_whitespace().collect();
    if pids.len() > MAX_SUMMED_PROCESSES {
        return Err(format!(
            "{} holds {} processes, more than the {MAX_SUMMED_PROCESSES} summed",
            procs.display(),
            pids.len()
        ));
    }
    let mut ticks = 0u64;
    for pid in pids {
        let stat = proc_dir.join(pid).join("stat");
        if let Ok(t) = std::fs::read_to_string(&stat) {
            if let Ok(v) = crate::monitor::proc::parse_process_ticks(&t, &stat) {
                ticks = ticks.saturating_add(v);
            }
        }
    }
    Ok(ticks as f64 / crate::monitor::proc::ticks_per_second() as f64)
}

/// Reads every file of a located cgroup (the I/O half of [`CgroupSource::read`]); process
/// files are read under `proc_dir`.
pub fn read_layout(layout: &CgroupLayout, proc_dir: &Path) -> CgroupReading {
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
            match (
                read_optional(&q),
                read_optional(&level.join("cpu.cfs_period_us")),
            ) {
                (Ok(Some(quota)), Ok(Some(period))) => match parse_cfs_quota(&quota, &period, &q) {
                    Ok(v) => lv.quota_cores = v,
                    Err(e) => note(&mut r, e.to_string()),
                },
                (Err(e), _) | (_, Err(e)) => note(&mut r, e),
                _ => {}
            }
            if let Some(acct) = cpuacct {
                let rel = level.strip_prefix(&cpu.mount).unwrap_or(Path::new(""));
                let p = acct.mount.join(rel).join("cpuacct.usage");
                match read_optional(&p) {
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
            match read_optional(&p) {
                Ok(Some(t)) => match parse_cpu_max(&t, &p) {
                    Ok(v) => lv.quota_cores = v,
                    Err(e) => note(&mut r, e.to_string()),
                },
                Ok(None) => {}
                Err(e) => note(&mut r, e),
            }
            if let Ok(Some(t)) = read_optional(&level.join("cpu.stat")) {
                lv.usage_seconds = parse_keyed(&t).get("usage_usec").map(|us| *us as f64 / 1e6);
            }
        }
        if depth == 0 {
            let p = level.join("cpu.stat");
            match read_optional(&p) {
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
        match summed_task_seconds(&cpu.dir, proc_dir) {
            Ok(s) => r.levels[0].usage_seconds = Some(s),
            Err(e) => r.notes.push(format!(
                "cgroup CPU usage unknown: no cpuacct group matches the cpu cgroup {} and {e}",
                cpu.path
            )),
        }
    }
    if let Some(mem) = &layout.memory {
        read_memory(mem, &mut r);
    }
    r
}

fn read_memory(mem: &ControllerDir, r: &mut CgroupReading) {
    let (limit_file, usage_file, inactive_key) = if mem.version == 1 {
        (
            "memory.limit_in_bytes",
            "memory.usage_in_bytes",
            "total_inactive_file",
        )
    } else {
        ("memory.max", "memory.current", "inactive_file")
    };
    for level in mem.levels() {
        let p = level.join(limit_file);
        match read_optional(&p) {
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
    match read_optional(&p) {
        Ok(Some(t)) => match parse_u64(&t, &p) {
            Ok(v) => r.memory_usage_bytes = Some(v),
            Err(e) => r.notes.push(e.to_string()),
        },
        Ok(None) => {}
        Err(e) => r.notes.push(e),
    }
    if let Ok(Some(t)) = read_optional(&mem.dir.join("memory.stat")) {
        let k = parse_keyed(&t);
        r.memory_inactive_file_bytes = k
            .get(inactive_key)
            .or_else(|| k.get("inactive_file"))
            .copied();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p() -> &'static Path {
        Path::new("f")
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

    const MOUNTINFO_HYBRID: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

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

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn reads_v1_tree_with_ancestor_quota() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        let cpu = r.join("sys/fs/cgroup/cpu");
        write(&cpu.join("cpu.cfs_quota_us"), "-1\n");
        write(&cpu.join("cpu.cfs_period_us"), "100000\n");
        write(&cpu.join("box/cpu.cfs_quota_us"), "150000\n");
        write(&cpu.join("box/cpu.cfs_period_us"), "100000\n");
        write(&cpu.join("box/inner/cpu.cfs_quota_us"), "300000\n");
        write(&cpu.join("box/inner/cpu.cfs_period_us"), "100000\n");
        write(
            &cpu.join("box/inner/cpu.stat"),
            "nr_periods 50\nnr_throttled 7\nthrottled_time 2500000000\n",
        );
        let acct = r.join("sys/fs/cgroup/cpuacct");
        write(&acct.join("cpuacct.usage"), "900000000000\n");
        write(&acct.join("box/cpuacct.usage"), "3000000000\n");
        write(&acct.join("box/inner/cpuacct.usage"), "2000000000\n");
        let mem = r.join("sys/fs/cgroup/memory");
        write(&mem.join("memory.limit_in_bytes"), "9223372036854771712\n");
        write(&mem.join("box/memory.limit_in_bytes"), "1073741824\n");
        write(&mem.join("box/inner/memory.limit_in_bytes"), "2147483648\n");
        write(&mem.join("box/inner/memory.usage_in_bytes"), "600000000\n");
        write(
            &mem.join("box/inner/memory.stat"),
            "cache 1\ninactive_file 5\ntotal_inactive_file 100000000\n",
        );
        let proc_dir = r.join("proc");
        write(&proc_dir.join("self/mountinfo"), MOUNTINFO_HYBRID);
        write(
            &proc_dir.join("42/cgroup"),
            "4:memory:/box/inner\n2:cpuacct:/box/inner\n1:cpu:/box/inner\n0::/\n",
        );
        let mut src = CgroupSource::new(r, &proc_dir, &proc_dir.join("42"));
        let reading = src.read().unwrap();
        assert_eq!(reading.version, 1);
        assert_eq!(reading.path, "/box/inner");
        assert_eq!(
            reading.quota_cores(),
            Some(1.5),
            "the ancestor's quota is tighter"
        );
        assert_eq!(reading.usage_seconds(), Some(2.0));
        assert_eq!(reading.levels[1].usage_seconds, Some(3.0));
        assert_eq!(reading.throttled_periods, Some(7));
        assert_eq!(reading.throttled_seconds, Some(2.5));
        assert_eq!(reading.memory_limit_bytes, Some(1073741824));
        assert_eq!(reading.memory_working_set_bytes(), Some(500000000));
        assert!(reading.notes.is_empty(), "{:?}", reading.notes);

        // The process moves: the new cgroup is located again; its cpuacct path differs.
        write(
            &proc_dir.join("42/cgroup"),
            "4:memory:/box/inner\n2:cpuacct:/\n1:cpu:/box\n0::/\n",
        );
        let reading = src.read().unwrap();
        assert_eq!(reading.path, "/box");
        assert_eq!(reading.usage_seconds(), None);
        assert!(
            reading.notes[0].contains("cgroup.procs"),
            "{:?}",
            reading.notes
        );
        // ... unless the cgroup's processes can be summed.
        write(&cpu.join("box/cgroup.procs"), "42\n43\n");
        write(
            &proc_dir.join("42/stat"),
            "42 (a) S 1 1 1 0 -1 0 0 0 0 0 150 50 0 0 20 0 1 0 1 1 1 1 1 1 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0 0 0 0 0 0 0 0 0",
        );
        write(
            &proc_dir.join("43/stat"),
            "43 (b) S 1 1 1 0 -1 0 0 0 0 0 100 0 0 0 20 0 1 0 1 1 1 1 1 1 0 0 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0 0 0 0 0 0 0 0 0",
        );
        let reading = src.read().unwrap();
        let tps = crate::monitor::proc::ticks_per_second() as f64;
        assert_eq!(reading.usage_seconds(), Some(300.0 / tps));
        assert!(reading.notes.is_empty(), "{:?}", reading.notes);
    }

    #[test]
    fn reads_v2_tree() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        let cg = r.join("sys/fs/cgroup");
        write(&cg.join("cpu.stat"), "usage_usec 99000000\n");
        write(&cg.join("job/cpu.max"), "max 100000\n");
        write(&cg.join("job/memory.max"), "max\n");
        write(&cg.join("job/w1/cpu.max"), "50000 100000\n");
        write(
            &cg.join("job/w1/cpu.stat"),
            "usage_usec 1500000\nuser_usec 1000000\nsystem_usec 500000\nnr_periods 30\nnr_throttled 12\nthrottled_usec 700000\n",
        );
        write(&cg.join("job/w1/memory.max"), "268435456\n");
        write(&cg.join("job/w1/memory.current"), "1000\n");
        write(
            &cg.join("job/w1/memory.stat"),
            "anon 900\ninactive_file 100\n",
        );
        let proc_dir = r.join("proc");
        write(
            &proc_dir.join("self/mountinfo"),
            "30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
        );
        write(&proc_dir.join("self/cgroup"), "0::/job/w1\n");
        let mut src = CgroupSource::new(r, &proc_dir, &proc_dir.join("self"));
        let reading = src.read().unwrap();
        assert_eq!(reading.version, 2);
        assert_eq!(reading.quota_cores(), Some(0.5));
        assert_eq!(reading.usage_seconds(), Some(1.5));
        assert_eq!(reading.levels.len(), 3);
        assert_eq!(reading.levels[2].usage_seconds, Some(99.0));
        assert_eq!(reading.throttled_periods, Some(12));
        assert_eq!(reading.throttled_seconds, Some(0.7));
        assert_eq!(reading.memory_limit_bytes, Some(268435456));
        assert_eq!(reading.memory_working_set_bytes(), Some(900));
        assert!(reading.notes.is_empty(), "{:?}", reading.notes);
    }

    #[test]
    fn malformed_leaf_files_become_notes() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        let cg = r.join("sys/fs/cgroup");
        write(&cg.join("a/cpu.max"), "lots\n");
        write(&cg.join("a/memory.current"), "many\n");
        let proc_dir = r.join("proc");
        write(
            &proc_dir.join("self/mountinfo"),
            "30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
        );
        write(&proc_dir.join("self/cgroup"), "0::/a\n");
        let mut src = CgroupSource::new(r, &proc_dir, &proc_dir.join("self"));
        let reading = src.read().unwrap();
        assert_eq!(reading.quota_cores(), None);
        assert_eq!(reading.notes.len(), 2, "{:?}", reading.notes);
        // No cgroup file at all: an error naming it.
        let mut gone = CgroupSource::new(r, &proc_dir, &proc_dir.join("999"));
        assert!(gone.read().unwrap_err().to_string().contains("999/cgroup"));
    }

    #[test]
    fn live_cgroup_reads() {
        let mut src =
            CgroupSource::new(Path::new("/"), Path::new("/proc"), Path::new("/proc/self"));
        match src.read() {
            Ok(r) => assert!(r.version == 1 || r.version == 2),
            Err(e) => eprintln!("no cgroup here: {e}"),
        }
    }
}

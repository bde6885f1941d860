//! CPU-quota cgroups for emulated nodes (v1 `cpu` controller, or v2 `cpu.max`), removed on drop.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tf_iaware::{Error, Result};

/// CFS period the quotas are expressed in, µs. Short, so a throttled step is not quantised to
/// 100 ms slices (the kernel default), which would make calibration noisy.
const PERIOD_US: u64 = 20_000;

/// Prefix of every cgroup tf-iaware creates; the creating process's pid follows.
pub(crate) const PREFIX: &str = "tf-iaware-";

/// Where CPU cgroups can be created on this machine, if anywhere writable.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Hierarchy {
    /// cgroup v1 `cpu` controller mount.
    V1(PathBuf),
    /// cgroup v2 unified mount with the `cpu` controller enabled for children.
    V2(PathBuf),
}

impl Hierarchy {
    /// Detects a writable CPU hierarchy, or says why there is none.
    pub(crate) fn detect() -> std::result::Result<Hierarchy, String> {
        let v1 = Path::new("/sys/fs/cgroup/cpu");
        if v1.join("cpu.cfs_quota_us").is_file() {
            return writable(v1).map(|_| Hierarchy::V1(v1.into()));
        }
        let v2 = Path::new("/sys/fs/cgroup");
        match std::fs::read_to_string(v2.join("cgroup.subtree_control")) {
            Ok(c) if c.split_whitespace().any(|x| x == "cpu") => {
                writable(v2).map(|_| Hierarchy::V2(v2.into()))
            }
            Ok(_) => Err(
                "cgroup v2 is mounted but the cpu controller is not enabled for children".into(),
            ),
            Err(_) => Err("no cgroup cpu controller is mounted".into()),
        }
    }

    fn root(&self) -> &Path {
        match self {
            Hierarchy::V1(p) | Hierarchy::V2(p) => p,
        }
    }
}

fn writable(dir: &Path) -> std::result::Result<(), String> {
    let probe = dir.join(format!("{PREFIX}probe-{}", std::process::id()));
    std::fs::create_dir(&probe)
        .map_err(|e| format!("cannot create cgroups under {}: {e}", dir.display()))?;
    let _ = std::fs::remove_dir(&probe);
    Ok(())
}

/// An emulated node: a cgroup with a CPU quota and two children that split it — `tf` (the
/// TensorFlow server) gets `(1 − busy)` of the quota, `cotenant` (a hog that always wants CPU)
/// gets `busy` of it. CFS weights (`cpu.shares`) would not do: they only arbitrate threads that
/// share a runqueue, and on a multi-core machine the hog and TensorFlow rarely do. Processes are
/// moved out and the groups removed on drop.
#[derive(Debug)]
pub(crate) struct CpuCgroup {
    path: PathBuf,
    hierarchy: Hierarchy,
}

impl CpuCgroup {
    /// Creates `PREFIX<pid>-<name>` with a quota of `cores` CPUs, split `1 − busy : busy`
    /// between its `tf` and `cotenant` children. `name` must be unique within the process.
    ///
    /// # Errors
    /// [`Error::Io`] naming the cgroup file that could not be written.
    pub(crate) fn create(
        hierarchy: &Hierarchy,
        name: &str,
        cores: f64,
        busy: f64,
    ) -> Result<CpuCgroup> {
        let path = hierarchy
            .root()
            .join(format!("{PREFIX}{}-{name}", std::process::id()));
        for dir in [path.clone(), path.join("tf"), path.join("cotenant")] {
            // A name must be new: another live cluster's group is not ours to reconfigure.
            std::fs::create_dir(&dir).map_err(|e| Error::io(&dir, e))?;
        }
        if let Hierarchy::V2(_) = hierarchy {
            write(&path.join("cgroup.subtree_control"), "+cpu")?;
        }
        let group = CpuCgroup {
            path,
            hierarchy: hierarchy.clone(),
        };
        group.set_quota(cores)?;
        group.set_busy(cores, busy)?;
        Ok(group)
    }

    /// Sets the CPU quota of the whole node, cores (re-splitting it with the current busy share).
    ///
    /// # Errors
    /// [`Error::Io`] naming the file.
    pub(crate) fn set_quota(&self, cores: f64) -> Result<()> {
        quota(&self.hierarchy, &self.path, cores)
    }

    /// Splits the node's quota: `busy` of it to the co-tenant, the rest to TensorFlow.
    ///
    /// # Errors
    /// [`Error::Io`] naming the file.
    pub(crate) fn set_busy(&self, cores: f64, busy: f64) -> Result<()> {
        let busy = busy.clamp(0.0, 0.99);
        quota(&self.hierarchy, &self.path.join("tf"), cores * (1.0 - busy))?;
        quota(
            &self.hierarchy,
            &self.path.join("cotenant"),
            (cores * busy).max(0.01),
        )
    }

    /// Moves the TensorFlow server `pid` into the node.
    ///
    /// # Errors
    /// [`Error::Io`] naming `cgroup.procs`.
    pub(crate) fn add_tf(&self, pid: u32) -> Result<()> {
        write(&self.path.join("tf/cgroup.procs"), &pid.to_string())
    }

    /// Moves a co-tenant `pid` into the node.
    ///
    /// # Errors
    /// [`Error::Io`] naming `cgroup.procs`.
    pub(crate) fn add_cotenant(&self, pid: u32) -> Result<()> {
        write(&self.path.join("cotenant/cgroup.procs"), &pid.to_string())
    }

    /// The node's folder.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }
}

/// Writes a quota of `cores` CPUs to the group at `path`.
fn quota(hierarchy: &Hierarchy, path: &Path, cores: f64) -> Result<()> {
    let quota = ((cores * PERIOD_US as f64).round() as u64).max(1000);
    match hierarchy {
        Hierarchy::V1(_) => {
            write(&path.join("cpu.cfs_period_us"), &PERIOD_US.to_string())?;
            write(&path.join("cpu.cfs_quota_us"), &quota.to_string())
        }
        Hierarchy::V2(_) => write(&path.join("cpu.max"), &format!("{quota} {PERIOD_US}")),
    }
}

fn write(path: &Path, value: &str) -> Result<()> {
    std::fs::write(path, value).map_err(|e| Error::io(path, e))
}

/// Moves any remaining processes to the root group and removes `path` and its children.
pub(crate) fn remove(path: &Path, root: &Path) {
    if let Ok(entries) = std::fs::read_dir(path) {
        for e in entries.flatten() {
            if e.path().is_dir() {
                remove(&e.path(), root);
            }
        }
    }
    if let Ok(procs) = std::fs::read_to_string(path.join("cgroup.procs")) {
        for pid in procs.split_whitespace() {
            let _ = std::fs::write(root.join("cgroup.procs"), pid);
        }
    }
    if let Err(e) = std::fs::remove_dir(path) {
        log::debug!("could not remove cgroup {} yet: {e}", path.display());
    }
}

impl Drop for CpuCgroup {
    fn drop(&mut self) {
        // A process that was just killed leaves the group only once the kernel has reaped it.
        for _ in 0..40 {
            remove(&self.path, self.hierarchy.root());
            if !self.path.exists() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(25));
        }
        log::warn!("could not remove cgroup {}", self.path.display());
    }
}

/// The pid in the name of a tf-iaware cgroup (`tf-iaware-<pid>-…`): the process that made it.
fn owner_of(name: &str) -> Option<u32> {
    name.strip_prefix(PREFIX)?.split('-').next()?.parse().ok()
}

/// The tf-iaware cgroups of `hierarchy` whose maker `whose` picks.
fn groups_of(hierarchy: &Hierarchy, whose: impl Fn(u32) -> bool) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(hierarchy.root()) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| {
            owner_of(&e.file_name().to_string_lossy()).is_some_and(&whose) && e.path().is_dir()
        })
        .map(|e| e.path())
        .collect()
}

/// Removes tf-iaware cgroups left behind by processes that no longer exist (a killed run).
pub(crate) fn remove_stale(hierarchy: &Hierarchy) {
    for group in groups_of(hierarchy, |pid| {
        !Path::new(&format!("/proc/{pid}")).exists()
    }) {
        remove(&group, hierarchy.root());
    }
}

/// SIGKILLs every process in the group at `path` and its children.
fn kill_members(path: &Path) {
    if let Ok(entries) = std::fs::read_dir(path) {
        for e in entries.flatten() {
            if e.path().is_dir() {
                kill_members(&e.path());
            }
        }
    }
    let procs = std::fs::read_to_string(path.join("cgroup.procs")).unwrap_or_default();
    for pid in procs
        .split_whitespace()
        .filter_map(|p| p.parse::<i32>().ok())
    {
        // SAFETY: kill(2); a member of a tf-iaware group of a dead driver is one of its tasks.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}

/// Kills whatever is left in the cgroups process `owner` made and removes them, waiting up to
/// `within` for killed processes to leave; returns how many it removed.
pub(crate) fn remove_owned(hierarchy: &Hierarchy, owner: u32, within: Duration) -> usize {
    let deadline = Instant::now() + within;
    let mut removed = 0;
    for group in groups_of(hierarchy, |pid| pid == owner) {
        loop {
            kill_members(&group);
            remove(&group, hierarchy.root());
            if !group.exists() {
                removed += 1;
                break;
            }
            if Instant::now() >= deadline {
                log::warn!("could not remove cgroup {}", group.display());
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_groups_maker_is_the_pid_in_its_name() {
        assert_eq!(owner_of("tf-iaware-4242-0-worker1"), Some(4242));
        assert_eq!(owner_of("tf-iaware-probe-17"), None);
        assert_eq!(owner_of("user.slice"), None);
    }
}

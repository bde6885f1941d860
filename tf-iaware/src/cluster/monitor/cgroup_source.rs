//! `CgroupSource`: the thin layer that reads the observed process's cgroup files; where the
//! controllers are and what a reading is made of are [`tf_iaware_core::monitor::cgroup`]'s
//! (public as `tf_iaware::cluster::monitor::cgroup`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use tf_iaware_core::monitor::cgroup::*;

use crate::cluster::monitor::proc::{parse_runnable_threads, read_text};
use crate::error::{Error, Result};

/// Reads the live cgroup files of one process. Re-reads `/proc/<pid>/cgroup` every time and
/// locates the controllers again when the process has moved.
#[derive(Debug)]
pub(crate) struct CgroupSource {
    root: PathBuf,
    proc_dir: PathBuf,
    process_dir: PathBuf,
    cgroup_file: PathBuf,
    mountinfo_file: PathBuf,
    located: Option<(String, CgroupLayout)>,
}

impl CgroupSource {
    /// Reads the cgroup of the process whose `/proc` directory is `process_dir`, resolving mount
    /// points (from `<proc_dir>/self/mountinfo`) under `root`.
    pub(crate) fn new(root: &Path, proc_dir: &Path, process_dir: &Path) -> Self {
        CgroupSource {
            root: root.to_path_buf(),
            proc_dir: proc_dir.to_path_buf(),
            process_dir: process_dir.to_path_buf(),
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
    pub(crate) fn read(&mut self) -> Result<CgroupReading> {
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
        let mut reading = layout.read(read_optional, |dir| {
            summed_task_seconds(dir, &self.proc_dir)
        });
        // Co-tenants inside a quota compete for it: count them where there is one.
        if reading.quota_cores().is_some() && reading.path != "/" {
            match self.others_runnable(&layout.cpu) {
                Ok(n) => reading.others_runnable = n,
                Err(e) => reading.notes.push(e),
            }
        }
        Ok(reading)
    }

    /// The runnable threads of the cgroup at `cpu` that are neither the observed process's nor
    /// the reading thread ([`CgroupReading::others_runnable`]); `Ok(None)` when the cgroup has
    /// no thread list. Threads that end while they are read are skipped.
    fn others_runnable(&self, cpu: &ControllerDir) -> std::result::Result<Option<u32>, String> {
        let list = cpu.dir.join(if cpu.version == 1 {
            "tasks"
        } else {
            "cgroup.threads"
        });
        let Some(text) = read_optional(&list)? else {
            return Ok(None);
        };
        let tids = parse_thread_ids(&text, &list).map_err(|e| e.to_string())?;
        if tids.len() > MAX_COUNTED_THREADS {
            return Err(format!(
                "{} holds {} threads, more than the {MAX_COUNTED_THREADS} counted",
                list.display(),
                tids.len()
            ));
        }
        let mut ours: BTreeSet<u32> = std::fs::read_dir(self.process_dir.join("task"))
            .map(|dir| {
                dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                    .collect()
            })
            .unwrap_or_default();
        if let Some(me) = std::fs::read_link(self.proc_dir.join("thread-self"))
            .ok()
            .and_then(|l| l.file_name()?.to_str()?.parse().ok())
        {
            ours.insert(me);
        }
        let mut stats = String::new();
        for tid in tids.into_iter().filter(|t| !ours.contains(t)) {
            if let Ok(line) =
                std::fs::read_to_string(self.proc_dir.join(tid.to_string()).join("stat"))
            {
                stats.push_str(line.trim_end());
                stats.push('\n');
            }
        }
        if stats.is_empty() {
            return Ok(Some(0));
        }
        let runnable = parse_runnable_threads(&stats, &list).map_err(|e| e.to_string())?;
        Ok(Some(u32::try_from(runnable.len()).unwrap_or(u32::MAX)))
    }
}

/// Most threads of a quota'd cgroup whose state is read to count its runnable co-tenants.
const MAX_COUNTED_THREADS: usize = 4096;

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
            if let Ok(v) = crate::cluster::monitor::proc::parse_process_ticks(&t, &stat) {
                ticks = ticks.saturating_add(v);
            }
        }
    }
    Ok(ticks as f64 / crate::cluster::monitor::proc::ticks_per_second() as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hybrid v1 + v2 host (the core's parser tests read the same fixture).
    const MOUNTINFO_HYBRID: &str =
        include_str!("../../../../tf-iaware-core/tests/fixtures/monitor/mountinfo_hybrid.txt");

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    /// `root/proc`, with a mount table of a pure cgroup v2 host at `/sys/fs/cgroup`.
    fn v2_proc(root: &Path) -> std::path::PathBuf {
        let proc_dir = root.join("proc");
        write(
            &proc_dir.join("self/mountinfo"),
            "30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
        );
        proc_dir
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
        let tps = crate::cluster::monitor::proc::ticks_per_second() as f64;
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
        let proc_dir = v2_proc(r);
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
    fn the_runnable_co_tenants_of_a_quota_are_counted_without_ours() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        let cg = r.join("sys/fs/cgroup");
        write(&cg.join("w/cpu.max"), "100000 100000\n");
        // Ours: 42 (runnable) and 43; co-tenants: 50 and 51 runnable, 52 asleep, 53 gone.
        write(&cg.join("w/cgroup.threads"), "42\n43\n50\n51\n52\n53\n");
        let proc_dir = v2_proc(r);
        write(&proc_dir.join("42/cgroup"), "0::/w\n");
        for (tid, state) in [(42, 'R'), (43, 'S'), (50, 'R'), (51, 'R'), (52, 'S')] {
            let line = format!("{tid} (t {tid}) {state} 1 42 42 0 -1\n");
            write(&proc_dir.join(format!("{tid}/stat")), &line);
            if tid < 50 {
                write(&proc_dir.join(format!("42/task/{tid}/stat")), &line);
            }
        }
        let mut src = CgroupSource::new(r, &proc_dir, &proc_dir.join("42"));
        let reading = src.read().unwrap();
        assert_eq!(reading.others_runnable, Some(2));
        assert!(reading.notes.is_empty(), "{:?}", reading.notes);
        // A garbled thread list is a note naming it, and the count unknown.
        write(&cg.join("w/cgroup.threads"), "42\nforty\n");
        let reading = src.read().unwrap();
        assert_eq!(reading.others_runnable, None);
        assert!(
            reading.notes[0].contains("w/cgroup.threads"),
            "{:?}",
            reading.notes
        );
        // No quota: nothing competes for one, nothing is counted.
        write(&cg.join("w/cpu.max"), "max 100000\n");
        assert_eq!(src.read().unwrap().others_runnable, None);
    }

    #[test]
    fn malformed_leaf_files_become_notes() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        let cg = r.join("sys/fs/cgroup");
        write(&cg.join("a/cpu.max"), "lots\n");
        write(&cg.join("a/memory.current"), "many\n");
        let proc_dir = v2_proc(r);
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

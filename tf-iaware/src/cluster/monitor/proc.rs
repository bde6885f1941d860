//! `ProcSource`: the thin layer that reads the live `/proc` files of the host and of one
//! process; the parsers and arithmetic over its text are [`tf_iaware_core::monitor::proc`]'s,
//! re-exported here.

use std::path::{Path, PathBuf};

pub use tf_iaware_core::monitor::proc::*;

use crate::error::{Error, Result};

/// Reads the live `/proc` files of the host and of one process.
#[derive(Clone, Debug)]
pub(crate) struct ProcSource {
    proc_dir: PathBuf,
    process_dir: PathBuf,
    /// The reading thread belongs to the observed process (it observes itself).
    reader_inside: bool,
}

impl ProcSource {
    /// Reads `<root>/proc`, observing process `pid` (`None`: this process, `/proc/self`).
    pub(crate) fn new(root: &Path, pid: Option<u32>) -> Self {
        let proc_dir = root.join("proc");
        let process_dir = match pid {
            Some(pid) => proc_dir.join(pid.to_string()),
            None => proc_dir.join("self"),
        };
        ProcSource {
            proc_dir,
            process_dir,
            reader_inside: pid.is_none_or(|p| p == std::process::id()),
        }
    }

    /// `<root>/proc`.
    pub(crate) fn proc_dir(&self) -> &Path {
        &self.proc_dir
    }

    /// `<root>/proc/<pid>` or `<root>/proc/self`.
    pub(crate) fn process_dir(&self) -> &Path {
        &self.process_dir
    }

    /// Reads every `/proc` file the monitor uses.
    ///
    /// # Errors
    /// [`Error::Io`] or [`Error::ProcFormat`] for `/proc/stat` only; every other file that cannot
    /// be read or parsed leaves its part of the reading as `Err(reason)`.
    pub(crate) fn read(&self) -> Result<ProcReading> {
        ProcReading::parse(|file| {
            let path = match file {
                ProcFile::Stat => self.proc_dir.join("stat"),
                ProcFile::Meminfo => self.proc_dir.join("meminfo"),
                ProcFile::Loadavg => self.proc_dir.join("loadavg"),
                ProcFile::NetDev => self.proc_dir.join("net/dev"),
                ProcFile::ProcessStat => self.process_dir.join("stat"),
                ProcFile::ProcessStatus => self.process_dir.join("status"),
                ProcFile::Pressure => self.proc_dir.join("pressure/cpu"),
                ProcFile::ProcessTasks | ProcFile::ProcessTasksBefore => return self.task_stats(),
            };
            Ok((read_text(&path)?, path))
        })
    }

    /// The `stat` lines of the observed process's threads (`<pid>/task/*/stat`), and the
    /// reading thread's own (`thread-self/stat`) when it is not one of them
    /// ([`ProcFile::ProcessTasks`], [`ProcFile::ProcessTasksBefore`]). A thread that ends while
    /// the folder is read is skipped.
    fn task_stats(&self) -> Result<(String, PathBuf)> {
        let dir = self.process_dir.join("task");
        let mut text = String::new();
        for entry in std::fs::read_dir(&dir).map_err(|e| Error::io(&dir, e))? {
            let entry = entry.map_err(|e| Error::io(&dir, e))?;
            match std::fs::read_to_string(entry.path().join("stat")) {
                Ok(line) => text.push_str(line.trim_end()),
                // Exited between the listing and the read (ENOENT, or ESRCH from the kernel).
                Err(_) => continue,
            }
            text.push('\n');
        }
        if !self.reader_inside {
            text.push_str(read_text(&self.proc_dir.join("thread-self/stat"))?.trim_end());
            text.push('\n');
        }
        Ok((text, dir))
    }

    /// Host name (`/proc/sys/kernel/hostname`), if readable.
    pub(crate) fn hostname(&self) -> Option<String> {
        let text = std::fs::read_to_string(self.proc_dir.join("sys/kernel/hostname")).ok()?;
        let name = text.trim();
        (!name.is_empty()).then(|| name.to_string())
    }
}

/// Reads a whole (small) text file.
pub(crate) fn read_text(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(|e| Error::io(path, e))
}

/// USER_HZ of the running kernel (ticks per second of `/proc/stat` and `/proc/<pid>/stat`).
pub fn ticks_per_second() -> u64 {
    procfs::ticks_per_second().max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn live_proc_reads() {
        let src = ProcSource::new(Path::new("/"), None);
        let r = src.read().unwrap();
        assert!(!r.cpus.cores.is_empty());
        assert!(r.memory.is_ok(), "{:?}", r.memory);
        assert!(r.process_ticks.is_ok(), "{:?}", r.process_ticks);
        assert!(ticks_per_second() >= 1);
        // The reading thread is ours and runnable while it reads.
        let own = r.own_runnable.unwrap();
        assert!(own >= 1, "{own}");
    }

    #[test]
    fn an_observed_process_counts_the_reader_once() {
        // This test's thread observes another process (its parent, the test harness's shell
        // or init): the reader is added to that process's threads, and is runnable.
        let parent = std::os::unix::process::parent_id();
        let src = ProcSource::new(Path::new("/"), Some(parent));
        assert!(!src.reader_inside);
        let (text, path) = src.task_stats().unwrap();
        assert!(path.ends_with("task"), "{}", path.display());
        let me = current_thread_line(&text);
        assert!(me.is_some(), "the reader's own line is added: {text}");
        assert!(!parse_runnable_threads(&text, &path).unwrap().is_empty());
        assert!(ProcSource::new(Path::new("/"), Some(std::process::id())).reader_inside);
    }

    /// The line of `text` that is this thread's.
    fn current_thread_line(text: &str) -> Option<&str> {
        let tid = crate::cluster::monitor::sampler::current_tid()?;
        text.lines()
            .find(|l| l.split_ascii_whitespace().next() == Some(&tid.to_string()))
    }

    #[test]
    fn missing_files_are_reasons_not_panics() {
        let dir = tempfile::tempdir().unwrap();
        let proc_dir = dir.path().join("proc");
        std::fs::create_dir_all(&proc_dir).unwrap();
        let src = ProcSource::new(dir.path(), Some(1));
        let err = src.read().unwrap_err();
        assert!(err.to_string().contains("proc/stat"), "{err}");
        std::fs::write(proc_dir.join("stat"), "cpu 1 2 3 4\ncpu0 1 2 3 4\n").unwrap();
        let r = src.read().unwrap();
        let reason = r.memory.unwrap_err();
        assert!(reason.contains("meminfo"), "{reason}");
        assert!(r.process_ticks.unwrap_err().contains("proc/1/stat"));
        assert!(r.own_runnable.unwrap_err().contains("proc/1/task"));
    }
}

//! [`DirLock`]: the advisory lock (`flock`) a run holds on its checkpoint directory, so that a
//! second run on the same directory is refused at its start instead of mixing its checkpoints
//! with the first's or deleting them under it.
//!
//! The lock is on the file [`LOCK_FILE`] inside the directory, which holds the holder's pid (for
//! the message the second run gives). The kernel drops the lock when the holder's descriptor is
//! closed — at the end of the run, or when the process dies however it dies — so a stale lock
//! file locks nothing; it is never deleted (deleting it would let two runs lock two files).

use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;

use tf_iaware_core::durable::layout::LOCK_FILE;

use super::folder::Folder;
use crate::error::{Error, Result};

/// The held lock of a checkpoint directory; released when dropped.
#[derive(Debug)]
pub(crate) struct DirLock {
    _file: std::fs::File,
}

/// Most bytes of the lock file read for the holder's pid.
const MAX_PID_BYTES: u64 = 32;

impl DirLock {
    /// Takes the lock of `folder`, writing this process's pid into the lock file.
    ///
    /// # Errors
    /// [`Error::CheckpointLocked`] naming the process that holds it; [`Error::CheckpointFile`]
    /// if the lock file is not a regular file (a link, a FIFO); [`Error::Io`] if it cannot be
    /// created or locked.
    pub fn take(folder: &Folder) -> Result<DirLock> {
        let path = folder.join(LOCK_FILE);
        let mut file = folder
            .open_rw(LOCK_FILE)
            .map_err(|reason| Error::CheckpointFile {
                path: path.clone(),
                reason,
            })?;
        // SAFETY: a live descriptor.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let e = std::io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EWOULDBLOCK) => {
                    let mut text = String::new();
                    let _ = (&mut file).take(MAX_PID_BYTES).read_to_string(&mut text);
                    let holder = match text.trim().parse::<u32>() {
                        Ok(pid) if pid == std::process::id() => {
                            format!("this process ({pid}), through another CheckpointDir")
                        }
                        Ok(pid) => format!("process {pid}"),
                        Err(_) => "another process".into(),
                    };
                    return Err(Error::CheckpointLocked {
                        dir: folder.path().to_path_buf(),
                        lock: path,
                        holder,
                    });
                }
                // A file system without locks (some network ones): run unlocked, and say so.
                Some(libc::ENOLCK | libc::EOPNOTSUPP | libc::ENOSYS) => {
                    log::warn!(
                        "checkpoint folder {} cannot be locked ({e}): make sure no other run \
                         uses it",
                        folder.path().display()
                    );
                }
                _ => return Err(Error::io(path, e)),
            }
        }
        file.set_len(0)
            .and_then(|()| file.seek(SeekFrom::Start(0)))
            .and_then(|_| writeln!(file, "{}", std::process::id()))
            .map_err(|e| Error::io(&path, e))?;
        Ok(DirLock { _file: file })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_lock_is_refused_naming_the_holder_until_the_first_is_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let folder = Folder::open(dir.path()).unwrap();
        let first = DirLock::take(&folder).unwrap();
        let text = std::fs::read_to_string(dir.path().join(LOCK_FILE)).unwrap();
        assert_eq!(text.trim(), std::process::id().to_string());
        let e = DirLock::take(&folder).unwrap_err();
        assert!(matches!(e, Error::CheckpointLocked { .. }), "{e}");
        assert!(
            e.to_string()
                .contains(&format!("this process ({})", std::process::id())),
            "{e}"
        );
        drop(first);
        let _again = DirLock::take(&folder).unwrap();
    }

    #[test]
    fn a_lock_file_that_is_a_link_is_refused_and_left_alone() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("theirs");
        std::fs::write(&target, b"keep").unwrap();
        std::os::unix::fs::symlink(&target, dir.path().join(LOCK_FILE)).unwrap();
        let folder = Folder::open(dir.path()).unwrap();
        let e = DirLock::take(&folder).unwrap_err().to_string();
        assert!(e.contains(LOCK_FILE) && e.contains("symbolic link"), "{e}");
        assert_eq!(std::fs::read(&target).unwrap(), b"keep");
    }
}

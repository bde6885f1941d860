//! Reading and writing user-named files. Inputs are read with a size cap and only from regular
//! files, so a wrong path (`/dev/zero`, a FIFO, a folder, a multi-gigabyte log) is an error naming
//! the file instead of memory running out or a read that never ends. Outputs are written
//! atomically beside their target ([`write_atomic`]) and never replace what is not a regular file
//! (a device node, a FIFO, a folder), and can be checked before long work starts
//! ([`check_output_path`]).

use std::io::{Read, Write};
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, Result};

/// What a file that is not a regular file is, in words.
fn kind_of(kind: std::fs::FileType) -> &'static str {
    if kind.is_dir() {
        "a folder"
    } else if kind.is_file() {
        "a regular file"
    } else if kind.is_fifo() {
        "a FIFO (named pipe)"
    } else if kind.is_char_device() {
        "a character device"
    } else if kind.is_block_device() {
        "a block device"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_symlink() {
        "a symbolic link"
    } else {
        "not a regular file"
    }
}

fn not_regular(path: &Path, what: &str, kind: std::fs::FileType) -> Error {
    Error::InvalidArgument {
        what: format!("{what} {}", path.display()),
        reason: format!(
            "is not a regular file ({}); give the path of a file",
            kind_of(kind)
        ),
    }
}

/// Opens `path` for reading only if it is a regular file. The type is checked before the open
/// (so a FIFO is never opened: opening one blocks until a writer appears) and again on the open
/// file, which is opened with `O_NONBLOCK` so that a FIFO swapped in between cannot block either.
///
/// # Errors
/// [`Error::Io`] if it cannot be opened; [`Error::InvalidArgument`] for a folder, FIFO, device or
/// socket.
pub fn open_regular(path: &Path, what: &str) -> Result<std::fs::File> {
    let meta = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
    if !meta.is_file() {
        return Err(not_regular(path, what, meta.file_type()));
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| Error::io(path, e))?;
    let meta = file.metadata().map_err(|e| Error::io(path, e))?;
    if !meta.is_file() {
        return Err(not_regular(path, what, meta.file_type()));
    }
    Ok(file)
}

/// The bytes of `path`, at most `max` of them; `what` names the file's role in errors.
///
/// # Errors
/// [`Error::Io`] if it cannot be opened or read; [`Error::InvalidArgument`] if it holds more
/// than `max` bytes or is not a regular file (a folder, a device such as `/dev/zero`, a FIFO).
pub fn read_bytes_capped(path: &Path, max: u64, what: &str) -> Result<Vec<u8>> {
    let file = open_regular(path, what)?;
    let mut bytes = Vec::new();
    file.take(max.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| Error::io(path, e))?;
    if bytes.len() as u64 > max {
        return Err(Error::InvalidArgument {
            what: format!("{what} {}", path.display()),
            reason: format!("larger than the {max} bytes read at most"),
        });
    }
    Ok(bytes)
}

/// Where an output named `path` goes: `path` itself when it is absent or a regular file, the file
/// a symbolic link points to when that is a regular file. Refuses anything else: writing through
/// a rename would replace a device node, a FIFO or a folder we did not create.
fn output_target(path: &Path, what: &str) -> Result<PathBuf> {
    let named = || format!("{what} {}", path.display());
    let target = match std::fs::symlink_metadata(path) {
        // Absent, or under something that is not a folder (the folder check below says so).
        Err(e)
            if matches!(
                e.kind(),
                std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory
            ) =>
        {
            path.to_path_buf()
        }
        Err(e) => return Err(Error::io(path, e)),
        Ok(m) if m.is_file() => path.to_path_buf(),
        Ok(m) if m.file_type().is_symlink() => match std::fs::metadata(path) {
            Ok(t) if t.is_file() => std::fs::canonicalize(path).map_err(|e| Error::io(path, e))?,
            Ok(t) => {
                return Err(Error::InvalidArgument {
                    what: named(),
                    reason: format!(
                        "is a symbolic link to {}, not to a regular file; it is left as it is",
                        kind_of(t.file_type())
                    ),
                })
            }
            Err(_) => {
                return Err(Error::InvalidArgument {
                    what: named(),
                    reason: "is a symbolic link that points nowhere; it is left as it is".into(),
                })
            }
        },
        Ok(m) => {
            return Err(Error::InvalidArgument {
                what: named(),
                reason: format!(
                    "is {}, not a regular file; it is left as it is (give a file path)",
                    kind_of(m.file_type())
                ),
            })
        }
    };
    if target.file_name().is_none() {
        return Err(Error::InvalidArgument {
            what: named(),
            reason: "does not name a file".into(),
        });
    }
    let parent = folder_of(&target);
    match std::fs::metadata(parent) {
        Ok(m) if m.is_dir() => Ok(target),
        Ok(_) => Err(Error::InvalidArgument {
            what: named(),
            reason: format!("{} is not a folder", parent.display()),
        }),
        Err(e) => Err(Error::InvalidArgument {
            what: named(),
            reason: format!("its folder {} cannot be used: {e}", parent.display()),
        }),
    }
}

fn folder_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// A new, empty temporary file beside `target` (created here, never an existing one).
fn temp_beside(target: &Path) -> std::io::Result<(PathBuf, std::fs::File)> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    loop {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let tmp = folder_of(target).join(format!(".{name}.tmp-{}-{n}", std::process::id()));
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&tmp)
        {
            Ok(f) => return Ok((tmp, f)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n < u64::MAX => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Checks, before long work starts, that an output can later be written at `path` with
/// [`write_atomic`]: its folder exists and takes new files (a temporary file is created there and
/// removed), and `path` is absent, a regular file, or a symbolic link to one. Nothing at `path`
/// is touched.
///
/// # Errors
/// [`Error::InvalidArgument`] naming `what` and the path for a folder, device, FIFO or socket at
/// `path`, or a missing folder; [`Error::Io`] if the folder does not take new files.
pub fn check_output_path(path: &Path, what: &str) -> Result<()> {
    let target = output_target(path, what)?;
    let (tmp, file) = temp_beside(&target).map_err(|e| Error::io(folder_of(&target), e))?;
    drop(file);
    std::fs::remove_file(&tmp).map_err(|e| Error::io(&tmp, e))
}

/// Checks, before long work starts, that `path` can serve as an output folder (a checkpoint or
/// log folder, created later if missing): an existing `path` must be a folder (or a symbolic
/// link to one) that takes new files; a missing one needs its nearest existing ancestor to be a
/// folder that takes new files. A temporary file is created in that folder and removed; nothing
/// else is created or touched.
///
/// # Errors
/// [`Error::InvalidArgument`] naming `what` and the path for a regular file, device, FIFO or
/// socket at `path` or on the way to it, or a folder that takes no new files (read-only, no
/// permission, a pseudo file system).
pub fn check_output_dir(path: &Path, what: &str) -> Result<()> {
    let named = || format!("{what} {}", path.display());
    let mut at = path;
    let folder = loop {
        match std::fs::metadata(at) {
            Ok(m) if m.is_dir() => break at,
            Ok(m) => {
                let reason = if at == path {
                    format!(
                        "is {}, not a folder; it is left as it is",
                        kind_of(m.file_type())
                    )
                } else {
                    format!(
                        "{} on its way is {}, not a folder",
                        at.display(),
                        kind_of(m.file_type())
                    )
                };
                return Err(Error::InvalidArgument {
                    what: named(),
                    reason,
                });
            }
            // Missing, or under a file (ENOTDIR): the ancestor says which.
            Err(e)
                if e.kind() == std::io::ErrorKind::NotFound
                    || e.raw_os_error() == Some(libc::ENOTDIR) =>
            {
                match at.parent() {
                    Some(p) if !p.as_os_str().is_empty() => at = p,
                    _ => break Path::new("."),
                }
            }
            Err(e) => {
                return Err(Error::InvalidArgument {
                    what: named(),
                    reason: format!("{} cannot be used: {e}", at.display()),
                })
            }
        }
    };
    let (tmp, file) = temp_beside(&folder.join("probe")).map_err(|e| Error::InvalidArgument {
        what: named(),
        reason: format!("{} takes no new files: {e}", folder.display()),
    })?;
    drop(file);
    std::fs::remove_file(&tmp).map_err(|e| Error::io(&tmp, e))
}

/// Writes `bytes` to `path` atomically: into a new temporary file beside it, then renamed over
/// it, so a reader sees the old content or the new, never a part. `path` must be absent, a
/// regular file or a symbolic link to one (the link is kept and its file replaced); a device node,
/// FIFO, socket or folder at `path` is refused and left as it is. On failure the temporary file
/// is removed and `path` is untouched.
///
/// # Errors
/// [`Error::InvalidArgument`] for what is refused (see [`check_output_path`]); [`Error::Io`] if
/// writing or renaming fails (a full disk, a read-only folder).
pub fn write_atomic(path: &Path, bytes: &[u8], what: &str) -> Result<()> {
    let target = output_target(path, what)?;
    let (tmp, mut file) = temp_beside(&target).map_err(|e| Error::io(folder_of(&target), e))?;
    let written = file
        .write_all(bytes)
        .and_then(|()| file.sync_all())
        .map_err(|e| Error::io(&tmp, e))
        // The target may have changed since it was checked: check again just before the rename.
        .and_then(|()| output_target(path, what).map(drop))
        .and_then(|()| std::fs::rename(&tmp, &target).map_err(|e| Error::io(&target, e)));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// As [`read_bytes_capped`], as UTF-8 text.
///
/// # Errors
/// As [`read_bytes_capped`]; [`Error::InvalidArgument`] for bytes that are not UTF-8.
pub(crate) fn read_capped(path: &Path, max: u64, what: &str) -> Result<String> {
    let bytes = read_bytes_capped(path, max, what)?;
    String::from_utf8(bytes).map_err(|e| Error::InvalidArgument {
        what: format!("{what} {}", path.display()),
        reason: format!("not UTF-8 text ({e})"),
    })
}

/// The memory this process may still allocate, bytes: the least of `/proc/meminfo`'s
/// `MemAvailable` and the headroom under every memory limit on its cgroup and the cgroups
/// enclosing it (v1 `memory.limit_in_bytes`, v2 `memory.max`, less each level's working set:
/// [`ControllerDir::memory_headroom`](crate::monitor::cgroup::ControllerDir::memory_headroom)).
/// A container or a `systemd-run -p MemoryMax=` scope is bounded by its limit, not by the
/// host's free memory. `None` where neither can be read.
pub fn available_memory_bytes() -> Option<u64> {
    let host = meminfo_available_bytes();
    match (host, cgroup_memory_headroom_bytes()) {
        (Some(h), Some(c)) => Some(h.min(c)),
        (h, c) => h.or(c),
    }
}

/// `MemAvailable` of `/proc/meminfo`, bytes.
fn meminfo_available_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
}

/// The headroom under the memory limits of this process's cgroup and its ancestors, bytes;
/// `None` without a memory controller or a limit.
fn cgroup_memory_headroom_bytes() -> Option<u64> {
    let (cgroup, mountinfo) = (
        Path::new("/proc/self/cgroup"),
        Path::new("/proc/self/mountinfo"),
    );
    let layout = crate::monitor::cgroup::locate(
        &std::fs::read_to_string(cgroup).ok()?,
        cgroup,
        &std::fs::read_to_string(mountinfo).ok()?,
        mountinfo,
        Path::new("/"),
    )
    .ok()?;
    layout
        .memory?
        .memory_headroom(&mut |p| match std::fs::read_to_string(p) {
            Ok(text) => Ok(Some(text)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(format!("{}: {e}", p.display())),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endless_and_oversized_files_are_errors_naming_the_file() {
        let e = read_bytes_capped(Path::new("/dev/zero"), 1024, "GraphDef").unwrap_err();
        assert!(e.to_string().contains("/dev/zero"), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f.json");
        std::fs::write(&p, "12345").unwrap();
        assert_eq!(read_capped(&p, 5, "sidecar").unwrap(), "12345");
        assert!(read_capped(&p, 4, "sidecar").is_err());
        let missing = read_capped(&dir.path().join("none"), 4, "sidecar").unwrap_err();
        assert!(matches!(missing, Error::Io { .. }));
    }

    #[test]
    fn fifos_folders_and_devices_are_refused_before_any_read() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("in.fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // Would block forever without a writer if it were opened for reading.
        let e = read_bytes_capped(&fifo, 1024, "GraphDef")
            .unwrap_err()
            .to_string();
        assert!(e.contains("in.fifo") && e.contains("FIFO"), "{e}");
        let e = read_capped(dir.path(), 1024, "sidecar")
            .unwrap_err()
            .to_string();
        assert!(e.contains("folder"), "{e}");
        let e = read_capped(Path::new("/dev/null"), 1024, "TF_CONFIG file")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("/dev/null") && e.contains("character device"),
            "{e}"
        );
    }

    #[test]
    fn outputs_replace_regular_files_atomically_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("out.json");
        write_atomic(&file, b"one", "--json").unwrap();
        write_atomic(&file, b"two", "--json").unwrap();
        assert_eq!(std::fs::read(&file).unwrap(), b"two");
        // A link to a regular file: the link stays, its file gets the new content.
        let link = dir.path().join("link.json");
        std::os::unix::fs::symlink(&file, &link).unwrap();
        write_atomic(&link, b"three", "--json").unwrap();
        assert!(std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink());
        assert_eq!(std::fs::read(&file).unwrap(), b"three");
        // A FIFO, a folder, a device and a link to a device are left as they are.
        let fifo = dir.path().join("out.fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let to_null = dir.path().join("null");
        std::os::unix::fs::symlink("/dev/null", &to_null).unwrap();
        for (path, says) in [
            (fifo.as_path(), "FIFO"),
            (dir.path(), "folder"),
            (Path::new("/dev/null"), "character device"),
            (to_null.as_path(), "symbolic link to a character device"),
        ] {
            let e = check_output_path(path, "--trace").unwrap_err().to_string();
            assert!(
                e.contains(says) && e.contains("--trace"),
                "{}: {e}",
                path.display()
            );
            let e = write_atomic(path, b"x", "--trace").unwrap_err().to_string();
            assert!(e.contains(says), "{}: {e}", path.display());
        }
        assert!(std::fs::symlink_metadata(&fifo)
            .unwrap()
            .file_type()
            .is_fifo());
        assert_eq!(
            std::fs::read_link(&to_null).unwrap(),
            Path::new("/dev/null")
        );
        // A missing folder is named; nothing is left behind in the folder we checked.
        let e = check_output_path(&dir.path().join("none/o.json"), "--out").unwrap_err();
        assert!(e.to_string().contains("none"), "{e}");
        check_output_path(&dir.path().join("new.json"), "--out").unwrap();
        let mut left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, ["link.json", "null", "out.fifo", "out.json"]);
    }

    #[test]
    fn output_folders_are_checked_without_creating_them() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::write(d.join("file"), "x").unwrap();
        let fifo = d.join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        check_output_dir(d, "--logdir").unwrap();
        check_output_dir(&d.join("new/deeper"), "--logdir").unwrap();
        for (bad, says) in [
            (d.join("file"), "a regular file"),
            (fifo, "FIFO"),
            (d.join("file/under"), "on its way"),
            (PathBuf::from("/dev/full"), "character device"),
        ] {
            let e = check_output_dir(&bad, "--checkpoint-dir")
                .unwrap_err()
                .to_string();
            assert!(e.contains("--checkpoint-dir") && e.contains(says), "{e}");
        }
        assert!(check_output_dir(Path::new("/proc/none/x"), "--logdir").is_err());
        let mut left: Vec<_> = std::fs::read_dir(d)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        left.sort();
        assert_eq!(left, ["fifo", "file"]);
    }

    #[test]
    fn available_memory_is_read_from_proc_and_bounded_by_meminfo() {
        let bytes = available_memory_bytes().expect("/proc/meminfo has MemAvailable");
        assert!(bytes > 1 << 20, "{bytes}");
        // Never more than the host has; the cgroup can only lower it.
        let host = meminfo_available_bytes().unwrap();
        assert!(bytes <= host.saturating_add(64 << 20), "{bytes} > {host}");
    }
}

//! [`Folder`]: a directory held open, in which every name is looked up without following a
//! symbolic link (`openat` with `O_NOFOLLOW`, `fstatat` with `AT_SYMLINK_NOFOLLOW`, `unlinkat`).
//! A checkpoint directory is input nobody vouches for: a link named like a checkpoint must never
//! lead a deletion or a read out of it, and a FIFO or a device named like a state file must never
//! block or flood a read.

use std::ffi::{CString, OsString};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// What a name in a [`Folder`] is, found without following a link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// A regular file of this many bytes.
    File(u64),
    /// A directory.
    Dir,
    /// A symbolic link.
    Symlink,
    /// A FIFO, device or socket.
    Other(&'static str),
}

impl Kind {
    /// The kind in words, for warnings and errors.
    pub fn describe(self) -> &'static str {
        match self {
            Kind::File(_) => "a regular file",
            Kind::Dir => "a folder",
            Kind::Symlink => "a symbolic link",
            Kind::Other(what) => what,
        }
    }
}

fn c_name(name: &str) -> std::io::Result<CString> {
    CString::new(name).map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))
}

fn last_error() -> std::io::Error {
    std::io::Error::last_os_error()
}

/// A directory held open by descriptor; see the module documentation.
#[derive(Debug)]
pub(crate) struct Folder {
    fd: OwnedFd,
    path: PathBuf,
}

impl Folder {
    /// Opens the directory `path` (a link the caller named is followed: the user chose it).
    ///
    /// # Errors
    /// [`Error::Io`] naming `path`.
    pub fn open(path: &Path) -> Result<Folder> {
        let c = CString::new(path.as_os_str().as_bytes())
            .map_err(|_| Error::io(path, std::io::ErrorKind::InvalidInput.into()))?;
        // SAFETY: a valid NUL-terminated path; the descriptor is owned below.
        let fd = unsafe {
            libc::open(
                c.as_ptr(),
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(Error::io(path, last_error()));
        }
        Ok(Folder {
            // SAFETY: `fd` was just opened and is owned by nobody else.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            path: path.to_path_buf(),
        })
    }

    /// Its path (as opened; the descriptor stays on the same directory if it is renamed).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `name`'s path, for messages and for TensorFlow, which opens files by path.
    pub fn join(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    fn openat(&self, name: &str, flags: libc::c_int, mode: libc::mode_t) -> std::io::Result<File> {
        let c = c_name(name)?;
        // SAFETY: a live directory descriptor and a NUL-terminated name; the result is owned.
        let fd = unsafe {
            libc::openat(
                self.fd.as_raw_fd(),
                c.as_ptr(),
                flags | libc::O_NOFOLLOW | libc::O_CLOEXEC,
                libc::c_uint::from(mode),
            )
        };
        if fd < 0 {
            return Err(last_error());
        }
        // SAFETY: just opened, owned by nobody else.
        Ok(File::from(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// What `name` is, `None` if there is nothing of that name.
    ///
    /// # Errors
    /// [`Error::Io`] naming the path if it cannot be looked at.
    pub fn kind(&self, name: &str) -> Result<Option<Kind>> {
        let c = c_name(name).map_err(|e| Error::io(self.join(name), e))?;
        // SAFETY: an all-zero `stat` is a valid value to be filled in.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: a live descriptor, a NUL-terminated name and a `stat` to fill.
        let rc = unsafe {
            libc::fstatat(
                self.fd.as_raw_fd(),
                c.as_ptr(),
                &mut st,
                libc::AT_SYMLINK_NOFOLLOW,
            )
        };
        if rc != 0 {
            let e = last_error();
            return match e.kind() {
                std::io::ErrorKind::NotFound => Ok(None),
                _ => Err(Error::io(self.join(name), e)),
            };
        }
        Ok(Some(kind_of(&st)))
    }

    /// Opens the directory `name` inside, never through a link: `None` if `name` is not a
    /// directory (a link to one included).
    ///
    /// # Errors
    /// [`Error::Io`] naming the path if it is absent or cannot be opened.
    pub fn dir(&self, name: &str) -> Result<Option<Folder>> {
        match self.openat(name, libc::O_RDONLY | libc::O_DIRECTORY, 0) {
            Ok(f) => Ok(Some(Folder {
                fd: f.into(),
                path: self.join(name),
            })),
            Err(e) if matches!(e.raw_os_error(), Some(libc::ELOOP | libc::ENOTDIR)) => Ok(None),
            Err(e) => Err(Error::io(self.join(name), e)),
        }
    }

    /// The names in the directory (the one the descriptor holds, wherever it was moved; by its
    /// path where `/proc` is not mounted). Names only: every use of one goes through the
    /// descriptor.
    ///
    /// # Errors
    /// [`Error::Io`] naming the directory if it cannot be listed.
    pub fn names(&self) -> Result<Vec<OsString>> {
        let proc = PathBuf::from(format!("/proc/self/fd/{}", self.fd.as_raw_fd()));
        let entries = std::fs::read_dir(&proc)
            .or_else(|_| std::fs::read_dir(&self.path))
            .map_err(|e| Error::io(&self.path, e))?;
        entries
            .map(|e| {
                e.map(|e| e.file_name())
                    .map_err(|e| Error::io(&self.path, e))
            })
            .collect()
    }

    /// Opens the regular file `name` for reading, never through a link and without blocking on
    /// a FIFO, checking it holds at most `max` bytes.
    ///
    /// # Errors
    /// A reason in words (the caller names the file): absent, not a regular file (a link, a
    /// FIFO, a device, a folder), larger than `max`.
    pub fn open_regular(&self, name: &str, max: u64) -> std::result::Result<File, String> {
        let file = self
            .openat(name, libc::O_RDONLY | libc::O_NONBLOCK, 0)
            .map_err(|e| match e.raw_os_error() {
                Some(libc::ELOOP) => not_regular(Kind::Symlink),
                Some(libc::ENOENT) => "is missing".into(),
                _ => format!("cannot be opened: {e}"),
            })?;
        let meta = file
            .metadata()
            .map_err(|e| format!("cannot be read: {e}"))?;
        if !meta.is_file() {
            use std::os::unix::fs::FileTypeExt;
            let t = meta.file_type();
            let kind = if t.is_dir() {
                Kind::Dir
            } else if t.is_fifo() {
                Kind::Other("a FIFO (named pipe)")
            } else if t.is_char_device() || t.is_block_device() {
                Kind::Other("a device")
            } else {
                Kind::Other("not a regular file")
            };
            return Err(not_regular(kind));
        }
        if meta.len() > max {
            return Err(format!(
                "holds {} bytes, more than the {max} read at most",
                meta.len()
            ));
        }
        Ok(file)
    }

    /// The bytes of the regular file `name`, at most `max` (see [`Folder::open_regular`]).
    ///
    /// # Errors
    /// As [`Folder::open_regular`], or a failed read.
    pub fn read(&self, name: &str, max: u64) -> std::result::Result<Vec<u8>, String> {
        let file = self.open_regular(name, max)?;
        let mut bytes = Vec::new();
        file.take(max.saturating_add(1))
            .read_to_end(&mut bytes)
            .map_err(|e| format!("cannot be read: {e}"))?;
        if bytes.len() as u64 > max {
            return Err(format!("holds more than the {max} bytes read at most"));
        }
        Ok(bytes)
    }

    /// The size of the regular file `name` (at most `max`) and its last `n` bytes.
    ///
    /// # Errors
    /// As [`Folder::open_regular`], or a failed read.
    pub fn tail(
        &self,
        name: &str,
        max: u64,
        n: usize,
    ) -> std::result::Result<(u64, Vec<u8>), String> {
        let mut file = self.open_regular(name, max)?;
        let len = file
            .metadata()
            .map_err(|e| format!("cannot be read: {e}"))?
            .len();
        let from = len.saturating_sub(n as u64);
        let mut bytes = Vec::with_capacity(n);
        file.seek(SeekFrom::Start(from))
            .and_then(|_| file.take(n as u64).read_to_end(&mut bytes))
            .map_err(|e| format!("cannot be read: {e}"))?;
        Ok((len, bytes))
    }

    /// Creates the regular file `name` for writing; it must not exist (nothing of that name is
    /// ever written through, a link included).
    ///
    /// # Errors
    /// [`Error::Io`] naming the path (`AlreadyExists` when something has that name).
    pub fn create_new(&self, name: &str) -> Result<File> {
        self.openat(name, libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL, 0o644)
            .map_err(|e| Error::io(self.join(name), e))
    }

    /// Opens (creating it if absent) the regular file `name` for reading and writing, never
    /// through a link and without blocking on a FIFO.
    ///
    /// # Errors
    /// A reason in words, as [`Folder::open_regular`].
    pub fn open_rw(&self, name: &str) -> std::result::Result<File, String> {
        let file = self
            .openat(name, libc::O_RDWR | libc::O_CREAT | libc::O_NONBLOCK, 0o644)
            .map_err(|e| match e.raw_os_error() {
                Some(libc::ELOOP) => not_regular(Kind::Symlink),
                _ => format!("cannot be opened: {e}"),
            })?;
        match file.metadata() {
            Ok(m) if m.is_file() => Ok(file),
            Ok(_) => Err(not_regular(Kind::Other("not a regular file"))),
            Err(e) => Err(format!("cannot be read: {e}")),
        }
    }

    /// Deletes `name` if it is a regular file; anything else of that name (a link, a folder, a
    /// FIFO) is left alone and said in the result.
    ///
    /// # Errors
    /// [`Error::Io`] naming the path if a regular file cannot be deleted.
    pub fn remove_file(&self, name: &str) -> Result<Removal> {
        match self.kind(name)? {
            None => Ok(Removal::Absent),
            Some(Kind::File(_)) => {
                let c = c_name(name).map_err(|e| Error::io(self.join(name), e))?;
                // SAFETY: a live descriptor and a NUL-terminated name.
                if unsafe { libc::unlinkat(self.fd.as_raw_fd(), c.as_ptr(), 0) } != 0 {
                    let e = last_error();
                    if e.kind() != std::io::ErrorKind::NotFound {
                        return Err(Error::io(self.join(name), e));
                    }
                }
                Ok(Removal::Deleted)
            }
            Some(other) => Ok(Removal::Left(other)),
        }
    }

    /// Deletes the empty directory `name` (never a link).
    ///
    /// # Errors
    /// The OS error: not empty, not a directory.
    pub fn remove_dir(&self, name: &str) -> std::io::Result<()> {
        let c = c_name(name)?;
        // SAFETY: a live descriptor and a NUL-terminated name.
        if unsafe { libc::unlinkat(self.fd.as_raw_fd(), c.as_ptr(), libc::AT_REMOVEDIR) } != 0 {
            return Err(last_error());
        }
        Ok(())
    }

    /// Flushes the directory's entries (a rename or a new file in it) to disk.
    ///
    /// # Errors
    /// [`Error::Io`] naming the directory.
    pub fn sync(&self) -> Result<()> {
        // SAFETY: a live descriptor.
        if unsafe { libc::fsync(self.fd.as_raw_fd()) } != 0 {
            return Err(Error::io(&self.path, last_error()));
        }
        Ok(())
    }
}

/// What [`Folder::remove_file`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Removal {
    /// The regular file was deleted.
    Deleted,
    /// There was nothing of that name.
    Absent,
    /// Something else had that name; it was left alone.
    Left(Kind),
}

fn not_regular(kind: Kind) -> String {
    format!(
        "is {}, not a regular file: tf-iaware reads only the regular files it writes in a \
         checkpoint folder (it was left as it is)",
        kind.describe()
    )
}

fn kind_of(st: &libc::stat) -> Kind {
    match st.st_mode & libc::S_IFMT {
        libc::S_IFREG => Kind::File(u64::try_from(st.st_size).unwrap_or(0)),
        libc::S_IFDIR => Kind::Dir,
        libc::S_IFLNK => Kind::Symlink,
        libc::S_IFIFO => Kind::Other("a FIFO (named pipe)"),
        libc::S_IFCHR | libc::S_IFBLK => Kind::Other("a device"),
        libc::S_IFSOCK => Kind::Other("a socket"),
        _ => Kind::Other("not a regular file"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mkfifo(path: &Path) {
        let c = CString::new(path.as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    }

    #[test]
    fn links_fifos_and_devices_are_never_followed_read_or_deleted() {
        let root = tempfile::tempdir().unwrap();
        let (inside, outside) = (root.path().join("ck"), root.path().join("outside"));
        std::fs::create_dir_all(&inside).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("model.ckpt.index"), b"theirs").unwrap();
        std::os::unix::fs::symlink(&outside, inside.join("ckpt-1")).unwrap();
        std::os::unix::fs::symlink(outside.join("model.ckpt.index"), inside.join("state")).unwrap();
        std::os::unix::fs::symlink("/dev/zero", inside.join("zero")).unwrap();
        mkfifo(&inside.join("fifo"));
        std::fs::write(inside.join("mine"), b"0123456789").unwrap();
        let f = Folder::open(&inside).unwrap();

        assert!(f.dir("ckpt-1").unwrap().is_none(), "a link is not a folder");
        assert_eq!(f.kind("ckpt-1").unwrap(), Some(Kind::Symlink));
        assert_eq!(f.kind("none").unwrap(), None);
        for name in ["state", "zero"] {
            let e = f.read(name, 1 << 20).unwrap_err();
            assert!(e.contains("symbolic link"), "{name}: {e}");
        }
        // A FIFO is refused at once, not waited on.
        let e = f.read("fifo", 1 << 20).unwrap_err();
        assert!(e.contains("FIFO"), "{e}");
        assert_eq!(f.read("mine", 10).unwrap(), b"0123456789");
        assert!(f.read("mine", 9).unwrap_err().contains("more than the 9"));
        assert_eq!(f.tail("mine", 10, 4).unwrap(), (10, b"6789".to_vec()));

        for name in ["ckpt-1", "state", "zero", "fifo"] {
            assert!(
                matches!(f.remove_file(name).unwrap(), Removal::Left(_)),
                "{name}"
            );
        }
        assert_eq!(f.remove_file("mine").unwrap(), Removal::Deleted);
        assert_eq!(f.remove_file("mine").unwrap(), Removal::Absent);
        assert!(f.remove_dir("ckpt-1").is_err());
        assert_eq!(
            std::fs::read(outside.join("model.ckpt.index")).unwrap(),
            b"theirs"
        );
        // Nothing is created through a link either.
        assert!(f.create_new("state").is_err());
        assert!(f.open_rw("zero").unwrap_err().contains("symbolic link"));
        let mut names: Vec<String> = f
            .names()
            .unwrap()
            .into_iter()
            .map(|n| n.into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, ["ckpt-1", "fifo", "state", "zero"]);
    }
}

//! Reading user-named files with a size cap, so a wrong path (`/dev/zero`, a multi-gigabyte log)
//! is an error naming the file instead of memory running out.

use std::io::Read;
use std::path::Path;

use crate::error::{Error, Result};

/// The bytes of `path`, at most `max` of them; `what` names the file's role in errors.
///
/// # Errors
/// [`Error::Io`] if it cannot be opened or read; [`Error::InvalidArgument`] if it holds more
/// than `max` bytes or is a directory or a device (`/dev/zero` never ends).
pub fn read_bytes_capped(path: &Path, max: u64, what: &str) -> Result<Vec<u8>> {
    let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
    let kind = file.metadata().map_err(|e| Error::io(path, e))?.file_type();
    {
        use std::os::unix::fs::FileTypeExt;
        if kind.is_dir() || kind.is_char_device() || kind.is_block_device() || kind.is_socket() {
            return Err(Error::InvalidArgument {
                what: format!("{what} {}", path.display()),
                reason: "is not a regular file (a directory or a device)".into(),
            });
        }
    }
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

/// `MemAvailable` of `/proc/meminfo`, bytes (`None` where it cannot be read).
pub fn available_memory_bytes() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kib.checked_mul(1024)
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
    fn available_memory_is_read_from_proc() {
        let bytes = available_memory_bytes().expect("/proc/meminfo has MemAvailable");
        assert!(bytes > 1 << 20, "{bytes}");
    }
}

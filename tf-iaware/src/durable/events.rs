//! TensorBoard event files: [`EventWriter`] writes `events.out.tfevents.*` in a log directory
//! (TFRecord-framed `Event`s, the first the file version, each record written as it is logged)
//! and [`read_event_file`] / [`read_scalars`] parse them back.

use std::fs::{self, File, OpenOptions};
use std::io::{BufReader, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use prost::Message;
use tf_iaware_core::durable::events::{
    decode_event, event_file_name, file_version_event, name_part, scalar_points, scalars_event,
};
pub use tf_iaware_core::durable::events::{tags, ScalarPoint, FILE_VERSION};
use tf_iaware_core::proto::Event;
use tf_iaware_core::record::{RecordReader, RecordWriter};

use crate::error::{Error, Result};

fn now_s() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// This machine's host name (`localhost` when it cannot be read), as one file-name component.
fn host_name() -> String {
    let raw = fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    match name_part(raw.trim()) {
        host if host == "_" => "localhost".into(),
        host => host,
    }
}

/// Writes one TensorBoard event file. Each event goes to the file in one write as it is logged,
/// so TensorBoard shows a live run and a killed driver loses nothing logged. A write that fails
/// (a full disk) is cut back off the file, which stays whole records only: a later write, once
/// there is room, continues it (with the file-version event first if that one was lost).
#[derive(Debug)]
pub struct EventWriter {
    path: PathBuf,
    file: File,
    /// Bytes of whole records in the file: where the next write goes.
    len: u64,
    /// Wall time of the file-version event.
    wall: f64,
    /// Whether the file-version event is in the file.
    versioned: bool,
}

impl EventWriter {
    /// Creates `logdir` if needed and a new event file in it
    /// (`events.out.tfevents.<secs>.<host>.<pid>.<n>`), starting with the file-version event.
    /// Files already there (an earlier run's) are never touched: TensorBoard reads them all, and
    /// a resumed run's points continue the same series.
    ///
    /// # Errors
    /// [`Error::Io`] naming the directory or file that cannot be created or written.
    pub fn create(logdir: &Path) -> Result<Self> {
        let mut w = Self::open(logdir)?;
        w.start()?;
        Ok(w)
    }

    /// As [`EventWriter::create`], without writing anything yet: the file-version event goes
    /// first with the first event.
    ///
    /// # Errors
    /// [`Error::Io`] naming the directory or file that cannot be created.
    pub(crate) fn open(logdir: &Path) -> Result<Self> {
        fs::create_dir_all(logdir).map_err(|e| Error::io(logdir, e))?;
        let wall = now_s();
        let (host, pid) = (host_name(), std::process::id());
        let mut n = 0u32;
        let (path, file) = loop {
            let path = logdir.join(event_file_name(wall as u64, &host, pid, n));
            match OpenOptions::new().write(true).create_new(true).open(&path) {
                Ok(f) => break (path, f),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && n < 1000 => n += 1,
                Err(e) => return Err(Error::io(path, e)),
            }
        };
        Ok(EventWriter {
            path,
            file,
            len: 0,
            wall,
            versioned: false,
        })
    }

    /// Writes the file-version event, unless it is in the file already (what
    /// [`EventWriter::create`] does after [`EventWriter::open`]).
    ///
    /// # Errors
    /// [`Error::Io`] naming the file if the write fails.
    pub(crate) fn start(&mut self) -> Result<()> {
        self.append(None)
    }

    /// The event file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Logs `scalars` (tag, value) at `step`, now, as one event.
    ///
    /// # Errors
    /// [`Error::Io`] naming the file if the write fails.
    pub fn scalars(&mut self, step: i64, scalars: &[(&str, f32)]) -> Result<()> {
        self.write_event(&scalars_event(now_s(), step, scalars))
    }

    /// Logs one scalar at `step`, now.
    ///
    /// # Errors
    /// As [`EventWriter::scalars`].
    pub fn scalar(&mut self, step: i64, tag: &str, value: f32) -> Result<()> {
        self.scalars(step, &[(tag, value)])
    }

    /// Appends `event` as one record, in one write.
    ///
    /// # Errors
    /// [`Error::Io`] naming the file if the write fails (the file keeps its whole records).
    pub fn write_event(&mut self, event: &Event) -> Result<()> {
        self.append(Some(event))
    }

    /// Writes the file-version event if it is not in the file yet, then `event`.
    fn append(&mut self, event: Option<&Event>) -> Result<()> {
        let mut framed = RecordWriter::new(Vec::new());
        if !self.versioned {
            framed.write_record(&file_version_event(self.wall).encode_to_vec())?;
        }
        if let Some(event) = event {
            framed.write_record(&event.encode_to_vec())?;
        }
        let bytes = framed.into_inner()?;
        if let Err(e) = self.file.write_all(&bytes) {
            // Cut a partial record off, so what is there stays readable and a later write
            // continues after the last whole record.
            let _ = self.file.set_len(self.len);
            let _ = self.file.seek(SeekFrom::Start(self.len));
            return Err(Error::io(&self.path, e));
        }
        self.len += bytes.len() as u64;
        self.versioned = true;
        Ok(())
    }
}

/// Every event of the event file at `path`, in order.
///
/// # Errors
/// [`Error::Io`] if it cannot be read; the record errors of `tf_iaware_core::record` for a
/// truncated or corrupt record; [`Error::EventFile`] for a record that is not an `Event`.
pub fn read_event_file(path: &Path) -> Result<Vec<Event>> {
    let file = File::open(path).map_err(|e| Error::io(path, e))?;
    let mut reader = RecordReader::new(BufReader::new(file), path.display().to_string());
    let mut events = Vec::new();
    loop {
        let offset = reader.offset();
        match reader.next() {
            None => return Ok(events),
            Some(record) => events.push(decode_event(&record?, path, offset)?),
        }
    }
}

/// Every scalar of the event file at `path`, in order.
///
/// # Errors
/// As [`read_event_file`].
pub fn read_scalars(path: &Path) -> Result<Vec<ScalarPoint>> {
    Ok(read_event_file(path)?
        .iter()
        .flat_map(scalar_points)
        .collect())
}

/// The event files of `logdir` (names containing `tfevents`), sorted by name.
///
/// # Errors
/// [`Error::Io`] if the directory cannot be read.
pub fn event_files(logdir: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    for entry in fs::read_dir(logdir).map_err(|e| Error::io(logdir, e))? {
        let entry = entry.map_err(|e| Error::io(logdir, e))?;
        if entry.file_name().to_string_lossy().contains("tfevents") && entry.path().is_file() {
            files.push(entry.path());
        }
    }
    files.sort();
    Ok(files)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `/dev/full`: every write fails with ENOSPC, as on a full disk.
    fn full() -> File {
        OpenOptions::new().write(true).open("/dev/full").unwrap()
    }

    #[test]
    fn a_failed_write_is_an_error_naming_the_file_and_later_writes_continue_it() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = EventWriter::create(dir.path()).unwrap();
        w.scalar(1, "loss", 0.5).unwrap();
        let file = std::mem::replace(&mut w.file, full());
        let err = w.scalar(2, "loss", 0.4).unwrap_err().to_string();
        assert!(err.contains(&w.path().display().to_string()), "{err}");
        assert!(err.contains("No space left"), "{err}");
        // Room again: the next point goes after the last whole record.
        w.file = file;
        w.scalar(3, "loss", 0.3).unwrap();
        let steps: Vec<i64> = read_scalars(w.path())
            .unwrap()
            .iter()
            .map(|p| p.step)
            .collect();
        assert_eq!(steps, [1, 3]);
        assert_eq!(read_event_file(w.path()).unwrap().len(), 3, "version, 1, 3");
    }

    #[test]
    fn a_file_whose_first_write_failed_gets_its_version_event_with_the_next() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = EventWriter::open(dir.path()).unwrap();
        let file = std::mem::replace(&mut w.file, full());
        assert!(w.start().is_err());
        w.file = file;
        w.scalar(7, "loss", 1.0).unwrap();
        let events = read_event_file(w.path()).unwrap();
        assert_eq!(events.len(), 2);
        assert_eq!(events[0], file_version_event(w.wall));
        assert_eq!(read_scalars(w.path()).unwrap()[0].step, 7);
    }
}

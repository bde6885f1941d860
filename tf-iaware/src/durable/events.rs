//! TensorBoard event files: [`EventWriter`] writes `events.out.tfevents.*` in a log directory
//! (TFRecord-framed `Event`s, the first the file version, each record flushed as it is written)
//! and [`read_event_file`] / [`read_scalars`] parse them back.

use std::fs::{self, File, OpenOptions};
use std::io::BufReader;
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

/// Writes one TensorBoard event file. Each record is flushed to the file as it is written, so
/// TensorBoard shows a live run and a killed driver loses nothing logged.
#[derive(Debug)]
pub struct EventWriter {
    path: PathBuf,
    records: RecordWriter<File>,
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
        let mut w = EventWriter {
            path,
            records: RecordWriter::new(file),
        };
        w.write_event(&file_version_event(wall))?;
        Ok(w)
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

    /// Appends `event` as one record and flushes it.
    ///
    /// # Errors
    /// [`Error::Io`] naming the file if the write fails.
    pub fn write_event(&mut self, event: &Event) -> Result<()> {
        let bytes = event.encode_to_vec();
        let path = &self.path;
        let named = |e: Error| match e {
            Error::Io { source, .. } => Error::io(path, source),
            other => other,
        };
        self.records.write_record(&bytes).map_err(named)?;
        self.records.flush().map_err(named)
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

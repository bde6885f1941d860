//! Data sets from files: NumPy `.npy` (one input) and `.npz` (one array per input name),
//! TFRecord files of `tf.train.Example` (feature name = input name), and [`open`], which picks
//! the reader by the path's extension (the CLI's `--data PATH` / `--held-out PATH`).
//!
//! Each is read whole into an [`InMemory`] data set and checked against the graph's inputs: a
//! missing array or feature, another element type or row shape, a truncated or corrupt file,
//! arrays of different row counts and an empty data set are errors naming the input and the file.
//! The file type is checked before a file is opened, so a FIFO or a device given as data is an
//! error rather than a hang.

use std::collections::BTreeMap;
use std::io::BufReader;
use std::path::{Path, PathBuf};

use super::dataset::InMemory;
use super::npy::read_npy;
use crate::error::{Error, Result};
use tf_iaware_core::data::{Columns, ExampleRows, HostTensor, InputSpec};
use tf_iaware_core::record::RecordReader;

/// The most bytes of values read from files for one data set (16 GiB), and never more than half
/// of what this process may still allocate (the least of `MemAvailable` and the headroom under
/// its cgroups' memory limits: [`io::available_memory_bytes`](crate::data::io::available_memory_bytes)).
pub const MAX_DATA_BYTES: u64 = 16 << 30;

/// The most bytes a `.npy` header takes beyond its values (its length field is 32 bits in
/// format version 2; real headers are under 1 KiB).
const NPY_HEADER_MAX_BYTES: u64 = 1 << 20;

/// Extensions of TFRecord files ([`open`] reads a directory of them).
pub const TFRECORD_EXTENSIONS: &[&str] = &["tfrecord", "tfrecords"];

fn budget() -> u64 {
    crate::data::io::available_memory_bytes()
        .map_or(MAX_DATA_BYTES, |a| (a / 2).min(MAX_DATA_BYTES))
}

fn label(path: &Path) -> String {
    path.display().to_string()
}

/// Checks `path` is a regular file, without opening it (opening a FIFO blocks).
fn regular_file(path: &Path) -> Result<()> {
    let kind = std::fs::metadata(path)
        .map_err(|e| Error::io(path, e))?
        .file_type();
    if !kind.is_file() {
        return Err(Error::DataFormat {
            file: label(path),
            reason: "is not a regular file (a directory, FIFO, socket or device)".into(),
        });
    }
    Ok(())
}

/// The regular file `path`, opened for a buffered read (a FIFO or device is refused before it
/// is opened).
fn open_file(path: &Path) -> Result<BufReader<std::fs::File>> {
    regular_file(path)?;
    Ok(BufReader::new(crate::data::io::open_regular(
        path,
        "data file",
    )?))
}

/// The array of the `.npy` file `path`, its values taking at most `left` bytes (which it
/// lowers by what they take).
fn read_npy_file(path: &Path, left: &mut u64) -> Result<HostTensor> {
    let tensor = read_npy(open_file(path)?, *left, &label(path))?;
    *left = left.saturating_sub(tensor.values.byte_len());
    Ok(tensor)
}

/// Opens the data set at `path` for the graph inputs `specs`, by its extension: `.npy` (the
/// array of the graph's one input), `.npz` (one array per input name), `.tfrecord` /
/// `.tfrecords` (Examples), or a directory of TFRecord files (read in name order) or of
/// `NAME.npy` files (one per input). The data set is checked against `specs`.
///
/// ```no_run
/// # fn main() -> tf_iaware::Result<()> {
/// use tf_iaware::data::{input_specs, open, Dataset};
/// # let (op_graph, sidecar): (tf_iaware::graph::OpGraph, tf_iaware::graph::Sidecar) = todo!();
/// let specs = input_specs(&op_graph, &sidecar)?;
/// let train = open("train.npz".as_ref(), &specs)?;
/// println!("{} rows", train.len());
/// # Ok(()) }
/// ```
///
/// # Errors
/// [`Error::Io`] for a path that cannot be read; [`Error::DataFormat`] for an unknown
/// extension, a path that is not a regular file or directory (FIFO, device), or a file that is
/// not what its extension says (truncated included); [`Error::RecordTruncated`] /
/// [`Error::RecordCrc`] for a broken TFRecord file; [`Error::DataMissing`],
/// [`Error::DataType`], [`Error::DataShape`], [`Error::DataRows`] or [`Error::DataEmpty`] for
/// data that does not fit the graph.
pub fn open(path: &Path, specs: &[InputSpec]) -> Result<InMemory> {
    let meta = std::fs::metadata(path).map_err(|e| Error::io(path, e))?;
    if meta.is_dir() {
        return open_dir(path, specs);
    }
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .unwrap_or("")
        .to_ascii_lowercase();
    match ext.as_str() {
        "npy" => open_npy(path, specs),
        "npz" => open_npz(path, specs),
        e if TFRECORD_EXTENSIONS.contains(&e) => open_tfrecords(&[path.to_path_buf()], specs),
        _ => Err(Error::DataFormat {
            file: label(path),
            reason: "unknown data format: give a .npy, .npz, .tfrecord or .tfrecords file, or a \
                     directory of TFRecord or .npy files"
                .into(),
        }),
    }
}

fn open_dir(dir: &Path, specs: &[InputSpec]) -> Result<InMemory> {
    let mut records = Vec::new();
    let mut arrays = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| Error::io(dir, e))? {
        let path = entry.map_err(|e| Error::io(dir, e))?.path();
        let ext = path
            .extension()
            .and_then(|e| e.to_str())
            .unwrap_or("")
            .to_ascii_lowercase();
        if TFRECORD_EXTENSIONS.contains(&ext.as_str()) {
            records.push(path);
        } else if ext == "npy" {
            arrays.push(path);
        }
    }
    records.sort();
    arrays.sort();
    match (records.is_empty(), arrays.is_empty()) {
        (false, true) => open_tfrecords(&records, specs),
        (true, false) => {
            let mut columns = BTreeMap::new();
            let mut left = budget();
            for path in &arrays {
                let name = path
                    .file_stem()
                    .and_then(|s| s.to_str())
                    .unwrap_or("")
                    .to_string();
                columns.insert(name, read_npy_file(path, &mut left)?);
            }
            checked(Columns::new(label(dir), columns)?, specs)
        }
        (false, false) => Err(Error::DataFormat {
            file: label(dir),
            reason: "holds both TFRecord and .npy files; keep one kind per directory".into(),
        }),
        (true, true) => Err(Error::DataEmpty { file: label(dir) }),
    }
}

fn checked(columns: Columns, specs: &[InputSpec]) -> Result<InMemory> {
    columns.check_against(specs)?;
    Ok(InMemory::new(columns))
}

/// A `.npy` file as the array of the graph's one input: the input the file's stem names (`x.npy`),
/// else the first; a graph of several inputs then reports the others missing.
///
/// # Errors
/// As [`open`].
pub fn open_npy(path: &Path, specs: &[InputSpec]) -> Result<InMemory> {
    let tensor = read_npy_file(path, &mut budget())?;
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    let name = match specs.iter().find(|s| s.name == stem).or(specs.first()) {
        Some(s) => s.name.clone(),
        None => stem.to_string(),
    };
    checked(
        Columns::new(label(path), BTreeMap::from([(name, tensor)]))?,
        specs,
    )
}

/// A `.npz` file (`np.savez` or `np.savez_compressed`): one array per input name. Arrays no
/// input names (ids, class names, a scalar) are not read, whatever their type and rows: a log
/// note names them.
///
/// # Errors
/// As [`open`].
pub fn open_npz(path: &Path, specs: &[InputSpec]) -> Result<InMemory> {
    let file = label(path);
    let bad = |reason: String| Error::DataFormat {
        file: file.clone(),
        reason,
    };
    // Read from the file, not from its bytes in memory: `np.savez` stores arrays uncompressed,
    // and a copy of the archive would hold every value twice.
    let mut archive = zip::ZipArchive::new(open_file(path)?)
        .map_err(|e| bad(format!("not a .npz (zip) archive: {e}")))?;
    let mut left = budget();
    let mut columns = BTreeMap::new();
    let mut unused = Vec::new();
    for index in 0..archive.len() {
        let entry = archive
            .by_index(index)
            .map_err(|e| bad(format!("member {index}: {e}")))?;
        // `np.savez` stores array NAME as NAME.npy.
        let Some(name) = entry.name().strip_suffix(".npy").map(str::to_string) else {
            continue;
        };
        if !specs.is_empty() && !specs.iter().any(|s| s.name == name) {
            log::info!("{file}: array `{name}` is no input of the graph: not read");
            unused.push(name);
            continue;
        }
        // The size the archive declares, before anything is inflated; the array's own header
        // is checked again (a member may lie about its size).
        if entry.size() > left.saturating_add(NPY_HEADER_MAX_BYTES) {
            return Err(bad(format!(
                "array `{name}` declares {} bytes uncompressed, more than the {left} bytes of \
                 memory data may still use (half of what this process may allocate: the least \
                 of MemAvailable and its cgroup's memory limit)",
                entry.size()
            )));
        }
        let tensor = read_npy(
            BufReader::new(entry),
            left,
            &format!("{file} (array `{name}`)"),
        )?;
        left = left.saturating_sub(tensor.values.byte_len());
        columns.insert(name, tensor);
    }
    // A misspelt input name is easier to see with every array listed.
    if let Some(missing) = specs.iter().find(|s| !columns.contains_key(&s.name)) {
        let mut available: Vec<String> = columns.into_keys().chain(unused).collect();
        available.sort();
        return Err(Error::DataMissing {
            file,
            input: missing.name.clone(),
            available: available.join(", "),
        });
    }
    checked(Columns::new(file, columns)?, specs)
}

/// TFRecord files of `tf.train.Example` records, read in the order given, as one data set for
/// `specs` (named by the first file, or its directory when there are several).
///
/// # Errors
/// As [`open`]; a record that is not an Example is [`Error::DataFormat`] naming the file and
/// the record's index.
pub fn open_tfrecords(paths: &[PathBuf], specs: &[InputSpec]) -> Result<InMemory> {
    let name = match paths {
        [] => {
            return Err(Error::DataEmpty {
                file: "no TFRecord files".into(),
            })
        }
        [one] => label(one),
        [first, ..] => label(first.parent().unwrap_or(first)),
    };
    let mut rows = ExampleRows::new(name.clone(), specs)?;
    let mut left = budget();
    for path in paths {
        regular_file(path)?;
        let file = std::fs::File::open(path).map_err(|e| Error::io(path, e))?;
        let reader = RecordReader::new(std::io::BufReader::new(file), label(path))
            .with_max_record_bytes(left);
        rows.set_file(label(path));
        for (k, record) in reader.enumerate() {
            let record = record?;
            left = left.saturating_sub(record.len() as u64);
            rows.push_serialized(&record, k)?;
        }
    }
    rows.set_file(name);
    checked(rows.into_columns()?, specs)
}

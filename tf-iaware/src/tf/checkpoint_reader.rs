//! The index of a checkpoint through TensorFlow's own reader (`TF_NewCheckpointReader`): every
//! tensor's name, dtype and shape, without reading the values.

use std::ffi::{CStr, CString};

use tensorflow::DataType;
use tf_iaware_sys as sys;

use super::status::Status;
use crate::error::{Error, Result};

/// One tensor of a checkpoint's index.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckpointEntry {
    /// Its key (the variable's name).
    pub name: String,
    /// Its dtype.
    pub dtype: DataType,
    /// Its dimensions.
    pub dims: Vec<u64>,
}

/// The `DataType` of a `TF_DataType` number (types.proto numbering).
fn data_type(n: i32) -> DataType {
    match n {
        1 => DataType::Float,
        2 => DataType::Double,
        3 => DataType::Int32,
        4 => DataType::UInt8,
        5 => DataType::Int16,
        6 => DataType::Int8,
        7 => DataType::String,
        8 => DataType::Complex64,
        9 => DataType::Int64,
        10 => DataType::Bool,
        14 => DataType::BFloat16,
        17 => DataType::UInt16,
        18 => DataType::Complex128,
        19 => DataType::Half,
        20 => DataType::Resource,
        21 => DataType::Variant,
        22 => DataType::UInt32,
        23 => DataType::UInt64,
        other => DataType::UnrecognizedEnumValue(other.max(0) as u32),
    }
}

/// Every tensor in the index of the checkpoint at `prefix` (a V2 prefix: `prefix.index` is
/// read), sorted by name.
///
/// # Errors
/// [`Error::TensorFlow`] with TensorFlow's message if the index is missing or does not parse;
/// [`Error::InvalidArgument`] if `prefix` holds a NUL byte.
pub fn list_checkpoint(prefix: &str) -> Result<Vec<CheckpointEntry>> {
    let c_prefix = CString::new(prefix).map_err(|_| Error::InvalidArgument {
        what: format!("checkpoint prefix {prefix:?}"),
        reason: "contains a NUL byte".into(),
    })?;
    let status = Status::new();
    // SAFETY: both pointers are live for the call; the reader is freed by `Reader`'s drop.
    let raw = unsafe { sys::TF_NewCheckpointReader(c_prefix.as_ptr(), status.as_ptr()) };
    status.check("TF_NewCheckpointReader")?;
    if raw.is_null() {
        return Err(Error::tf(
            "TF_NewCheckpointReader",
            crate::error::TfCode::Unknown,
            "returned no reader",
        ));
    }
    let reader = Reader(raw);
    // SAFETY: `reader.0` is a live reader.
    let count = unsafe { sys::TF_CheckpointReaderSize(reader.0) };
    let mut entries = Vec::with_capacity(count.max(0) as usize);
    for i in 0..count {
        // SAFETY: `i` is in range; the name is owned by the live reader and copied at once.
        let name_ptr = unsafe { sys::TF_CheckpointReaderGetVariable(reader.0, i) };
        if name_ptr.is_null() {
            continue;
        }
        // SAFETY: a NUL-terminated string owned by the reader.
        let c_name = unsafe { CStr::from_ptr(name_ptr) }.to_owned();
        // SAFETY: live reader, NUL-terminated name.
        let dtype =
            unsafe { sys::TF_CheckpointReaderGetVariableDataType(reader.0, c_name.as_ptr()) };
        // SAFETY: as above.
        let rank = unsafe { sys::TF_CheckpointReaderGetVariableNumDims(reader.0, c_name.as_ptr()) };
        let mut dims = vec![0i64; rank.max(0) as usize];
        let status = Status::new();
        // SAFETY: `dims` has room for `rank` values.
        unsafe {
            sys::TF_CheckpointReaderGetVariableShape(
                reader.0,
                c_name.as_ptr(),
                dims.as_mut_ptr(),
                rank.max(0),
                status.as_ptr(),
            )
        };
        status.check("TF_CheckpointReaderGetVariableShape")?;
        entries.push(CheckpointEntry {
            name: c_name.to_string_lossy().into_owned(),
            dtype: data_type(dtype),
            dims: dims.into_iter().map(|d| d.max(0) as u64).collect(),
        });
    }
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(entries)
}

/// An owned `TF_CheckpointReader`, deleted on drop.
struct Reader(*mut sys::TF_CheckpointReader);

impl Drop for Reader {
    fn drop(&mut self) {
        // SAFETY: created by TF_NewCheckpointReader, deleted once.
        unsafe { sys::TF_DeleteCheckpointReader(self.0) }
    }
}

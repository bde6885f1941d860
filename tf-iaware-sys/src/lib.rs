//! Raw FFI to the parts of the TensorFlow C API (2.21) that the `tensorflow` crate does not wrap:
//! the distributed-runtime server (`TF_NewServer` family), the kernel registry, the checkpoint
//! reader and the version.
//!
//! Linking is this crate's job: its build script finds or fetches libtensorflow (see docs/src/guide/libtensorflow.md)
//! and every final link of the workspace — the `tensorflow` crate's calls included — resolves
//! against that one library. Safe wrappers live in the `tf_iaware` crate; everything here is
//! `unsafe` and follows the C header's ownership rules.

#![warn(missing_docs)]
#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_int, c_void};

/// Directory of the linked libtensorflow (also the rpath of the workspace's binaries); empty when
/// nothing was linked (`cargo check`/`cargo doc` without the library — see [`LIB_SOURCE`]).
pub const LIB_DIR: &str = env!("TF_IAWARE_LIBDIR");
/// File name of the linked shared object, e.g. `libtensorflow_cc.so.2`; empty when nothing was linked.
pub const LIB_FILE: &str = env!("TF_IAWARE_LIB_FILE");
/// Which discovery step supplied the library, or `not linked (…)` / `not found: <reason>`.
pub const LIB_SOURCE: &str = env!("TF_IAWARE_LIB_SOURCE");
/// The TensorFlow release this code is written against; compare with [`TF_Version`].
pub const EXPECTED_VERSION: &str = env!("TF_IAWARE_EXPECTED_VERSION");

/// Opaque `TF_Status`.
#[repr(C)]
pub struct TF_Status {
    _private: [u8; 0],
}

/// Opaque `TF_Server` (an in-process gRPC server of the distributed runtime).
#[repr(C)]
pub struct TF_Server {
    _private: [u8; 0],
}

/// Opaque `TF_CheckpointReader` (c_api_experimental.h): the index of a V1 or V2 checkpoint.
#[repr(C)]
pub struct TF_CheckpointReader {
    _private: [u8; 0],
}

/// `TF_Buffer`: bytes owned by TensorFlow until [`TF_DeleteBuffer`].
#[repr(C)]
pub struct TF_Buffer {
    /// Start of the bytes.
    pub data: *const c_void,
    /// Number of bytes at `data`.
    pub length: usize,
    /// Frees `data`; called by [`TF_DeleteBuffer`] (`None`: the bytes are not freed).
    pub data_deallocator: Option<unsafe extern "C" fn(data: *mut c_void, length: usize)>,
}

/// `TF_OK` of the `TF_Code` enum; every other value is an error.
pub const TF_OK: c_int = 0;

extern "C" {
    /// Version string of the loaded library, e.g. `"2.21.0"`. Static storage.
    pub fn TF_Version() -> *const c_char;

    /// A new, OK status; free it with [`TF_DeleteStatus`].
    pub fn TF_NewStatus() -> *mut TF_Status;
    /// Frees a status.
    pub fn TF_DeleteStatus(status: *mut TF_Status);
    /// The status code (`TF_Code`).
    pub fn TF_GetCode(status: *const TF_Status) -> c_int;
    /// The status message; valid until the status is changed or deleted.
    pub fn TF_Message(status: *const TF_Status) -> *const c_char;

    /// Frees a buffer (and its bytes, through its `data_deallocator`).
    pub fn TF_DeleteBuffer(buffer: *mut TF_Buffer);

    /// Serialized `KernelList` of the kernels registered for op `name`.
    pub fn TF_GetRegisteredKernelsForOp(
        name: *const c_char,
        status: *mut TF_Status,
    ) -> *mut TF_Buffer;

    /// Creates a server from a serialized `ServerDef`; not started.
    pub fn TF_NewServer(
        proto: *const c_void,
        proto_len: usize,
        status: *mut TF_Status,
    ) -> *mut TF_Server;
    /// Starts the server (it then serves in background threads); errors go to `status`.
    pub fn TF_ServerStart(server: *mut TF_Server, status: *mut TF_Status);
    /// Stops a started server; errors go to `status`.
    pub fn TF_ServerStop(server: *mut TF_Server, status: *mut TF_Status);
    /// Blocks until the server stops; errors go to `status`.
    pub fn TF_ServerJoin(server: *mut TF_Server, status: *mut TF_Status);
    /// `grpc://host:port` target of the server; owned by the server.
    pub fn TF_ServerTarget(server: *mut TF_Server) -> *const c_char;
    /// Frees a server, stopping it first if it runs.
    pub fn TF_DeleteServer(server: *mut TF_Server);

    /// Opens the checkpoint at `filename` (a V2 prefix, without `.index`); null with an error in
    /// `status` when it cannot be read. Free with [`TF_DeleteCheckpointReader`].
    pub fn TF_NewCheckpointReader(
        filename: *const c_char,
        status: *mut TF_Status,
    ) -> *mut TF_CheckpointReader;
    /// Frees a checkpoint reader.
    pub fn TF_DeleteCheckpointReader(reader: *mut TF_CheckpointReader);
    /// Number of tensors in the checkpoint.
    pub fn TF_CheckpointReaderSize(reader: *mut TF_CheckpointReader) -> c_int;
    /// Name of tensor `index` (`0..TF_CheckpointReaderSize`); owned by the reader.
    pub fn TF_CheckpointReaderGetVariable(
        reader: *mut TF_CheckpointReader,
        index: c_int,
    ) -> *const c_char;
    /// `TF_DataType` of tensor `name`.
    pub fn TF_CheckpointReaderGetVariableDataType(
        reader: *mut TF_CheckpointReader,
        name: *const c_char,
    ) -> c_int;
    /// Rank of tensor `name`.
    pub fn TF_CheckpointReaderGetVariableNumDims(
        reader: *mut TF_CheckpointReader,
        name: *const c_char,
    ) -> c_int;
    /// Writes the `num_dims` dimensions of tensor `name` to `dims`.
    pub fn TF_CheckpointReaderGetVariableShape(
        reader: *mut TF_CheckpointReader,
        name: *const c_char,
        dims: *mut i64,
        num_dims: c_int,
        status: *mut TF_Status,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    #[test]
    fn linked_library_reports_expected_version() {
        // SAFETY: TF_Version returns a static NUL-terminated string.
        let v = unsafe { CStr::from_ptr(TF_Version()) }.to_string_lossy();
        assert_eq!(v, EXPECTED_VERSION, "linked {LIB_DIR}/{LIB_FILE}");
    }
}

//! RAII wrapper of a TensorFlow distributed-runtime server (`TF_NewServer` family).

use std::ffi::CStr;

use prost::Message;
use tf_iaware_sys as sys;

use super::status::Status;
use crate::error::Result;
use crate::proto::ServerDef;

/// A started in-process gRPC server of TensorFlow's distributed runtime. Stopped and deleted on
/// drop.
pub struct Server {
    raw: *mut sys::TF_Server,
    target: String,
}

// SAFETY: TF_Server is internally synchronised; the C API allows calls from any thread.
unsafe impl Send for Server {}
// SAFETY: as above; &Server only exposes `target` and thread-safe C calls.
unsafe impl Sync for Server {}

impl Server {
    /// Creates and starts a server for `def` (job, task, cluster, protocol `grpc`).
    ///
    /// # Errors
    /// [`crate::Error::TensorFlow`] if TensorFlow rejects the definition or cannot bind the port.
    pub fn start(def: &ServerDef) -> Result<Server> {
        super::ensure_supported_version()?;
        let bytes = def.encode_to_vec();
        let status = Status::new();
        // SAFETY: bytes outlive the call; status is live.
        let raw = unsafe { sys::TF_NewServer(bytes.as_ptr().cast(), bytes.len(), status.as_ptr()) };
        status.check(&format!(
            "TF_NewServer(/job:{}/task:{})",
            def.job_name, def.task_index
        ))?;
        // SAFETY: raw is a live server (status was OK); the target string is owned by it.
        let target = unsafe { CStr::from_ptr(sys::TF_ServerTarget(raw)) }
            .to_string_lossy()
            .into_owned();
        let server = Server { raw, target };
        // SAFETY: raw is live.
        unsafe { sys::TF_ServerStart(server.raw, status.as_ptr()) };
        status.check("TF_ServerStart")?;
        Ok(server)
    }

    /// Session target of this server, `grpc://host:port`.
    pub fn target(&self) -> &str {
        &self.target
    }

    /// Blocks until the server stops.
    ///
    /// # Errors
    /// [`crate::Error::TensorFlow`] if joining fails.
    pub fn join(&self) -> Result<()> {
        let status = Status::new();
        // SAFETY: self.raw is live for the lifetime of self.
        unsafe { sys::TF_ServerJoin(self.raw, status.as_ptr()) };
        status.check("TF_ServerJoin")
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let status = Status::new();
        // SAFETY: self.raw is live; stopped then deleted exactly once. TensorFlow's gRPC server
        // may report "Unimplemented" for Stop; deletion is still valid.
        unsafe {
            sys::TF_ServerStop(self.raw, status.as_ptr());
            sys::TF_DeleteServer(self.raw);
        }
    }
}

//! RAII wrapper of a TensorFlow distributed-runtime server (`TF_NewServer` family).

use std::ffi::CStr;

use prost::Message;
use tf_iaware_sys as sys;

use super::status::Status;
use crate::error::Result;
use crate::graph::proto::ServerDef;

/// A started in-process gRPC server of TensorFlow's distributed runtime.
///
/// TensorFlow 2.21's gRPC server cannot shut down cleanly: `TF_ServerStop` answers
/// "Clean shutdown is not currently implemented" and `TF_DeleteServer` on a started server
/// aborts the process. So a `Server` is never deleted — dropping it leaves it serving until the
/// process exits, which is how `tf-iaware worker` stops (on SIGTERM/SIGINT).
pub struct Server {
    raw: *mut sys::TF_Server,
    target: String,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

/// What a started server exposes, in words: TensorFlow 2.21's gRPC server listens on
/// `0.0.0.0:PORT` (`GrpcServer::Init` builds the listening address from the port alone; a
/// `ServerDef` has no field for the host to bind), whatever host TF_CONFIG names, and its worker
/// and master services run any graph they are sent, without authentication.
pub fn exposure_warning(def: &ServerDef) -> String {
    format!(
        "TensorFlow's gRPC server of /job:{}/task:{} listens on port {} of every network interface \
         (TensorFlow binds 0.0.0.0 whatever host TF_CONFIG names) and runs any graph it is sent, \
         unauthenticated; confine it to trusted peers with a network namespace or a firewall rule \
         (README, Distributed training: Security)",
        def.job_name, def.task_index, def.port
    )
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
        log::warn!("{}", exposure_warning(def));
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::tf_config::{TaskId, TfConfig};

    #[test]
    fn the_exposure_warning_names_the_task_and_the_port() {
        let def = ServerDef {
            job_name: "worker".into(),
            task_index: 3,
            port: 2345,
            ..ServerDef::default()
        };
        let w = exposure_warning(&def);
        assert!(
            w.contains("/job:worker/task:3") && w.contains("port 2345"),
            "{w}"
        );
        assert!(w.contains("0.0.0.0") && w.contains("firewall"), "{w}");
    }

    #[test]
    fn starts_on_a_free_port_and_can_be_dropped_without_aborting() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let text = format!("{{\"cluster\": {{\"worker\": [\"127.0.0.1:{port}\"]}}}}");
        let config = TfConfig::parse(&text, "test").unwrap();
        let def = config
            .server_def(&TaskId {
                job: "worker".into(),
                index: 0,
            })
            .unwrap();
        let server = Server::start(&def).unwrap();
        assert_eq!(server.target(), format!("grpc://localhost:{port}"));
        assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_ok());
        drop(server);
    }
}

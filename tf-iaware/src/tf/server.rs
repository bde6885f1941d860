//! RAII wrapper of a TensorFlow distributed-runtime server (`TF_NewServer` family).

use std::ffi::CStr;
use std::net::SocketAddr;

use prost::Message;
use tf_iaware_sys as sys;

use super::listen;
use super::status::Status;
use crate::error::{Error, Result};
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
    listen: SocketAddr,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("target", &self.target)
            .field("listen", &self.listen)
            .finish_non_exhaustive()
    }
}

// SAFETY: TF_Server is internally synchronised; the C API allows calls from any thread.
unsafe impl Send for Server {}
// SAFETY: as above; &Server only exposes `target` and thread-safe C calls.
unsafe impl Sync for Server {}

impl Server {
    /// Creates and starts a server for `def` (job, task, cluster, protocol `grpc`), listening
    /// only on its task's own address: the host TF_CONFIG names for the task (the first of its
    /// addresses this machine can bind) and `def.port`. TensorFlow would bind every interface;
    /// the executable's `bind` narrows that (the crate's `tf::listen`), and the listening
    /// sockets are read back from the kernel before this returns.
    ///
    /// The executable must export `bind`: this workspace's build scripts link with
    /// `-Wl,--export-dynamic-symbol=bind`; a crate of your own adds the same line to its build
    /// script (the book's "Distributed training: Security").
    ///
    /// # Errors
    /// [`Error::ServerListen`] if the executable does not export `bind`, if the task's host is
    /// not an address of this machine, or if a wildcard listener is found after all (it is shut
    /// down); [`crate::Error::TensorFlow`] if TensorFlow rejects the definition or cannot bind
    /// the port.
    pub fn start(def: &ServerDef) -> Result<Server> {
        super::ensure_supported_version()?;
        let listen = Self::own_address(def)?;
        listen::narrow(listen);
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
        let server = Server {
            raw,
            target,
            listen,
        };
        // SAFETY: raw is live.
        unsafe { sys::TF_ServerStart(server.raw, status.as_ptr()) };
        status.check("TF_ServerStart")?;
        Self::check_listeners(def, listen)?;
        log::info!(
            "TensorFlow server of /job:{}/task:{} listens on {listen} only",
            def.job_name,
            def.task_index
        );
        Ok(server)
    }

    /// The address `def`'s server is to listen on, once `bind` is known to be narrowed.
    fn own_address(def: &ServerDef) -> Result<SocketAddr> {
        let address = def
            .cluster
            .as_ref()
            .and_then(|c| c.job.iter().find(|j| j.name == def.job_name))
            .and_then(|j| j.tasks.get(&def.task_index))
            .cloned()
            .unwrap_or_default();
        let fail = |reason: String| Error::ServerListen {
            job: def.job_name.clone(),
            task: def.task_index,
            address: address.clone(),
            reason,
        };
        if address.is_empty() {
            return Err(fail("the cluster has no address for this task".into()));
        }
        let port = u16::try_from(def.port)
            .ok()
            .filter(|&p| p > 0)
            .ok_or_else(|| fail(format!("port {} is not in 1..=65535", def.port)))?;
        if !listen::interposed() {
            return Err(fail(format!(
                "TensorFlow would listen on port {port} of every interface: this executable does \
                 not export `bind`, so it cannot narrow that to the task's address; link it with \
                 `-Wl,--export-dynamic-symbol=bind` (in its build script: \
                 `println!(\"{}\")`)",
                listen::LINK_ARG
            )));
        }
        let own = listen::own_address(&address, port).map_err(fail)?;
        if own.ip().is_unspecified() {
            log::warn!(
                "TF_CONFIG gives /job:{}/task:{} the wildcard address {address}: its server \
                 listens on every interface",
                def.job_name,
                def.task_index
            );
        }
        Ok(own)
    }

    /// Fails, shutting them down, if the process listens on a wildcard address of the
    /// server's port although its task's address is not one.
    fn check_listeners(def: &ServerDef, listen: SocketAddr) -> Result<()> {
        if listen.ip().is_unspecified() {
            return Ok(());
        }
        let fail = |reason: String| Error::ServerListen {
            job: def.job_name.clone(),
            task: def.task_index,
            address: listen.to_string(),
            reason,
        };
        let wide = listen::wildcard_listeners(listen.port()).map_err(fail)?;
        if wide.is_empty() {
            return Ok(());
        }
        for &(_, fd) in &wide {
            // SAFETY: shutdown(2) of a listening socket of this process stops it accepting.
            unsafe { libc::shutdown(fd, libc::SHUT_RDWR) };
        }
        let found: Vec<String> = wide.iter().map(|(a, _)| a.to_string()).collect();
        Err(fail(format!(
            "it listened on {} after all (now shut down)",
            found.join(", ")
        )))
    }

    /// The address the server listens on (the task's own, with the port it serves).
    pub fn listen_address(&self) -> SocketAddr {
        self.listen
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
        assert_eq!(
            server.listen_address().to_string(),
            format!("127.0.0.1:{port}")
        );
        assert_eq!(listen::wildcard_listeners(port), Ok(Vec::new()));
        drop(server);
    }
}

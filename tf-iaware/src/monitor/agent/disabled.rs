//! Without the `agent` feature: the agent's API, refusing to serve. Every method stays `pub`, as
//! in the real one, so callers compile the same with and without the feature.

use std::net::SocketAddr;
use std::sync::Arc;

use super::{AgentConfig, MetricsSource};
use crate::error::{Error, Result};

/// Why no agent can serve in this build.
pub const NOT_COMPILED: &str =
    "the metrics agent is not compiled in: build tf-iaware with the `agent` feature";

/// The agent of a build without the `agent` feature: it cannot be started.
#[derive(Debug)]
pub struct Agent {
    never: std::convert::Infallible,
}

impl Agent {
    /// Always fails in this build.
    ///
    /// # Errors
    /// [`Error::Agent`] naming the address and [`NOT_COMPILED`].
    pub fn serve(config: AgentConfig, _source: Arc<dyn MetricsSource>) -> Result<Agent> {
        Err(Error::Agent {
            listen: config.listen.to_string(),
            reason: NOT_COMPILED.to_string(),
        })
    }

    /// Never called: no `Agent` exists in this build.
    pub fn local_addr(&self) -> SocketAddr {
        match self.never {}
    }

    /// Never called: no `Agent` exists in this build.
    pub fn metrics_url(&self) -> String {
        match self.never {}
    }

    /// Never called: no `Agent` exists in this build.
    pub fn stop(self) {
        match self.never {}
    }

    /// Never called: no `Agent` exists in this build.
    pub fn wait(self) {
        match self.never {}
    }
}

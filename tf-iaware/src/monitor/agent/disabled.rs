//! Without the `agent` feature: the agent's API, refusing to serve. Every method stays `pub`, as
//! in the real one, so callers compile the same with and without the feature.

use std::net::SocketAddr;
use std::sync::Arc;

use super::{AgentConfig, MetricsSource};
use crate::error::{Error, Result};

/// The cargo feature the agent needs.
pub const FEATURE: &str = "agent";

/// The agent of a build without the `agent` feature: it cannot be started.
#[derive(Debug)]
pub struct Agent {
    never: std::convert::Infallible,
}

impl Agent {
    /// Always fails in this build.
    ///
    /// # Errors
    /// [`Error::NotCompiled`] naming the [`FEATURE`] and the address.
    pub fn serve(config: AgentConfig, _source: Arc<dyn MetricsSource>) -> Result<Agent> {
        Err(Error::NotCompiled {
            feature: FEATURE,
            what: format!("the metrics agent (asked to listen on {})", config.listen),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::monitor::agent::AgentConfig;

    struct Page;
    impl MetricsSource for Page {
        fn metrics_page(&self) -> String {
            String::new()
        }
    }

    #[test]
    fn not_compiled_agent_names_the_feature_and_address() {
        let config = AgentConfig::default();
        let listen = config.listen.to_string();
        match Agent::serve(config, Arc::new(Page)) {
            Err(e @ Error::NotCompiled { feature, .. }) => {
                assert_eq!(feature, "agent");
                let message = e.to_string();
                assert!(message.contains(&listen), "{message}");
                assert!(message.contains("`agent` feature"), "{message}");
            }
            Err(other) => panic!("not NotCompiled: {other}"),
            Ok(_) => panic!("an agent served without the agent feature"),
        }
    }
}

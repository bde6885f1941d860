//! Without the `agent` feature: the server behind [`Agent`](super::Agent) refuses to start, so
//! callers compile the same with and without the feature.

use std::net::SocketAddr;
use std::sync::Arc;

use super::{AgentConfig, MetricsSource};
use crate::error::{Error, Result};

/// The cargo feature the agent needs.
const FEATURE: &str = "agent";

/// The server of a build without the `agent` feature: none can exist.
#[derive(Debug)]
pub(super) struct Server(std::convert::Infallible);

impl Server {
    /// Always [`Error::NotCompiled`] naming the [`FEATURE`] and the address.
    pub(super) fn serve(config: AgentConfig, _source: Arc<dyn MetricsSource>) -> Result<Server> {
        Err(Error::NotCompiled {
            feature: FEATURE,
            what: format!("the metrics agent (asked to listen on {})", config.listen),
        })
    }

    pub(super) fn local_addr(&self) -> SocketAddr {
        match self.0 {}
    }

    pub(super) fn stop(self) {
        match self.0 {}
    }

    pub(super) fn wait(self) {
        match self.0 {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::monitor::agent::Agent;

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
                let shown = e.to_string();
                assert!(shown.contains(&listen), "{shown}");
                assert!(shown.contains("`agent` feature"), "{shown}");
            }
            Err(other) => panic!("not NotCompiled: {other}"),
            Ok(_) => panic!("an agent served without the agent feature"),
        }
    }
}

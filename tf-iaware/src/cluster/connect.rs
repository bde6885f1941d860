//! From a [`ClusterSpec`] to the devices it offers and the session configuration that reaches them.

use super::local;
use super::model::Cluster;
use super::spec::ClusterSpec;
use crate::error::{Error, Result};
use crate::runtime::SessionConfig;

/// Devices of the cluster `spec` names, and how to open sessions on it.
///
/// # Errors
/// [`Error::ClusterSpec`] for cluster kinds this build cannot reach; [`Error::TensorFlow`] if
/// TensorFlow cannot list the devices.
pub fn connect(spec: &ClusterSpec) -> Result<(Cluster, SessionConfig)> {
    let config = match spec {
        ClusterSpec::Local => SessionConfig::default(),
        ClusterSpec::LocalCpu(n) => SessionConfig::local_cpus(*n),
        ClusterSpec::TfConfig(_) | ClusterSpec::Emulated(_) => {
            return Err(Error::ClusterSpec {
                spec: spec.to_string(),
                reason: "distributed clusters (tf-config, emulated) are not available in this build yet; use local or local:cpu=N".into(),
            })
        }
    };
    let cluster = local::discover(&config)?;
    Ok((cluster, config))
}

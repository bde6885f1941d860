//! [`Connection`]: a cluster spec turned into devices (with their calibrated capability, when a
//! calibration is cached) and the session configuration that reaches them.

use std::path::PathBuf;

use crate::cluster::tf_config::TfConfig;
use crate::cluster::{self, Cluster, ClusterSpec};
use crate::emulate::EmulatedCluster;
use crate::error::Result;
use crate::runtime::{calibrate, SessionConfig};

/// A connected cluster: its devices, how to open sessions on it, its TF_CONFIG (for `tf-config`
/// and emulated clusters) and, for an emulated cluster, the local processes, which live as long
/// as the connection.
pub struct Connection {
    spec: String,
    cluster: Cluster,
    config: SessionConfig,
    tf_config: Option<TfConfig>,
    calibration: Option<PathBuf>,
    emulated: Option<EmulatedCluster>,
}

/// Connects to the cluster `spec` names (`local`, `local:cpu=N`, `tf-config`,
/// `tf-config:PATH`; DESIGN.md §5) and applies the cached calibration of its devices, if a fresh
/// one exists (`tf-iaware devices --calibrate` or [`Connection::calibrate`] made it).
///
/// ```no_run
/// let cluster = tf_iaware::connect("local:cpu=4")?;
/// println!("{} devices", cluster.cluster().devices.len());
/// # Ok::<(), tf_iaware::Error>(())
/// ```
///
/// # Errors
/// [`Error::ClusterSpec`](crate::Error::ClusterSpec) for a spec that does not parse or names an
/// emulated cluster (start it with [`EmulatedCluster::start`] and use
/// [`Connection::from_emulated`]); [`Error::TfConfig`](crate::Error::TfConfig) for a bad
/// TF_CONFIG; [`Error::TensorFlow`](crate::Error::TensorFlow) if the devices cannot be listed
/// (an unreachable master, say); [`Error::Json`](crate::Error::Json) for a corrupt calibration
/// cache file.
pub fn connect(spec: &str) -> Result<Connection> {
    Connection::open(&ClusterSpec::parse(spec)?)
}

impl Connection {
    /// As [`connect`], from a parsed spec.
    ///
    /// # Errors
    /// As [`connect`].
    pub fn open(spec: &ClusterSpec) -> Result<Connection> {
        let (cluster, config) = cluster::connect(spec)?;
        let tf_config = match spec {
            ClusterSpec::TfConfig(Some(path)) => Some(TfConfig::from_file(path)?),
            ClusterSpec::TfConfig(None) => Some(TfConfig::from_env()?),
            _ => None,
        };
        Connection::finish(spec.to_string(), cluster, config, tf_config, None)
    }

    /// Connects to an emulated cluster that is already running; the connection owns it (its
    /// processes end when the connection is dropped).
    ///
    /// # Errors
    /// As [`connect`].
    pub fn from_emulated(emulated: EmulatedCluster) -> Result<Connection> {
        let (cluster, config) = emulated.connect()?;
        let spec = format!("emulated:{}", emulated.scenario().name);
        let tf_config = Some(emulated.tf_config().clone());
        Connection::finish(spec, cluster, config, tf_config, Some(emulated))
    }

    fn finish(
        spec: String,
        mut cluster: Cluster,
        config: SessionConfig,
        tf_config: Option<TfConfig>,
        emulated: Option<EmulatedCluster>,
    ) -> Result<Connection> {
        let calibration = if calibrate::apply_cached(&mut cluster)? {
            let path = calibrate::profile_path(&cluster);
            log::debug!("using the calibration in {}", path.display());
            Some(path)
        } else {
            None
        };
        Ok(Connection {
            spec,
            cluster,
            config,
            tf_config,
            calibration,
            emulated,
        })
    }

    /// Calibrates every device through TensorFlow now (micro-benchmarks, the calibration
    /// network, link transfers), caches the profile per host and cluster and applies it; later
    /// connections reuse it. Returns the cache file.
    ///
    /// # Errors
    /// As [`calibrate::calibrate_and_store`].
    pub fn calibrate(&mut self) -> Result<PathBuf> {
        let path = calibrate::calibrate_and_store(&mut self.cluster, &self.config)?;
        self.calibration = Some(path.clone());
        Ok(path)
    }

    /// The spec this connection was made from.
    pub fn spec(&self) -> &str {
        &self.spec
    }

    /// The devices: names, types, memory, capability, availability, links.
    pub fn cluster(&self) -> &Cluster {
        &self.cluster
    }

    /// The devices, to adjust by hand (a known co-tenant, a measured link).
    pub fn cluster_mut(&mut self) -> &mut Cluster {
        &mut self.cluster
    }

    /// How sessions on this cluster are created (target, threads, deadlines).
    pub fn session_config(&self) -> &SessionConfig {
        &self.config
    }

    /// The session configuration, to adjust (deadlines, thread counts) before placing.
    pub fn session_config_mut(&mut self) -> &mut SessionConfig {
        &mut self.config
    }

    /// The cluster's TF_CONFIG (task addresses), for `tf-config…` and emulated clusters.
    pub fn tf_config(&self) -> Option<&TfConfig> {
        self.tf_config.as_ref()
    }

    /// The calibration cache file applied to the devices, if one was.
    pub fn calibration(&self) -> Option<&std::path::Path> {
        self.calibration.as_deref()
    }

    /// The emulated cluster this connection owns, if any (to change co-tenant loads, kill or
    /// restart tasks).
    pub fn emulated_mut(&mut self) -> Option<&mut EmulatedCluster> {
        self.emulated.as_mut()
    }
}

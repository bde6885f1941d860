//! [`Connection`]: a cluster spec turned into devices — their calibrated capability (when a
//! calibration is cached for this hardware) and their live availability (read from the
//! cluster's metrics when it connects, and again on [`Connection::refresh`]) — and the session
//! configuration that reaches them.

use std::any::Any;

use super::builder::{CalibrationPolicy, ConnectionBuilder};
use crate::cluster::tf_config::{TaskId, TfConfig};
use crate::cluster::{connect_live, connect_tf_config_live};
use crate::cluster::{Cluster, ClusterSpec, LiveWarning, MetricsFeed};
use crate::error::Result;
use crate::runtime::calibrate::{self, CacheStatus, CalibrateOptions, CalibrationOutcome};
use crate::runtime::SessionConfig;

/// A connected cluster: its devices with live figures, how to open sessions on it, its
/// TF_CONFIG (for `tf-config` and running clusters), the feed that keeps reading its metrics
/// and, for a cluster started by the caller, what keeps its processes alive, for as long as the
/// connection lives.
pub struct Connection {
    spec: String,
    cluster: Cluster,
    config: SessionConfig,
    tf_config: Option<TfConfig>,
    cache: CacheStatus,
    metrics: MetricsFeed,
    warnings: Vec<LiveWarning>,
    /// Dropped with the connection, after everything else: the processes of a cluster handed
    /// over with [`Connection::from_running`].
    _owner: Option<Box<dyn Any + Send>>,
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("spec", &self.spec)
            .field("devices", &self.cluster.devices.len())
            .field("config", &self.config)
            .field("calibration", &self.cache)
            .field("warnings", &self.warnings)
            .field("owns_processes", &self._owner.is_some())
            .finish_non_exhaustive()
    }
}

/// Connects to the cluster `spec` names (`local`, `local:cpu=N`, `tf-config`,
/// `tf-config:PATH`, `synthetic:…` — drawn for planning and simulation only; docs/src/guide/cluster-specs.md): lists its devices, reads their live metrics (an in-process
/// sampler for local devices, each task's agent for TF_CONFIG clusters; an agent that does not
/// answer is a [`Connection::warnings`] entry, not an error) and applies the cached calibration
/// of their capability, if a fresh one exists for this hardware (`tf-iaware devices
/// --calibrate` or [`Connection::calibrate`] made it).
///
/// ```no_run
/// let cluster = tf_iaware::connect("local:cpu=4")?;
/// println!("{} devices", cluster.cluster().devices.len());
/// # Ok::<(), tf_iaware::Error>(())
/// ```
///
/// The short form of [`Connection::builder`]`(spec).connect()`: default live options, the cached
/// calibration, the session configuration's deadlines.
///
/// # Errors
/// [`Error::ClusterSpec`](crate::Error::ClusterSpec) for a spec that does not parse or names an
/// emulated cluster (start it with `tf_iaware_emulate::EmulatedCluster::start` and use its
/// `into_connection`, or [`Connection::from_running`]); [`Error::TfConfig`](crate::Error::TfConfig) for a bad
/// TF_CONFIG; [`Error::TensorFlow`](crate::Error::TensorFlow) if the devices cannot be listed
/// (an unreachable master, say); [`Error::Json`](crate::Error::Json) for a corrupt calibration
/// cache file.
pub fn connect(spec: &str) -> Result<Connection> {
    Connection::builder(spec).connect()
}

impl ConnectionBuilder {
    /// Connects with these settings.
    ///
    /// # Errors
    /// As [`connect`]; [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a zero or
    /// absurd deadline or scrape timeout, or a policy that calibrates on a `synthetic:` cluster;
    /// calibration errors with [`CalibrationPolicy::CalibrateIfMissing`] and
    /// [`CalibrationPolicy::Recalibrate`].
    pub fn connect(self) -> Result<Connection> {
        let spec = ClusterSpec::parse(self.spec())?;
        let (run, operation) = self.checked(&spec)?;
        let mut connection = Connection::open_with(&spec, &self)?;
        if let Some(ms) = run {
            connection.config.run_timeout_ms = ms;
        }
        if let Some(ms) = operation {
            connection.config.operation_timeout_ms = ms;
        }
        Ok(connection)
    }
}

impl Connection {
    /// Settings for connecting to the cluster `spec` names — live options, calibration policy,
    /// deadlines — then [`ConnectionBuilder::connect`].
    pub fn builder(spec: &str) -> ConnectionBuilder {
        ConnectionBuilder::new(spec)
    }

    /// As [`connect`], from a parsed spec.
    ///
    /// # Errors
    /// As [`connect`].
    pub fn open(spec: &ClusterSpec) -> Result<Connection> {
        Connection::open_with(spec, &Connection::builder(""))
    }

    /// As [`Connection::open`], with `settings`' live options and calibration policy (the
    /// caller applies the rest).
    fn open_with(spec: &ClusterSpec, settings: &ConnectionBuilder) -> Result<Connection> {
        if let ClusterSpec::Synthetic(_) = spec {
            // Drawn, not discovered: no metrics to read, no calibration that could describe it.
            let live = connect_live(spec, &settings.live)?;
            return Ok(Connection {
                spec: spec.to_string(),
                cluster: live.cluster,
                config: live.config,
                tf_config: None,
                cache: CacheStatus {
                    hit: false,
                    path: std::path::PathBuf::new(),
                    reason: Some("synthetic cluster: its figures are drawn, not calibrated".into()),
                    created_unix_s: None,
                },
                metrics: live.metrics,
                warnings: live.warnings,
                _owner: None,
            });
        }
        let live = connect_live(spec, &settings.live)?;
        let tf_config = match spec {
            ClusterSpec::TfConfig(Some(path)) => Some(TfConfig::from_file(path)?),
            ClusterSpec::TfConfig(None) => Some(TfConfig::from_env()?),
            _ => None,
        };
        let connection = Connection::finish(spec.to_string(), live, tf_config, None, settings)?;
        connection.calibrate_as(settings.calibration)
    }

    /// Connects to a TF_CONFIG cluster that is already running, through task `master`, and
    /// keeps `owner` — whatever keeps its processes alive (an emulated cluster, a test
    /// harness) — until the connection is dropped. `name` is the connection's spec in reports
    /// (`emulated:paper`, say).
    ///
    /// # Errors
    /// As [`connect`]; [`Error::TfConfig`](crate::Error::TfConfig) if `master` is not a task of
    /// `tf_config`.
    pub fn from_running(
        name: &str,
        tf_config: TfConfig,
        master: &TaskId,
        owner: Box<dyn Any + Send>,
    ) -> Result<Connection> {
        let settings = Connection::builder(name);
        let live = connect_tf_config_live(&tf_config, master, &settings.live)?;
        Connection::finish(
            name.to_string(),
            live,
            Some(tf_config),
            Some(owner),
            &settings,
        )
    }

    fn finish(
        spec: String,
        live: crate::cluster::LiveConnection,
        tf_config: Option<TfConfig>,
        owner: Option<Box<dyn Any + Send>>,
        settings: &ConnectionBuilder,
    ) -> Result<Connection> {
        let mut cluster = live.cluster;
        let cache = match settings.calibration {
            CalibrationPolicy::Nominal => CacheStatus {
                hit: false,
                path: std::path::PathBuf::new(),
                reason: Some("calibration policy Nominal: the cache is not read".into()),
                created_unix_s: None,
            },
            _ => calibrate::apply_cached_status(&mut cluster)?,
        };
        match &cache.reason {
            None => log::debug!("calibration cache hit: {}", cache.path.display()),
            Some(r) => log::debug!("calibration cache miss ({r}): {}", cache.path.display()),
        }
        for w in &live.warnings {
            log::warn!("{w}");
        }
        Ok(Connection {
            spec,
            cluster,
            config: live.config,
            tf_config,
            cache,
            metrics: live.metrics,
            warnings: live.warnings,
            _owner: owner,
        })
    }

    /// Calibrates now where `policy` says so (a miss with
    /// [`CalibrationPolicy::CalibrateIfMissing`], always with
    /// [`CalibrationPolicy::Recalibrate`], after dropping the cached profile).
    fn calibrate_as(mut self, policy: CalibrationPolicy) -> Result<Connection> {
        let now = match policy {
            CalibrationPolicy::Cached | CalibrationPolicy::Nominal => false,
            CalibrationPolicy::CalibrateIfMissing => !self.cache.hit,
            CalibrationPolicy::Recalibrate => {
                self.forget_calibration()?;
                true
            }
        };
        if now {
            let outcome = self.calibrate()?;
            if let Some(w) = &outcome.warning {
                log::warn!("calibration not cached: {w}");
            }
        }
        Ok(self)
    }

    /// Calibrates every device through TensorFlow now (micro-benchmarks, the calibration
    /// network, link transfers) at its live availability, applies the capabilities, and caches
    /// them per user, host, hardware and TensorFlow version — unless co-tenants take so much of
    /// a device that the figures would be poisoned (then [`CalibrationOutcome::warning`] says
    /// why and nothing is cached). Later connections reuse the cache.
    ///
    /// # Errors
    /// As `calibrate::calibrate_and_cache`.
    pub fn calibrate(&mut self) -> Result<CalibrationOutcome> {
        let outcome = calibrate::calibrate_and_cache(
            &mut self.cluster,
            &self.config,
            &CalibrateOptions::default(),
        )?;
        if let Some(path) = &outcome.cached {
            self.cache = CacheStatus {
                hit: true,
                path: path.clone(),
                reason: None,
                created_unix_s: None,
            };
        }
        Ok(outcome)
    }

    /// Drops this cluster's cached calibration (`--recalibrate`); returns whether there was one.
    ///
    /// # Errors
    /// [`Error::Io`](crate::Error::Io) if the cache file cannot be removed.
    pub fn forget_calibration(&self) -> Result<bool> {
        calibrate::invalidate(&self.cluster)
    }

    /// Reads the cluster's metrics again and updates every device's live figures
    /// (availability, free memory, co-tenant load, age, source); returns the tasks whose
    /// metrics could not be read (their devices keep their last figures, marked stale).
    pub fn refresh(&mut self) -> Vec<LiveWarning> {
        self.warnings = self.metrics.refresh(&mut self.cluster);
        self.warnings.clone()
    }

    /// Tasks whose metrics could not be read on the last reading.
    pub fn warnings(&self) -> &[LiveWarning] {
        &self.warnings
    }

    /// Whether the cached calibration was used, and why not.
    pub fn calibration_status(&self) -> &CacheStatus {
        &self.cache
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
        self.cache.hit.then_some(self.cache.path.as_path())
    }
}

//! [`ConnectionBuilder`]: [`connect`](super::connect) with its choices spelled out — how live
//! metrics are read, what to do about the calibration of the devices' capability, and how long a
//! step or a blocking call may take — so that none of them means reaching below the entry point.

use std::time::Duration;

use crate::cluster::{ClusterSpec, LiveOptions};
use crate::error::{Error, Result};

/// What a new connection does about the calibration of its devices' capability.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CalibrationPolicy {
    /// Apply a fresh cached calibration of this hardware if there is one; nominal figures
    /// otherwise (what [`connect`](super::connect) does).
    #[default]
    Cached,
    /// As `Cached`, and calibrate now (and cache) when no fresh calibration exists.
    CalibrateIfMissing,
    /// Drop any cached calibration of this hardware and calibrate now.
    Recalibrate,
    /// Nominal figures: the cache is neither read nor written.
    Nominal,
}

impl CalibrationPolicy {
    /// Whether it may calibrate while connecting (which a drawn `synthetic:` cluster cannot).
    pub(super) fn may_calibrate(self) -> bool {
        matches!(self, Self::CalibrateIfMissing | Self::Recalibrate)
    }
}

/// Builds a [`Connection`](super::Connection): `Connection::builder(spec)`, any of the settings,
/// [`connect`](Self::connect).
///
/// ```no_run
/// use std::time::Duration;
/// use tf_iaware::{CalibrationPolicy, Connection};
///
/// let cluster = Connection::builder("tf-config:cluster.json")
///     .scrape_timeout(Duration::from_millis(300)) // per metrics agent
///     .calibration(CalibrationPolicy::CalibrateIfMissing)
///     .run_deadline(Duration::from_secs(120)) // any one Session::run
///     .connect()?;
/// # Ok::<(), tf_iaware::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct ConnectionBuilder {
    spec: String,
    pub(super) live: LiveOptions,
    pub(super) calibration: CalibrationPolicy,
    run_deadline: Option<Duration>,
    operation_deadline: Option<Duration>,
}

impl ConnectionBuilder {
    /// Settings for the cluster `spec` names (as [`connect`](super::connect) takes it), all at
    /// their defaults.
    pub(super) fn new(spec: &str) -> Self {
        ConnectionBuilder {
            spec: spec.to_string(),
            live: LiveOptions::default(),
            calibration: CalibrationPolicy::default(),
            run_deadline: None,
            operation_deadline: None,
        }
    }

    /// How live metrics are read, all at once (replaces the settings of
    /// [`live_metrics`](Self::live_metrics) and [`scrape_timeout`](Self::scrape_timeout)).
    pub fn live(mut self, options: LiveOptions) -> Self {
        self.live = options;
        self
    }

    /// Read the devices' live metrics (default `true`); `false` keeps every device nominal.
    pub fn live_metrics(mut self, on: bool) -> Self {
        self.live.enabled = on;
        self
    }

    /// Deadline of one metrics agent's page, connect to last byte (default 1 s).
    pub fn scrape_timeout(mut self, timeout: Duration) -> Self {
        self.live.timeout = timeout;
        self
    }

    /// What to do about the calibration (default [`CalibrationPolicy::Cached`]).
    pub fn calibration(mut self, policy: CalibrationPolicy) -> Self {
        self.calibration = policy;
        self
    }

    /// Deadline of every `Session::run` on this cluster (RunOptions `timeout_in_ms`; default:
    /// the session configuration's, 10 minutes).
    pub fn run_deadline(mut self, deadline: Duration) -> Self {
        self.run_deadline = Some(deadline);
        self
    }

    /// Deadline of every other blocking TensorFlow call (session creation, graph extension;
    /// ConfigProto `operation_timeout_in_ms`).
    pub fn operation_deadline(mut self, deadline: Duration) -> Self {
        self.operation_deadline = Some(deadline);
        self
    }

    /// The spec as given.
    pub(super) fn spec(&self) -> &str {
        &self.spec
    }

    /// Checks the settings against the parsed `spec`; returns the run and operation deadlines
    /// to set, ms.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a zero or absurd deadline or scrape timeout, or a policy
    /// that calibrates on a `synthetic:` cluster.
    pub(super) fn checked(&self, spec: &ClusterSpec) -> Result<(Option<i64>, Option<i64>)> {
        if self.live.enabled {
            positive_ms("scrape timeout", self.live.timeout)?;
        }
        if self.calibration.may_calibrate() && matches!(spec, ClusterSpec::Synthetic(_)) {
            return Err(Error::InvalidArgument {
                what: format!("calibration policy {:?}", self.calibration),
                reason: format!("`{spec}` is drawn, not measured: it cannot be calibrated"),
            });
        }
        let run = self
            .run_deadline
            .map(|d| positive_ms("run deadline", d))
            .transpose()?;
        let operation = self
            .operation_deadline
            .map(|d| positive_ms("operation deadline", d))
            .transpose()?;
        Ok((run, operation))
    }
}

/// Longest deadline accepted: a week, ms.
const MAX_DEADLINE_MS: i64 = 7 * 24 * 3600 * 1000;

/// `d` in whole ms, when it is at least 1 ms and at most [`MAX_DEADLINE_MS`].
fn positive_ms(what: &str, d: Duration) -> Result<i64> {
    match i64::try_from(d.as_millis()) {
        Ok(ms) if (1..=MAX_DEADLINE_MS).contains(&ms) => Ok(ms),
        _ => Err(Error::InvalidArgument {
            what: what.into(),
            reason: format!("{d:?} is not between 1 ms and a week"),
        }),
    }
}

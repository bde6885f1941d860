//! [`PlacedSession`]: a TensorFlow session over a placed graph, run by op name, with deadlines and
//! step stats.

use std::time::{Duration, Instant};

use prost::Message;
use tensorflow::{Graph, Operation, Session, SessionRunArgs, Tensor};

use crate::config::SessionConfig;
use crate::error::{Error, Result};
use crate::graph::proto::{RunMetadata, RunOptions, StepStats};

/// What one run returned.
#[derive(Debug)]
pub struct RunOutcome {
    /// Values of the fetched float tensors, in request order.
    pub fetched: Vec<Tensor<f32>>,
    /// Wall time of `Session::run`.
    pub wall: Duration,
    /// Step stats when tracing was requested.
    pub step_stats: Option<StepStats>,
}

/// A session over a (placed) graph.
pub struct PlacedSession {
    graph: Graph,
    session: Session,
    /// More sessions over the same graph, each with a master of its own
    /// ([`PlacedSession::open_sibling`]).
    siblings: Vec<Session>,
    /// Deadline of each run, ms (RunOptions.timeout_in_ms).
    pub run_timeout_ms: i64,
}

impl std::fmt::Debug for PlacedSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlacedSession")
            .field("siblings", &self.siblings.len())
            .field("run_timeout_ms", &self.run_timeout_ms)
            .finish_non_exhaustive()
    }
}

impl PlacedSession {
    /// Creates a session over `graph` with `config`.
    ///
    /// # Errors
    /// [`Error::TensorFlow`] if TensorFlow cannot create it (bad target, bad config).
    pub fn new(graph: Graph, config: &SessionConfig) -> Result<Self> {
        crate::tf::ensure_supported_version()?;
        let session = Session::new(&config.session_options()?, &graph).map_err(|e| {
            crate::tf::status::error(
                format!("creating a session (target `{}`)", config.target),
                &e,
            )
        })?;
        Ok(PlacedSession {
            graph,
            session,
            siblings: Vec::new(),
            run_timeout_ms: config.run_timeout_ms,
        })
    }

    /// Opens another session over the same graph with `config` — another master (target),
    /// other device filters — and returns its index for [`PlacedSession::run_args_on`]. Runs
    /// keep this session's deadline. Its state is shared with the others only if neither
    /// isolates its session state.
    ///
    /// # Errors
    /// [`Error::TensorFlow`] if TensorFlow cannot create it (bad target, bad config).
    pub(crate) fn open_sibling(&mut self, config: &SessionConfig) -> Result<usize> {
        let session = Session::new(&config.session_options()?, &self.graph).map_err(|e| {
            crate::tf::status::error(
                format!("creating a session (target `{}`)", config.target),
                &e,
            )
        })?;
        self.siblings.push(session);
        Ok(self.siblings.len() - 1)
    }

    /// The graph the session runs.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// Devices the session sees.
    ///
    /// # Errors
    /// [`Error::TensorFlow`] if listing fails.
    pub fn devices(&self) -> Result<Vec<tensorflow::Device>> {
        self.session
            .device_list()
            .map_err(|e| crate::tf::status::error("listing devices", &e))
    }

    /// The operation called `name`.
    ///
    /// # Errors
    /// [`Error::UnknownOp`] with `context` if the graph has no such op.
    pub fn op(&self, name: &str, context: &str) -> Result<Operation> {
        self.graph
            .operation_by_name(name)
            .ok()
            .flatten()
            .ok_or_else(|| Error::UnknownOp {
                context: context.into(),
                op: name.into(),
            })
    }

    /// Runs once: feeds float tensors to ops (output 0), runs `targets`, fetches output 0 of
    /// `fetches`; with `trace`, requests FULL_TRACE step stats.
    ///
    /// # Errors
    /// [`Error::TensorFlow`] naming the targets if the run fails or passes its deadline.
    pub fn run(
        &self,
        feeds: &[(Operation, &Tensor<f32>)],
        targets: &[Operation],
        fetches: &[Operation],
        trace: bool,
    ) -> Result<RunOutcome> {
        let mut args = SessionRunArgs::new();
        for (op, t) in feeds {
            args.add_feed(op, 0, t);
        }
        for op in targets {
            args.add_target(op);
        }
        let tokens: Vec<_> = fetches.iter().map(|op| args.request_fetch(op, 0)).collect();
        let describe = || {
            let names: Vec<String> = targets
                .iter()
                .chain(fetches)
                .map(|o| o.name().unwrap_or_default())
                .collect();
            format!("Session::run({})", names.join(", "))
        };
        let (wall, step_stats) = self.run_args(&mut args, trace, &describe())?;
        let mut fetched = Vec::with_capacity(tokens.len());
        for t in tokens {
            fetched.push(args.fetch::<f32>(t).map_err(|e| {
                crate::tf::status::error(format!("fetching from {}", describe()), &e)
            })?);
        }
        Ok(RunOutcome {
            fetched,
            wall,
            step_stats,
        })
    }

    /// Runs `args` as they are (any feeds, targets and fetches the caller put there) under this
    /// session's deadline; with `trace`, requests FULL_TRACE step stats and returns them.
    /// `describe` names the run in errors. Returns the wall time of `Session::run`.
    ///
    /// # Errors
    /// [`Error::TensorFlow`] naming `describe` if the run fails or passes its deadline;
    /// [`Error::GraphDecode`] if the returned RunMetadata does not decode.
    pub fn run_args(
        &self,
        args: &mut SessionRunArgs<'_>,
        trace: bool,
        describe: &str,
    ) -> Result<(Duration, Option<StepStats>)> {
        self.run_args_on(None, args, trace, describe)
    }

    /// As [`PlacedSession::run_args`], on sibling session `sibling` (from
    /// [`PlacedSession::open_sibling`]) or, with `None`, on this one.
    ///
    /// # Errors
    /// As [`PlacedSession::run_args`]; [`Error::InvalidArgument`] for a sibling never opened.
    pub(crate) fn run_args_on(
        &self,
        sibling: Option<usize>,
        args: &mut SessionRunArgs<'_>,
        trace: bool,
        describe: &str,
    ) -> Result<(Duration, Option<StepStats>)> {
        self.run_args_within(sibling, args, trace, describe, self.run_timeout_ms)
    }

    /// As [`PlacedSession::run_args_on`], under a deadline of `timeout_ms` instead of the
    /// session's.
    ///
    /// # Errors
    /// As [`PlacedSession::run_args_on`].
    pub(crate) fn run_args_within(
        &self,
        sibling: Option<usize>,
        args: &mut SessionRunArgs<'_>,
        trace: bool,
        describe: &str,
        timeout_ms: i64,
    ) -> Result<(Duration, Option<StepStats>)> {
        let session = match sibling {
            None => &self.session,
            Some(k) => self.siblings.get(k).ok_or_else(|| Error::InvalidArgument {
                what: "sibling session".into(),
                reason: format!("{k} was never opened ({} are)", self.siblings.len()),
            })?,
        };
        let options = RunOptions {
            trace_level: if trace { RunOptions::FULL_TRACE } else { 0 },
            timeout_in_ms: timeout_ms,
        };
        args.set_run_options(&options.encode_to_vec());
        args.set_request_metadata(trace);
        // TensorFlow allows one profiling session per process: a FULL_TRACE run while another
        // is in flight fails with "Another profiling session active". Traced runs of every
        // session in this process take turns.
        let _one_trace = trace.then(|| TRACED_RUN.lock());
        let start = Instant::now();
        session
            .run(args)
            .map_err(|e| crate::tf::status::error(describe, &e))?;
        let wall = start.elapsed();
        let step_stats = if trace {
            let bytes = args.get_metadata().unwrap_or_default();
            let meta = RunMetadata::decode(bytes).map_err(|source| Error::GraphDecode {
                what: "RunMetadata".into(),
                source,
            })?;
            meta.step_stats
        } else {
            None
        };
        Ok((wall, step_stats))
    }
}

/// Held by the traced run in flight (see [`PlacedSession::run_args`]).
static TRACED_RUN: parking_lot::Mutex<()> = parking_lot::Mutex::new(());

impl Drop for PlacedSession {
    fn drop(&mut self) {
        for session in self
            .siblings
            .iter_mut()
            .chain(std::iter::once(&mut self.session))
        {
            if let Err(e) = session.close() {
                log::warn!("closing session: {e}");
            }
        }
    }
}

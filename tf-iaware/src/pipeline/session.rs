//! [`Session`]: a TensorFlow session over a placed graph that takes the handles of the graph the
//! user built ([`Run`]), feeds and fetches any dtype and any output, and checks afterwards where
//! every op ran ([`Verification`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tensorflow::{DataType, FetchToken, Graph, Operation, SessionRunArgs, Tensor, TensorType};

use crate::cluster::Cluster;
use crate::error::{Error, Result};
use crate::graph::proto::StepStats;
use crate::graph::OpGraph;
use crate::placer::Placement;
use crate::runtime::stats::{self, Mismatch};
use crate::runtime::PlacedSession;

use super::handle::{OpHandle, TensorHandle, TensorRef};
use super::step::Step;

/// A tensor to feed, whatever its element type (`Tensor<f32>`, `Tensor<i64>`, …).
pub trait Feed {
    /// Adds the tensor to `args` as the value of `output`.
    fn add_to<'l>(&'l self, args: &mut SessionRunArgs<'l>, output: &Operation, index: i32);
    /// Its TensorFlow dtype.
    fn data_type(&self) -> DataType;
    /// Its dimensions.
    fn dims(&self) -> &[u64];
}

impl<T: TensorType> Feed for Tensor<T> {
    fn add_to<'l>(&'l self, args: &mut SessionRunArgs<'l>, op: &Operation, index: i32) {
        args.add_feed(op, index, self);
    }
    fn data_type(&self) -> DataType {
        T::data_type()
    }
    fn dims(&self) -> &[u64] {
        Tensor::dims(self)
    }
}

/// One `Session::run`: feeds, targets and fetches named by handles of the original graph.
/// Builder methods chain without `?`; a handle that names nothing is reported by
/// [`Session::run`].
#[derive(Default)]
pub struct Run<'l> {
    feeds: Vec<(TensorRef, &'l dyn Feed)>,
    /// Targets and fetches (a [`Step`] is exactly that).
    ops: Step,
    trace: bool,
}

impl std::fmt::Debug for Run<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let feeds: Vec<&TensorRef> = self.feeds.iter().map(|(r, _)| r).collect();
        f.debug_struct("Run")
            .field("feeds", &feeds)
            .field("step", &self.ops)
            .field("traced", &self.trace)
            .finish()
    }
}

impl<'l> Run<'l> {
    /// A run with nothing in it.
    pub fn new() -> Self {
        Run::default()
    }

    /// A run of `step`: its targets and fetches (fetched values in the step's order).
    pub fn of(step: &Step) -> Self {
        Run {
            ops: step.clone(),
            ..Run::default()
        }
    }

    /// Feeds `value` as the value of `tensor` (a placeholder, or any output to override).
    #[must_use]
    pub fn feed(mut self, tensor: impl TensorHandle, value: &'l dyn Feed) -> Self {
        match tensor.tensor_ref() {
            Ok(t) => self.feeds.push((t, value)),
            Err(e) => self.ops.note(e),
        }
        self
    }

    /// Runs `op` for its effect.
    #[must_use]
    pub fn target(mut self, op: impl OpHandle) -> Self {
        self.ops = self.ops.target(op);
        self
    }

    /// Fetches `tensor` (read it with [`Fetched::get`]).
    #[must_use]
    pub fn fetch(mut self, tensor: impl TensorHandle) -> Self {
        self.ops = self.ops.fetch(tensor);
        self
    }

    /// Requests FULL_TRACE step stats ([`Fetched::step_stats`], [`Session::verify`]).
    #[must_use]
    pub fn traced(mut self) -> Self {
        self.trace = true;
        self
    }

    fn describe(&self) -> String {
        let names: Vec<String> = self
            .ops
            .targets()
            .iter()
            .cloned()
            .chain(self.ops.fetches().iter().map(TensorRef::to_string))
            .collect();
        format!("Session::run({})", names.join(", "))
    }
}

/// What a [`Run`] returned: fetched tensors by handle or position, wall time, step stats.
pub struct Fetched<'l> {
    args: SessionRunArgs<'l>,
    tokens: Vec<(TensorRef, FetchToken)>,
    /// Wall time of `Session::run`.
    pub wall: Duration,
    /// Step stats, when the run was [`Run::traced`].
    pub step_stats: Option<StepStats>,
}

impl std::fmt::Debug for Fetched<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let fetched: Vec<&TensorRef> = self.tokens.iter().map(|(r, _)| r).collect();
        f.debug_struct("Fetched")
            .field("fetched", &fetched)
            .field("wall", &self.wall)
            .field("traced", &self.step_stats.is_some())
            .finish_non_exhaustive()
    }
}

impl Fetched<'_> {
    /// Takes the value of fetched `tensor` (each fetch can be taken once).
    ///
    /// # Errors
    /// [`Error::Handle`] if the run did not fetch `tensor`, it was taken already, or its dtype is
    /// not `T`'s.
    pub fn get<T: TensorType>(&mut self, tensor: impl TensorHandle) -> Result<Tensor<T>> {
        let want = tensor.tensor_ref()?;
        let at = self
            .tokens
            .iter()
            .position(|(t, _)| *t == want)
            .ok_or_else(|| Error::Handle {
                handle: format!("`{want}`"),
                reason: "was not fetched by this run".into(),
            })?;
        self.at(at)
    }

    /// Takes the `i`-th fetched value (in the order of the run's fetches).
    ///
    /// # Errors
    /// As [`Fetched::get`].
    pub(crate) fn at<T: TensorType>(&mut self, i: usize) -> Result<Tensor<T>> {
        let (name, token) = self.tokens.get(i).cloned().ok_or_else(|| Error::Handle {
            handle: format!("fetch #{i}"),
            reason: format!("the run fetched {} tensors", self.tokens.len()),
        })?;
        self.args.fetch::<T>(token).map_err(|e| Error::Handle {
            handle: format!("`{name}`"),
            reason: e.to_string(),
        })
    }

    /// The first element of fetched `tensor` (a scalar loss, say).
    ///
    /// # Errors
    /// As [`Fetched::get`]; [`Error::Handle`] if the tensor is empty.
    pub fn scalar<T: TensorType + Copy>(&mut self, tensor: impl TensorHandle) -> Result<T> {
        let want = tensor.tensor_ref()?;
        let t = self.get::<T>(&want)?;
        t.first().copied().ok_or_else(|| Error::Handle {
            handle: format!("`{want}`"),
            reason: "the fetched tensor is empty".into(),
        })
    }
}

/// Where a traced run's ops actually ran, against the plan.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Verification {
    /// Device → number of distinct ops step stats saw run there.
    pub executed: BTreeMap<String, usize>,
    /// Placed ops that ran on another device (empty for a plan TensorFlow honoured).
    pub mismatches: Vec<Mismatch>,
    /// Placed ops that step stats saw run (the others were pruned from the step or rewritten).
    pub checked: usize,
}

impl Verification {
    /// Compares `stats` with `placement` of `graph` on `cluster` (`graph` gives op types too, so
    /// ops Grappler rewrote into other types are not counted as mismatches).
    pub fn of(
        stats: &StepStats,
        placement: &Placement,
        graph: &OpGraph,
        cluster: &Cluster,
    ) -> Self {
        let placed = |name: &str| placement.device_of(graph, cluster, name);
        let nodes = stats::executed_nodes(stats);
        let checked = nodes
            .values()
            .flatten()
            .filter(|n| placed(n).is_some())
            .collect::<BTreeSet<_>>()
            .len();
        Verification {
            executed: nodes.iter().map(|(d, n)| (d.clone(), n.len())).collect(),
            mismatches: stats::placement_mismatches(stats, placed, |name| {
                graph.id(name).map(|id| graph.node(id).op.as_str())
            }),
            checked,
        }
    }

    /// Whether every placed op that ran, ran where it was placed.
    pub fn is_ok(&self) -> bool {
        self.mismatches.is_empty()
    }
}

/// A session over a placed graph; it translates the handles of the original graph.
pub struct Session {
    inner: PlacedSession,
    placement: Placement,
    graph: OpGraph,
    cluster: Arc<Cluster>,
}

impl std::fmt::Debug for Session {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Session")
            .field("session", &self.inner)
            .field("placed_ops", &self.placement.placed_ops())
            .finish_non_exhaustive()
    }
}

impl Session {
    pub(super) fn new(
        inner: PlacedSession,
        placement: Placement,
        graph: &OpGraph,
        cluster: Arc<Cluster>,
    ) -> Self {
        Session {
            inner,
            placement,
            graph: graph.clone(),
            cluster,
        }
    }

    /// The placed TensorFlow graph the session runs.
    pub fn graph(&self) -> &Graph {
        self.inner.graph()
    }

    /// The placement the session's graph carries (ids of the plan's op graph and cluster).
    pub fn placement(&self) -> &Placement {
        &self.placement
    }

    /// Full device name the session's graph gives op `name`, if it was placed.
    pub fn device_of(&self, name: &str) -> Option<&str> {
        self.placement.device_of(&self.graph, &self.cluster, name)
    }

    /// The placed graph's op for a handle of the original graph.
    ///
    /// # Errors
    /// [`Error::Handle`] naming the op if the placed graph has no op of that name.
    pub fn op(&self, op: impl OpHandle) -> Result<Operation> {
        let name = op.op_name()?;
        self.resolve(&name)
    }

    fn resolve(&self, name: &str) -> Result<Operation> {
        self.inner
            .graph()
            .operation_by_name(name)
            .ok()
            .flatten()
            .ok_or_else(|| Error::Handle {
                handle: format!("`{name}`"),
                reason: "no op of that name in the placed graph (is it an op of the graph that was placed?)".into(),
            })
    }

    fn output(&self, t: &TensorRef) -> Result<(Operation, i32)> {
        let op = self.resolve(&t.op)?;
        let outputs = op.num_outputs();
        if t.index >= outputs {
            return Err(Error::Handle {
                handle: format!("`{t}`"),
                reason: format!("op `{}` has {outputs} outputs", t.op),
            });
        }
        Ok((op, t.index as i32))
    }

    /// Runs `run` once: feeds (any dtype, checked against the graph before TensorFlow sees
    /// them), targets and fetches, under the cluster's run deadline.
    ///
    /// # Errors
    /// [`Error::Handle`] for a handle that names nothing in the placed graph, an output index
    /// beyond the op's outputs, or a feed whose dtype is not the tensor's;
    /// [`Error::TensorFlow`] if the run fails (a missing feed, a deadline passed).
    pub fn run<'l>(&self, run: Run<'l>) -> Result<Fetched<'l>> {
        if let Some(e) = run.ops.deferred_error() {
            return Err(Error::Handle {
                handle: "in the run".into(),
                reason: e.to_string(),
            });
        }
        let mut args = SessionRunArgs::new();
        for (t, value) in &run.feeds {
            let (op, index) = self.output(t)?;
            let want = op.output_type(index as usize);
            if !feed_type_fits(want, value.data_type()) {
                return Err(Error::Handle {
                    handle: format!("feed `{t}`"),
                    reason: format!(
                        "the tensor is {}, the graph wants {want}",
                        value.data_type()
                    ),
                });
            }
            value.add_to(&mut args, &op, index);
        }
        for name in run.ops.targets() {
            args.add_target(&self.resolve(name)?);
        }
        let mut tokens = Vec::with_capacity(run.ops.fetches().len());
        for t in run.ops.fetches() {
            let (op, index) = self.output(t)?;
            tokens.push((t.clone(), args.request_fetch(&op, index)));
        }
        let (wall, step_stats) = self.inner.run_args(&mut args, run.trace, &run.describe())?;
        Ok(Fetched {
            args,
            tokens,
            wall,
            step_stats,
        })
    }

    /// Where the ops of a traced run (see [`Run::traced`]) ran, against this session's plan.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if `fetched` carries no step stats (the run was not traced).
    pub fn verify(&self, fetched: &Fetched<'_>) -> Result<Verification> {
        let stats = fetched
            .step_stats
            .as_ref()
            .ok_or_else(|| Error::InvalidArgument {
                what: "verification".into(),
                reason: "the run has no step stats: build it with Run::traced()".into(),
            })?;
        Ok(Verification::of(
            stats,
            &self.placement,
            &self.graph,
            &self.cluster,
        ))
    }

    /// The underlying session, for the synthetic-data [`Trainer`](crate::runtime::Trainer).
    pub fn into_placed_session(self) -> PlacedSession {
        self.inner
    }
}

/// Whether TensorFlow would take a feed of `got` for an output of `want`: the same type, or a
/// type the `tensorflow` crate does not know by name (reference dtypes of TF1 variables), which
/// is left to TensorFlow to check.
fn feed_type_fits(want: DataType, got: DataType) -> bool {
    want == got || matches!(want, DataType::UnrecognizedEnumValue(_))
}

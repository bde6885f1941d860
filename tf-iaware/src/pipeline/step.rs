//! [`Step`]: one training step as TensorFlow runs it — the ops it runs (targets) and the tensors it
//! fetches. Placement predictions cover exactly what the step needs (the targets' and fetches'
//! ancestors), not initialisers or other one-off ops; a [`Session`](super::Session) runs it.

use crate::error::{Error, Result};
use crate::graph::OpGraph;
use crate::graph::Sidecar;

use super::handle::{OpHandle, TensorHandle, TensorRef};

/// One training step: targets run for their effect (the optimizer's update op) and fetched
/// tensors (the loss, metrics). Built from the user's own handles; a handle that names nothing is
/// reported when the step is used (`Step::check`), so the builder chains without `?`.
#[derive(Clone, Debug, Default)]
pub struct Step {
    targets: Vec<String>,
    fetches: Vec<TensorRef>,
    error: Option<String>,
}

impl Step {
    /// An empty step (predictions then cover every op of the graph).
    pub fn new() -> Self {
        Step::default()
    }

    /// The step of a sidecar: runs `train`, fetches `loss`.
    pub fn from_sidecar(sidecar: &Sidecar) -> Self {
        Step::new().target(&sidecar.train).fetch(&sidecar.loss)
    }

    /// Adds an op the step runs (e.g. the optimizer's `train` op).
    #[must_use]
    pub fn target(mut self, op: impl OpHandle) -> Self {
        match op.op_name() {
            Ok(name) => self.targets.push(name),
            Err(e) => self.note(e),
        }
        self
    }

    /// Adds a tensor the step fetches (an `Output`, an `Operation` for its output 0, or
    /// `"name:k"`).
    #[must_use]
    pub fn fetch(mut self, tensor: impl TensorHandle) -> Self {
        match tensor.tensor_ref() {
            Ok(t) => self.fetches.push(t),
            Err(e) => self.note(e),
        }
        self
    }

    /// Records the first handle that named nothing (reported when the step is used).
    pub(super) fn note(&mut self, e: Error) {
        self.error.get_or_insert_with(|| e.to_string());
    }

    /// The first handle error recorded by the builder, if any.
    pub(super) fn deferred_error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    /// Names of the target ops, in the order given.
    pub(crate) fn targets(&self) -> &[String] {
        &self.targets
    }

    /// The fetched tensors, in the order given.
    pub(crate) fn fetches(&self) -> &[TensorRef] {
        &self.fetches
    }

    /// Whether the step names no op at all.
    pub(crate) fn is_empty(&self) -> bool {
        self.targets.is_empty() && self.fetches.is_empty()
    }

    /// Checks every handle of the step against `graph`.
    ///
    /// # Errors
    /// [`Error::Handle`] for a handle that named nothing when it was added;
    /// [`Error::UnknownOp`] for a target or fetch the graph lacks; [`Error::Handle`] for a fetch
    /// index beyond the op's outputs.
    pub(crate) fn check(&self, graph: &OpGraph) -> Result<()> {
        if let Some(e) = self.deferred_error() {
            return Err(Error::Handle {
                handle: "in the step".into(),
                reason: e.to_string(),
            });
        }
        for t in &self.targets {
            graph.require(t, "step target")?;
        }
        for f in &self.fetches {
            let id = graph.require(&f.op, "step fetch")?;
            let outputs = graph.node(id).outputs.len();
            if f.index >= outputs {
                return Err(Error::Handle {
                    handle: format!("`{f}`"),
                    reason: format!("op `{}` has {outputs} outputs", f.op),
                });
            }
        }
        Ok(())
    }

    /// Which ops of `graph` the step runs: the ancestors of its targets and fetches (all ops for
    /// an empty step).
    ///
    /// # Errors
    /// As [`Step::check`].
    pub(crate) fn active_ops(&self, graph: &OpGraph) -> Result<Vec<bool>> {
        self.check(graph)?;
        if self.is_empty() {
            return Ok(vec![true; graph.len()]);
        }
        let mut roots = Vec::with_capacity(self.targets.len() + self.fetches.len());
        for name in self
            .targets
            .iter()
            .chain(self.fetches.iter().map(|f| &f.op))
        {
            roots.push(graph.require(name, "step")?);
        }
        Ok(graph.ancestors(&roots))
    }
}

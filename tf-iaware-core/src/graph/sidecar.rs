//! The graph sidecar (`F.json` next to `F.pb`, docs/src/guide/sidecar.md): how to train a GraphDef with
//! synthetic data.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::graph::signature::OpSignature;
use crate::graph::OpGraph;

/// Contents of a sidecar. Unknown keys are ignored.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sidecar {
    /// float32 placeholders and their shapes; a leading `-1` is the batch dimension.
    pub inputs: BTreeMap<String, Vec<i64>>,
    /// Op that initialises every variable.
    pub init: String,
    /// Op run once per training step.
    pub train: String,
    /// Scalar float loss (op name; output 0).
    pub loss: String,
    /// Inputs fed one-hot rows (class labels) instead of uniform noise. Optional extension.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub one_hot: Vec<String>,
    /// Global batch size the graph was built with, if fixed. Optional extension.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub batch: Option<usize>,
    /// Op whose output 0 is the logits (`[batch, classes]`), for measuring held-out accuracy
    /// (`bench --data digits`). Optional extension.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logits: Option<String>,
}

/// Largest sidecar read, bytes (a sidecar is a few lines of JSON).
pub(crate) const MAX_FILE_BYTES: u64 = 16 << 20;

/// The op types a sidecar input may name: TensorFlow's placeholders.
pub(crate) const FEEDABLE_OPS: [&str; 3] =
    ["Placeholder", "PlaceholderV2", "PlaceholderWithDefault"];

impl Sidecar {
    /// The sidecar path for a graph path: same stem, `.json`.
    pub fn path_for(graph: &Path) -> PathBuf {
        graph.with_extension("json")
    }

    /// Reads and parses a sidecar file.
    ///
    /// # Errors
    /// [`Error::Sidecar`] naming the file if it is missing or not the documented JSON.
    pub fn load(path: &Path) -> Result<Sidecar> {
        let text = crate::io::read_capped(path, MAX_FILE_BYTES, "sidecar").map_err(|e| {
            Error::Sidecar {
                path: path.into(),
                reason: match e {
                    Error::InvalidArgument { reason, .. } => reason,
                    other => format!("cannot read: {other}"),
                },
            }
        })?;
        Self::parse(&text, path)
    }

    /// Parses sidecar JSON read from `path` (which only names it in errors).
    ///
    /// # Errors
    /// [`Error::Sidecar`] naming `path` if the text is not the documented JSON or a shape has a
    /// dimension that is 0, below -1, or -1 other than first.
    pub fn parse(text: &str, path: &Path) -> Result<Sidecar> {
        let sidecar: Sidecar = serde_json::from_str(text).map_err(|e| Error::Sidecar {
            path: path.into(),
            reason: e.to_string(),
        })?;
        for (name, shape) in &sidecar.inputs {
            let bad = shape
                .iter()
                .enumerate()
                .any(|(i, &d)| d == 0 || d < -1 || (d == -1 && i != 0));
            if bad {
                return Err(Error::Sidecar {
                    path: path.into(),
                    reason: format!("input `{name}` has shape {shape:?}: dimensions must be positive (-1 only first)"),
                });
            }
        }
        Ok(sidecar)
    }

    /// Writes the sidecar as pretty JSON, atomically ([`crate::io::write_atomic`]).
    ///
    /// # Errors
    /// [`Error::Io`] naming the file; [`Error::InvalidArgument`] for a path that is not a
    /// regular file (a device, a FIFO, a folder).
    pub fn save(&self, path: &Path) -> Result<()> {
        let text = serde_json::to_string_pretty(self).map_err(|source| Error::Json {
            what: format!("sidecar {}", path.display()),
            source,
        })?;
        crate::io::write_atomic(path, (text + "\n").as_bytes(), "sidecar")
    }

    /// Checks that every op the sidecar names exists in `graph`, that every input's shape
    /// agrees with the rank and the known non-leading dimensions of its op's first output (the
    /// leading dimension is the batch, which replication and `--batch` may change), and that
    /// `loss` and `logits` are what the model computes: not a graph input or a constant, float,
    /// the loss a scalar and the logits of rank 2 where the shapes are known
    /// ([`check_loss`](super::labels::check_loss),
    /// [`check_logits`](super::labels::check_logits)).
    ///
    /// # Errors
    /// [`Error::UnknownOp`] naming the sidecar key and the op; [`Error::Sidecar`] naming the
    /// input whose shape disagrees with the graph, or the key (`loss`, `logits`) and the op
    /// that cannot be one.
    pub fn check_against(&self, graph: &OpGraph, path: &Path) -> Result<()> {
        let ctx = |key: &str| format!("sidecar {} `{key}`", path.display());
        for (name, shape) in &self.inputs {
            let id = graph.require(name, &ctx("inputs"))?;
            // Feeding any other op's output would replace what the graph computes there, and
            // training would run on it without a word.
            let op = &graph.node(id).op;
            if !FEEDABLE_OPS.contains(&op.as_str()) {
                return Err(Error::Sidecar {
                    path: path.into(),
                    reason: format!(
                        "input `{name}` is a {op} op, not a placeholder ({}): a sidecar input \
                         names what the data feeds",
                        FEEDABLE_OPS.join(", ")
                    ),
                });
            }
            let Some(Some(dims)) = graph.node(id).outputs.first().map(|o| o.shape.as_ref()) else {
                continue;
            };
            let agrees = dims.len() == shape.len()
                && dims
                    .iter()
                    .zip(shape)
                    .skip(1)
                    .all(|(&g, &s)| g < 0 || g == s);
            if !agrees {
                return Err(Error::Sidecar {
                    path: path.into(),
                    reason: format!(
                        "input `{name}` has shape {shape:?}, but the graph's `{name}` is {dims:?} \
                         (-1: any; the leading dimension is the batch)"
                    ),
                });
            }
        }
        for name in &self.one_hot {
            if !self.inputs.contains_key(name) {
                return Err(Error::Sidecar {
                    path: path.into(),
                    reason: format!("`one_hot` names `{name}`, which is not in `inputs`"),
                });
            }
        }
        graph.require(&self.init, &ctx("init"))?;
        graph.require(&self.train, &ctx("train"))?;
        graph.require(&self.loss, &ctx("loss"))?;
        let refuse = |key: &str, reason: String| Error::Sidecar {
            path: path.into(),
            reason: format!("`{key}`: {reason}"),
        };
        super::labels::check_loss(graph, &self.loss).map_err(|r| refuse("loss", r))?;
        if let Some(logits) = &self.logits {
            graph.require(logits, &ctx("logits"))?;
            super::labels::check_logits(graph, logits).map_err(|r| refuse("logits", r))?;
        }
        Ok(())
    }

    /// Marks as `one_hot` every input that reaches the `labels` of a softmax cross-entropy
    /// (`SoftmaxCrossEntropyWithLogits`, found by its argument name in `signatures`) through data
    /// edges, so synthetic batches are valid class distributions without a sidecar key (random
    /// noise as labels makes the loss meaningless, even negative). Returns the inputs it marked.
    pub fn infer_one_hot(
        &mut self,
        graph: &OpGraph,
        signatures: &BTreeMap<String, OpSignature>,
    ) -> Vec<String> {
        let mut marked = Vec::new();
        for name in self.inputs.keys() {
            if self.one_hot.contains(name) {
                continue;
            }
            let Some(start) = graph.id(name) else {
                continue;
            };
            let mut seen = vec![false; graph.len()];
            let mut stack = vec![start];
            let mut reaches = false;
            while let Some(i) = stack.pop() {
                if std::mem::replace(&mut seen[i], true) {
                    continue;
                }
                for &c in graph.consumers(i) {
                    let node = graph.node(c);
                    let labels = signatures
                        .get(&node.op)
                        .filter(|_| node.op == "SoftmaxCrossEntropyWithLogits")
                        .and_then(|s| s.input("labels"));
                    if labels.is_some_and(|at| node.inputs.get(at).is_some_and(|x| x.node == i)) {
                        reaches = true;
                    }
                    if node.inputs.iter().any(|x| x.node == i) {
                        stack.push(c);
                    }
                }
            }
            if reaches {
                marked.push(name.clone());
            }
        }
        self.one_hot.extend(marked.iter().cloned());
        marked
    }

    /// Batch size: the explicit one, else the first fixed leading dimension of an input.
    pub fn batch_size(&self) -> Option<usize> {
        self.batch.or_else(|| {
            self.inputs
                .values()
                .find_map(|s| s.first().copied().filter(|&d| d > 0).map(|d| d as usize))
        })
    }
}

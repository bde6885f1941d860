//! The graph sidecar (`F.json` next to `F.pb`, docs/src/guide/sidecar.md): how to train a GraphDef with
//! synthetic data.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::graph::signature::OpSignature;
use crate::graph::{Attr, DType, NodeId, OpGraph};

/// Contents of a sidecar. Unknown keys are ignored (an exporter's `exported_by`, say).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sidecar {
    /// The placeholders data is fed to and their shapes; a leading `-1` is the batch dimension.
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
    /// The input holding the labels of a held-out accuracy: one of `inputs`, of any type that
    /// holds classes — integer classes, one per row (`[batch]` or `[batch, 1]`, sparse), or float
    /// one-hot rows `[batch, classes]` (fed one-hot rows by synthetic data, as if listed in
    /// `one_hot`). Without it the label is guessed: the first `one_hot` input, else the one
    /// integer input. Optional extension.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label: Option<String>,
}

/// Largest sidecar read, bytes (a sidecar is a few lines of JSON).
pub(crate) const MAX_FILE_BYTES: u64 = 16 << 20;

use super::labels::FEEDABLE_OPS;

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
    /// [`check_logits`](super::labels::check_logits)); and that `label` is one of `inputs`
    /// whose type and shape hold classes (integer, one per row; or float one-hot rows as wide as
    /// the logits where both widths are known).
    ///
    /// # Errors
    /// [`Error::UnknownOp`] naming the sidecar key and the op; [`Error::Sidecar`] naming the
    /// input whose shape disagrees with the graph, or the key (`loss`, `logits`, `label`) and
    /// the op or input that cannot be one, with the reason (for `label`: the inputs it may
    /// name).
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
        if let Some(label) = &self.label {
            self.check_label(graph, label)
                .map_err(|r| refuse("label", r))?;
        }
        Ok(())
    }

    /// Why `label` cannot be the label input of a held-out accuracy, or `Ok`: it must be one of
    /// `inputs` and hold classes — integer, one per row, or float (`float`, `double`) one-hot
    /// rows `[batch, classes]` of two or more classes, as many as the logits have where both
    /// are known. An input whose type the graph does not say passes on its shape alone.
    fn check_label(&self, graph: &OpGraph, label: &str) -> std::result::Result<(), String> {
        let Some(shape) = self.inputs.get(label) else {
            let names: Vec<&str> = self.inputs.keys().map(String::as_str).collect();
            let op = match graph.id(label) {
                Some(id) => format!(" but an op of type {}", graph.node(id).op),
                None => String::new(),
            };
            return Err(format!(
                "`{label}` is not one of the inputs ({}){op}: `label` names the placeholder in \
                 `inputs` the labels are fed to",
                names.join(", ")
            ));
        };
        let Some(dtype) = graph.id(label).and_then(|id| input_dtype(graph, id)) else {
            return Ok(());
        };
        let kind = dtype.name();
        if dtype.is_integer() {
            let one_per_row = !shape.is_empty() && shape[1..].iter().all(|&d| d == 1);
            return if one_per_row {
                Ok(())
            } else {
                Err(format!(
                    "`{label}` is {kind} of shape {shape:?}: integer labels are one class per row \
                     ([batch] or [batch, 1])"
                ))
            };
        }
        if !is_float(dtype) {
            return Err(format!(
                "`{label}` is {kind}: labels are integer classes (one per row) or float one-hot \
                 rows [batch, classes]"
            ));
        }
        let [_, classes] = shape[..] else {
            return Err(format!(
                "`{label}` is {kind} of shape {shape:?}: float labels are one-hot rows [batch, \
                 classes] (integer classes are int32 or int64)"
            ));
        };
        if classes < 2 {
            return Err(format!(
                "`{label}` is {kind} of shape {shape:?}: one-hot rows of one class tell no \
                 class apart (integer classes are int32 or int64)"
            ));
        }
        let logits = self.logits.as_deref();
        let width = logits.and_then(|l| super::labels::metric_labels(graph, l, false));
        match width {
            Some(w) if w.classes != classes as u64 => Err(format!(
                "`{label}` holds one-hot rows of {classes}, but the logits `{}` have {} classes",
                w.logits, w.classes
            )),
            _ => Ok(()),
        }
    }

    /// Marks as `one_hot` the float `label` (one-hot rows, [`Sidecar::check_against`]) and every
    /// other input, not of an integer type, that reaches the `labels` of a softmax cross-entropy
    /// (`SoftmaxCrossEntropyWithLogits`, found by its argument name in `signatures`) through data
    /// edges, so synthetic batches are valid class distributions without a sidecar key (random
    /// noise as labels makes the loss meaningless, even negative). Integer inputs (classes,
    /// token ids) are never marked. Returns the inputs it marked.
    pub fn infer_one_hot(
        &mut self,
        graph: &OpGraph,
        signatures: &BTreeMap<String, OpSignature>,
    ) -> Vec<String> {
        let dtype = |name: &str| graph.id(name).and_then(|id| input_dtype(graph, id));
        let mut marked = Vec::new();
        if let Some(label) = &self.label {
            if self.inputs.contains_key(label)
                && !self.one_hot.contains(label)
                && dtype(label).is_some_and(is_float)
            {
                marked.push(label.clone());
            }
        }
        for name in self.inputs.keys() {
            if self.one_hot.contains(name)
                || marked.contains(name)
                || dtype(name).is_some_and(DType::is_integer)
            {
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

/// The element type of placeholder `id`: its `dtype` attribute, else its output's type.
fn input_dtype(graph: &OpGraph, id: NodeId) -> Option<DType> {
    let node = graph.node(id);
    match node.attrs.get("dtype") {
        Some(Attr::Type(t)) => Some(t.base()),
        _ => node.outputs.first().map(|o| o.dtype.base()),
    }
}

/// Whether one-hot label rows of type `dtype` can be fed (`float`, `double`).
fn is_float(dtype: DType) -> bool {
    matches!(dtype.base().0, 1 | 2)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::OpGraphBuilder;

    /// Placeholders `x` (float `[-1, 4]`), `tokens` (int32 `[-1, 6]`), `y` (int64 `[-1]`),
    /// `y1` (int32 `[-1, 1]`), `hot` (float `[-1, 3]`), `one` (float `[-1, 1]`), `flat` (float
    /// `[-1]`) and `mask` (bool `[-1]`); logits `l` (float `[-1, 3]`), `loss` (a float scalar),
    /// `init` and `train`.
    fn graph() -> OpGraph {
        let mut b = OpGraphBuilder::new();
        let inputs: [(&str, DType, &[i64]); 8] = [
            ("x", DType::FLOAT, &[-1, 4]),
            ("tokens", DType(3), &[-1, 6]),
            ("y", DType(9), &[-1]),
            ("y1", DType(3), &[-1, 1]),
            ("hot", DType::FLOAT, &[-1, 3]),
            ("one", DType::FLOAT, &[-1, 1]),
            ("flat", DType::FLOAT, &[-1]),
            ("mask", DType(10), &[-1]),
        ];
        let ids: Vec<NodeId> = inputs
            .iter()
            .map(|&(name, dtype, shape)| {
                let id = b.add(name, "Placeholder").unwrap();
                b.output(id, dtype, Some(shape.to_vec()));
                id
            })
            .collect();
        let x = ids[0];
        let l = b.add("l", "MatMul").unwrap();
        b.output(l, DType::FLOAT, Some(vec![-1, 3]));
        b.connect(x, 0, l);
        let loss = b.add("loss", "Mean").unwrap();
        b.output(loss, DType::FLOAT, Some(vec![]));
        b.connect(l, 0, loss);
        b.add("init", "NoOp").unwrap();
        b.add("train", "NoOp").unwrap();
        b.build().unwrap()
    }

    fn sidecar(label: Option<&str>) -> Sidecar {
        let text = r#"{"inputs": {"x": [-1, 4], "tokens": [-1, 6], "y": [-1], "y1": [-1, 1],
            "hot": [-1, 3], "one": [-1, 1], "flat": [-1], "mask": [-1]},
            "init": "init", "train": "train", "loss": "loss", "logits": "l"}"#;
        let mut s = Sidecar::parse(text, Path::new("s.json")).unwrap();
        s.label = label.map(String::from);
        s
    }

    #[test]
    fn label_parses_round_trips_and_unknown_keys_stay_ignored() {
        let text = r#"{"inputs": {"x": [-1, 4], "y": [-1]}, "init": "init", "train": "train",
            "loss": "loss", "label": "y", "exported_by": "tensorflow 2.21.0"}"#;
        let s = Sidecar::parse(text, Path::new("s.json")).unwrap();
        assert_eq!(s.label.as_deref(), Some("y"));
        let json = serde_json::to_string(&s).unwrap();
        assert!(json.contains(r#""label":"y""#), "{json}");
        assert_eq!(Sidecar::parse(&json, Path::new("s.json")).unwrap(), s);
        // Without the key: none, and none written.
        let none = Sidecar {
            label: None,
            ..s.clone()
        };
        let json = serde_json::to_string(&none).unwrap();
        assert!(!json.contains("label"), "{json}");
        assert_eq!(
            Sidecar::parse(&json, Path::new("s.json")).unwrap().label,
            None
        );
        // A label that is not a name is no sidecar.
        let e = Sidecar::parse(
            &text.replace(r#""y", "exp"#, r#"7, "exp"#),
            Path::new("s.json"),
        )
        .unwrap_err();
        assert!(e.to_string().contains("s.json"), "{e}");
    }

    #[test]
    fn a_label_holding_classes_passes() {
        let g = graph();
        for label in ["y", "y1", "hot"] {
            sidecar(Some(label))
                .check_against(&g, Path::new("s.json"))
                .unwrap();
        }
        sidecar(None)
            .check_against(&g, Path::new("s.json"))
            .unwrap();
    }

    #[test]
    fn a_label_that_is_no_input_or_holds_no_classes_is_refused_with_the_reason() {
        let g = graph();
        for (label, says) in [
            (
                "ghost",
                "`ghost` is not one of the inputs (flat, hot, mask, one, tokens, x, y, y1)",
            ),
            ("l", "`l` is not one of the inputs (flat, hot, mask, one, tokens, x, y, y1) but an op of type MatMul"),
            ("mask", "`mask` is bool: labels are integer classes"),
            (
                "tokens",
                "`tokens` is int32 of shape [-1, 6]: integer labels are one class per row",
            ),
            (
                "flat",
                "`flat` is float of shape [-1]: float labels are one-hot rows",
            ),
            ("one", "one-hot rows of one class"),
            (
                "x",
                "`x` holds one-hot rows of 4, but the logits `l` have 3 classes",
            ),
        ] {
            let e = sidecar(Some(label))
                .check_against(&g, Path::new("s.json"))
                .unwrap_err();
            assert!(matches!(e, Error::Sidecar { .. }), "{label}: {e:?}");
            let text = e.to_string();
            assert!(
                text.starts_with("sidecar s.json: `label`: "),
                "{label}: {text}"
            );
            assert!(text.contains(says), "{label}: {text}");
        }
    }

    #[test]
    fn a_float_label_is_fed_one_hot_rows_and_integer_inputs_never_are() {
        let g = graph();
        let mut s = sidecar(Some("hot"));
        assert_eq!(s.infer_one_hot(&g, &BTreeMap::new()), ["hot"]);
        assert_eq!(s.one_hot, ["hot"]);
        // Marked once.
        assert!(s.infer_one_hot(&g, &BTreeMap::new()).is_empty());
        let mut s = sidecar(Some("y"));
        assert!(s.infer_one_hot(&g, &BTreeMap::new()).is_empty());
        assert!(s.one_hot.is_empty());
    }
}

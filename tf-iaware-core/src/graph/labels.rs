//! Class labels as the graph reads them, found without TensorFlow: which graph inputs a
//! classification op takes as its labels and how many classes their values may name
//! ([`graph_labels`], [`metric_labels`]), checked row by row against the data
//! (`data::check_label_values`); and
//! whether an op can be what a sidecar calls the logits or the loss ([`check_logits`],
//! [`check_loss`]). A label outside the logits' classes otherwise fails inside TensorFlow at the
//! first step (naming neither the file nor the input), or silently counts as wrong in a
//! held-out accuracy; logits that are a placeholder fail only when training is over. And the
//! other integer inputs, features rather than labels: the token ids an embedding lookup takes
//! and the rows of its table ([`lookup_rows`]), so synthetic ids stay within it.

use std::collections::BTreeMap;

use super::{Attr, DType, Input, NodeId, OpGraph, OpNode};

/// The op types a sidecar input may name: TensorFlow's placeholders.
pub(crate) const FEEDABLE_OPS: [&str; 3] =
    ["Placeholder", "PlaceholderV2", "PlaceholderWithDefault"];

/// Op types whose output 0 holds the values of their input 0 (in another shape or type, or
/// with another gradient): a label traced back through them is still the input's values.
pub const PASS_THROUGH_OPS: [&str; 10] = [
    "Identity",
    "Snapshot",
    "StopGradient",
    "PreventGradient",
    "CheckNumerics",
    "EnsureShape",
    "Cast",
    "Reshape",
    "Squeeze",
    "ExpandDims",
];

/// The ops that take class labels: op type, index of its logits input, index of its labels
/// input, and whether the labels are rows of one value per class (one-hot or probabilities)
/// rather than integer classes. The indices are TensorFlow's op definitions (`features` or
/// `predictions` first, `labels` or `targets` second).
const LABEL_OPS: [(&str, usize, usize, bool); 4] = [
    ("SparseSoftmaxCrossEntropyWithLogits", 0, 1, false),
    ("InTopK", 0, 1, false),
    ("InTopKV2", 0, 1, false),
    ("SoftmaxCrossEntropyWithLogits", 0, 1, true),
];

/// What the values of a label input must be: integer classes in `[0, classes)`, or rows of
/// `classes` elements (one-hot).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LabelRange {
    /// The number of classes: the last dimension of the logits.
    pub classes: u64,
    /// Whether a row holds one value per class (one-hot or class probabilities) rather than
    /// integer classes.
    pub one_hot: bool,
    /// The op whose output holds the logits the classes come from (for messages).
    pub logits: String,
}

impl LabelRange {
    /// `self` and `other` as one range: the fewer classes, where both are of one kind (two ops
    /// that disagree on a one-hot width would fail at TensorFlow's shape inference already).
    fn merge(self, other: LabelRange) -> LabelRange {
        if self.one_hot == other.one_hot && other.classes < self.classes {
            other
        } else {
            self
        }
    }
}

/// Inserts `range` for `input` into `ranges`, merged with what is there.
pub fn add_label_range(ranges: &mut BTreeMap<String, LabelRange>, input: &str, range: LabelRange) {
    let merged = match ranges.remove(input) {
        Some(old) => old.merge(range),
        None => range,
    };
    ranges.insert(input.into(), merged);
}

/// The tensor whose values reach tensor `(node, output)` through [`PASS_THROUGH_OPS`] only:
/// `(node, output)` itself when it is no pass-through op's output 0.
pub fn pass_through_source(
    graph: &OpGraph,
    mut node: NodeId,
    mut output: usize,
) -> (NodeId, usize) {
    // At most one step per node: a cycle of pass-through ops is no valid graph, but must not hang.
    for _ in 0..graph.len() {
        let n = graph.node(node);
        match n.inputs.first() {
            Some(src) if output == 0 && PASS_THROUGH_OPS.contains(&n.op.as_str()) => {
                (node, output) = (src.node, src.output);
            }
            _ => break,
        }
    }
    (node, output)
}

/// The graph input (a placeholder) whose values `input` takes through pass-through ops only.
fn traced_input(graph: &OpGraph, input: &Input) -> Option<NodeId> {
    let (src, _) = pass_through_source(graph, input.node, input.output);
    FEEDABLE_OPS
        .contains(&graph.node(src).op.as_str())
        .then_some(src)
}

/// The static last dimension of output `output` of `node`, when known and positive.
fn last_dim(graph: &OpGraph, node: NodeId, output: usize) -> Option<u64> {
    let shape = graph.node(node).outputs.get(output)?.shape.as_ref()?;
    shape
        .last()
        .and_then(|&d| u64::try_from(d).ok())
        .filter(|&d| d > 0)
}

/// Every graph input that a classification op takes as its labels, directly or through
/// [`PASS_THROUGH_OPS`], with the classes of that op's logits (their static last dimension):
/// `SparseSoftmaxCrossEntropyWithLogits` and `InTopK`/`InTopKV2` take integer classes,
/// `SoftmaxCrossEntropyWithLogits` one-hot rows. Ops whose logits' width is unknown, or whose
/// labels are computed (`y - 1`) rather than fed, are left out. An input several ops take gets
/// the fewest classes.
pub fn graph_labels(graph: &OpGraph) -> BTreeMap<String, LabelRange> {
    let mut ranges = BTreeMap::new();
    for node in graph.nodes() {
        let Some(&(_, at_logits, at_labels, one_hot)) =
            LABEL_OPS.iter().find(|(op, ..)| *op == node.op)
        else {
            continue;
        };
        let (Some(logits), Some(labels)) = (node.inputs.get(at_logits), node.inputs.get(at_labels))
        else {
            continue;
        };
        let Some(classes) = last_dim(graph, logits.node, logits.output) else {
            continue;
        };
        let Some(input) = traced_input(graph, labels) else {
            continue;
        };
        let range = LabelRange {
            classes,
            one_hot,
            logits: graph.node(logits.node).name.clone(),
        };
        add_label_range(&mut ranges, &graph.node(input).name, range);
    }
    ranges
}

/// The ops that look rows of a table up by index (embedding lookups): op type, index of the
/// table input, index of the indices input. `GatherV2` counts only along axis 0, and none with
/// `batch_dims` other than 0.
const LOOKUP_OPS: [(&str, usize, usize); 3] = [
    ("Gather", 0, 1),
    ("GatherV2", 0, 1),
    ("ResourceGather", 0, 1),
];

/// Variable ops whose `shape` attribute is the variable's shape.
const VARIABLE_OPS: [&str; 3] = ["VariableV2", "Variable", "VarHandleOp"];

/// Ops through which a tensor is a variable's value, unchanged in shape.
const READ_OPS: [&str; 4] = ["Identity", "Snapshot", "StopGradient", "ReadVariableOp"];

/// Every graph input that an embedding lookup (`Gather`, `GatherV2` along axis 0,
/// `ResourceGather`) takes as its indices, directly or through [`PASS_THROUGH_OPS`], with the
/// rows of the table it indexes (its static first dimension, or the `shape` of the variable it
/// reads): the ids it may hold are `[0, rows)`. Lookups whose table's rows are unknown, whose
/// axis cannot be told to be 0 from the shapes, or whose ids are computed (`ids + 1`) are left
/// out; an input several lookups take gets the fewest rows.
pub fn lookup_rows(graph: &OpGraph) -> BTreeMap<String, u64> {
    let mut rows = BTreeMap::new();
    for node in graph.nodes() {
        let Some(&(_, at_table, at_ids)) = LOOKUP_OPS.iter().find(|(op, ..)| *op == node.op) else {
            continue;
        };
        let (Some(table), Some(ids)) = (node.inputs.get(at_table), node.inputs.get(at_ids)) else {
            continue;
        };
        let Some(input) = traced_input(graph, ids) else {
            continue;
        };
        let Some(n) = table_rows(graph, node, table, ids) else {
            continue;
        };
        rows.entry(graph.node(input).name.clone())
            .and_modify(|r: &mut u64| *r = (*r).min(n))
            .or_insert(n);
    }
    rows
}

/// The rows of the table lookup `node` indexes along axis 0, when the graph says.
fn table_rows(graph: &OpGraph, node: &OpNode, table: &Input, ids: &Input) -> Option<u64> {
    if node
        .attrs
        .get("batch_dims")
        .is_some_and(|a| *a != Attr::Int(0))
    {
        return None;
    }
    let rows = match node.op.as_str() {
        // A resource handle is a scalar: the shape is the variable's.
        "ResourceGather" => *variable_shape(graph, table.node)?.first()?,
        "Gather" => *tensor_shape(graph, table)?.first()?,
        _ => {
            // Along axis 0 the output is the ids' shape followed by a table row's shape; along
            // another axis it is not, unless the dimensions happen to agree.
            let t = tensor_shape(graph, table)?;
            let i = graph
                .node(ids.node)
                .outputs
                .get(ids.output)?
                .shape
                .as_ref()?;
            let out = node.outputs.first()?.shape.as_ref()?;
            let along_0: Vec<i64> = i.iter().chain(t.get(1..)?).copied().collect();
            if *out != along_0 {
                return None;
            }
            *t.first()?
        }
    };
    u64::try_from(rows).ok().filter(|&r| r > 0)
}

/// The shape of tensor `input`: its static shape when its first dimension is known, else the
/// `shape` of the variable it reads.
fn tensor_shape(graph: &OpGraph, input: &Input) -> Option<Vec<i64>> {
    let known = graph
        .node(input.node)
        .outputs
        .get(input.output)
        .and_then(|o| o.shape.clone())
        .filter(|s| s.first().is_some_and(|&d| d > 0));
    known.or_else(|| variable_shape(graph, input.node))
}

/// The `shape` attribute of the variable whose value `node` is, through [`READ_OPS`].
fn variable_shape(graph: &OpGraph, mut node: NodeId) -> Option<Vec<i64>> {
    // At most one step per node: a cycle is no valid graph, but must not hang.
    for _ in 0..graph.len() {
        let n = graph.node(node);
        if VARIABLE_OPS.contains(&n.op.as_str()) {
            return match n.attrs.get("shape") {
                Some(Attr::Shape(Some(dims))) => Some(dims.clone()),
                _ => None,
            };
        }
        if !READ_OPS.contains(&n.op.as_str()) {
            return None;
        }
        node = n.inputs.first()?.node;
    }
    None
}

/// The range of the label input of a held-out accuracy measured on op `logits` (output 0,
/// `[batch, classes]`): integer classes when `integer`, else one-hot rows. `None` when the
/// graph has no such op or its width is unknown.
pub fn metric_labels(graph: &OpGraph, logits: &str, integer: bool) -> Option<LabelRange> {
    let id = graph.id(logits)?;
    Some(LabelRange {
        classes: last_dim(graph, id, 0)?,
        one_hot: !integer,
        logits: logits.into(),
    })
}

/// What keeps op `name` from being a tensor the model computes (its loss or its logits): a
/// graph input or a constant, directly or through pass-through ops; or no output at all.
fn not_computed(graph: &OpGraph, id: NodeId) -> Option<String> {
    let node = graph.node(id);
    if node.outputs.is_empty() {
        return Some(format!(
            "`{}` is a {} op with no output",
            node.name, node.op
        ));
    }
    let (src, _) = pass_through_source(graph, id, 0);
    let source = graph.node(src);
    let what = if FEEDABLE_OPS.contains(&source.op.as_str()) {
        "a graph input"
    } else if source.op == "Const" {
        "a constant"
    } else {
        return None;
    };
    Some(if src == id {
        format!("`{}` is a {} op, {what}", node.name, node.op)
    } else {
        format!(
            "`{}` only passes on `{}`, a {} op, {what}",
            node.name, source.name, source.op
        )
    })
}

/// Output 0 of op `name` of `graph` when the model computes it and it is float; `Ok(None)` for
/// a name the graph lacks. `computed` and `float` end the reasons given otherwise.
///
/// # Errors
/// The reason, in words naming the op.
fn computed_float<'g>(
    graph: &'g OpGraph,
    name: &str,
    computed: &str,
    float: &str,
) -> std::result::Result<Option<&'g super::TensorInfo>, String> {
    let Some(id) = graph.id(name) else {
        return Ok(None);
    };
    if let Some(why) = not_computed(graph, id) {
        return Err(format!("{why}: {computed}"));
    }
    let out = &graph.node(id).outputs[0];
    if out.dtype.base() != DType::FLOAT {
        return Err(format!("`{name}` outputs {}: {float}", out.dtype.name()));
    }
    Ok(Some(out))
}

/// Why op `name` of `graph` cannot be the logits of a held-out accuracy (output 0, float
/// `[batch, classes]`, computed by the model), or `Ok` — also for a name the graph lacks,
/// which the caller reports.
///
/// # Errors
/// The reason, in words naming the op.
pub fn check_logits(graph: &OpGraph, name: &str) -> std::result::Result<(), String> {
    let Some(out) = computed_float(
        graph,
        name,
        "logits are what the model computes from its inputs",
        "logits are float (accuracy reads them as float32)",
    )?
    else {
        return Ok(());
    };
    match &out.shape {
        Some(dims) if dims.len() != 2 => Err(format!(
            "`{name}` outputs a tensor of rank {} (shape {dims:?}): logits are [batch, classes]",
            dims.len()
        )),
        _ => Ok(()),
    }
}

/// Why op `name` of `graph` cannot be the training loss (output 0, a float32 scalar the model
/// computes), or `Ok` — also for a name the graph lacks, which the caller reports. A shape that
/// may hold one element passes (`[]`, `[1]`, `[-1]`: TensorFlow's answer at the first step says
/// the rest); one with a known dimension of 0 or above 1 does not.
///
/// # Errors
/// The reason, in words naming the op.
pub fn check_loss(graph: &OpGraph, name: &str) -> std::result::Result<(), String> {
    let Some(out) = computed_float(
        graph,
        name,
        "the loss is what the model computes from its inputs",
        "the loss must be a float scalar (it is read as float32)",
    )?
    else {
        return Ok(());
    };
    match &out.shape {
        Some(dims) if dims.iter().any(|&d| d == 0 || d > 1) => Err(format!(
            "`{name}` outputs shape {dims:?}{}: the loss must be a scalar",
            if dims.contains(&-1) {
                " (-1: unknown)"
            } else {
                ""
            }
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::OpGraphBuilder;

    /// A graph: placeholders `x` (float `[-1, 4]`) and `y` (`label_type`, `[-1]`), logits `l`
    /// (`MatMul`, float `[-1, width]`), `y` passed through `Cast` and `Reshape` into a
    /// `loss_op` taking (`l`, the labels), and `loss` a `Mean` of it.
    fn graph(loss_op: &str, label_type: DType, width: i64) -> OpGraph {
        let mut b = OpGraphBuilder::new();
        let x = b.add("x", "Placeholder").unwrap();
        b.output(x, DType::FLOAT, Some(vec![-1, 4]));
        let y = b.add("y", "Placeholder").unwrap();
        b.output(y, label_type, Some(vec![-1]));
        let l = b.add("l", "MatMul").unwrap();
        b.output(l, DType::FLOAT, Some(vec![-1, width]));
        b.connect(x, 0, l);
        let cast = b.add("cast", "Cast").unwrap();
        b.output(cast, DType(9), Some(vec![-1]));
        b.connect(y, 0, cast);
        let shaped = b.add("shaped", "Reshape").unwrap();
        b.output(shaped, DType(9), Some(vec![-1]));
        b.connect(cast, 0, shaped);
        let xent = b.add("xent", loss_op).unwrap();
        b.output(xent, DType::FLOAT, Some(vec![-1]));
        b.connect(l, 0, xent);
        b.connect(shaped, 0, xent);
        let loss = b.add("loss", "Mean").unwrap();
        b.output(loss, DType::FLOAT, Some(vec![]));
        b.connect(xent, 0, loss);
        let k = b.add("k", "Const").unwrap();
        b.output(k, DType::FLOAT, Some(vec![2, 3]));
        let ints = b.add("ints", "ArgMax").unwrap();
        b.output(ints, DType(9), Some(vec![-1]));
        let fixed = b.add("fixed", "Relu").unwrap();
        b.output(fixed, DType::FLOAT, Some(vec![8, 4]));
        let wide = b.add("wide", "Identity").unwrap();
        b.output(wide, DType::FLOAT, Some(vec![-1, 3, 4]));
        let noop = b.add("noop", "NoOp").unwrap();
        let _ = noop;
        b.build().unwrap()
    }

    fn range(classes: u64, one_hot: bool) -> LabelRange {
        LabelRange {
            classes,
            one_hot,
            logits: "l".into(),
        }
    }

    #[test]
    fn sparse_labels_are_traced_to_their_input_through_casts_and_reshapes() {
        for op in ["SparseSoftmaxCrossEntropyWithLogits", "InTopKV2", "InTopK"] {
            let g = graph(op, DType(3), 4);
            assert_eq!(
                graph_labels(&g),
                BTreeMap::from([("y".to_string(), range(4, false))]),
                "{op}"
            );
        }
        let g = graph("SoftmaxCrossEntropyWithLogits", DType::FLOAT, 6);
        assert_eq!(graph_labels(&g)["y"], range(6, true));
        // Unknown width, or an op that takes no labels: nothing to check.
        assert!(
            graph_labels(&graph("SparseSoftmaxCrossEntropyWithLogits", DType(3), -1)).is_empty()
        );
        assert!(graph_labels(&graph("Sub", DType(3), 4)).is_empty());
    }

    #[test]
    fn labels_computed_from_the_input_are_not_traced() {
        let mut b = OpGraphBuilder::new();
        let y = b.add("y", "Placeholder").unwrap();
        b.output(y, DType(9), Some(vec![-1]));
        let l = b.add("l", "Placeholder").unwrap();
        b.output(l, DType::FLOAT, Some(vec![-1, 4]));
        let minus = b.add("minus", "Sub").unwrap();
        b.output(minus, DType(9), Some(vec![-1]));
        b.connect(y, 0, minus);
        let x = b
            .add("xent", "SparseSoftmaxCrossEntropyWithLogits")
            .unwrap();
        b.connect(l, 0, x);
        b.connect(minus, 0, x);
        assert!(graph_labels(&b.build().unwrap()).is_empty());
    }

    #[test]
    fn an_input_taken_by_two_ops_gets_the_fewer_classes() {
        let mut ranges = BTreeMap::new();
        add_label_range(&mut ranges, "y", range(10, false));
        add_label_range(&mut ranges, "y", range(4, false));
        add_label_range(&mut ranges, "y", range(7, false));
        assert_eq!(ranges["y"].classes, 4);
    }

    #[test]
    fn the_metric_label_range_is_the_logits_width() {
        let g = graph("SparseSoftmaxCrossEntropyWithLogits", DType(9), 5);
        assert_eq!(metric_labels(&g, "l", true), Some(range(5, false)));
        assert_eq!(metric_labels(&g, "l", false), Some(range(5, true)));
        assert_eq!(metric_labels(&g, "ghost", true), None);
        let g = graph("SparseSoftmaxCrossEntropyWithLogits", DType(9), -1);
        assert_eq!(metric_labels(&g, "l", true), None);
    }

    /// A table `table` (`table_op`, `[12, 8]` by its `shape` attribute, output shape
    /// `table_shape`) read through `read`, token ids `tokens` (int32 `[-1, 4]`, cast to int64)
    /// looked up by `lookup` with output shape `out`.
    fn lookup_graph(
        table_op: &str,
        table_shape: Option<Vec<i64>>,
        lookup: &str,
        out: Option<Vec<i64>>,
    ) -> OpGraph {
        let mut b = OpGraphBuilder::new();
        let table = b.add("table", table_op).unwrap();
        b.node_mut(table)
            .attrs
            .insert("shape".into(), Attr::Shape(Some(vec![12, 8])));
        b.output(table, DType::FLOAT, table_shape);
        let read = b.add("read", "ReadVariableOp").unwrap();
        b.output(read, DType::FLOAT, None);
        b.connect(table, 0, read);
        let tokens = b.add("tokens", "Placeholder").unwrap();
        b.output(tokens, DType(3), Some(vec![-1, 4]));
        let cast = b.add("cast", "Cast").unwrap();
        b.output(cast, DType(9), Some(vec![-1, 4]));
        b.connect(tokens, 0, cast);
        let axis = b.add("axis", "Const").unwrap();
        b.output(axis, DType(3), Some(vec![]));
        let l = b.add("lookup", lookup).unwrap();
        b.output(l, DType::FLOAT, out);
        b.connect(
            if lookup == "ResourceGather" {
                table
            } else {
                read
            },
            0,
            l,
        );
        b.connect(cast, 0, l);
        b.connect(axis, 0, l);
        b.build().unwrap()
    }

    #[test]
    fn embedding_lookups_give_their_ids_the_tables_rows() {
        let rows = |g: &OpGraph| lookup_rows(g).get("tokens").copied();
        let (table, var, along_0, along_1) = (
            Some(vec![12, 8]),
            Some(vec![]),
            Some(vec![-1, 4, 8]),
            Some(vec![12, -1, 4]),
        );
        for (table_op, table_shape, lookup, out, want) in [
            // The table's rows from its static shape, or the variable's `shape` through the read.
            ("VariableV2", &table, "GatherV2", &along_0, Some(12)),
            ("VarHandleOp", &var, "GatherV2", &along_0, Some(12)),
            ("VarHandleOp", &var, "ResourceGather", &None, Some(12)),
            ("VariableV2", &table, "Gather", &None, Some(12)),
            // GatherV2 along axis 1 (`[12, batch, 4]`), or of unknown output: the rows are not
            // the ids' range.
            ("VariableV2", &table, "GatherV2", &along_1, None),
            ("VariableV2", &table, "GatherV2", &None, None),
        ] {
            let g = lookup_graph(table_op, table_shape.clone(), lookup, out.clone());
            assert_eq!(rows(&g), want, "{table_op} read by {lookup}, out {out:?}");
        }
        // No lookup at all.
        assert!(lookup_rows(&graph("SparseSoftmaxCrossEntropyWithLogits", DType(3), 4)).is_empty());
    }

    #[test]
    fn logits_must_be_a_computed_float_matrix() {
        let g = graph("SparseSoftmaxCrossEntropyWithLogits", DType(9), 4);
        check_logits(&g, "l").unwrap();
        check_logits(&g, "ghost").unwrap();
        for (name, says) in [
            ("x", "`x` is a Placeholder op, a graph input"),
            ("k", "`k` is a Const op, a constant"),
            (
                "shaped",
                "`shaped` only passes on `y`, a Placeholder op, a graph input",
            ),
            ("ints", "outputs int64"),
            ("wide", "rank 3"),
            ("loss", "rank 0"),
            ("noop", "no output"),
        ] {
            let e = check_logits(&g, name).unwrap_err();
            assert!(e.contains(says), "{name}: {e}");
        }
    }

    #[test]
    fn the_loss_must_be_a_computed_float_scalar() {
        let g = graph("SparseSoftmaxCrossEntropyWithLogits", DType(9), 4);
        check_loss(&g, "loss").unwrap();
        // A batch of losses of unknown size may be one element: TensorFlow says at run time.
        check_loss(&g, "xent").unwrap();
        for (name, says) in [
            ("x", "graph input"),
            ("k", "constant"),
            ("ints", "outputs int64"),
            ("l", "scalar"),
            ("fixed", "[8, 4]"),
            ("noop", "no output"),
        ] {
            let e = check_loss(&g, name).unwrap_err();
            assert!(e.contains(says), "{name}: {e}");
        }
    }
}

//! Where each replica's share of the batch comes from: fed placeholders sized to the share, or a
//! synthetic batch that lives on the replica's worker; and the sidecar of the replicated graph.

use std::collections::BTreeMap;

use super::{refuse, replica_name, Output, Role};
use crate::error::Result;
use crate::graph::Sidecar;
use crate::parallel::plan::Replica;
use crate::proto::attr::{self, DT_DOUBLE, DT_FLOAT, DT_INT32, DT_INT64};
use crate::proto::{NodeDef, TensorShapeProto};

/// Where each replica's share of the batch comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BatchData {
    /// Fed at every step: replica `k`'s placeholders are `replica_k/<input>`, listed with their
    /// shapes in [`Replication::sidecar`](super::Replication::sidecar) (real data, or synthetic
    /// batches sent by the driver).
    Feed,
    /// A fixed synthetic batch that lives on the replica's worker (uniform noise in [-1, 1), or
    /// one-hot rows for label inputs), drawn with `seed` when `init` or `init_data` runs: nothing
    /// crosses the network per step, as in a benchmark of the model rather than of the input
    /// pipeline.
    Synthetic {
        /// Seed of the random batch.
        seed: i64,
    },
}

/// Name of the op that initialises only the replicas' synthetic batches (after a re-plan, when
/// the variables on the ps survived). Present in every replicated graph (a no-op for fed ones).
pub const INIT_DATA_OP: &str = "init_data";

/// Sets the leading dimension of a placeholder's `shape` attribute to `batch`.
///
/// # Errors
/// [`Error::Replication`](crate::Error::Replication) for a placeholder of unknown rank or a
/// scalar one.
pub(super) fn set_batch(node: &mut NodeDef, batch: i64) -> Result<()> {
    let mut value = attr::get(node, "shape").unwrap_or_default();
    let shape = value.shape.get_or_insert_with(TensorShapeProto::default);
    if shape.unknown_rank {
        return Err(refuse(
            &node.name,
            "a sidecar input needs a placeholder of known rank (its leading dimension is the batch)",
        ));
    }
    match shape.dim.first_mut() {
        Some(d) => d.size = batch,
        None => {
            return Err(refuse(
                &node.name,
                "a scalar placeholder has no batch dimension",
            ))
        }
    }
    node.attr
        .insert("shape".into(), prost::Message::encode_to_vec(&value));
    Ok(())
}

/// Adds [`INIT_DATA_OP`], and with [`BatchData::Synthetic`] turns every replica's placeholders
/// into reads of a variable on its worker, initialised by `init` and by [`INIT_DATA_OP`].
///
/// # Errors
/// [`Error::Replication`](crate::Error::Replication) when the graph has an op named
/// [`INIT_DATA_OP`] that is not a `NoOp`, or a synthetic input of unknown shape.
pub(super) fn add_batch_data(
    out: &mut Output,
    sidecar: &Sidecar,
    replicas: &[Replica],
    data: BatchData,
) -> Result<()> {
    let nodes = &out.graph_def.node;
    let existing = nodes.iter().position(|n| n.name == INIT_DATA_OP);
    if existing.is_some_and(|i| nodes[i].op != "NoOp") {
        return Err(refuse(
            INIT_DATA_OP,
            "the graph already has an op of the name tf-iaware's data initialiser takes",
        ));
    }
    let mut assigns = Vec::new();
    if let BatchData::Synthetic { seed } = data {
        let mut added = Vec::new();
        for (k, r) in replicas.iter().enumerate() {
            for (i, (name, shape)) in sidecar.inputs.iter().enumerate() {
                let read = replica_name(k, name);
                let Some(at) = out.graph_def.node.iter().position(|n| n.name == read) else {
                    continue;
                };
                let mut dims = shape.clone();
                if let Some(d) = dims.first_mut() {
                    *d = r.batch as i64;
                }
                if dims.is_empty() || dims.iter().any(|&d| d < 0) {
                    return Err(refuse(
                        name,
                        format!("a synthetic batch needs a known shape, not {dims:?}"),
                    ));
                }
                // The batch has the placeholder's element type (int64 labels stay int64).
                let dtype = attr::get(&out.graph_def.node[at], "dtype")
                    .and_then(|a| a.r#type)
                    .unwrap_or(DT_FLOAT);
                if !matches!(dtype, DT_FLOAT | DT_DOUBLE | DT_INT32 | DT_INT64) {
                    return Err(refuse(
                        name,
                        format!(
                            "a synthetic batch is float, double or integer classes; this input \
                             takes DataType {dtype}"
                        ),
                    ));
                }
                let input = SyntheticInput {
                    base: format!("tf_iaware_data/r{k}_b{}/{name}", r.batch),
                    dims,
                    seed: seed.wrapping_mul(1000).wrapping_add((k * 100 + i) as i64),
                    one_hot: sidecar.one_hot.contains(name),
                    dtype,
                };
                let (handle, assign) = input.variable(&mut added);
                assigns.push(format!("^{assign}"));
                // The placeholder becomes a read of the variable, under the same name.
                out.graph_def.node[at] = attr::node(
                    &read,
                    "ReadVariableOp",
                    vec![handle],
                    vec![("dtype", attr::dtype(dtype))],
                );
                for n in &added {
                    out.roles.entry(n.name.clone()).or_insert(Role::Replica(k));
                }
            }
        }
        out.graph_def.node.extend(added);
        let init = out
            .graph_def
            .node
            .iter_mut()
            .find(|n| n.name == sidecar.init);
        if let Some(init) = init {
            init.input.extend(assigns.iter().cloned());
        }
    }
    // A graph that has its own (the zoo's) gets the assigns added to it.
    match existing {
        Some(i) => out.graph_def.node[i].input.extend(assigns),
        None => out
            .graph_def
            .node
            .push(attr::node(INIT_DATA_OP, "NoOp", assigns, vec![])),
    }
    out.roles.insert(INIT_DATA_OP.into(), Role::Shared);
    Ok(())
}

/// One replica's synthetic batch of one input: a variable of shape `dims` and element type
/// `dtype` under `base`, assigned uniform noise in [-1, 1) or one-hot rows (float, double), or
/// classes 0 and 1 (integers: sparse labels, valid for any classifier of two or more classes).
struct SyntheticInput {
    base: String,
    dims: Vec<i64>,
    /// The random ops' `seed`.
    seed: i64,
    one_hot: bool,
    /// `DT_FLOAT`, `DT_DOUBLE`, `DT_INT32` or `DT_INT64`.
    dtype: i32,
}

impl SyntheticInput {
    /// Adds the variable, its value and its assignment to `added`; returns the variable's
    /// handle and the assignment's name.
    fn variable(&self, added: &mut Vec<NodeDef>) -> (String, String) {
        let base = &self.base;
        let float = attr::dtype(self.dtype);
        let handle = format!("{base}/handle");
        added.push(attr::node(
            &handle,
            "VarHandleOp",
            vec![],
            vec![
                ("dtype", float.clone()),
                ("shape", attr::shape(attr::shape_of(&self.dims))),
                ("shared_name", attr::string(&handle)),
            ],
        ));
        let value = match self.dtype {
            DT_INT32 | DT_INT64 => self.classes(added),
            _ if self.one_hot => self.one_hot_rows(added),
            _ => self.uniform(added),
        };
        let assign = format!("{base}/assign");
        added.push(attr::node(
            &assign,
            "AssignVariableOp",
            vec![handle.clone(), value],
            vec![("dtype", float)],
        ));
        (handle, assign)
    }

    /// A constant `{base}/{name}` of type `dtype` holding `value` (a `tensor` attribute).
    fn constant(&self, name: &str, dtype: i32, value: Vec<u8>) -> NodeDef {
        attr::node(
            &format!("{}/{name}", self.base),
            "Const",
            vec![],
            vec![("dtype", attr::dtype(dtype)), ("value", value)],
        )
    }

    /// `{base}/{name}`: integers of type `dtype` drawn uniformly from [`{base}/{low}`,
    /// `{base}/{high}`) in the shape `{base}/{shape}` holds.
    fn random_ints(&self, name: &str, [shape, low, high]: [&str; 3], dtype: i32) -> NodeDef {
        let base = &self.base;
        attr::node(
            &format!("{base}/{name}"),
            "RandomUniformInt",
            vec![
                format!("{base}/{shape}"),
                format!("{base}/{low}"),
                format!("{base}/{high}"),
            ],
            vec![
                ("T", attr::dtype(DT_INT32)),
                ("Tout", attr::dtype(dtype)),
                ("seed", attr::int(self.seed)),
                ("seed2", attr::int(7)),
            ],
        )
    }

    /// One-hot rows of random classes (the last dimension is the number of classes).
    fn one_hot_rows(&self, added: &mut Vec<NodeDef>) -> String {
        let (base, dims) = (&self.base, &self.dims);
        let classes = *dims.last().unwrap_or(&1);
        let rows = &dims[..dims.len() - 1];
        added.push(self.constant("rows", DT_INT32, attr::int32_vector(rows)));
        added.push(self.constant("zero", DT_INT32, attr::int32_scalar(0)));
        added.push(self.constant("classes", DT_INT32, attr::int32_scalar(classes)));
        added.push(self.random_ints("labels", ["rows", "zero", "classes"], DT_INT32));
        added.push(self.constant("on", self.dtype, attr::float_scalar(self.dtype, 1.0)));
        added.push(self.constant("off", self.dtype, attr::float_scalar(self.dtype, 0.0)));
        let value = format!("{base}/value");
        added.push(attr::node(
            &value,
            "OneHot",
            vec![
                format!("{base}/labels"),
                format!("{base}/classes"),
                format!("{base}/on"),
                format!("{base}/off"),
            ],
            vec![
                ("T", attr::dtype(self.dtype)),
                ("TI", attr::dtype(DT_INT32)),
                ("axis", attr::int(-1)),
            ],
        ));
        value
    }

    /// Classes 0 and 1 of the input's integer type.
    fn classes(&self, added: &mut Vec<NodeDef>) -> String {
        added.push(self.constant("shape", DT_INT32, attr::int32_vector(&self.dims)));
        added.push(self.constant("low", self.dtype, attr::int_scalar(self.dtype, 0)));
        added.push(self.constant("high", self.dtype, attr::int_scalar(self.dtype, 2)));
        added.push(self.random_ints("value", ["shape", "low", "high"], self.dtype));
        format!("{}/value", self.base)
    }

    /// Uniform noise in [-1, 1).
    fn uniform(&self, added: &mut Vec<NodeDef>) -> String {
        let base = &self.base;
        let float = attr::dtype(self.dtype);
        added.push(self.constant("shape", DT_INT32, attr::int32_vector(&self.dims)));
        added.push(attr::node(
            &format!("{base}/uniform"),
            "RandomUniform",
            vec![format!("{base}/shape")],
            vec![
                ("T", attr::dtype(DT_INT32)),
                ("dtype", float.clone()),
                ("seed", attr::int(self.seed)),
                ("seed2", attr::int(7)),
            ],
        ));
        added.push(self.constant("two", self.dtype, attr::float_scalar(self.dtype, 2.0)));
        added.push(self.constant("one", self.dtype, attr::float_scalar(self.dtype, 1.0)));
        added.push(attr::node(
            &format!("{base}/scaled"),
            "Mul",
            vec![format!("{base}/uniform"), format!("{base}/two")],
            vec![("T", float.clone())],
        ));
        let value = format!("{base}/value");
        added.push(attr::node(
            &value,
            "Sub",
            vec![format!("{base}/scaled"), format!("{base}/one")],
            vec![("T", float)],
        ));
        value
    }
}

/// The sidecar of the replicated graph: every fed replica's placeholders with their shares
/// (one-hot ones marked), the original `init`, `train` and `loss`, the global batch, the
/// logits as replica 0 computes them where they are replicated, and replica 0's `label`
/// placeholder where the batches are fed (none where they live on the workers).
pub(super) fn replicated_sidecar(
    sidecar: &Sidecar,
    replicas: &[Replica],
    data: BatchData,
    logits_replicated: bool,
) -> Sidecar {
    let mut out = Sidecar {
        inputs: BTreeMap::new(),
        init: sidecar.init.clone(),
        train: sidecar.train.clone(),
        loss: sidecar.loss.clone(),
        one_hot: Vec::new(),
        batch: Some(replicas.iter().map(|r| r.batch).sum()),
        logits: sidecar.logits.as_ref().map(|l| {
            if logits_replicated {
                replica_name(0, l)
            } else {
                l.clone()
            }
        }),
        label: None,
    };
    let fed = if data == BatchData::Feed {
        replicas
    } else {
        &[]
    };
    if !fed.is_empty() {
        out.label = sidecar.label.as_ref().map(|l| replica_name(0, l));
    }
    for (k, r) in fed.iter().enumerate() {
        for (name, shape) in &sidecar.inputs {
            let mut dims = shape.clone();
            if let Some(d) = dims.first_mut() {
                *d = r.batch as i64;
            }
            let placeholder = replica_name(k, name);
            if sidecar.one_hot.contains(name) {
                out.one_hot.push(placeholder.clone());
            }
            out.inputs.insert(placeholder, dims);
        }
    }
    out
}

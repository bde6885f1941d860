//! Synchronous in-graph replication of any single-tower training GraphDef: one copy of the
//! tower per replica (`replica_k/…`), each fed its share of the global batch, the variables and
//! the optimizer's updates shared, every gradient combined as Σ_k (share_k / global batch) · g_k
//! before its one update, and the loss reported the same way — so a step of the replicated graph
//! is, mathematically, one step of the original on the global batch.
//!
//! Pure: GraphDef + the op signatures recorded at analysis + sidecar + plan in, GraphDef out. What
//! is replicated is every op that depends on a sidecar input (the batch) and that the loss or a
//! gradient needs. Stateful updates other than the optimizer's (batch-norm moving averages, a
//! global step) run once, from replica 0; ops outside the step that read the batch (accuracy,
//! predictions) see replica 0's share. Per-replica statistics inside the tower (batch
//! normalisation in training mode) are computed over each replica's share, as in TensorFlow's own
//! data parallelism; the replicated step then differs from the global one by exactly that.

use std::collections::{BTreeMap, HashMap, HashSet};

use prost::Message;

use super::checkpoint::{initialized_op, restore_value_op, StateVar, RESTORE_OP};
use crate::error::{Error, Result};
use crate::graph::graph_def::parse_input;
use crate::graph::OpSignature;
use crate::graph::Sidecar;
use crate::proto::{AttrValue, GraphDef, NodeDef, TensorAttr, TensorProto, TensorShapeProto};

use super::plan::{DataParallelPlan, Replica};

/// `DT_FLOAT`, `DT_DOUBLE`, `DT_HALF` (types.proto).
const DT_FLOAT: i32 = 1;
const DT_DOUBLE: i32 = 2;
const DT_HALF: i32 = 19;
const DT_INT32: i32 = 3;
const DT_INT64: i32 = 9;

/// Prefix of replica `k`'s copy of an op.
pub fn replica_name(k: usize, op: &str) -> String {
    format!("replica_{k}/{op}")
}

/// Where each replica's share of the batch comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BatchData {
    /// Fed at every step: replica `k`'s placeholders are `replica_k/<input>`, listed with their
    /// shapes in [`Replication::sidecar`] (real data, or synthetic batches sent by the driver).
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
pub(crate) const INIT_DATA_OP: &str = "init_data";

/// What an op of the replicated graph is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Role {
    /// Replica `k`'s copy of a tower op (runs on that replica's worker).
    Replica(usize),
    /// Part of the combination of gradients for optimizer update `update` (runs with it).
    Combine {
        /// Name of the optimizer update op.
        update: String,
    },
    /// The replicas' losses combined into the original loss's name.
    Loss,
    /// An op of the original graph kept once: variables, their reads and updates, `init`,
    /// `train`, constants.
    Shared,
}

/// The replicated graph and what each of its ops is.
#[derive(Clone, Debug)]
pub struct Replication {
    /// The replicated GraphDef (function library, versions and debug info carried over).
    pub graph_def: GraphDef,
    /// Role of every node of `graph_def`.
    pub roles: BTreeMap<String, Role>,
    /// The replicas, in the graph's numbering (plan order, empty shares left out).
    pub replicas: Vec<Replica>,
    /// The sidecar of the replicated graph: every replica's placeholders with their shares as
    /// inputs (one-hot ones marked), the original `init`, `train` and combined `loss`.
    pub sidecar: Sidecar,
    /// The optimizer's update ops (one per variable), by name.
    pub updates: Vec<String>,
    /// Each update's gradient as every replica computes it, before the combination.
    pub gradients: Vec<UpdateGradients>,
    /// Stateful ops in the tower other than the optimizer's, run once from replica 0.
    pub once: Vec<String>,
    /// The float variables (weights and optimizer slots) a checkpoint holds, with the ops added
    /// to read, restore ([`RESTORE_OP`]) and probe them; devices unset.
    pub state: Vec<StateVar>,
}

/// One optimizer update and the gradient each replica computes for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UpdateGradients {
    /// The update op (shared; its `grad` input is the combination).
    pub update: String,
    /// Index of `grad` among the update's data inputs.
    pub grad_input: usize,
    /// Replica `k`'s gradient tensor (`node:port` text), in replica order.
    pub per_replica: Vec<String>,
}

fn refuse(op: &str, reason: impl Into<String>) -> Error {
    Error::Replication {
        op: op.into(),
        reason: reason.into(),
    }
}

/// Whether op type `op` is an optimizer's update of a variable from a gradient.
pub(crate) fn is_optimizer_update(op: &str, signature: Option<&OpSignature>) -> bool {
    let family = [
        "Apply",
        "ResourceApply",
        "SparseApply",
        "ResourceSparseApply",
    ]
    .iter()
    .any(|p| op.starts_with(p));
    family && gradient_input(signature).is_some()
}

/// Index of an optimizer update's gradient input: `grad`, or `delta` for plain gradient
/// descent (`ApplyGradientDescent`, `ResourceApplyGradientDescent`, the proximal variant).
pub(crate) fn gradient_input(signature: Option<&OpSignature>) -> Option<usize> {
    let s = signature?;
    s.input("grad").or_else(|| s.input("delta"))
}

/// Stateful op types that write a variable (run once, not per replica).
fn is_variable_write(op: &str) -> bool {
    op.starts_with("Assign")
        || op.starts_with("Scatter")
        || op.starts_with("ResourceScatter")
        || op == "ResourceStridedSliceAssign"
        || op == "StridedSliceAssign"
}

/// Stateful op types that are safe to run once per replica: random numbers (each replica draws
/// its own, like a bigger batch would), checks and prints, reads of variables, per-step
/// containers of control flow.
fn is_replicable_stateful(op: &str) -> bool {
    op.contains("Random")
        || op.contains("TruncatedNormal")
        || op.contains("Multinomial")
        || matches!(
            op,
            "Assert"
                | "Print"
                | "PrintV2"
                | "ReadVariableOp"
                | "ResourceGather"
                | "ResourceGatherNd"
                | "VarIsInitializedOp"
                | "VariableShape"
        )
        || op.starts_with("TensorArray")
        || op.starts_with("Stack")
}

/// One input of a node: source index, output suffix (`""` or `":k"`), control or data.
struct Edge {
    src: usize,
    port: String,
    control: bool,
}

fn edges(def: &GraphDef, index: &HashMap<&str, usize>) -> Result<Vec<Vec<Edge>>> {
    def.node
        .iter()
        .map(|n| {
            n.input
                .iter()
                .map(|input| {
                    let (control, rest) = match input.strip_prefix('^') {
                        Some(r) => (true, r),
                        None => (false, input.as_str()),
                    };
                    let (name, _) = parse_input(rest);
                    let src = *index.get(name).ok_or_else(|| Error::InvalidGraph {
                        node: n.name.clone(),
                        reason: format!("input `{input}` names no node"),
                    })?;
                    Ok(Edge {
                        src,
                        port: rest[name.len()..].to_string(),
                        control,
                    })
                })
                .collect()
        })
        .collect()
}

fn attr(node: &NodeDef, name: &str) -> Option<AttrValue> {
    AttrValue::decode(node.attr.get(name)?.as_slice()).ok()
}

/// Replicates `def` (its sidecar `sidecar`, op signatures `signatures` from
/// `tf_iaware::graph::analyze::Analyzed`) as `plan` says: replica `k` on
/// `plan.replicas[k].device` with that share of the batch (replicas with an empty share are left
/// out). Devices are not set here: see `runtime::replicated` for the placement.
///
/// # Errors
/// [`Error::InvalidArgument`] for a plan without a non-empty share; [`Error::UnknownOp`] for a
/// sidecar op the graph lacks; [`Error::Replication`] naming the op for what cannot be replicated
/// safely: a sidecar input that is not a placeholder, no optimizer update fed by a gradient of
/// the batch, a sparse update, a stateful op of unknown kind inside the tower, a loss of a
/// non-float type.
pub fn replicate(
    def: &GraphDef,
    signatures: &BTreeMap<String, OpSignature>,
    sidecar: &Sidecar,
    plan: &DataParallelPlan,
    data: BatchData,
) -> Result<Replication> {
    let replicas: Vec<Replica> = plan
        .replicas
        .iter()
        .filter(|r| r.batch > 0)
        .cloned()
        .collect();
    if replicas.is_empty() {
        return Err(Error::InvalidArgument {
            what: "data-parallel plan".into(),
            reason: "has no replica with a non-empty share".into(),
        });
    }
    let global: usize = replicas.iter().map(|r| r.batch).sum();
    let index: HashMap<&str, usize> = def
        .node
        .iter()
        .enumerate()
        .map(|(i, n)| (n.name.as_str(), i))
        .collect();
    let require = |name: &str, what: &str| {
        index.get(name).copied().ok_or_else(|| Error::UnknownOp {
            context: format!("sidecar `{what}`"),
            op: name.into(),
        })
    };
    let edges = edges(def, &index)?;
    let n = def.node.len();
    let mut consumers: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, es) in edges.iter().enumerate() {
        for e in es.iter().filter(|e| !e.control) {
            consumers[e.src].push(i);
        }
    }

    // The batch: every sidecar input, and what depends on it through data edges.
    let mut inputs = BTreeMap::new();
    for name in sidecar.inputs.keys() {
        let i = require(name, "inputs")?;
        if !matches!(def.node[i].op.as_str(), "Placeholder" | "PlaceholderV2") {
            return Err(refuse(
                name,
                format!(
                    "a sidecar input must be a Placeholder, not {}",
                    def.node[i].op
                ),
            ));
        }
        inputs.insert(i, name.clone());
    }
    let mut batch_dep = vec![false; n];
    let mut stack: Vec<usize> = inputs.keys().copied().collect();
    while let Some(i) = stack.pop() {
        if std::mem::replace(&mut batch_dep[i], true) {
            continue;
        }
        stack.extend(consumers[i].iter().copied());
    }

    // The optimizer's updates fed by a gradient of the batch, and their `grad` inputs.
    let loss = require(&sidecar.loss, "loss")?;
    require(&sidecar.train, "train")?;
    require(&sidecar.init, "init")?;
    let mut updates: Vec<(usize, usize)> = Vec::new();
    for (i, node) in def.node.iter().enumerate() {
        let sig = signatures.get(&node.op);
        if !is_optimizer_update(&node.op, sig) || !batch_dep[i] {
            continue;
        }
        if node.op.contains("Sparse") {
            return Err(refuse(
                &node.name,
                format!("{}: sparse optimizer updates (embedding gradients) are not replicated yet; use model parallelism", node.op),
            ));
        }
        let at = gradient_input(sig).unwrap_or(usize::MAX);
        let grad = edges[i]
            .iter()
            .filter(|e| !e.control)
            .nth(at)
            .ok_or_else(|| refuse(&node.name, "has no `grad` input"))?;
        updates.push((i, grad.src));
    }
    if updates.is_empty() {
        return Err(refuse(
            &sidecar.train,
            "no optimizer update (Apply*/ResourceApply*) takes a gradient of the sidecar inputs: \
             nothing to combine across replicas",
        ));
    }

    // What the step needs: ancestors of the gradients and of the loss.
    let mut needed = vec![false; n];
    let mut stack: Vec<usize> = updates.iter().map(|&(_, g)| g).collect();
    stack.push(loss);
    while let Some(i) = stack.pop() {
        if std::mem::replace(&mut needed[i], true) {
            continue;
        }
        stack.extend(edges[i].iter().map(|e| e.src));
    }
    let is_update: HashSet<usize> = updates.iter().map(|&(u, _)| u).collect();
    let mut replicated = vec![false; n];
    let mut once = Vec::new();
    for i in 0..n {
        if !(batch_dep[i] && needed[i]) || is_update.contains(&i) {
            continue;
        }
        let node = &def.node[i];
        let stateful = signatures.get(&node.op).is_some_and(|s| s.stateful);
        if stateful && is_variable_write(&node.op) {
            once.push(node.name.clone());
        } else if stateful && !is_replicable_stateful(&node.op) {
            return Err(refuse(
                &node.name,
                format!(
                    "stateful op {} depends on the batch inside the tower and is of no kind \
                     tf-iaware knows how to replicate",
                    node.op
                ),
            ));
        } else {
            replicated[i] = true;
        }
    }
    // A NoOp that only groups ops of the tower (`tf.tuple`'s `group_deps`, which TF1's
    // `minimize` puts between an op's gradients) belongs to the tower too: shared, it would make
    // every replica's gradients wait for every other's.
    let mut changed = true;
    while changed {
        changed = false;
        for i in 0..n {
            let groups_tower = !replicated[i]
                && needed[i]
                && def.node[i].op == "NoOp"
                && !edges[i].is_empty()
                && edges[i].iter().all(|e| e.control && replicated[e.src]);
            if groups_tower {
                replicated[i] = true;
                changed = true;
            }
        }
    }
    // Shape arithmetic that Python folded from a fixed batch (`tf.shape` of a fully defined
    // shape is a constant): constants with the batch as leading entry, and what is computed
    // from them alone, are replicated too, each copy with its replica's share.
    let fixed = fixed_batch(def, &inputs, sidecar);
    let mut baked: Vec<Option<Baked>> = vec![None; n];
    if let Some(b) = fixed {
        let const_derived = const_derived(def, &edges, &batch_dep, signatures);
        for (slot, node) in baked.iter_mut().zip(&def.node) {
            *slot = baked_kind(node, b).filter(|k| *k == Baked::LeadingInt);
        }
        let mut tainted: Vec<bool> = baked.iter().map(Option::is_some).collect();
        let mut changed = true;
        while changed {
            changed = false;
            for i in 0..n {
                if !tainted[i]
                    && const_derived[i]
                    && edges[i].iter().any(|e| !e.control && tainted[e.src])
                {
                    tainted[i] = true;
                    changed = true;
                }
            }
        }
        for i in 0..n {
            if tainted[i] && needed[i] {
                replicated[i] = true;
            }
        }
        // A float batch is the mean's divisor only where it divides in a replica.
        for i in 0..n {
            if baked_kind(&def.node[i], b) != Some(Baked::FloatScalar) {
                continue;
            }
            let divides = consumers[i].iter().any(|&c| {
                replicated[c]
                    && matches!(def.node[c].op.as_str(), "RealDiv" | "Div" | "DivNoNan")
                    && edges[c].iter().filter(|e| !e.control).nth(1).map(|e| e.src) == Some(i)
            });
            if divides {
                baked[i] = Some(Baked::FloatScalar);
                replicated[i] = true;
            }
        }
    }
    let loss_type = attr(&def.node[loss], "T")
        .and_then(|a| a.r#type)
        .unwrap_or(DT_FLOAT);
    if ![DT_FLOAT, DT_DOUBLE, DT_HALF].contains(&loss_type) {
        return Err(refuse(&sidecar.loss, "the loss must be a float tensor"));
    }

    let mut out = GraphDef {
        node: Vec::with_capacity(n * (replicas.len() + 1)),
        ..def.clone()
    };
    let mut roles = BTreeMap::new();
    let mut gradients = Vec::new();
    // A shared op reads replica 0's copy of a replicated tensor (the loss: the combined one) and
    // waits for every replica's copy of a replicated control input.
    let shared_inputs = |i: usize, grad_of: Option<(usize, &str)>| -> Vec<String> {
        let mut data_index = 0;
        let mut v = Vec::new();
        for e in &edges[i] {
            let src = &def.node[e.src].name;
            if e.control {
                if replicated[e.src] {
                    v.extend((0..replicas.len()).map(|k| format!("^{}", replica_name(k, src))));
                } else {
                    v.push(format!("^{src}"));
                }
                continue;
            }
            let text = match grad_of {
                Some((at, combined)) if data_index == at => combined.to_string(),
                _ if e.src == loss => format!("{src}{}", e.port),
                _ if replicated[e.src] => format!("{}{}", replica_name(0, src), e.port),
                _ => format!("{src}{}", e.port),
            };
            v.push(text);
            data_index += 1;
        }
        v
    };
    let grad_at: HashMap<usize, usize> = updates
        .iter()
        .map(|&(u, _)| {
            let sig = signatures.get(&def.node[u].op);
            (u, gradient_input(sig).unwrap_or(0))
        })
        .collect();
    for (i, node) in def.node.iter().enumerate() {
        if replicated[i] {
            for (k, r) in replicas.iter().enumerate() {
                let mut copy = node.clone();
                copy.name = replica_name(k, &node.name);
                copy.input = edges[i]
                    .iter()
                    .map(|e| {
                        let src = &def.node[e.src].name;
                        let name = if replicated[e.src] {
                            replica_name(k, src)
                        } else {
                            src.clone()
                        };
                        if e.control {
                            format!("^{name}")
                        } else {
                            format!("{name}{}", e.port)
                        }
                    })
                    .collect();
                copy.attr.remove("_output_shapes");
                relocate_class(&mut copy, &index, &replicated, k);
                if let Some(kind) = baked[i] {
                    rewrite_baked(&mut copy, kind, r.batch as i64);
                }
                if inputs.contains_key(&i) {
                    set_batch(&mut copy, r.batch as i64)?;
                }
                roles.insert(copy.name.clone(), Role::Replica(k));
                out.node.push(copy);
            }
            if i == loss {
                push_weighted_sum(
                    &mut out,
                    &mut roles,
                    &node.name,
                    "tf_iaware_combine/loss",
                    &(0..replicas.len())
                        .map(|k| replica_name(k, &node.name))
                        .collect::<Vec<_>>(),
                    &replicas,
                    global,
                    loss_type,
                    Role::Loss,
                );
            }
            continue;
        }
        let mut copy = node.clone();
        let grad = match grad_at.get(&i) {
            Some(&at) => {
                let (_, g) = *updates.iter().find(|&&(u, _)| u == i).unwrap_or(&(i, i));
                let port = edges[i]
                    .iter()
                    .filter(|e| !e.control)
                    .nth(at)
                    .map(|e| e.port.clone())
                    .unwrap_or_default();
                let src = &def.node[g].name;
                let combined = format!("tf_iaware_combine/{}/sum", node.name);
                let dtype = attr(node, "T").and_then(|a| a.r#type).unwrap_or(DT_FLOAT);
                let parts: Vec<String> = (0..replicas.len())
                    .map(|k| {
                        if replicated[g] {
                            format!("{}{port}", replica_name(k, src))
                        } else {
                            format!("{src}{port}")
                        }
                    })
                    .collect();
                gradients.push(UpdateGradients {
                    update: node.name.clone(),
                    grad_input: at,
                    per_replica: parts.clone(),
                });
                push_weighted_sum(
                    &mut out,
                    &mut roles,
                    &combined,
                    &format!("tf_iaware_combine/{}", node.name),
                    &parts,
                    &replicas,
                    global,
                    dtype,
                    Role::Combine {
                        update: node.name.clone(),
                    },
                );
                Some((at, combined))
            }
            None => None,
        };
        copy.input = shared_inputs(i, grad.as_ref().map(|(a, c)| (*a, c.as_str())));
        relocate_class(&mut copy, &index, &replicated, 0);
        roles.insert(copy.name.clone(), Role::Shared);
        out.node.push(copy);
    }

    let state = add_checkpoint_ops(&mut out, &mut roles)?;
    add_batch_data(&mut out, &mut roles, sidecar, &replicas, data)?;
    let mut replicated_sidecar = Sidecar {
        inputs: BTreeMap::new(),
        init: sidecar.init.clone(),
        train: sidecar.train.clone(),
        loss: sidecar.loss.clone(),
        one_hot: Vec::new(),
        batch: Some(global),
        // Replica 0's copy where the logits are replicated (they are on the loss's path).
        logits: sidecar
            .logits
            .as_ref()
            .map(|l| match index.get(l.as_str()) {
                Some(&i) if replicated[i] => replica_name(0, l),
                _ => l.clone(),
            }),
    };
    let fed = if data == BatchData::Feed {
        replicas.as_slice()
    } else {
        &[]
    };
    for (k, r) in fed.iter().enumerate() {
        for (name, shape) in &sidecar.inputs {
            let mut dims = shape.clone();
            if let Some(d) = dims.first_mut() {
                *d = r.batch as i64;
            }
            let placeholder = replica_name(k, name);
            if sidecar.one_hot.contains(name) {
                replicated_sidecar.one_hot.push(placeholder.clone());
            }
            replicated_sidecar.inputs.insert(placeholder, dims);
        }
    }
    Ok(Replication {
        graph_def: out,
        roles,
        replicas,
        sidecar: replicated_sidecar,
        updates: updates
            .iter()
            .map(|&(u, _)| def.node[u].name.clone())
            .collect(),
        gradients,
        once,
        state,
    })
}

pub(crate) fn new_node(
    name: &str,
    op: &str,
    input: Vec<String>,
    attrs: Vec<(&str, Vec<u8>)>,
) -> NodeDef {
    let mut n = NodeDef {
        name: name.into(),
        op: op.into(),
        input,
        ..NodeDef::default()
    };
    for (k, v) in attrs {
        n.attr.insert(k.into(), v);
    }
    n
}

fn int_attr(i: i64) -> Vec<u8> {
    AttrValue {
        i: Some(i),
        ..AttrValue::default()
    }
    .encode_to_vec()
}

fn int32_vector(values: &[i64]) -> Vec<u8> {
    TensorAttr {
        tensor: Some(TensorProto {
            dtype: DT_INT32,
            tensor_shape: Some(TensorShapeProto {
                dim: vec![crate::proto::graph::Dim {
                    size: values.len() as i64,
                    name: String::new(),
                }],
                unknown_rank: false,
            }),
            int_val: values.iter().map(|&v| v as i32).collect(),
            ..TensorProto::default()
        }),
    }
    .encode_to_vec()
}

/// Adds [`INIT_DATA_OP`], and with [`BatchData::Synthetic`] turns every replica's placeholders
/// into reads of a variable on its worker, initialised by `init` and by [`INIT_DATA_OP`].
fn add_batch_data(
    out: &mut GraphDef,
    roles: &mut BTreeMap<String, Role>,
    sidecar: &Sidecar,
    replicas: &[Replica],
    data: BatchData,
) -> Result<()> {
    let existing = out.node.iter().position(|n| n.name == INIT_DATA_OP);
    if existing.is_some_and(|i| out.node[i].op != "NoOp") {
        return Err(refuse(
            INIT_DATA_OP,
            "the graph already has an op of the name tf-iaware's data initialiser takes",
        ));
    }
    let mut assigns = Vec::new();
    if let BatchData::Synthetic { seed } = data {
        let float = type_attr(DT_FLOAT);
        let int32 = type_attr(DT_INT32);
        let mut added = Vec::new();
        for (k, r) in replicas.iter().enumerate() {
            for (i, (name, shape)) in sidecar.inputs.iter().enumerate() {
                let read = replica_name(k, name);
                let Some(at) = out.node.iter().position(|n| n.name == read) else {
                    continue;
                };
                let mut dims = shape.clone();
                dims[0] = r.batch as i64;
                if dims.iter().any(|&d| d < 0) {
                    return Err(refuse(
                        name,
                        format!("a synthetic batch needs a known shape, not {dims:?}"),
                    ));
                }
                let base = format!("tf_iaware_data/r{k}_b{}/{name}", r.batch);
                let shape_attr = AttrValue {
                    shape: Some(TensorShapeProto {
                        dim: dims
                            .iter()
                            .map(|&size| crate::proto::graph::Dim {
                                size,
                                name: String::new(),
                            })
                            .collect(),
                        unknown_rank: false,
                    }),
                    ..AttrValue::default()
                }
                .encode_to_vec();
                let op_seed = int_attr(seed.wrapping_mul(1000).wrapping_add((k * 100 + i) as i64));
                let handle = format!("{base}/handle");
                let shared_name = AttrValue {
                    s: Some(handle.clone().into_bytes()),
                    ..AttrValue::default()
                }
                .encode_to_vec();
                added.push(new_node(
                    &handle,
                    "VarHandleOp",
                    vec![],
                    vec![
                        ("dtype", float.clone()),
                        ("shape", shape_attr),
                        ("shared_name", shared_name),
                    ],
                ));
                let value = if sidecar.one_hot.contains(name) {
                    let classes = *dims.last().unwrap_or(&1);
                    added.push(new_node(
                        &format!("{base}/rows"),
                        "Const",
                        vec![],
                        vec![
                            ("dtype", int32.clone()),
                            ("value", int32_vector(&dims[..dims.len() - 1])),
                        ],
                    ));
                    added.push(new_node(
                        &format!("{base}/zero"),
                        "Const",
                        vec![],
                        vec![("dtype", int32.clone()), ("value", scalar_int(0))],
                    ));
                    added.push(new_node(
                        &format!("{base}/classes"),
                        "Const",
                        vec![],
                        vec![("dtype", int32.clone()), ("value", scalar_int(classes))],
                    ));
                    added.push(new_node(
                        &format!("{base}/labels"),
                        "RandomUniformInt",
                        vec![
                            format!("{base}/rows"),
                            format!("{base}/zero"),
                            format!("{base}/classes"),
                        ],
                        vec![
                            ("T", int32.clone()),
                            ("Tout", int32.clone()),
                            ("seed", op_seed.clone()),
                            ("seed2", int_attr(7)),
                        ],
                    ));
                    added.push(new_node(
                        &format!("{base}/on"),
                        "Const",
                        vec![],
                        vec![("dtype", float.clone()), ("value", scalar(DT_FLOAT, 1.0))],
                    ));
                    added.push(new_node(
                        &format!("{base}/off"),
                        "Const",
                        vec![],
                        vec![("dtype", float.clone()), ("value", scalar(DT_FLOAT, 0.0))],
                    ));
                    added.push(new_node(
                        &format!("{base}/value"),
                        "OneHot",
                        vec![
                            format!("{base}/labels"),
                            format!("{base}/classes"),
                            format!("{base}/on"),
                            format!("{base}/off"),
                        ],
                        vec![
                            ("T", float.clone()),
                            ("TI", int32.clone()),
                            ("axis", int_attr(-1)),
                        ],
                    ));
                    format!("{base}/value")
                } else {
                    added.push(new_node(
                        &format!("{base}/shape"),
                        "Const",
                        vec![],
                        vec![("dtype", int32.clone()), ("value", int32_vector(&dims))],
                    ));
                    added.push(new_node(
                        &format!("{base}/uniform"),
                        "RandomUniform",
                        vec![format!("{base}/shape")],
                        vec![
                            ("T", int32.clone()),
                            ("dtype", float.clone()),
                            ("seed", op_seed.clone()),
                            ("seed2", int_attr(7)),
                        ],
                    ));
                    added.push(new_node(
                        &format!("{base}/two"),
                        "Const",
                        vec![],
                        vec![("dtype", float.clone()), ("value", scalar(DT_FLOAT, 2.0))],
                    ));
                    added.push(new_node(
                        &format!("{base}/one"),
                        "Const",
                        vec![],
                        vec![("dtype", float.clone()), ("value", scalar(DT_FLOAT, 1.0))],
                    ));
                    added.push(new_node(
                        &format!("{base}/scaled"),
                        "Mul",
                        vec![format!("{base}/uniform"), format!("{base}/two")],
                        vec![("T", float.clone())],
                    ));
                    added.push(new_node(
                        &format!("{base}/value"),
                        "Sub",
                        vec![format!("{base}/scaled"), format!("{base}/one")],
                        vec![("T", float.clone())],
                    ));
                    format!("{base}/value")
                };
                let assign = format!("{base}/assign");
                added.push(new_node(
                    &assign,
                    "AssignVariableOp",
                    vec![handle.clone(), value],
                    vec![("dtype", float.clone())],
                ));
                assigns.push(format!("^{assign}"));
                // The placeholder becomes a read of the variable, under the same name.
                out.node[at] = new_node(
                    &read,
                    "ReadVariableOp",
                    vec![handle],
                    vec![("dtype", float.clone())],
                );
                for n in &added {
                    roles.entry(n.name.clone()).or_insert(Role::Replica(k));
                }
            }
        }
        out.node.extend(added);
        if let Some(init) = out.node.iter_mut().find(|n| n.name == sidecar.init) {
            init.input.extend(assigns.iter().cloned());
        }
    }
    // A graph that has its own (the zoo's) gets the assigns added to it.
    match existing {
        Some(i) => out.node[i].input.extend(assigns),
        None => out
            .node
            .push(new_node(INIT_DATA_OP, "NoOp", assigns, vec![])),
    }
    roles.insert(INIT_DATA_OP.into(), Role::Shared);
    Ok(())
}

fn scalar_int(v: i64) -> Vec<u8> {
    TensorAttr {
        tensor: Some(TensorProto {
            dtype: DT_INT32,
            tensor_shape: Some(TensorShapeProto::default()),
            int_val: vec![v as i32],
            ..TensorProto::default()
        }),
    }
    .encode_to_vec()
}

/// Adds, for every float variable of `out`, a placeholder for its checkpointed value, an assign
/// from it (all grouped under [`RESTORE_OP`]), a read for taking checkpoints and a float flag that
/// says whether it holds a value ([`initialized_op`]) — what the driver's checkpoints and
/// recovery use (`runtime::checkpoint`). Non-float variables (an int64 global step) are not
/// checkpointed.
fn add_checkpoint_ops(
    out: &mut GraphDef,
    roles: &mut BTreeMap<String, Role>,
) -> Result<Vec<StateVar>> {
    let names: HashSet<String> = out.node.iter().map(|n| n.name.clone()).collect();
    let mut added: Vec<NodeDef> = Vec::new();
    let mut state = Vec::new();
    let mut assigns = Vec::new();
    let node = |name: String, op: &str, input: Vec<String>, attrs: Vec<(&str, Vec<u8>)>| {
        let mut n = NodeDef {
            name,
            op: op.into(),
            input,
            ..NodeDef::default()
        };
        for (k, v) in attrs {
            n.attr.insert(k.into(), v);
        }
        n
    };
    for var in &out.node {
        let resource = match var.op.as_str() {
            "VarHandleOp" => true,
            "VariableV2" | "Variable" => false,
            _ => continue,
        };
        if attr(var, "dtype").and_then(|a| a.r#type) != Some(DT_FLOAT) {
            continue;
        }
        let Some(shape) = attr(var, "shape").and_then(|a| a.shape) else {
            continue;
        };
        let Some(dims) = shape.dims().filter(|d| d.iter().all(|&x| x >= 0)) else {
            continue;
        };
        let v = var.name.clone();
        let value = restore_value_op(&v);
        let flag = initialized_op(&v);
        let read = format!("checkpoint/read/{v}");
        let assign = format!("restore/{v}/assign");
        let probe = format!("{flag}/is_initialized");
        for name in [&value, &flag, &read, &assign, &probe] {
            if names.contains(name) {
                return Err(refuse(
                    name,
                    "the graph already has an op of the name tf-iaware's checkpoint ops take",
                ));
            }
        }
        let float = type_attr(DT_FLOAT);
        let shape_attr = AttrValue {
            shape: Some(shape.clone()),
            ..AttrValue::default()
        }
        .encode_to_vec();
        added.push(node(
            value.clone(),
            "Placeholder",
            vec![],
            vec![("dtype", float.clone()), ("shape", shape_attr)],
        ));
        if resource {
            added.push(node(
                probe.clone(),
                "VarIsInitializedOp",
                vec![v.clone()],
                vec![],
            ));
            added.push(node(
                assign.clone(),
                "AssignVariableOp",
                vec![v.clone(), value.clone()],
                vec![("dtype", float.clone())],
            ));
            added.push(node(
                read.clone(),
                "ReadVariableOp",
                vec![v.clone()],
                vec![("dtype", float.clone())],
            ));
        } else {
            added.push(node(
                probe.clone(),
                "IsVariableInitialized",
                vec![v.clone()],
                vec![("dtype", float.clone())],
            ));
            added.push(node(
                assign.clone(),
                "Assign",
                vec![v.clone(), value.clone()],
                vec![("T", float.clone())],
            ));
            added.push(node(
                read.clone(),
                "Identity",
                vec![v.clone()],
                vec![("T", float.clone())],
            ));
        }
        added.push(node(
            flag.clone(),
            "Cast",
            vec![probe.clone()],
            vec![("SrcT", type_attr(10)), ("DstT", float.clone())],
        ));
        assigns.push(format!("^{assign}"));
        state.push(StateVar {
            name: v,
            shape: dims,
            read,
            device: None,
        });
    }
    if state.is_empty() {
        return Ok(state);
    }
    if names.contains(RESTORE_OP) {
        return Err(refuse(
            RESTORE_OP,
            "the graph already has an op of the name tf-iaware's restore op takes",
        ));
    }
    added.push(node(RESTORE_OP.into(), "NoOp", assigns, vec![]));
    for n in &added {
        roles.insert(n.name.clone(), Role::Shared);
    }
    out.node.extend(added);
    Ok(state)
}

/// Points `_class` entries (`loc:@op`) at replicated ops to replica `k`'s copies.
fn relocate_class(node: &mut NodeDef, index: &HashMap<&str, usize>, replicated: &[bool], k: usize) {
    let Some(mut class) = attr(node, "_class") else {
        return;
    };
    let Some(list) = class.list.as_mut() else {
        return;
    };
    let mut changed = false;
    for s in &mut list.s {
        let text = String::from_utf8_lossy(s).into_owned();
        if let Some(target) = text.strip_prefix("loc:@") {
            if index.get(target).is_some_and(|&t| replicated[t]) {
                *s = format!("loc:@{}", replica_name(k, target)).into_bytes();
                changed = true;
            }
        }
    }
    if changed {
        node.attr.insert("_class".into(), class.encode_to_vec());
    }
}

/// The batch fixed in the graph: the leading dimension every sidecar input's placeholder
/// declares, when they agree and it is known.
fn fixed_batch(def: &GraphDef, inputs: &BTreeMap<usize, String>, sidecar: &Sidecar) -> Option<i64> {
    let mut fixed = None;
    for (&i, name) in inputs {
        let declared = attr(&def.node[i], "shape")
            .and_then(|a| a.shape)
            .and_then(|s| s.dims())
            .and_then(|d| d.first().copied());
        let given = sidecar.inputs.get(name).and_then(|d| d.first().copied());
        let b = declared.filter(|&b| b > 0).or(given.filter(|&b| b > 0))?;
        if *fixed.get_or_insert(b) != b {
            return None;
        }
    }
    fixed
}

/// Nodes computed from constants alone (no batch, no variable, nothing stateful).
fn const_derived(
    def: &GraphDef,
    edges: &[Vec<Edge>],
    batch_dep: &[bool],
    signatures: &BTreeMap<String, OpSignature>,
) -> Vec<bool> {
    let n = def.node.len();
    let mut derived: Vec<bool> = def.node.iter().map(|d| d.op == "Const").collect();
    let mut changed = true;
    while changed {
        changed = false;
        for i in 0..n {
            let node = &def.node[i];
            if derived[i]
                || batch_dep[i]
                || edges[i].is_empty()
                || signatures.get(&node.op).is_none_or(|s| s.stateful)
            {
                continue;
            }
            if edges[i].iter().all(|e| e.control || derived[e.src]) {
                derived[i] = true;
                changed = true;
            }
        }
    }
    derived
}

/// How a constant holds a fixed batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Baked {
    /// An integer vector (a shape) whose first entry is the batch.
    LeadingInt,
    /// A float scalar equal to the batch (the divisor of a mean's gradient).
    FloatScalar,
}

fn const_tensor(node: &NodeDef) -> Option<TensorProto> {
    if node.op != "Const" {
        return None;
    }
    TensorAttr::decode(node.attr.get("value")?.as_slice())
        .ok()?
        .tensor
}

fn elements(t: &TensorProto) -> Option<usize> {
    t.tensor_shape
        .as_ref()?
        .dims()?
        .iter()
        .try_fold(1usize, |a, &d| usize::try_from(d).ok().map(|d| a * d))
}

/// The integer values of a constant, expanded to every element.
fn int_values(t: &TensorProto) -> Option<Vec<i64>> {
    let n = elements(t)?;
    let v: Vec<i64> = match t.dtype {
        DT_INT32 if !t.tensor_content.is_empty() => t
            .tensor_content
            .chunks_exact(4)
            .map(|c| i64::from(i32::from_le_bytes([c[0], c[1], c[2], c[3]])))
            .collect(),
        DT_INT64 if !t.tensor_content.is_empty() => t
            .tensor_content
            .chunks_exact(8)
            .map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
            .collect(),
        DT_INT32 => t.int_val.iter().map(|&x| i64::from(x)).collect(),
        DT_INT64 => t.int64_val.clone(),
        _ => return None,
    };
    match v.len() {
        len if len == n => Some(v),
        1 => Some(vec![v[0]; n]),
        _ => None,
    }
}

fn float_scalar(t: &TensorProto) -> Option<f64> {
    if elements(t)? != 1 {
        return None;
    }
    match t.dtype {
        DT_FLOAT if t.tensor_content.len() == 4 => {
            let c = &t.tensor_content;
            Some(f64::from(f32::from_le_bytes([c[0], c[1], c[2], c[3]])))
        }
        DT_FLOAT => t.float_val.first().map(|&x| f64::from(x)),
        DT_DOUBLE => t.double_val.first().copied(),
        _ => None,
    }
}

fn baked_kind(node: &NodeDef, batch: i64) -> Option<Baked> {
    let t = const_tensor(node)?;
    let rank = t.tensor_shape.as_ref()?.dims()?.len();
    if rank == 1 && int_values(&t)?.first() == Some(&batch) {
        return Some(Baked::LeadingInt);
    }
    (rank == 0 && float_scalar(&t) == Some(batch as f64)).then_some(Baked::FloatScalar)
}

/// Writes `share` where a baked constant holds the batch.
fn rewrite_baked(node: &mut NodeDef, kind: Baked, share: i64) {
    let Some(mut t) = const_tensor(node) else {
        return;
    };
    match kind {
        Baked::LeadingInt => {
            let Some(mut v) = int_values(&t) else { return };
            v[0] = share;
            t.tensor_content.clear();
            if t.dtype == DT_INT32 {
                t.int_val = v.iter().map(|&x| x as i32).collect();
            } else {
                t.int64_val = v;
            }
        }
        Baked::FloatScalar => {
            t.tensor_content.clear();
            if t.dtype == DT_DOUBLE {
                t.double_val = vec![share as f64];
            } else {
                t.float_val = vec![share as f32];
            }
        }
    }
    node.attr.insert(
        "value".into(),
        TensorAttr { tensor: Some(t) }.encode_to_vec(),
    );
}

/// Sets the leading dimension of a placeholder's `shape` attribute to `batch`.
fn set_batch(node: &mut NodeDef, batch: i64) -> Result<()> {
    let mut value = attr(node, "shape").unwrap_or_default();
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
    node.attr.insert("shape".into(), value.encode_to_vec());
    Ok(())
}

pub(crate) fn type_attr(t: i32) -> Vec<u8> {
    AttrValue {
        r#type: Some(t),
        ..AttrValue::default()
    }
    .encode_to_vec()
}

fn scalar(dtype: i32, v: f64) -> Vec<u8> {
    let mut t = TensorProto {
        dtype,
        tensor_shape: Some(TensorShapeProto::default()),
        ..TensorProto::default()
    };
    match dtype {
        DT_DOUBLE => t.double_val.push(v),
        DT_HALF => t.half_val.push(i32::from(f32_to_f16_bits(v as f32))),
        _ => t.float_val.push(v as f32),
    }
    TensorAttr { tensor: Some(t) }.encode_to_vec()
}

/// IEEE 754 binary16 bits of `x`, rounded to nearest (weights are in (0, 1]: no overflow).
fn f32_to_f16_bits(x: f32) -> u16 {
    let bits = x.to_bits();
    let sign = ((bits >> 16) & 0x8000) as u16;
    let exp = ((bits >> 23) & 0xff) as i32 - 127 + 15;
    let mant = bits & 0x7f_ffff;
    if exp <= 0 {
        return sign;
    }
    if exp >= 31 {
        return sign | 0x7c00;
    }
    let rounded = (mant + 0x1000) >> 13;
    sign | (((exp as u32) << 10) + rounded) as u16
}

/// `name` = Σ_k (share_k / global) · parts[k]: one `Const` weight and one `Mul` per replica and
/// an `AddN` named `name`; every node gets `role`.
#[allow(clippy::too_many_arguments)]
fn push_weighted_sum(
    out: &mut GraphDef,
    roles: &mut BTreeMap<String, Role>,
    name: &str,
    scope: &str,
    parts: &[String],
    replicas: &[Replica],
    global: usize,
    dtype: i32,
    role: Role,
) {
    let mut terms = Vec::with_capacity(parts.len());
    for (k, (part, r)) in parts.iter().zip(replicas).enumerate() {
        let weight = format!("{scope}/weight_{k}");
        let mut c = NodeDef {
            name: weight.clone(),
            op: "Const".into(),
            ..NodeDef::default()
        };
        c.attr.insert("dtype".into(), type_attr(dtype));
        c.attr.insert(
            "value".into(),
            scalar(dtype, r.batch as f64 / global as f64),
        );
        let mul = format!("{scope}/mul_{k}");
        let mut m = NodeDef {
            name: mul.clone(),
            op: "Mul".into(),
            input: vec![part.clone(), weight.clone()],
            ..NodeDef::default()
        };
        m.attr.insert("T".into(), type_attr(dtype));
        roles.insert(weight, role.clone());
        roles.insert(mul.clone(), role.clone());
        out.node.push(c);
        out.node.push(m);
        terms.push(mul);
    }
    let mut sum = NodeDef {
        name: name.into(),
        op: "AddN".into(),
        input: terms,
        ..NodeDef::default()
    };
    sum.attr.insert(
        "N".into(),
        AttrValue {
            i: Some(parts.len() as i64),
            ..AttrValue::default()
        }
        .encode_to_vec(),
    );
    sum.attr.insert("T".into(), type_attr(dtype));
    roles.insert(name.into(), role);
    out.node.push(sum);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn half_weights_are_binary16() {
        assert_eq!(f32_to_f16_bits(1.0), 0x3c00);
        assert_eq!(f32_to_f16_bits(0.5), 0x3800);
        assert_eq!(f32_to_f16_bits(0.375), 0x3600);
    }
}

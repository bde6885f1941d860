//! Which ops of a single-tower graph make up the tower: the sidecar's inputs (the batch), what
//! depends on them, the optimizer's updates fed by a gradient of the batch, and what the step
//! needs to compute those gradients and the loss. The tower is replicated; stateful writes in it
//! run once; everything else stays shared.

use std::collections::{BTreeMap, HashMap, HashSet};

use super::refuse;
use crate::error::{Error, Result};
use crate::graph::graph_def::parse_input;
use crate::graph::{OpSignature, Sidecar};
use crate::proto::GraphDef;

/// One input of a node: source index, output suffix (`""` or `":k"`), control or data.
pub(super) struct Edge {
    pub(super) src: usize,
    pub(super) port: String,
    pub(super) control: bool,
}

/// One optimizer update that takes a gradient of the batch.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Update {
    /// Index of the update op.
    pub(super) node: usize,
    /// Index of its gradient among its data inputs.
    pub(super) grad_input: usize,
    /// Index of the op whose output is the gradient.
    pub(super) grad_src: usize,
}

/// The graph's structure and what of it the replication copies.
pub(super) struct Selection<'a> {
    /// Node name → index.
    pub(super) index: HashMap<&'a str, usize>,
    /// Every node's inputs, in order.
    pub(super) edges: Vec<Vec<Edge>>,
    /// Every node's data consumers.
    pub(super) consumers: Vec<Vec<usize>>,
    /// The sidecar inputs' placeholders, by index.
    pub(super) inputs: BTreeMap<usize, String>,
    /// Nodes that depend on the batch through data edges.
    pub(super) batch_dep: Vec<bool>,
    /// Nodes the step needs: ancestors of the gradients and of the loss.
    pub(super) needed: Vec<bool>,
    /// Index of the loss.
    pub(super) loss: usize,
    /// The optimizer's updates fed by a gradient of the batch, in graph order.
    pub(super) updates: Vec<Update>,
    /// Nodes copied once per replica.
    pub(super) replicated: Vec<bool>,
    /// Stateful writes inside the tower, run once (from replica 0).
    pub(super) once: Vec<String>,
}

impl Selection<'_> {
    /// The update op at index `i`, if it is one.
    pub(super) fn update(&self, i: usize) -> Option<&Update> {
        self.updates.iter().find(|u| u.node == i)
    }
}

/// Whether op type `op` is an optimizer's update of a variable from a gradient.
fn is_optimizer_update(op: &str, signature: Option<&OpSignature>) -> bool {
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
fn gradient_input(signature: Option<&OpSignature>) -> Option<usize> {
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

/// Every node's inputs as edges.
///
/// # Errors
/// [`Error::InvalidGraph`] for an input that names no node.
pub(super) fn edges(def: &GraphDef, index: &HashMap<&str, usize>) -> Result<Vec<Vec<Edge>>> {
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

/// Marks every node reachable from `start`; `next(i, stack)` pushes the nodes one step from `i`.
fn reach(n: usize, start: Vec<usize>, next: impl Fn(usize, &mut Vec<usize>)) -> Vec<bool> {
    let mut seen = vec![false; n];
    let mut stack = start;
    while let Some(i) = stack.pop() {
        if std::mem::replace(&mut seen[i], true) {
            continue;
        }
        next(i, &mut stack);
    }
    seen
}

/// Finds the tower of `def` (see the module docs).
///
/// # Errors
/// As [`replicate`](super::replicate): [`Error::UnknownOp`] for a sidecar op the graph lacks,
/// [`Error::Replication`] for a sidecar input that is not a placeholder, a sparse update, no
/// update fed by the batch, a stateful op of unknown kind inside the tower.
pub(super) fn select<'a>(
    def: &'a GraphDef,
    signatures: &BTreeMap<String, OpSignature>,
    sidecar: &Sidecar,
) -> Result<Selection<'a>> {
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
    let mut inputs = BTreeMap::new();
    for name in sidecar.inputs.keys() {
        let i = require(name, "inputs")?;
        if !matches!(def.node[i].op.as_str(), "Placeholder" | "PlaceholderV2") {
            let reason = format!(
                "a sidecar input must be a Placeholder, not {}",
                def.node[i].op
            );
            return Err(refuse(name, reason));
        }
        inputs.insert(i, name.clone());
    }
    let batch_dep = reach(n, inputs.keys().copied().collect(), |i, stack| {
        stack.extend(consumers[i].iter().copied())
    });
    let loss = require(&sidecar.loss, "loss")?;
    require(&sidecar.train, "train")?;
    require(&sidecar.init, "init")?;
    let updates = optimizer_updates(def, signatures, &edges, &batch_dep, &sidecar.train)?;
    let mut start: Vec<usize> = updates.iter().map(|u| u.grad_src).collect();
    start.push(loss);
    let needed = reach(n, start, |i, stack| {
        stack.extend(edges[i].iter().map(|e| e.src))
    });
    let mut selection = Selection {
        index,
        edges,
        consumers,
        inputs,
        batch_dep,
        needed,
        loss,
        updates,
        replicated: vec![false; n],
        once: Vec::new(),
    };
    mark_tower(def, signatures, &mut selection)?;
    group_tower_noops(def, &mut selection);
    Ok(selection)
}

/// The optimizer's updates fed by a gradient of the batch.
fn optimizer_updates(
    def: &GraphDef,
    signatures: &BTreeMap<String, OpSignature>,
    edges: &[Vec<Edge>],
    batch_dep: &[bool],
    train: &str,
) -> Result<Vec<Update>> {
    let mut updates = Vec::new();
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
        let grad_input = gradient_input(sig).unwrap_or(usize::MAX);
        let grad = edges[i]
            .iter()
            .filter(|e| !e.control)
            .nth(grad_input)
            .ok_or_else(|| refuse(&node.name, "has no `grad` input"))?;
        updates.push(Update {
            node: i,
            grad_input,
            grad_src: grad.src,
        });
    }
    if updates.is_empty() {
        return Err(refuse(
            train,
            "no optimizer update (Apply*/ResourceApply*) takes a gradient of the sidecar inputs: \
             nothing to combine across replicas",
        ));
    }
    Ok(updates)
}

/// Marks the ops that depend on the batch and that the step needs as replicated, except the
/// updates themselves and stateful writes (run once).
fn mark_tower(
    def: &GraphDef,
    signatures: &BTreeMap<String, OpSignature>,
    s: &mut Selection<'_>,
) -> Result<()> {
    let is_update: HashSet<usize> = s.updates.iter().map(|u| u.node).collect();
    for (i, node) in def.node.iter().enumerate() {
        if !(s.batch_dep[i] && s.needed[i]) || is_update.contains(&i) {
            continue;
        }
        let stateful = signatures.get(&node.op).is_some_and(|s| s.stateful);
        if stateful && is_variable_write(&node.op) {
            s.once.push(node.name.clone());
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
            s.replicated[i] = true;
        }
    }
    Ok(())
}

/// A NoOp that only groups ops of the tower (`tf.tuple`'s `group_deps`, which TF1's `minimize`
/// puts between an op's gradients) belongs to the tower too: shared, it would make every
/// replica's gradients wait for every other's.
fn group_tower_noops(def: &GraphDef, s: &mut Selection<'_>) {
    let mut changed = true;
    while changed {
        changed = false;
        for i in 0..def.node.len() {
            let groups_tower = !s.replicated[i]
                && s.needed[i]
                && def.node[i].op == "NoOp"
                && !s.edges[i].is_empty()
                && s.edges[i].iter().all(|e| e.control && s.replicated[e.src]);
            if groups_tower {
                s.replicated[i] = true;
                changed = true;
            }
        }
    }
}

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

//!
//! The transform in steps, one private module each: `select` finds the tower, `baked` the
//! constants that hold a fixed batch, `tower` writes the replicas' copies and the shared ops,
//! `aggregate` the combinations of gradients and loss, `checkpoint` the ops that save and
//! restore the variables, `batch` where each replica's share comes from.

mod aggregate;
mod baked;
mod batch;
mod checkpoint;
mod select;
mod tower;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use crate::error::{Error, Result};
use crate::graph::{OpSignature, Sidecar};
use crate::parallel::checkpoint::StateVar;
use crate::proto::attr::{self, DT_DOUBLE, DT_FLOAT, DT_HALF};
use crate::proto::{GraphDef, NodeDef};

use super::plan::{DataParallelPlan, Replica};
use aggregate::Shares;
pub use batch::{BatchData, INIT_DATA_OP};

/// Prefix of replica `k`'s copy of an op.
pub fn replica_name(k: usize, op: &str) -> String {
    format!("replica_{k}/{op}")
}

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
    /// to read, restore ([`RESTORE_OP`](crate::parallel::checkpoint::RESTORE_OP)) and probe them; devices unset.
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

/// The replicated graph as it is written: its nodes in order, each with its role.
struct Output {
    graph_def: GraphDef,
    roles: BTreeMap<String, Role>,
}

impl Output {
    fn push(&mut self, node: NodeDef, role: Role) {
        self.roles.insert(node.name.clone(), role);
        self.graph_def.node.push(node);
    }
}

/// Replicates `def` (its sidecar `sidecar`, op signatures `signatures` from
/// `tf_iaware::graph::analyze::Analyzed`) as `plan` says: replica `k` on
/// `plan.replicas[k].device` with that share of the batch (replicas with an empty share are left
/// out). Devices are not set here: see `runtime::replicated` for the placement.
///
/// # Errors
/// [`Error::InvalidArgument`] for a plan without a non-empty share; [`Error::UnknownOp`] for a
/// sidecar op the graph lacks; [`Error::InvalidGraph`] for an input that names no node;
/// [`Error::Replication`] naming the op for what cannot be replicated safely: a sidecar input
/// that is not a placeholder, no optimizer update fed by a gradient of the batch, a sparse
/// update, a stateful op of unknown kind inside the tower, a loss of a non-float type.
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
    let mut selection = select::select(def, signatures, sidecar)?;
    let baked = baked::mark_baked(def, signatures, sidecar, &mut selection);
    let loss_type = attr::get(&def.node[selection.loss], "T")
        .and_then(|a| a.r#type)
        .unwrap_or(DT_FLOAT);
    if ![DT_FLOAT, DT_DOUBLE, DT_HALF].contains(&loss_type) {
        return Err(refuse(&sidecar.loss, "the loss must be a float tensor"));
    }
    let shares = Shares {
        replicas: &replicas,
        global: replicas.iter().map(|r| r.batch).sum(),
    };
    let mut out = Output {
        graph_def: GraphDef {
            node: Vec::with_capacity(def.node.len() * (replicas.len() + 1)),
            ..def.clone()
        },
        roles: BTreeMap::new(),
    };
    let tower = tower::Tower {
        def,
        selection: &selection,
        baked: &baked,
        shares: &shares,
        loss_type,
    };
    let gradients = tower.write(&mut out)?;
    let state = checkpoint::add_checkpoint_ops(&mut out)?;
    batch::add_batch_data(&mut out, sidecar, &replicas, data)?;
    let logits_replicated = sidecar
        .logits
        .as_ref()
        .and_then(|l| selection.index.get(l.as_str()))
        .is_some_and(|&i| selection.replicated[i]);
    Ok(Replication {
        graph_def: out.graph_def,
        roles: out.roles,
        sidecar: batch::replicated_sidecar(sidecar, &replicas, data, logits_replicated),
        updates: selection
            .updates
            .iter()
            .map(|u| def.node[u.node].name.clone())
            .collect(),
        gradients,
        once: selection.once,
        state,
        replicas,
    })
}

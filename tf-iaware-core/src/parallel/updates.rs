//! Ways the replicas' gradients reach the variables other than the synchronous in-graph sum of
//! [`replicate`](super::replicate::replicate), added to a [`Replication`] as extra ops beside it:
//!
//! - **asynchronous** ([`add_async_updates`]): every replica gets its own copy of each optimizer
//!   update, fed by its own gradient, and its own train target — ParameterServerStrategy's (and
//!   TF1 between-graph replication's) semantics: a worker's step reads the variables as they are,
//!   applies its gradient when it is ready, and waits for no one;
//! - **backup workers** ([`add_backup_accumulators`]): SyncReplicasOptimizer's semantics. Each
//!   update gets a `ConditionalAccumulator` on the variable's ps; a replica's `push` applies its
//!   gradients to them tagged with the step it read; the chief's `train` takes the mean of the
//!   first `num_required` gradients of the current step (`AccumulatorTakeGradient` blocks until
//!   they are there, and drops stale ones) and applies it.
//!
//! Pure: the replicated GraphDef in, the same with the new ops out.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::error::{Error, Result};
use crate::proto::attr::{
    self, dtype as type_attr, node as new_node, DT_FLOAT, DT_INT32, DT_INT64,
};
use crate::proto::{AttrValue, GraphDef, NodeDef, TensorShapeProto};

use super::replicate::{replica_name, Replication, Role};

/// Each replica's asynchronous train target and loss.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AsyncTargets {
    /// Replica `k`'s train op: its own updates of every variable.
    pub train: Vec<String>,
    /// Replica `k`'s loss (its copy of the original loss).
    pub loss: Vec<String>,
}

/// The ops of SyncReplicasOptimizer-style training with backup workers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackupTargets {
    /// Replica `k`'s op that pushes its gradients into the accumulators.
    pub push: Vec<String>,
    /// Replica `k`'s int64 scalar placeholder: the global step its gradients belong to.
    pub local_step: Vec<String>,
    /// Replica `k`'s loss.
    pub loss: Vec<String>,
    /// The chief's op: takes the mean of `num_required` gradients per variable and applies it.
    pub train: String,
    /// The chief's int32 scalar placeholder: how many gradients a step aggregates.
    pub num_required: String,
}

/// Prefix of the ops [`add_async_updates`] adds.
pub(crate) const ASYNC_PREFIX: &str = "tf_iaware_async";
/// Prefix of the ops [`add_backup_accumulators`] adds.
pub const BACKUP_PREFIX: &str = "tf_iaware_backup";

/// The update `name`'s node in the replicated graph.
fn update_node<'a>(rep: &'a Replication, name: &str) -> Result<&'a NodeDef> {
    rep.graph_def
        .node
        .iter()
        .find(|n| n.name == name)
        .ok_or_else(|| Error::Replication {
            op: name.into(),
            reason: "the optimizer update is missing from the replicated graph".into(),
        })
}

/// `inputs` with data input `at` replaced by `tensor`.
fn with_data_input(inputs: &[String], at: usize, tensor: &str) -> Result<Vec<String>> {
    let mut data = 0;
    let mut replaced = false;
    let out = inputs
        .iter()
        .map(|i| {
            if i.starts_with('^') {
                return i.clone();
            }
            let this = data;
            data += 1;
            if this == at {
                replaced = true;
                tensor.to_string()
            } else {
                i.clone()
            }
        })
        .collect();
    if replaced {
        Ok(out)
    } else {
        Err(Error::Replication {
            op: tensor.into(),
            reason: format!("the update has no data input {at} to feed this gradient"),
        })
    }
}

/// The control inputs a copy of a shared update keeps when replica `k` alone (or, with `None`,
/// no replica) runs it: a control input on some replica's op becomes one on replica `k`'s copy
/// (or is dropped), and the stateful writes [`Replication::once`] runs from replica 0 are
/// dropped (replica 0's own target runs them instead, [`once_controls`]).
fn controls_for(inputs: &[String], k: Option<usize>, once: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(inputs.len());
    for input in inputs {
        let Some(name) = input.strip_prefix('^') else {
            out.push(input.clone());
            continue;
        };
        let replica_op = name
            .strip_prefix("replica_")
            .and_then(|rest| rest.split_once('/'))
            .filter(|(index, _)| index.parse::<usize>().is_ok());
        let kept = match (replica_op, k) {
            (Some((_, op)), Some(k)) => Some(format!("^{}", replica_name(k, op))),
            (Some(_), None) => None,
            (None, _) if once.iter().any(|o| o == name) => None,
            (None, _) => Some(input.clone()),
        };
        if let Some(c) = kept.filter(|c| !out.contains(c)) {
            out.push(c);
        }
    }
    out
}

/// Checks that what `target` runs needs no op of a replica other than `k` (`None`: of no
/// replica): a worker's own step must not wait for another's batch.
///
/// # Errors
/// [`Error::Replication`] naming the op of the other replica and the op that needs it.
fn check_independent(
    graph: &GraphDef,
    roles: &BTreeMap<String, Role>,
    target: &str,
    k: Option<usize>,
) -> Result<()> {
    let index: HashMap<&str, &NodeDef> = graph.node.iter().map(|n| (n.name.as_str(), n)).collect();
    let mut seen: HashSet<&str> = HashSet::new();
    let mut stack: Vec<(&str, &str)> = vec![(target, target)];
    while let Some((name, parent)) = stack.pop() {
        if !seen.insert(name) {
            continue;
        }
        if let Some(Role::Replica(j)) = roles.get(name) {
            if Some(*j) != k {
                return Err(Error::Replication {
                    op: parent.into(),
                    reason: format!(
                        "needs `{name}` of replica {j}, so {} would wait for another worker's \
                         batch: asynchronous and backup-worker training need towers that do not \
                         depend on each other (a control dependency on a once-run update, such \
                         as batch-norm moving averages under `control_dependencies`, links them); \
                         train this graph synchronously",
                        match k {
                            Some(k) => format!("replica {k}'s step"),
                            None => "the chief's step".into(),
                        }
                    ),
                });
            }
        }
        if let Some(node) = index.get(name) {
            for input in &node.input {
                let src = input.trim_start_matches('^');
                let src = src.split(':').next().unwrap_or(src);
                stack.push((src, name));
            }
        }
    }
    Ok(())
}

/// Control inputs on the once-run stateful writes, for replica 0's target.
fn once_controls(rep: &Replication) -> Vec<String> {
    rep.once.iter().map(|o| format!("^{o}")).collect()
}

/// The loss tensor of every replica (`replica_k/<loss>`).
fn replica_losses(rep: &Replication) -> Vec<String> {
    (0..rep.replicas.len())
        .map(|k| replica_name(k, &rep.sidecar.loss))
        .collect()
}

/// Adds asynchronous per-replica updates and train targets to `rep` (see the module docs).
///
/// # Errors
/// [`Error::Replication`] if the replication's record of gradients does not match its graph.
pub fn add_async_updates(rep: &mut Replication) -> Result<AsyncTargets> {
    let replicas = rep.replicas.len();
    let mut nodes = Vec::new();
    let mut train = Vec::with_capacity(replicas);
    for k in 0..replicas {
        let mut updates = Vec::new();
        for g in &rep.gradients {
            let base = update_node(rep, &g.update)?;
            let mut copy = base.clone();
            copy.name = replica_name(k, &format!("{ASYNC_PREFIX}/updates/{}", g.update));
            copy.input = controls_for(
                &with_data_input(&base.input, g.grad_input, &g.per_replica[k])?,
                Some(k),
                &rep.once,
            );
            updates.push(format!("^{}", copy.name));
            nodes.push((
                copy,
                Role::Combine {
                    update: g.update.clone(),
                },
            ));
        }
        if k == 0 {
            updates.extend(once_controls(rep));
        }
        let name = replica_name(k, &format!("{ASYNC_PREFIX}/train"));
        nodes.push((new_node(&name, "NoOp", updates, vec![]), Role::Replica(k)));
        train.push(name);
    }
    for (node, role) in nodes {
        rep.roles.insert(node.name.clone(), role);
        rep.graph_def.node.push(node);
    }
    for (k, t) in train.iter().enumerate() {
        check_independent(&rep.graph_def, &rep.roles, t, Some(k))?;
    }
    Ok(AsyncTargets {
        train,
        loss: replica_losses(rep),
    })
}

/// Op types that create a resource shared by name (variables, accumulators, queues, tables):
/// those with a `container` attribute, which [`isolate_resources`] sets.
const RESOURCE_OPS: &[&str] = &[
    "VarHandleOp",
    "VariableV2",
    "Variable",
    "ConditionalAccumulator",
    "SparseConditionalAccumulator",
    "ResourceConditionalAccumulator",
    "FIFOQueueV2",
    "PaddingFIFOQueueV2",
    "PriorityQueueV2",
    "RandomShuffleQueueV2",
    "HashTableV2",
    "MutableHashTableV2",
    "MutableHashTableOfTensorsV2",
    "MutableDenseHashTableV2",
];

/// Puts every resource `graph_def` creates (variables, accumulators, queues, tables) in the
/// resource container `container`, where its `container` attribute is empty; returns how many
/// nodes were changed. Sessions that share state across masters (`isolate_session_state` off,
/// as between-graph replication needs) then still see only their own run's resources: a
/// resource is found by container and shared name on its device. Functions in the graph's
/// library are not rewritten.
///
/// # Errors
/// [`Error::InvalidArgument`] for an empty `container` or a `container` attribute that does not
/// decode.
pub fn isolate_resources(graph_def: &mut GraphDef, container: &str) -> Result<usize> {
    if container.is_empty() {
        return Err(Error::InvalidArgument {
            what: "resource container".into(),
            reason: "empty: it would leave the resources shared".into(),
        });
    }
    let mut changed = 0;
    for node in &mut graph_def.node {
        if !RESOURCE_OPS.contains(&node.op.as_str()) {
            continue;
        }
        let current = match node.attr.get("container") {
            None => String::new(),
            Some(bytes) => {
                let value =
                    <AttrValue as prost::Message>::decode(bytes.as_slice()).map_err(|e| {
                        Error::InvalidArgument {
                            what: format!("attr `container` of node {}", node.name),
                            reason: format!("not an AttrValue: {e}"),
                        }
                    })?;
                String::from_utf8_lossy(value.s.as_deref().unwrap_or_default()).into_owned()
            }
        };
        if current.is_empty() {
            node.attr
                .insert("container".to_string(), attr::string(container));
            changed += 1;
        }
    }
    Ok(changed)
}

/// The float type (`T`) of an update op.
fn update_type(node: &NodeDef) -> i32 {
    attr::get(node, "T")
        .and_then(|a| a.r#type)
        .unwrap_or(DT_FLOAT)
}

/// Adds accumulators, pushes and the chief's aggregating train op to `rep` (see the module
/// docs). `shared_prefix` makes the accumulators' `shared_name`s unique to this graph, so two
/// sessions on one cluster do not share them.
///
/// # Errors
/// [`Error::Replication`] if the replication's record of gradients does not match its graph.
pub fn add_backup_accumulators(
    rep: &mut Replication,
    shared_prefix: &str,
) -> Result<BackupTargets> {
    let replicas = rep.replicas.len();
    let scalar = |dtype: i32| {
        vec![
            ("dtype", type_attr(dtype)),
            ("shape", attr::shape(TensorShapeProto::default())),
        ]
    };
    let num_required = format!("{BACKUP_PREFIX}/num_required");
    let mut nodes = vec![(
        new_node(&num_required, "Placeholder", vec![], scalar(DT_INT32)),
        Role::Shared,
    )];
    let local_step: Vec<String> = (0..replicas)
        .map(|k| replica_name(k, &format!("{BACKUP_PREFIX}/local_step")))
        .collect();
    for (k, name) in local_step.iter().enumerate() {
        nodes.push((
            new_node(name, "Placeholder", vec![], scalar(DT_INT64)),
            Role::Replica(k),
        ));
    }
    let mut pushes: Vec<Vec<String>> = vec![Vec::new(); replicas];
    let mut applied = Vec::new();
    for g in &rep.gradients {
        let base = update_node(rep, &g.update)?;
        let dtype = update_type(base);
        let role = || Role::Combine {
            update: g.update.clone(),
        };
        let acc = format!("{BACKUP_PREFIX}/updates/{}/accumulator", g.update);
        nodes.push((
            new_node(
                &acc,
                "ConditionalAccumulator",
                vec![],
                vec![
                    ("dtype", type_attr(dtype)),
                    (
                        "shape",
                        attr::shape(TensorShapeProto {
                            dim: vec![],
                            unknown_rank: true,
                        }),
                    ),
                    (
                        "shared_name",
                        attr::string(&format!("{shared_prefix}/{acc}")),
                    ),
                    ("reduction_type", attr::string("MEAN")),
                ],
            ),
            role(),
        ));
        for (k, grad) in g.per_replica.iter().enumerate() {
            let push = replica_name(k, &format!("{BACKUP_PREFIX}/updates/{}/push", g.update));
            nodes.push((
                new_node(
                    &push,
                    "AccumulatorApplyGradient",
                    vec![acc.clone(), local_step[k].clone(), grad.clone()],
                    vec![("dtype", type_attr(dtype))],
                ),
                role(),
            ));
            pushes[k].push(format!("^{push}"));
        }
        let take = format!("{BACKUP_PREFIX}/updates/{}/take", g.update);
        nodes.push((
            new_node(
                &take,
                "AccumulatorTakeGradient",
                vec![acc.clone(), num_required.clone()],
                vec![("dtype", type_attr(dtype))],
            ),
            role(),
        ));
        let mut copy = base.clone();
        copy.name = format!("{BACKUP_PREFIX}/updates/{}", g.update);
        copy.input = controls_for(
            &with_data_input(&base.input, g.grad_input, &take)?,
            None,
            &rep.once,
        );
        applied.push(format!("^{}", copy.name));
        nodes.push((copy, role()));
    }
    let mut push = Vec::with_capacity(replicas);
    for (k, mut deps) in pushes.into_iter().enumerate() {
        if k == 0 {
            deps.extend(once_controls(rep));
        }
        let name = replica_name(k, &format!("{BACKUP_PREFIX}/push"));
        nodes.push((new_node(&name, "NoOp", deps, vec![]), Role::Replica(k)));
        push.push(name);
    }
    let train = format!("{BACKUP_PREFIX}/train");
    nodes.push((new_node(&train, "NoOp", applied, vec![]), Role::Shared));
    for (node, role) in nodes {
        rep.roles.insert(node.name.clone(), role);
        rep.graph_def.node.push(node);
    }
    for (k, p) in push.iter().enumerate() {
        check_independent(&rep.graph_def, &rep.roles, p, Some(k))?;
    }
    check_independent(&rep.graph_def, &rep.roles, &train, None)?;
    Ok(BackupTargets {
        push,
        local_step,
        loss: replica_losses(rep),
        train,
        num_required,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resources_go_into_the_container_unless_they_name_one() {
        let attr = |s: &str| vec![("container", attr::string(s))];
        let mut g = GraphDef {
            node: vec![
                new_node("w", "VarHandleOp", vec![], vec![]),
                new_node("v", "VariableV2", vec![], attr("")),
                new_node("kept", "VarHandleOp", vec![], attr("theirs")),
                new_node("acc", "ConditionalAccumulator", vec![], vec![]),
                new_node("read", "ReadVariableOp", vec!["w".into()], vec![]),
            ],
            ..GraphDef::default()
        };
        assert_eq!(isolate_resources(&mut g, "run-7").unwrap(), 3);
        let container = |name: &str| {
            let n = g.node.iter().find(|n| n.name == name).unwrap();
            n.attr.get("container").map(|b| {
                let v = <AttrValue as prost::Message>::decode(b.as_slice()).unwrap();
                String::from_utf8(v.s.unwrap_or_default()).unwrap()
            })
        };
        assert_eq!(container("w").as_deref(), Some("run-7"));
        assert_eq!(container("v").as_deref(), Some("run-7"));
        assert_eq!(container("acc").as_deref(), Some("run-7"));
        assert_eq!(container("kept").as_deref(), Some("theirs"));
        assert_eq!(container("read"), None, "not a resource op");
        // Idempotent: a second pass changes nothing.
        assert_eq!(isolate_resources(&mut g, "other").unwrap(), 0);
        assert!(isolate_resources(&mut g, "").is_err());
        // A container attr that is not an AttrValue is named.
        g.node[0].attr.insert("container".into(), vec![0xff, 0xff]);
        g.node[0].op = "VarHandleOp".into();
        let e = isolate_resources(&mut g, "x").unwrap_err().to_string();
        assert!(e.contains("node w"), "{e}");
    }

    #[test]
    fn data_input_replacement_skips_control_inputs() {
        let inputs: Vec<String> = ["var", "^ctl", "lr", "grad:1", "m"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let out = with_data_input(&inputs, 2, "replica_1/g").unwrap();
        assert_eq!(out, ["var", "^ctl", "lr", "replica_1/g", "m"]);
        assert!(with_data_input(&inputs, 9, "x").is_err());
    }

    #[test]
    fn controls_follow_the_replica_and_leave_once_writes_to_replica_0() {
        let inputs: Vec<String> = [
            "var",
            "grad",
            "^replica_0/bn/update",
            "^replica_1/bn/update",
            "^moving_mean/assign",
            "^global_step",
            "^replica_x/not_a_replica",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let once = vec!["moving_mean/assign".to_string()];
        assert_eq!(
            controls_for(&inputs, Some(1), &once),
            [
                "var",
                "grad",
                "^replica_1/bn/update",
                "^global_step",
                "^replica_x/not_a_replica"
            ]
        );
        assert_eq!(
            controls_for(&inputs, None, &once),
            ["var", "grad", "^global_step", "^replica_x/not_a_replica"]
        );
    }
}

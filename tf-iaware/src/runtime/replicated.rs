//! A user's own training graph (a GraphDef and its sidecar) replicated data-parallel
//! ([`parallel::replicate`](crate::parallel::replicate)), analysed and placed: replicas on their
//! workers, every variable's colocation group on its parameter server, the gradient combination
//! with the update it feeds, everything else on the plan's global device.

use std::collections::HashMap;
use std::sync::Arc;

use prost::Message;

use crate::cluster::{Cluster, DeviceId};
use crate::error::{Error, Result};
use crate::graph::analyze::{analyze_bytes, analyze_graph, Analyzed};
use crate::graph::Sidecar;
use crate::graph::{Attr, GroupId, NodeId, OpGraph};
use crate::parallel::replicate::{replicate, BatchData, Replication, Role};
use crate::parallel::{DataParallelPlan, VarInfo};
use crate::placer::{resolve, Placement};

/// Op types that hold a variable.
pub(crate) fn is_variable(op: &str) -> bool {
    matches!(op, "VarHandleOp" | "VariableV2" | "Variable")
}

/// Memory a replica of zoo model `name` needs per sample and in all, estimated from its graph
/// at batches 1 and 2 (see [`ReplicaMemory::of_graphs`](crate::parallel::ReplicaMemory::of_graphs)).
///
/// # Errors
/// [`Error::UnknownModel`] for a name not in the zoo; errors building or analysing the graph.
pub fn replica_memory(name: &str) -> Result<crate::parallel::ReplicaMemory> {
    let one = crate::models::build(name, 1, 1)?;
    let two = crate::models::build(name, 2, 1)?;
    let a = analyze_graph(one.net.graph())?;
    let b = analyze_graph(two.net.graph())?;
    Ok(crate::parallel::ReplicaMemory::of_graphs(
        (1, &a.op_graph),
        (2, &b.op_graph),
    ))
}

/// What data-parallel training trains: a zoo model by name, or a graph of the user's own.
#[derive(Clone, Debug)]
pub enum Workload {
    /// A model of the built-in zoo (`models::zoo`), built anew per plan.
    Zoo(String),
    /// A single-tower training graph and its sidecar, replicated per plan.
    Graph(Arc<GraphWorkload>),
}

impl From<&str> for Workload {
    fn from(name: &str) -> Self {
        Workload::Zoo(name.into())
    }
}

impl From<&String> for Workload {
    fn from(name: &String) -> Self {
        Workload::Zoo(name.clone())
    }
}

impl From<&Workload> for Workload {
    fn from(w: &Workload) -> Self {
        w.clone()
    }
}

impl Workload {
    /// A graph workload called `name` (for reports: its file, say) from an analysed graph and
    /// its sidecar (checked against each other; inputs that feed a cross-entropy's labels are
    /// marked one-hot, [`Sidecar::infer_one_hot`]).
    ///
    /// # Errors
    /// [`Error::Sidecar`]/[`Error::UnknownOp`] if the sidecar names ops the graph lacks.
    pub fn graph(name: &str, analyzed: Analyzed, sidecar: Sidecar) -> Result<Self> {
        Self::graph_with(name, analyzed, sidecar, BatchData::Synthetic { seed: 1 })
    }

    /// As [`Workload::graph`], with the batches coming from `data`: a synthetic batch on each
    /// worker (what [`Workload::graph`] chooses, as the zoo does), or placeholders fed every step.
    ///
    /// # Errors
    /// As [`Workload::graph`].
    pub fn graph_with(
        name: &str,
        analyzed: Analyzed,
        mut sidecar: Sidecar,
        data: BatchData,
    ) -> Result<Self> {
        sidecar.check_against(&analyzed.op_graph, std::path::Path::new("the sidecar"))?;
        sidecar.infer_one_hot(&analyzed.op_graph, &analyzed.signatures);
        Ok(Workload::Graph(Arc::new(GraphWorkload {
            name: name.into(),
            analyzed,
            sidecar,
            data,
        })))
    }

    /// What identifies the workload in caches: the zoo model's name, or the graph's name and a
    /// hash of its GraphDef and sidecar inputs.
    pub(crate) fn cache_key(&self) -> String {
        match self {
            Workload::Zoo(n) => n.clone(),
            Workload::Graph(g) => {
                use std::hash::{Hash, Hasher};
                let mut h = std::collections::hash_map::DefaultHasher::new();
                g.analyzed.graph_def.encode_to_vec().hash(&mut h);
                g.sidecar.inputs.hash(&mut h);
                format!("{}-{:016x}", g.name, h.finish())
            }
        }
    }

    /// Memory a replica needs per sample and in all (see
    /// [`ReplicaMemory::of_graphs`](crate::parallel::ReplicaMemory::of_graphs)), from the
    /// replica graph at shares 1 and 2.
    ///
    /// # Errors
    /// [`Error::UnknownModel`] for a zoo name that is not in the zoo; the errors of replicating
    /// or analysing the graph.
    pub fn replica_memory(&self) -> Result<crate::parallel::ReplicaMemory> {
        if let Workload::Zoo(n) = self {
            return replica_memory(n);
        }
        let (one, two) = self.graphs_at_one_and_two()?;
        Ok(crate::parallel::ReplicaMemory::of_graphs(
            (1, &one),
            (2, &two),
        ))
    }

    /// Analytic FLOPs one more sample adds to a replica's step: the graph's work (see
    /// [`op_work`](crate::cost::op_work)) at batch 2 less at batch 1, FLOP (≥ 0). Bounds what a
    /// worker's cores can do, in samples/s.
    ///
    /// # Errors
    /// As [`Workload::replica_memory`].
    pub fn flops_per_sample(&self) -> Result<f64> {
        let (one, two) = self.graphs_at_one_and_two()?;
        let flops = |g: &OpGraph| -> f64 {
            g.node_ids()
                .map(|id| crate::cost::op_work(g, id).flops)
                .sum()
        };
        Ok((flops(&two) - flops(&one)).max(0.0))
    }

    /// The replica graph (a zoo model as built) at batches 1 and 2.
    fn graphs_at_one_and_two(&self) -> Result<(OpGraph, OpGraph)> {
        let g = match self {
            Workload::Zoo(n) => {
                let at = |b: usize| -> Result<OpGraph> {
                    let m = crate::models::build(n, b, 1)?;
                    Ok(analyze_graph(m.net.graph())?.op_graph)
                };
                return Ok((at(1)?, at(2)?));
            }
            Workload::Graph(g) => g,
        };
        let at = |batch: usize| -> Result<OpGraph> {
            let plan = DataParallelPlan {
                strategy: "memory".into(),
                replicas: vec![crate::parallel::Replica {
                    device: "/job:localhost/replica:0/task:0/device:CPU:0".into(),
                    batch,
                }],
                variable_devices: Default::default(),
                global_device: "/job:localhost/replica:0/task:0/device:CPU:0".into(),
                predicted_step_ms: None,
            };
            Ok(replicate_analyzed(g, &plan, |_| Ok(()))?.0.op_graph)
        };
        Ok((at(1)?, at(2)?))
    }

    /// A name for reports: the zoo model's or the graph's.
    pub fn name(&self) -> &str {
        match self {
            Workload::Zoo(n) => n,
            Workload::Graph(g) => &g.name,
        }
    }

    /// The trainable state to place on parameter servers, one entry per colocation group of
    /// variables (a variable and its optimizer slots stay together), with its size.
    ///
    /// # Errors
    /// [`Error::UnknownModel`] for a zoo name that is not in the zoo.
    pub fn variables(&self) -> Result<Vec<VarInfo>> {
        match self {
            Workload::Zoo(n) => crate::models::replicated::variables(n),
            Workload::Graph(g) => Ok(variables(&g.analyzed.op_graph)),
        }
    }
}

/// A single-tower training graph and its sidecar.
#[derive(Debug)]
pub struct GraphWorkload {
    /// Its name in reports.
    pub name: String,
    /// The graph as TensorFlow analysed it.
    pub analyzed: Analyzed,
    /// Its inputs, loss and train op.
    pub sidecar: Sidecar,
    /// Where each replica's batch comes from.
    pub data: BatchData,
}

/// The variables of `graph` by colocation group: named after the group's first variable, sized
/// as all of its variables together (shape × dtype; unknown sizes count 0).
pub fn variables(graph: &OpGraph) -> Vec<VarInfo> {
    let mut out = Vec::new();
    for group in graph.groups() {
        let mut name = None;
        let mut bytes = 0u64;
        for &m in &group.members {
            let node = graph.node(m);
            if !is_variable(&node.op) {
                continue;
            }
            name.get_or_insert_with(|| node.name.clone());
            let elements = match node.attrs.get("shape") {
                Some(Attr::Shape(Some(dims))) => dims
                    .iter()
                    .try_fold(1u64, |a, &d| (d >= 0).then(|| a.saturating_mul(d as u64))),
                _ => None,
            };
            let size = match node.attrs.get("dtype") {
                Some(Attr::Type(t)) => t.base().size_bytes(),
                _ => None,
            };
            bytes = bytes.saturating_add(elements.zip(size).map_or(0, |(e, s)| e * s));
        }
        if let Some(name) = name {
            out.push(VarInfo { name, bytes });
        }
    }
    out
}

/// A graph replicated for a plan, analysed by TensorFlow, with a device for every op.
#[derive(Debug)]
pub struct ReplicatedGraph {
    /// The replicated graph as TensorFlow analysed it.
    pub analyzed: Analyzed,
    /// What each op of it is (replica, combination, global).
    pub replication: Replication,
    /// A device for every op.
    pub placement: Placement,
}

/// Replicates `workload`'s graph for `plan` and places it on `cluster` (whose devices the
/// plan's device strings name).
///
/// # Errors
/// The errors of [`replicate`]; [`Error::Replication`] naming the op when TensorFlow rejects the
/// replicated graph (a batch size baked into a constant shape fails shape inference here);
/// [`Error::MalformedDevice`]/[`Error::UnknownDevice`] for a plan device that names no single
/// device of `cluster`.
pub fn build(
    workload: &GraphWorkload,
    plan: &DataParallelPlan,
    cluster: &Cluster,
) -> Result<ReplicatedGraph> {
    build_with(workload, plan, cluster, |_| Ok(())).map(|(g, ())| g)
}

/// As [`build`], with `extend` adding ops to the replication before TensorFlow sees it (the
/// asynchronous or backup-worker updates of [`parallel::updates`](crate::parallel::updates)).
///
/// # Errors
/// As [`build`]; the errors of `extend`.
pub(crate) fn build_with<T>(
    workload: &GraphWorkload,
    plan: &DataParallelPlan,
    cluster: &Cluster,
    extend: impl FnOnce(&mut Replication) -> Result<T>,
) -> Result<(ReplicatedGraph, T)> {
    let (analyzed, mut replication, extended) = replicate_analyzed(workload, plan, extend)?;
    let (placement, group_spec) = place(&analyzed.op_graph, cluster, &replication, plan)?;
    for v in &mut replication.state {
        v.device = analyzed
            .op_graph
            .id(&v.name)
            .map(|id| group_spec[analyzed.op_graph.node(id).group].clone());
    }
    Ok((
        ReplicatedGraph {
            analyzed,
            replication,
            placement,
        },
        extended,
    ))
}

/// `workload`'s graph replicated for `plan`, extended by `extend`, and analysed by TensorFlow
/// (not placed).
///
/// # Errors
/// As [`build_with`], but for the devices.
fn replicate_analyzed<T>(
    workload: &GraphWorkload,
    plan: &DataParallelPlan,
    extend: impl FnOnce(&mut Replication) -> Result<T>,
) -> Result<(Analyzed, Replication, T)> {
    let single = &workload.analyzed;
    let mut replication = replicate(
        &single.graph_def,
        &single.signatures,
        &workload.sidecar,
        plan,
        workload.data,
    )?;
    let extended = extend(&mut replication)?;
    let bytes = replication.graph_def.encode_to_vec();
    let analyzed = analyze_bytes(&bytes, "the replicated graph").map_err(|e| match e {
        Error::TensorFlow { message, .. } => Error::Replication {
            op: culprit(&message).unwrap_or_else(|| "(see message)".into()),
            reason: format!(
                "TensorFlow rejects the replicated graph (a batch size fixed in a constant \
                 shape?): {message}"
            ),
        },
        other => other,
    })?;
    Ok((analyzed, replication, extended))
}

/// The node a TensorFlow error message names (`{{node NAME}}` or `node 'NAME'`).
fn culprit(message: &str) -> Option<String> {
    let after = message
        .split("{{node ")
        .nth(1)
        .map(|s| s.split("}}").next().unwrap_or(s))
        .or_else(|| {
            message
                .split("node '")
                .nth(1)
                .and_then(|s| s.split('\'').next())
        })?;
    Some(after.trim().to_string())
}

/// A device for every op of the replicated graph: a colocation group with a planned variable
/// goes to that variable's ps; one with a replica's op to that replica's worker; the gradient
/// combination of an update to the update's device; the rest to the plan's global device. Also
/// the plan's device string of every group (what the state's variables report).
///
/// # Errors
/// [`Error::MalformedDevice`]/[`Error::UnknownDevice`] for a plan device that names no single
/// device of `cluster`.
fn place(
    graph: &OpGraph,
    cluster: &Cluster,
    replication: &Replication,
    plan: &DataParallelPlan,
) -> Result<(Placement, Vec<String>)> {
    let role_of = |m: NodeId| replication.roles.get(&graph.node(m).name);
    let mut group_device: Vec<Option<String>> = vec![None; graph.groups().len()];
    let mut node_group: HashMap<&str, GroupId> = HashMap::new();
    for (g, group) in graph.enumerate_groups() {
        let mut device = None;
        for &m in &group.members {
            node_group.insert(graph.node(m).name.as_str(), g);
            if let Some(d) = plan.variable_devices.get(&graph.node(m).name) {
                device = Some(d.clone());
                break;
            }
        }
        if device.is_none() {
            device = group.members.iter().find_map(|&m| match role_of(m) {
                Some(Role::Replica(k)) => Some(replication.replicas[*k].device.clone()),
                _ => None,
            });
        }
        group_device[g] = device;
    }
    let mut specs: Vec<String> = Vec::with_capacity(graph.groups().len());
    let mut ids: Vec<DeviceId> = Vec::with_capacity(graph.groups().len());
    let mut known: HashMap<String, DeviceId> = HashMap::new();
    for (g, group) in graph.groups().iter().enumerate() {
        let device = group_device[g].clone().or_else(|| {
            group.members.iter().find_map(|&m| match role_of(m) {
                Some(Role::Combine { update }) => node_group
                    .get(update.as_str())
                    .and_then(|&u| group_device[u].clone()),
                _ => None,
            })
        });
        let device = device.unwrap_or_else(|| plan.global_device.clone());
        let id = match known.get(&device) {
            Some(&id) => id,
            None => {
                let op = group
                    .members
                    .first()
                    .map_or("", |&m| graph.node(m).name.as_str());
                let id = resolve::device(cluster, op, &device)?;
                known.insert(device.clone(), id);
                id
            }
        };
        ids.push(id);
        specs.push(device);
    }
    Ok((
        Placement::from_groups(&plan.strategy, graph, cluster, &ids)?,
        specs,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flops_per_sample_grow_with_the_model() {
        let mlp = Workload::from("mlp").flops_per_sample().unwrap();
        let lenet = Workload::from("lenet").flops_per_sample().unwrap();
        assert!(mlp > 0.0 && lenet > mlp, "mlp {mlp:.3e}, lenet {lenet:.3e}");
        assert!(Workload::from("no-such-model").flops_per_sample().is_err());
    }
}

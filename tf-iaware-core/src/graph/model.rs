//! [`OpGraph`]: a TensorFlow graph as plain data — what placement, cost and simulation need,
//! with no TensorFlow handle. Build it from TensorFlow with `tf_iaware::graph::analyze` or by hand
//! with [`OpGraphBuilder`](super::OpGraphBuilder) (tests, synthetic benchmarks).

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use super::device_type::DeviceType;
use super::dtype::DType;
use crate::error::{Error, Result};

crate::index::index_type!(
    /// Index of a node in [`OpGraph::nodes`]; serialised as its number.
    NodeId
);
crate::index::index_type!(
    /// Index of a colocation group in [`OpGraph::groups`]; serialised as its number.
    GroupId
);

/// One output tensor of an op.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TensorInfo {
    /// Element type.
    pub dtype: DType,
    /// Dimensions (`-1` unknown), `None` when even the rank is unknown.
    pub shape: Option<Vec<i64>>,
}

impl TensorInfo {
    /// Size in bytes when the dtype has a fixed size and every dimension is known.
    pub(crate) fn bytes(&self) -> Option<u64> {
        let elem = self.dtype.size_bytes()?;
        let dims = self.shape.as_ref()?;
        dims.iter()
            .try_fold(elem, |acc, &d| (d >= 0).then(|| acc * d as u64))
    }

    /// Number of elements when every dimension is known.
    pub fn elements(&self) -> Option<u64> {
        let dims = self.shape.as_ref()?;
        dims.iter()
            .try_fold(1u64, |acc, &d| (d >= 0).then(|| acc * d as u64))
    }
}

/// A decoded attribute value (the kinds cost models and colocation read).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Attr {
    /// An integer (`i`).
    Int(i64),
    /// A float (`f`).
    Float(f32),
    /// A boolean (`b`).
    Bool(bool),
    /// A string (`s`, lossily decoded as UTF-8).
    Str(String),
    /// A data type (`type`).
    Type(DType),
    /// A shape (`shape`): dimensions (`-1` unknown), `None` for unknown rank.
    Shape(Option<Vec<i64>>),
    /// A list of integers.
    Ints(Vec<i64>),
    /// A list of strings.
    Strs(Vec<String>),
    /// A list of data types.
    Types(Vec<DType>),
    /// A kind tf-iaware does not read (tensor, function, …).
    Other,
}

/// A data input of a node: output `output` of node `node`, arriving with type `dtype`
/// (the consumer's declared input type — a reference type for TF1 `Assign`, say).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Input {
    /// The producing node.
    pub node: NodeId,
    /// Index of the output of `node`.
    pub output: usize,
    /// Type of the tensor as the consumer declares it.
    pub dtype: DType,
}

/// One op of the graph.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OpNode {
    /// Name of the op, unique in the graph.
    pub name: String,
    /// Op type (`MatMul`, `Conv2D`, …).
    pub op: String,
    /// Device requested in the GraphDef (may be empty or partial).
    pub requested_device: String,
    /// Data inputs, in order.
    pub inputs: Vec<Input>,
    /// Nodes that must run before this one (`^name` inputs).
    pub control_inputs: Vec<NodeId>,
    /// Output tensors, in order.
    pub outputs: Vec<TensorInfo>,
    /// The attributes it reads, by name.
    pub attrs: BTreeMap<String, Attr>,
    /// Device types with a registered kernel (`[Cpu, Gpu]`); empty when unknown or for a
    /// function call (no restriction: analysis refuses a registered op with no kernel at all).
    pub kernel_device_types: Vec<DeviceType>,
    /// Colocation group (filled by the builder).
    pub group: GroupId,
}

impl OpNode {
    /// Whether a kernel for this op is registered for `device_type`. Unknown kernels allow all,
    /// and so does TensorFlow's `DEFAULT` device type (kernels such as `NoOp` registered for
    /// every device).
    pub(crate) fn has_kernel_for(&self, device_type: &DeviceType) -> bool {
        self.kernel_device_types.is_empty()
            || self
                .kernel_device_types
                .iter()
                .any(|t| t == device_type || *t == DeviceType::Default)
    }

    /// The kernel device types joined by `sep` (`CPU, GPU`), for messages.
    pub(crate) fn kernel_list(&self, sep: &str) -> String {
        let names: Vec<&str> = self
            .kernel_device_types
            .iter()
            .map(DeviceType::as_str)
            .collect();
        names.join(sep)
    }

    /// Integer-list attribute (`strides`, `ksize`).
    pub(crate) fn attr_ints(&self, name: &str) -> Option<&[i64]> {
        match self.attrs.get(name)? {
            Attr::Ints(v) => Some(v),
            _ => None,
        }
    }

    /// Boolean attribute (`transpose_a`).
    pub(crate) fn attr_bool(&self, name: &str) -> Option<bool> {
        match self.attrs.get(name)? {
            Attr::Bool(b) => Some(*b),
            _ => None,
        }
    }
}

/// A set of ops TensorFlow's placer keeps on one device: the unit of placement.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ColocationGroup {
    /// Name of the group's first member in graph order (what `loc:@…` would name).
    pub name: String,
    /// Nodes of the group, in graph order.
    pub members: Vec<NodeId>,
    /// First non-empty requested device among the members.
    pub requested_device: Option<String>,
}

/// A TensorFlow graph as plain data, with colocation groups and consumer lists precomputed.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct OpGraph {
    pub(super) nodes: Vec<OpNode>,
    pub(super) groups: Vec<ColocationGroup>,
    #[serde(skip)]
    pub(super) by_name: HashMap<String, NodeId>,
    /// For each node, the nodes that consume it (data or control), deduplicated.
    pub(super) consumers: Vec<Vec<NodeId>>,
}

impl OpGraph {
    /// All nodes, in GraphDef order.
    pub fn nodes(&self) -> &[OpNode] {
        &self.nodes
    }

    /// The node with id `id`.
    ///
    /// # Panics
    /// If `id` is from a larger graph (ids of this graph, from [`OpGraph::id`],
    /// [`OpGraph::node_id`] or [`OpGraph::node_ids`], are always in range).
    pub fn node(&self, id: NodeId) -> &OpNode {
        &self.nodes[id.index()]
    }

    /// The node with id `id`, or `None` when `id` is out of range (an id of another graph).
    pub fn get(&self, id: NodeId) -> Option<&OpNode> {
        self.nodes.get(id.index())
    }

    /// The id of the node at position `index` (GraphDef order).
    ///
    /// # Errors
    /// [`Error::BadId`] naming `index` when the graph has no node there.
    pub fn node_id(&self, index: usize) -> Result<NodeId> {
        if index < self.nodes.len() {
            Ok(NodeId::new(index))
        } else {
            Err(Error::BadId {
                kind: "node",
                id: index,
                len: self.nodes.len(),
            })
        }
    }

    /// Ids of all nodes, in GraphDef order.
    pub fn node_ids(&self) -> impl DoubleEndedIterator<Item = NodeId> + ExactSizeIterator + Clone {
        NodeId::range(self.nodes.len())
    }

    /// The nodes with their ids, in GraphDef order.
    pub(crate) fn enumerate(
        &self,
    ) -> impl DoubleEndedIterator<Item = (NodeId, &OpNode)> + ExactSizeIterator + Clone {
        self.node_ids().zip(&self.nodes)
    }

    /// Number of nodes.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    /// Whether the graph has no nodes.
    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// Id of the node called `name`.
    pub fn id(&self, name: &str) -> Option<NodeId> {
        self.by_name.get(name).copied()
    }

    /// Id of the node called `name`, or [`Error::UnknownOp`] with `context`.
    pub fn require(&self, name: &str, context: &str) -> Result<NodeId> {
        self.id(name).ok_or_else(|| Error::UnknownOp {
            context: context.into(),
            op: name.into(),
        })
    }

    /// The nodes running `targets` runs: the targets and everything they depend on through data
    /// and control inputs (as TensorFlow prunes a `Session::run`), by id.
    pub fn ancestors(&self, targets: &[NodeId]) -> Vec<bool> {
        let mut seen = vec![false; self.nodes.len()];
        let mut stack: Vec<NodeId> = targets.to_vec();
        while let Some(id) = stack.pop() {
            if std::mem::replace(&mut seen[id.index()], true) {
                continue;
            }
            let node = &self.nodes[id.index()];
            stack.extend(
                node.inputs
                    .iter()
                    .map(|i| i.node)
                    .filter(|p| !seen[p.index()]),
            );
            stack.extend(
                node.control_inputs
                    .iter()
                    .copied()
                    .filter(|p| !seen[p.index()]),
            );
        }
        seen
    }

    /// Colocation groups; every node is in exactly one.
    pub fn groups(&self) -> &[ColocationGroup] {
        &self.groups
    }

    /// The colocation group with id `id`.
    ///
    /// # Panics
    /// If `id` is from a graph with more groups (as [`OpGraph::node`]).
    pub(crate) fn group(&self, id: GroupId) -> &ColocationGroup {
        &self.groups[id.index()]
    }

    /// The id of the colocation group at position `index`.
    ///
    /// # Errors
    /// [`Error::BadId`] naming `index` when the graph has no group there.
    pub fn group_id(&self, index: usize) -> Result<GroupId> {
        if index < self.groups.len() {
            Ok(GroupId::new(index))
        } else {
            Err(Error::BadId {
                kind: "colocation group",
                id: index,
                len: self.groups.len(),
            })
        }
    }

    /// Ids of all colocation groups.
    pub(crate) fn group_ids(
        &self,
    ) -> impl DoubleEndedIterator<Item = GroupId> + ExactSizeIterator + Clone {
        GroupId::range(self.groups.len())
    }

    /// The colocation groups with their ids.
    pub fn enumerate_groups(
        &self,
    ) -> impl DoubleEndedIterator<Item = (GroupId, &ColocationGroup)> + ExactSizeIterator + Clone
    {
        self.group_ids().zip(&self.groups)
    }

    /// Consumers (data and control) of `id`.
    pub fn consumers(&self, id: NodeId) -> &[NodeId] {
        &self.consumers[id.index()]
    }

    /// Producers (data and control) of `id`, deduplicated, in input order.
    pub(crate) fn producers(&self, id: NodeId) -> Vec<NodeId> {
        let n = &self.nodes[id.index()];
        let mut out: Vec<NodeId> = Vec::with_capacity(n.inputs.len() + n.control_inputs.len());
        for p in n
            .inputs
            .iter()
            .map(|i| i.node)
            .chain(n.control_inputs.iter().copied())
        {
            if !out.contains(&p) {
                out.push(p);
            }
        }
        out
    }

    /// Bytes of the tensor flowing along input `input` of `id` (0 when unknown or a handle).
    pub(crate) fn input_bytes(&self, id: NodeId, input: usize) -> u64 {
        let i = &self.nodes[id.index()].inputs[input];
        self.nodes[i.node.index()]
            .outputs
            .get(i.output)
            .and_then(TensorInfo::bytes)
            .unwrap_or(0)
    }

    /// A topological order (producers first). Loop back-edges (inputs from `NextIteration`) are
    /// ignored, as TensorFlow's executor does; any other cycle is an error naming a node on it.
    ///
    /// # Errors
    /// [`Error::InvalidGraph`] on a cycle that is not a loop back-edge.
    pub fn topo_order(&self) -> Result<Vec<NodeId>> {
        let n = self.nodes.len();
        let mut indegree = vec![0usize; n];
        for id in self.node_ids() {
            indegree[id.index()] = self.blocking_producers(id).count();
        }
        let mut ready: Vec<NodeId> = self
            .node_ids()
            .rev()
            .filter(|i| indegree[i.index()] == 0)
            .collect();
        let mut order = Vec::with_capacity(n);
        while let Some(id) = ready.pop() {
            order.push(id);
            for &c in &self.consumers[id.index()] {
                if self.is_back_edge(id) {
                    continue;
                }
                indegree[c.index()] -= 1;
                if indegree[c.index()] == 0 {
                    ready.push(c);
                }
            }
        }
        if order.len() != n {
            let stuck = (0..n).find(|&i| indegree[i] > 0).unwrap_or(0);
            return Err(Error::InvalidGraph {
                node: self.nodes[stuck].name.clone(),
                reason: "is on a cycle that is not a while-loop back-edge".into(),
            });
        }
        Ok(order)
    }

    fn is_back_edge(&self, producer: NodeId) -> bool {
        self.nodes[producer.index()].op == "NextIteration"
    }

    fn blocking_producers(&self, id: NodeId) -> impl Iterator<Item = NodeId> + '_ {
        self.producers(id)
            .into_iter()
            .filter(move |&p| !self.is_back_edge(p))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::OpGraphBuilder;

    fn chain() -> OpGraph {
        let mut b = OpGraphBuilder::new();
        let x = b.add("x", "Placeholder").unwrap();
        b.output(x, DType::FLOAT, Some(vec![32, 10]));
        let y = b.add("y", "Relu").unwrap();
        b.output(y, DType::FLOAT, Some(vec![32, 10]));
        b.connect(x, 0, y);
        let z = b.add("z", "NoOp").unwrap();
        b.control(y, z);
        b.build().unwrap()
    }

    #[test]
    fn topo_order_and_bytes() {
        let g = chain();
        let [x, y, z] = [0, 1, 2].map(NodeId::new);
        assert_eq!(g.topo_order().unwrap(), vec![x, y, z]);
        assert_eq!(g.input_bytes(y, 0), 32 * 10 * 4);
        assert_eq!(g.consumers(y), &[z]);
        assert_eq!(g.groups().len(), 3);
    }

    #[test]
    fn duplicate_names_and_cycles_are_errors() {
        let mut b = OpGraphBuilder::new();
        let a = b.add("a", "NoOp").unwrap();
        assert!(matches!(
            b.add("a", "NoOp"),
            Err(Error::InvalidGraph { .. })
        ));
        let bb = b.add("b", "NoOp").unwrap();
        b.control(a, bb);
        b.control(bb, a);
        let g = b.build().unwrap();
        assert!(matches!(g.topo_order(), Err(Error::InvalidGraph { .. })));
    }

    #[test]
    fn ids_from_user_numbers_are_checked() {
        let g = chain();
        assert_eq!(g.node_id(1).unwrap(), g.id("y").unwrap());
        let err = g.node_id(3).unwrap_err();
        assert!(
            matches!(
                err,
                Error::BadId {
                    kind: "node",
                    id: 3,
                    len: 3
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("node 3"), "{err}");
        assert!(g.get(NodeId::new(3)).is_none());
        assert!(g.group_id(2).is_ok() && g.group_id(3).is_err());
        assert_eq!(g.node_ids().len(), 3);
        // Serialised as plain numbers, as before.
        assert_eq!(serde_json::to_string(&g.id("z").unwrap()).unwrap(), "2");
    }

    #[test]
    fn inputs_from_another_builder_are_errors() {
        let mut other = OpGraphBuilder::new();
        for name in ["a", "b", "c"] {
            other.add(name, "NoOp").unwrap();
        }
        let far = other.id("c").unwrap();
        let mut b = OpGraphBuilder::new();
        let x = b.add("x", "NoOp").unwrap();
        b.node_mut(x).control_inputs.push(far);
        assert!(matches!(b.build(), Err(Error::InvalidGraph { .. })));
    }
}

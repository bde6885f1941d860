//! [`OpGraphBuilder`]: an [`OpGraph`] built node by node (by the GraphDef decoder, tests and
//! synthetic benchmarks), checked, with its colocation groups and consumer lists derived.

use std::collections::{BTreeMap, HashMap};

use super::colocation;
use super::dtype::DType;
use super::model::{GroupId, Input, NodeId, OpGraph, OpNode, TensorInfo};
use crate::error::{Error, Result};

/// Builds an [`OpGraph`] node by node, then derives colocation groups and consumer lists.
#[derive(Debug, Default)]
pub struct OpGraphBuilder {
    nodes: Vec<OpNode>,
    by_name: HashMap<String, NodeId>,
}

impl OpGraphBuilder {
    /// An empty builder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an op with no inputs, no outputs and no attributes; returns its id.
    ///
    /// # Errors
    /// [`Error::InvalidGraph`] if the name is already taken or empty.
    pub fn add(&mut self, name: &str, op: &str) -> Result<NodeId> {
        if name.is_empty() {
            return Err(Error::InvalidGraph {
                node: name.into(),
                reason: "empty node name".into(),
            });
        }
        if self.by_name.contains_key(name) {
            return Err(Error::InvalidGraph {
                node: name.into(),
                reason: "duplicate node name".into(),
            });
        }
        let id = NodeId::new(self.nodes.len());
        self.nodes.push(OpNode {
            name: name.into(),
            op: op.into(),
            requested_device: String::new(),
            inputs: Vec::new(),
            control_inputs: Vec::new(),
            outputs: Vec::new(),
            attrs: BTreeMap::new(),
            kernel_device_types: Vec::new(),
            group: GroupId::new(0),
        });
        self.by_name.insert(name.into(), id);
        Ok(id)
    }

    /// Mutable access to a node added earlier.
    ///
    /// # Panics
    /// If `id` was not returned by this builder (the other methods taking ids, likewise).
    pub fn node_mut(&mut self, id: NodeId) -> &mut OpNode {
        &mut self.nodes[id.index()]
    }

    /// Id of a node added earlier.
    pub(crate) fn id(&self, name: &str) -> Option<NodeId> {
        self.by_name.get(name).copied()
    }

    /// Adds output `output` of `src` as the next data input of `dst`, typed as `src`'s output
    /// (or float when `src` declares no outputs yet).
    pub fn connect(&mut self, src: NodeId, output: usize, dst: NodeId) {
        let dtype = self.nodes[src.index()]
            .outputs
            .get(output)
            .map_or(DType::FLOAT, |t| t.dtype);
        self.nodes[dst.index()].inputs.push(Input {
            node: src,
            output,
            dtype,
        });
    }

    /// Adds a control edge `src → dst`.
    pub fn control(&mut self, src: NodeId, dst: NodeId) {
        let dst = &mut self.nodes[dst.index()];
        if !dst.control_inputs.contains(&src) {
            dst.control_inputs.push(src);
        }
    }

    /// Appends an output tensor to `id`.
    pub fn output(&mut self, id: NodeId, dtype: DType, shape: Option<Vec<i64>>) {
        self.nodes[id.index()]
            .outputs
            .push(TensorInfo { dtype, shape });
    }

    /// Finishes the graph: checks inputs, forms colocation groups as TensorFlow's placer does.
    ///
    /// # Errors
    /// [`Error::InvalidGraph`] for an input naming a missing output or a `_class` naming a
    /// missing node.
    pub fn build(mut self) -> Result<OpGraph> {
        let n = self.nodes.len();
        let mut consumers: Vec<Vec<NodeId>> = vec![Vec::new(); n];
        for (id, node) in NodeId::range(n).zip(&self.nodes) {
            if let Some(p) = node
                .inputs
                .iter()
                .map(|i| i.node)
                .chain(node.control_inputs.iter().copied())
                .find(|p| p.index() >= n)
            {
                return Err(Error::InvalidGraph {
                    node: node.name.clone(),
                    reason: format!(
                        "has an input from node id {p}, but the graph has {n} nodes \
                         (an id from another builder)"
                    ),
                });
            }
            for input in &node.inputs {
                let src = &self.nodes[input.node.index()];
                if !src.outputs.is_empty() && input.output >= src.outputs.len() {
                    return Err(Error::InvalidGraph {
                        node: node.name.clone(),
                        reason: format!(
                            "reads output {} of `{}`, which has {}",
                            input.output,
                            src.name,
                            src.outputs.len()
                        ),
                    });
                }
            }
            for p in node
                .inputs
                .iter()
                .map(|i| i.node)
                .chain(node.control_inputs.iter().copied())
            {
                let c = &mut consumers[p.index()];
                if !c.contains(&id) {
                    c.push(id);
                }
            }
        }
        let groups = colocation::groups(&self.nodes, &self.by_name)?;
        for (g, group) in GroupId::range(groups.len()).zip(&groups) {
            for &m in &group.members {
                self.nodes[m.index()].group = g;
            }
        }
        Ok(OpGraph {
            nodes: self.nodes,
            groups,
            by_name: self.by_name,
            consumers,
        })
    }
}

//! Colocation groups as TensorFlow's placer forms them: `_class` attributes (`loc:@name`),
//! reference-typed edges and resource-handle edges all join the two ops into one group.

use std::collections::HashMap;

use super::model::{Attr, ColocationGroup, NodeId, OpNode};
use crate::error::{Error, Result};

/// Union-find with path halving.
struct Sets(Vec<usize>);

impl Sets {
    fn find(&mut self, mut x: usize) -> usize {
        while self.0[x] != x {
            self.0[x] = self.0[self.0[x]];
            x = self.0[x];
        }
        x
    }

    fn union(&mut self, a: usize, b: usize) {
        let (ra, rb) = (self.find(a), self.find(b));
        // Keep the smaller id as root so a group is named after its first member.
        if ra < rb {
            self.0[rb] = ra;
        } else {
            self.0[ra] = rb;
        }
    }
}

/// Groups of `nodes` that must share a device, in order of their first member.
pub(crate) fn groups(
    nodes: &[OpNode],
    by_name: &HashMap<String, NodeId>,
) -> Result<Vec<ColocationGroup>> {
    let mut sets = Sets((0..nodes.len()).collect());
    for (id, node) in nodes.iter().enumerate() {
        if let Some(attr) = node.attrs.get("_class") {
            let Attr::Strs(classes) = attr else {
                return Err(Error::BadAttr {
                    node: node.name.clone(),
                    attr: "_class".into(),
                    reason: "expected a list of strings".into(),
                });
            };
            for class in classes {
                let Some(target) = class.strip_prefix("loc:@") else {
                    continue;
                };
                let other = by_name.get(target).ok_or_else(|| Error::InvalidGraph {
                    node: node.name.clone(),
                    reason: format!(
                        "_class asks for colocation with `{target}`, which is not in the graph"
                    ),
                })?;
                sets.union(id, other.index());
            }
        }
        for input in &node.inputs {
            if input.dtype.is_ref() || input.dtype.is_resource() {
                sets.union(id, input.node.index());
            }
        }
    }
    let mut index: HashMap<usize, usize> = HashMap::new();
    let mut out: Vec<ColocationGroup> = Vec::new();
    for (id, node) in nodes.iter().enumerate() {
        let root = sets.find(id);
        let g = *index.entry(root).or_insert_with(|| {
            out.push(ColocationGroup {
                name: nodes[root].name.clone(),
                members: Vec::new(),
                requested_device: None,
            });
            out.len() - 1
        });
        out[g].members.push(NodeId::new(id));
        if out[g].requested_device.is_none() && !node.requested_device.is_empty() {
            out[g].requested_device = Some(node.requested_device.clone());
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use crate::graph::dtype::DType;
    use crate::graph::model::Attr;
    use crate::graph::OpGraphBuilder;

    #[test]
    fn resource_ref_and_class_edges_colocate() {
        let mut b = OpGraphBuilder::new();
        let v = b.add("v", "VarHandleOp").unwrap();
        b.output(v, DType::RESOURCE, Some(vec![]));
        let read = b.add("v/read", "ReadVariableOp").unwrap();
        b.connect(v, 0, read);
        let r = b.add("r", "VariableV2").unwrap();
        b.output(r, DType(101), Some(vec![2]));
        let assign = b.add("r/Assign", "Assign").unwrap();
        b.connect(r, 0, assign);
        let slot = b.add("r/Momentum", "VariableV2").unwrap();
        b.node_mut(slot)
            .attrs
            .insert("_class".into(), Attr::Strs(vec!["loc:@r".into()]));
        let other = b.add("other", "Relu").unwrap();
        b.output(other, DType::FLOAT, None);
        let g = b.build().unwrap();
        assert_eq!(g.groups().len(), 3);
        assert_eq!(g.node(read).group, g.node(v).group);
        assert_eq!(g.node(assign).group, g.node(r).group);
        assert_eq!(g.node(slot).group, g.node(r).group);
        assert_eq!(g.group(g.node(slot).group).name, "r");
        assert_ne!(g.node(other).group, g.node(v).group);
    }

    #[test]
    fn class_naming_a_missing_node_is_an_error() {
        let mut b = OpGraphBuilder::new();
        let a = b.add("a", "NoOp").unwrap();
        b.node_mut(a)
            .attrs
            .insert("_class".into(), Attr::Strs(vec!["loc:@ghost".into()]));
        let err = b.build().unwrap_err().to_string();
        assert!(err.contains("ghost"), "{err}");
    }
}

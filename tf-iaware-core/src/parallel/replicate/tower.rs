//! Writes the replicated graph's ops from the original's, in the original's order: every tower
//! op as one copy per replica (`replica_k/…`, wired to the same replica's copies), every other op
//! once, reading replica 0's copy of a replicated tensor, and each optimizer update reading the
//! combination of its replicas' gradients.

use prost::Message;

use super::aggregate::{combine_gradient, combine_loss, Shares};
use super::baked::{rewrite_baked, Baked};
use super::batch::set_batch;
use super::select::{Selection, Update};
use super::{replica_name, Output, Role, UpdateGradients};
use crate::error::Result;
use crate::proto::attr::{self, DT_FLOAT};
use crate::proto::{GraphDef, NodeDef};

/// What the writing needs: the original graph, what of it is replicated, and the shares.
pub(super) struct Tower<'a> {
    pub(super) def: &'a GraphDef,
    pub(super) selection: &'a Selection<'a>,
    pub(super) baked: &'a [Option<Baked>],
    pub(super) shares: &'a Shares<'a>,
    /// Type of the loss (of its combination).
    pub(super) loss_type: i32,
}

impl Tower<'_> {
    /// Writes every op of the original graph into `out`; returns each update's gradients.
    ///
    /// # Errors
    /// [`Error::Replication`](crate::Error::Replication) for a sidecar input whose placeholder
    /// has no batch dimension.
    pub(super) fn write(&self, out: &mut Output) -> Result<Vec<UpdateGradients>> {
        let mut gradients = Vec::new();
        for i in 0..self.def.node.len() {
            if self.selection.replicated[i] {
                self.copies(i, out)?;
                if i == self.selection.loss {
                    let name = &self.def.node[i].name;
                    combine_loss(out, self.shares, name, self.loss_type);
                }
            } else {
                gradients.extend(self.shared(i, out));
            }
        }
        Ok(gradients)
    }

    /// One copy of tower op `i` per replica.
    fn copies(&self, i: usize, out: &mut Output) -> Result<()> {
        let s = self.selection;
        let node = &self.def.node[i];
        for (k, r) in self.shares.replicas.iter().enumerate() {
            let mut copy = node.clone();
            copy.name = replica_name(k, &node.name);
            copy.input = s.edges[i]
                .iter()
                .map(|e| {
                    let src = &self.def.node[e.src].name;
                    let name = if s.replicated[e.src] {
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
            self.relocate_class(&mut copy, k);
            if let Some(kind) = self.baked[i] {
                rewrite_baked(&mut copy, kind, r.batch as i64);
            }
            if s.inputs.contains_key(&i) {
                set_batch(&mut copy, r.batch as i64)?;
            }
            out.push(copy, Role::Replica(k));
        }
        Ok(())
    }

    /// Op `i` kept once (an update preceded by the combination of its gradients); the update's
    /// gradients, if it is one.
    fn shared(&self, i: usize, out: &mut Output) -> Option<UpdateGradients> {
        let node = &self.def.node[i];
        let combined = self.selection.update(i).map(|u| self.combine(u, node, out));
        let mut copy = node.clone();
        let grad_of = combined
            .as_ref()
            .map(|(g, sum)| (g.grad_input, sum.as_str()));
        copy.input = self.shared_inputs(i, grad_of);
        self.relocate_class(&mut copy, 0);
        out.push(copy, Role::Shared);
        combined.map(|(g, _)| g)
    }

    /// Adds the combination of update `u`'s gradients; returns them and the combined tensor.
    fn combine(&self, u: &Update, node: &NodeDef, out: &mut Output) -> (UpdateGradients, String) {
        let s = self.selection;
        let port = s.edges[u.node]
            .iter()
            .filter(|e| !e.control)
            .nth(u.grad_input)
            .map(|e| e.port.clone())
            .unwrap_or_default();
        let src = &self.def.node[u.grad_src].name;
        let dtype = attr::get(node, "T")
            .and_then(|a| a.r#type)
            .unwrap_or(DT_FLOAT);
        let parts: Vec<String> = (0..self.shares.replicas.len())
            .map(|k| {
                if s.replicated[u.grad_src] {
                    format!("{}{port}", replica_name(k, src))
                } else {
                    format!("{src}{port}")
                }
            })
            .collect();
        let combined = combine_gradient(out, self.shares, &node.name, &parts, dtype);
        let gradients = UpdateGradients {
            update: node.name.clone(),
            grad_input: u.grad_input,
            per_replica: parts,
        };
        (gradients, combined)
    }

    /// Inputs of shared op `i`: replica 0's copy of a replicated tensor (the loss: the combined
    /// one), every replica's copy of a replicated control input, and for an update the combined
    /// gradient at its data input `grad_of.0`.
    fn shared_inputs(&self, i: usize, grad_of: Option<(usize, &str)>) -> Vec<String> {
        let s = self.selection;
        let mut data_index = 0;
        let mut v = Vec::new();
        for e in &s.edges[i] {
            let src = &self.def.node[e.src].name;
            if e.control {
                if s.replicated[e.src] {
                    let k = self.shares.replicas.len();
                    v.extend((0..k).map(|k| format!("^{}", replica_name(k, src))));
                } else {
                    v.push(format!("^{src}"));
                }
                continue;
            }
            let text = match grad_of {
                Some((at, combined)) if data_index == at => combined.to_string(),
                _ if e.src == s.loss => format!("{src}{}", e.port),
                _ if s.replicated[e.src] => format!("{}{}", replica_name(0, src), e.port),
                _ => format!("{src}{}", e.port),
            };
            v.push(text);
            data_index += 1;
        }
        v
    }

    /// Points `_class` entries (`loc:@op`) at replicated ops to replica `k`'s copies.
    fn relocate_class(&self, node: &mut NodeDef, k: usize) {
        let Some(mut class) = attr::get(node, "_class") else {
            return;
        };
        let Some(list) = class.list.as_mut() else {
            return;
        };
        let mut changed = false;
        for s in &mut list.s {
            let text = String::from_utf8_lossy(s).into_owned();
            if let Some(target) = text.strip_prefix("loc:@") {
                let index = &self.selection.index;
                if index
                    .get(target)
                    .is_some_and(|&t| self.selection.replicated[t])
                {
                    *s = format!("loc:@{}", replica_name(k, target)).into_bytes();
                    changed = true;
                }
            }
        }
        if changed {
            node.attr.insert("_class".into(), class.encode_to_vec());
        }
    }
}

//! [`Dag`]: the dependency structure of an [`OpGraph`] in compact form (CSR arrays of `u32`
//! indices) with the bytes each edge carries, and a deterministic topological order. Placers and
//! the simulator walk it in their hot loops instead of the graph's string-keyed nodes.

use crate::error::{Error, Result};
use crate::graph::{NodeId, OpGraph};

/// `Edge::output` of a control edge.
pub const CONTROL: u32 = u32::MAX;

/// One dependency, seen from either end: `node` is the other end (the producer in
/// `Dag::preds`, the consumer in `Dag::succs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Edge {
    /// The node at the other end.
    pub node: NodeId,
    /// Output index of the producer carried by the edge, or [`CONTROL`].
    pub output: u32,
    /// Bytes of the tensor (0 for control edges, resource handles and unknown shapes).
    pub bytes: u64,
}

/// Dependencies of a graph: data edges (deduplicated per producer output and consumer) and control
/// edges (dropped where a data edge already orders the pair). `NextIteration` back-edges of while
/// loops are left out, as TensorFlow's executor starts without them.
#[derive(Clone, Debug, Default)]
pub(crate) struct Dag {
    pred_off: Vec<u32>,
    preds: Vec<Edge>,
    succ_off: Vec<u32>,
    succs: Vec<Edge>,
    topo: Vec<NodeId>,
    pos: Vec<u32>,
}

impl Dag {
    /// Builds the dependency structure of `graph`.
    ///
    /// # Errors
    /// [`Error::InvalidGraph`] naming a node on a cycle that is not a loop back-edge, or if the
    /// graph has more than `u32::MAX - 1` nodes.
    pub(crate) fn new(graph: &OpGraph) -> Result<Dag> {
        Dag::build(graph, None)
    }

    /// As [`Dag::new`], keeping only edges between `active` nodes: the others stay as isolated
    /// nodes (ops a training step does not run).
    ///
    /// # Errors
    /// As [`Dag::new`].
    pub(crate) fn new_active(graph: &OpGraph, active: &[bool]) -> Result<Dag> {
        Dag::build(graph, Some(active))
    }

    fn build(graph: &OpGraph, active: Option<&[bool]>) -> Result<Dag> {
        let on = |i: NodeId| active.is_none_or(|a| a[i.index()]);
        let n = graph.len();
        if n >= u32::MAX as usize {
            return Err(Error::InvalidGraph {
                node: graph.nodes()[0].name.clone(),
                reason: format!(
                    "graph has {n} nodes; at most {} are supported",
                    u32::MAX - 1
                ),
            });
        }
        let back = |p: NodeId| graph.node(p).op == "NextIteration";
        let skip = |p: NodeId, c: NodeId| back(p) || !on(p) || !on(c);
        let mut pred_off = Vec::with_capacity(n + 1);
        let mut preds: Vec<Edge> = Vec::with_capacity(n * 2);
        pred_off.push(0u32);
        for (id, node) in graph.enumerate() {
            let start = preds.len();
            for (k, input) in node.inputs.iter().enumerate() {
                if skip(input.node, id) {
                    continue;
                }
                let (p, o) = (input.node, input.output as u32);
                if preds[start..].iter().any(|e| e.node == p && e.output == o) {
                    continue;
                }
                preds.push(Edge {
                    node: p,
                    output: o,
                    bytes: graph.input_bytes(id, k),
                });
            }
            for &c in &node.control_inputs {
                if skip(c, id) {
                    continue;
                }
                let p = c;
                if preds[start..].iter().any(|e| e.node == p) {
                    continue;
                }
                preds.push(Edge {
                    node: p,
                    output: CONTROL,
                    bytes: 0,
                });
            }
            pred_off.push(preds.len() as u32);
        }
        // Successor CSR by counting sort over producers.
        let mut count = vec![0u32; n + 1];
        for e in &preds {
            count[e.node.index() + 1] += 1;
        }
        for i in 0..n {
            count[i + 1] += count[i];
        }
        let succ_off = count.clone();
        let mut fill = count;
        let mut succs = vec![
            Edge {
                node: NodeId::new(0),
                output: 0,
                bytes: 0
            };
            preds.len()
        ];
        for c in 0..n {
            for e in &preds[pred_off[c] as usize..pred_off[c + 1] as usize] {
                let slot = &mut fill[e.node.index()];
                succs[*slot as usize] = Edge {
                    node: NodeId::new(c),
                    output: e.output,
                    bytes: e.bytes,
                };
                *slot += 1;
            }
        }
        // Kahn's algorithm, FIFO in node order: deterministic and close to GraphDef order.
        let mut indeg: Vec<u32> = (0..n).map(|i| pred_off[i + 1] - pred_off[i]).collect();
        let mut topo: Vec<NodeId> = NodeId::range(n).filter(|i| indeg[i.index()] == 0).collect();
        topo.reserve(n);
        let mut head = 0;
        while head < topo.len() {
            let id = topo[head].index();
            head += 1;
            for e in &succs[succ_off[id] as usize..succ_off[id + 1] as usize] {
                let c = e.node;
                indeg[c.index()] -= 1;
                if indeg[c.index()] == 0 {
                    topo.push(c);
                }
            }
        }
        if topo.len() != n {
            let stuck = indeg.iter().position(|&d| d > 0).unwrap_or(0);
            return Err(Error::InvalidGraph {
                node: graph.nodes()[stuck].name.clone(),
                reason: "is on a cycle that is not a while-loop back-edge".into(),
            });
        }
        let mut pos = vec![0u32; n];
        for (i, &id) in topo.iter().enumerate() {
            pos[id.index()] = i as u32;
        }
        Ok(Dag {
            pred_off,
            preds,
            succ_off,
            succs,
            topo,
            pos,
        })
    }

    /// Number of edges.
    #[cfg(test)]
    pub(crate) fn num_edges(&self) -> usize {
        self.preds.len()
    }

    /// Producers of `id` (data edges first, in input order, then control edges).
    pub(crate) fn preds(&self, id: NodeId) -> &[Edge] {
        let id = id.index();
        &self.preds[self.pred_off[id] as usize..self.pred_off[id + 1] as usize]
    }

    /// Consumers of `id`.
    pub(crate) fn succs(&self, id: NodeId) -> &[Edge] {
        let id = id.index();
        &self.succs[self.succ_off[id] as usize..self.succ_off[id + 1] as usize]
    }

    /// Nodes in topological order (producers first).
    pub(crate) fn topo(&self) -> &[NodeId] {
        &self.topo
    }

    /// Position of `id` in [`Dag::topo`].
    pub(crate) fn position(&self, id: NodeId) -> usize {
        self.pos[id.index()] as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::{DType, OpGraphBuilder};

    #[test]
    fn dedups_edges_and_orders_topologically() {
        let mut b = OpGraphBuilder::new();
        let x = b.add("x", "Placeholder").unwrap();
        b.output(x, DType::FLOAT, Some(vec![10]));
        let sq = b.add("sq", "Mul").unwrap();
        b.connect(x, 0, sq);
        b.connect(x, 0, sq);
        b.control(x, sq);
        b.output(sq, DType::FLOAT, Some(vec![10]));
        let z = b.add("z", "NoOp").unwrap();
        b.control(sq, z);
        let ni = b.add("ni", "NextIteration").unwrap();
        b.connect(sq, 0, ni);
        b.connect(ni, 0, sq);
        let g = b.build().unwrap();
        let d = Dag::new(&g).unwrap();
        assert_eq!(
            d.preds(sq),
            &[Edge {
                node: x,
                output: 0,
                bytes: 40
            }]
        );
        assert_eq!(d.succs(x).len(), 1);
        assert_eq!(d.preds(z)[0].output, CONTROL);
        assert_eq!(d.topo(), &[x, sq, z, ni]);
        assert_eq!(d.position(z), 2);
        assert_eq!(d.num_edges(), 3);
    }

    #[test]
    fn cycles_name_a_node() {
        let mut b = OpGraphBuilder::new();
        let a = b.add("a", "NoOp").unwrap();
        let c = b.add("c", "NoOp").unwrap();
        b.control(a, c);
        b.control(c, a);
        let err = Dag::new(&b.build().unwrap()).unwrap_err();
        assert!(
            matches!(err, Error::InvalidGraph { ref node, .. } if node == "a"),
            "{err}"
        );
    }
}

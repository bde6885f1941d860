//! Explicit reads of ref-typed outputs that are consumed on another device.
//!
//! A TensorFlow 1 variable (`VariableV2`) outputs a *reference*; an op that takes a plain tensor
//! from it reads the variable when it runs. When that op is placed on another device, TensorFlow's
//! graph partitioner keeps the read semantics by giving the receiving `_Recv` a control input
//! from each of the consumer's other inputs (graph_partition.cc, `AddReadControl`): the value is
//! fetched only once everything else the consumer needs is there. A later rewrite of the
//! receiving partition that merges such an input's producer with the consumer — oneDNN's fusion
//! of `Conv2D` + `BiasAdd` on a worker, for one — turns that control edge into a cycle
//! (fused op → `_Recv` → fused op), and the step waits until its deadline.
//!
//! Python's `tf.Variable` never sends a reference across devices: every variable has a `read`
//! `Identity` beside it, and its readers take the plain tensor. Graphs built with the Rust
//! `tensorflow` crate (`Variable::builder`, `ops::Variable`) have no such read. [`add_ref_reads`]
//! adds one where a placement needs it: for every ref output with a consumer of a plain tensor on
//! another device, an `Identity` on the producer's device, which those consumers then read.
//! Consumers that take the reference itself (`Assign`, `Apply*`, …) are in the producer's
//! colocation group and never on another device in a valid placement.

use std::collections::{BTreeMap, HashSet};

use super::graph_def::parse_input;
use super::model::OpGraph;
use crate::error::{Error, Result};
use crate::proto::{attr, GraphDef};

/// What the name of an added read ends with: `<op>/tf_iaware_read` (`…_<k>` for output k > 0).
pub const READ_SUFFIX: &str = "tf_iaware_read";

/// One read added by [`add_ref_reads`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefRead {
    /// The op whose ref output is read (a variable, usually).
    pub source: String,
    /// Which of its outputs.
    pub output: usize,
    /// Name of the `Identity` added.
    pub read: String,
    /// Device of the source and of the read.
    pub device: String,
    /// Ops on other devices that now take the read's output instead of the reference.
    pub consumers: Vec<String>,
}

/// Adds an explicit read (an `Identity` on the producer's device) for every ref-typed output of
/// `def` that an op on another device consumes as a plain tensor, and points those consumers at
/// it (see the module docs). Devices are the `device` fields of `def` (set by a placement);
/// an edge with either end unplaced (empty device) is left alone, as is every edge within one
/// device. `graph` is `def` as analysis read it (input and output types). Returns the reads
/// added, in graph order; a graph that needs none is left unchanged.
///
/// # Errors
/// [`Error::InvalidGraph`] naming the node when `def` and `graph` disagree (a node or input
/// analysis did not see).
pub fn add_ref_reads(def: &mut GraphDef, graph: &OpGraph) -> Result<Vec<RefRead>> {
    let device: BTreeMap<&str, &str> = def
        .node
        .iter()
        .map(|n| (n.name.as_str(), n.device.as_str()))
        .collect();
    // (source, output) → index in `reads`; rewires as (node index, input index, read index).
    let mut wanted: BTreeMap<(String, usize), usize> = BTreeMap::new();
    let mut reads: Vec<RefRead> = Vec::new();
    let mut rewires: Vec<(usize, usize, usize)> = Vec::new();
    for (i, node) in def.node.iter().enumerate() {
        let Some(dst_device) = device.get(node.name.as_str()).filter(|d| !d.is_empty()) else {
            continue;
        };
        let id = graph.id(&node.name).ok_or_else(|| Error::InvalidGraph {
            node: node.name.clone(),
            reason: "not in the analysed graph".into(),
        })?;
        let analysed = graph.node(id);
        let data = node
            .input
            .iter()
            .enumerate()
            .filter(|(_, s)| !s.starts_with('^'));
        for (k, (slot, input)) in data.enumerate() {
            let Some(edge) = analysed.inputs.get(k) else {
                return Err(Error::InvalidGraph {
                    node: node.name.clone(),
                    reason: format!("input `{input}` is not among the analysed inputs"),
                });
            };
            let src = graph.node(edge.node);
            let src_type = src.outputs.get(edge.output).map(|t| t.dtype);
            let takes_value = src_type.is_some_and(|t| t.is_ref()) && !edge.dtype.is_ref();
            let src_device = device.get(src.name.as_str()).copied().unwrap_or_default();
            if !takes_value || src_device.is_empty() || src_device == *dst_device {
                continue;
            }
            let (src_name, output) = parse_input(input);
            let r = *wanted
                .entry((src_name.to_string(), output))
                .or_insert_with(|| {
                    reads.push(RefRead {
                        source: src_name.to_string(),
                        output,
                        read: String::new(),
                        device: src_device.to_string(),
                        consumers: Vec::new(),
                    });
                    reads.len() - 1
                });
            if reads[r].consumers.last() != Some(&node.name) {
                reads[r].consumers.push(node.name.clone());
            }
            rewires.push((i, slot, r));
        }
    }
    if reads.is_empty() {
        return Ok(reads);
    }
    let mut taken: HashSet<String> = def.node.iter().map(|n| n.name.clone()).collect();
    for read in &mut reads {
        let base = match read.output {
            0 => format!("{}/{READ_SUFFIX}", read.source),
            k => format!("{}/{READ_SUFFIX}_{k}", read.source),
        };
        let mut name = base.clone();
        let mut n = 1;
        while taken.contains(&name) {
            name = format!("{base}_{n}");
            n += 1;
        }
        taken.insert(name.clone());
        read.read = name;
    }
    for &(i, slot, r) in &rewires {
        def.node[i].input[slot] = reads[r].read.clone();
    }
    for read in &reads {
        let id = graph.id(&read.source).ok_or_else(|| Error::InvalidGraph {
            node: read.source.clone(),
            reason: "not in the analysed graph".into(),
        })?;
        let base = graph.node(id).outputs[read.output].dtype.base();
        let input = match read.output {
            0 => read.source.clone(),
            k => format!("{}:{k}", read.source),
        };
        let mut node = attr::node(
            &read.read,
            "Identity",
            vec![input],
            vec![("T", attr::dtype(base.0))],
        );
        node.device = read.device.clone();
        def.node.push(node);
    }
    Ok(reads)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::dtype::DType;
    use crate::graph::OpGraphBuilder;
    use crate::proto::NodeDef;

    const PS: &str = "/job:ps/replica:0/task:0/device:CPU:0";
    const W0: &str = "/job:worker/replica:0/task:0/device:CPU:0";

    fn node(name: &str, op: &str, input: &[&str], device: &str) -> NodeDef {
        NodeDef {
            name: name.into(),
            op: op.into(),
            input: input.iter().map(|s| s.to_string()).collect(),
            device: device.into(),
            ..NodeDef::default()
        }
    }

    /// `w` (VariableV2, float_ref) on the ps; `x` and `conv` (reads `w`) on worker 0; `apply`
    /// (takes the reference) and `w/Assign` with `w`; `local` reads `w` on the ps.
    fn graph(conv_device: &str) -> (GraphDef, OpGraph) {
        graph_with(conv_device, None)
    }

    /// As [`graph`], with a NoOp `extra` on worker 0.
    fn graph_with(conv_device: &str, extra: Option<&str>) -> (GraphDef, OpGraph) {
        let mut def = GraphDef {
            node: vec![
                node("w", "VariableV2", &[], PS),
                node("w/Assign", "Assign", &["w", "init"], PS),
                node("init", "Const", &[], PS),
                node("x", "Placeholder", &[], W0),
                node("conv", "Conv2D", &["x", "w", "^init"], conv_device),
                node("bias", "BiasAdd", &["conv", "w:0"], conv_device),
                node("local", "Mul", &["w", "w"], PS),
                node("apply", "ApplyGradientDescent", &["w", "init", "conv"], PS),
            ],
            ..GraphDef::default()
        };
        let float_ref = DType(101);
        let mut b = OpGraphBuilder::new();
        if let Some(name) = extra {
            def.node.push(node(name, "NoOp", &[], W0));
            b.add(name, "NoOp").unwrap();
        }
        let w = b.add("w", "VariableV2").unwrap();
        b.output(w, float_ref, Some(vec![3]));
        let assign = b.add("w/Assign", "Assign").unwrap();
        let init = b.add("init", "Const").unwrap();
        b.output(init, DType::FLOAT, Some(vec![3]));
        let x = b.add("x", "Placeholder").unwrap();
        b.output(x, DType::FLOAT, Some(vec![3]));
        let conv = b.add("conv", "Conv2D").unwrap();
        b.output(conv, DType::FLOAT, Some(vec![3]));
        let bias = b.add("bias", "BiasAdd").unwrap();
        let local = b.add("local", "Mul").unwrap();
        let apply = b.add("apply", "ApplyGradientDescent").unwrap();
        let edge = |src, dtype| crate::graph::Input {
            node: src,
            output: 0,
            dtype,
        };
        b.node_mut(assign).inputs = vec![edge(w, float_ref), edge(init, DType::FLOAT)];
        b.node_mut(conv).inputs = vec![edge(x, DType::FLOAT), edge(w, DType::FLOAT)];
        b.control(init, conv);
        b.node_mut(bias).inputs = vec![edge(conv, DType::FLOAT), edge(w, DType::FLOAT)];
        b.node_mut(local).inputs = vec![edge(w, DType::FLOAT), edge(w, DType::FLOAT)];
        b.node_mut(apply).inputs = vec![
            edge(w, float_ref),
            edge(init, DType::FLOAT),
            edge(conv, DType::FLOAT),
        ];
        (def, b.build().unwrap())
    }

    #[test]
    fn a_ref_read_on_another_device_goes_through_one_identity_beside_the_variable() {
        let (mut def, g) = graph(W0);
        let before = def.node.len();
        let reads = add_ref_reads(&mut def, &g).unwrap();
        assert_eq!(
            reads,
            vec![RefRead {
                source: "w".into(),
                output: 0,
                read: "w/tf_iaware_read".into(),
                device: PS.into(),
                consumers: vec!["conv".into(), "bias".into()],
            }]
        );
        assert_eq!(def.node.len(), before + 1);
        let read = def.node.last().unwrap();
        assert_eq!((read.op.as_str(), read.device.as_str()), ("Identity", PS));
        assert_eq!(read.input, vec!["w".to_string()]);
        let t = attr::get(read, "T").and_then(|a| a.r#type);
        assert_eq!(t, Some(attr::DT_FLOAT), "the base type, not float_ref");
        let inputs = |name: &str| {
            def.node
                .iter()
                .find(|n| n.name == name)
                .unwrap()
                .input
                .clone()
        };
        // Readers on the worker take the read; control inputs stay.
        assert_eq!(inputs("conv"), ["x", "w/tf_iaware_read", "^init"]);
        assert_eq!(inputs("bias"), ["conv", "w/tf_iaware_read"]);
        // Same-device readers and ref consumers keep the reference.
        assert_eq!(inputs("local"), ["w", "w"]);
        assert_eq!(inputs("apply"), ["w", "init", "conv"]);
        assert_eq!(inputs("w/Assign"), ["w", "init"]);
    }

    #[test]
    fn ref_edges_join_the_variables_group_and_value_reads_do_not() {
        let (_, g) = graph(W0);
        let group = |name: &str| g.node(g.id(name).unwrap()).group;
        assert_eq!(group("apply"), group("w"));
        assert_eq!(group("w/Assign"), group("w"));
        for reader in ["conv", "bias", "local"] {
            assert_ne!(group(reader), group("w"), "{reader}");
        }
    }

    #[test]
    fn reads_on_the_variables_device_or_unplaced_add_nothing() {
        for device in [PS, ""] {
            let (mut def, g) = graph(device);
            let copy = def.clone();
            assert_eq!(add_ref_reads(&mut def, &g).unwrap(), vec![]);
            assert_eq!(def, copy, "device `{device}`");
        }
    }

    #[test]
    fn a_taken_read_name_gets_a_suffix() {
        let (mut def, g) = graph_with(W0, Some("w/tf_iaware_read"));
        let reads = add_ref_reads(&mut def, &g).unwrap();
        assert_eq!(reads[0].read, "w/tf_iaware_read_1");
    }

    #[test]
    fn a_graph_analysis_did_not_see_is_an_error_naming_the_node() {
        let (mut def, g) = graph(W0);
        def.node.push(node("stranger", "NoOp", &[], W0));
        let err = add_ref_reads(&mut def, &g).unwrap_err().to_string();
        assert!(err.contains("stranger"), "{err}");
    }
}

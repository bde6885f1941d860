//! A dynamic batch pinned for pricing: a graph exported with `batch_size=None` has inputs of
//! shape `[-1, …]`, shape inference then leaves every activation's batch unknown, and the
//! analytic cost model counts an unknown dimension as 1 — a prediction for one sample. Before a
//! graph is analysed for a run (or a prediction) at a known batch, its placeholders' leading
//! `-1` becomes that batch, so shape inference carries it through the graph.

use prost::Message;

use crate::proto::{AttrValue, GraphDef};

/// `def` with the leading dimension of every `Placeholder` whose `shape` attribute is `[-1, …]`
/// set to `batch`, and how many placeholders changed. Placeholders of unknown rank, of rank 0
/// or with a known leading dimension are left alone, and so is every other op.
pub fn pin_batch(def: &GraphDef, batch: i64) -> (GraphDef, usize) {
    let mut out = def.clone();
    let mut changed = 0;
    for node in out.node.iter_mut().filter(|n| n.op == "Placeholder") {
        let Some(raw) = node.attr.get_mut("shape") else {
            continue;
        };
        let Ok(mut attr) = AttrValue::decode(raw.as_slice()) else {
            continue;
        };
        let Some(shape) = attr.shape.as_mut() else {
            continue;
        };
        match shape.dim.first_mut() {
            Some(d) if !shape.unknown_rank && d.size == -1 => d.size = batch,
            _ => continue,
        }
        *raw = attr.encode_to_vec();
        changed += 1;
    }
    (out, changed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::attr::{node, shape, shape_of};
    use crate::proto::TensorShapeProto;

    fn placeholder(name: &str, dims: Option<&[i64]>) -> crate::proto::NodeDef {
        let s = match dims {
            Some(d) => shape_of(d),
            None => TensorShapeProto {
                dim: Vec::new(),
                unknown_rank: true,
            },
        };
        node(name, "Placeholder", vec![], vec![("shape", shape(s))])
    }

    fn dims_of(def: &GraphDef, name: &str) -> Option<Vec<i64>> {
        let n = def.node.iter().find(|n| n.name == name).unwrap();
        crate::proto::attr::get(n, "shape")?.shape?.dims()
    }

    #[test]
    fn leading_unknown_dims_of_placeholders_take_the_batch() {
        let def = GraphDef {
            node: vec![
                placeholder("x", Some(&[-1, 784])),
                placeholder("labels", Some(&[-1])),
                placeholder("fixed", Some(&[32, 10])),
                placeholder("lr", Some(&[])),
                placeholder("anything", None),
                placeholder("inner", Some(&[8, -1])),
                node("not_an_input", "Identity", vec!["x".into()], vec![]),
            ],
            ..GraphDef::default()
        };
        let (pinned, changed) = pin_batch(&def, 64);
        assert_eq!(changed, 2);
        assert_eq!(dims_of(&pinned, "x"), Some(vec![64, 784]));
        assert_eq!(dims_of(&pinned, "labels"), Some(vec![64]));
        assert_eq!(dims_of(&pinned, "fixed"), Some(vec![32, 10]));
        assert_eq!(dims_of(&pinned, "lr"), Some(vec![]));
        assert_eq!(dims_of(&pinned, "anything"), None);
        assert_eq!(dims_of(&pinned, "inner"), Some(vec![8, -1]));
        // The input graph is untouched, and a graph with nothing to pin comes back equal.
        assert_eq!(dims_of(&def, "x"), Some(vec![-1, 784]));
        let (again, none) = pin_batch(&pinned, 64);
        assert_eq!((again, none), (pinned, 0));
    }
}

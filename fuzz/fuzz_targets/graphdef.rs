//! Arbitrary bytes as a GraphDef: decoding, attribute decoding, colocation and topological order
//! must return errors, never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tf_iaware::graph::graph_def::{decode_graph_def, structure};

fuzz_target!(|data: &[u8]| {
    if let Ok(def) = decode_graph_def(data, "fuzz input") {
        if let Ok(graph) = structure(&def) {
            let _ = graph.topo_order();
        }
    }
});

//! Op signatures from TensorFlow's op registry: `signatures` reads them for the op types of a
//! graph into the core's [`OpSignature`].

use std::collections::BTreeMap;

use tensorflow::Graph;

use tf_iaware_core::graph::OpSignature;

use crate::error::Result;

/// Signatures of every op type in `types`, from the registry `graph` sees (op types of the
/// graph's function library included).
///
/// # Errors
/// [`Error::TensorFlow`] naming the op type if TensorFlow does not know it.
pub(crate) fn signatures<'a>(
    graph: &Graph,
    types: impl IntoIterator<Item = &'a str>,
) -> Result<BTreeMap<String, OpSignature>> {
    let mut out = BTreeMap::new();
    for op in types {
        if out.contains_key(op) {
            continue;
        }
        let bytes = graph
            .get_op_def(op)
            .map_err(|e| crate::tf::status::error(format!("looking up the OpDef of {op}"), &e))?;
        out.insert(op.to_string(), OpSignature::from_op_def(&bytes, op)?);
    }
    Ok(out)
}

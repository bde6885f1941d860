//! Graphs: the plain-data model of [`tf_iaware_core::graph`] (re-exported here), and the analysis
//! of a real TensorFlow graph into it ([`analyze`]), with op signatures ([`OpSignature`]) from
//! TensorFlow's registry.

pub use tf_iaware_core::graph::*;

pub mod analyze;
pub use tf_iaware_core::proto;
mod op_defs;

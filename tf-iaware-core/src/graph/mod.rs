//! Graphs as plain data: the [`OpGraph`] model, colocation, device names, dtypes, op
//! signatures, a GraphDef's structure without TensorFlow, and the sidecar that names a graph's
//! training step.

pub mod batch;
mod builder;
pub(crate) mod colocation;
pub(crate) mod device_name;
mod device_type;
mod dtype;
pub mod graph_def;
pub mod labels;
pub mod library;
mod model;
pub mod ref_reads;
mod sidecar;
mod signature;

pub use builder::OpGraphBuilder;
pub use device_name::{is_job_name, DeviceName, JOB_NAME_RULE};
pub use device_type::DeviceType;
pub use dtype::DType;
pub use model::{Attr, ColocationGroup, GroupId, Input, NodeId, OpGraph, OpNode, TensorInfo};
pub use sidecar::Sidecar;
pub use signature::OpSignature;

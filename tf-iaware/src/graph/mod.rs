//! Graphs: the pure [`OpGraph`] model, colocation, device names, and analysis of a real
//! TensorFlow graph into an `OpGraph`.

pub mod analyze;
pub mod colocation;
pub mod device_name;
pub mod dtype;
pub mod model;
pub mod signature;

pub use device_name::DeviceName;
pub use dtype::DType;
pub use model::{
    Attr, ColocationGroup, GroupId, Input, NodeId, OpGraph, OpGraphBuilder, OpNode, TensorInfo,
};

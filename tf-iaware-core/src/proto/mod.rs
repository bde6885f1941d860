//! The few TensorFlow protobuf messages tf-iaware reads or writes, as `prost` derives.
//!
//! Field numbers are those of TensorFlow's `.proto` files (2.21). Fields we never edit are carried
//! as opaque bytes (a submessage and `bytes` share the wire type), so that decoding and re-encoding a
//! GraphDef loses nothing: attribute values, the function library, versions and debug info survive
//! untouched.

pub(crate) mod attr;
pub mod cluster;
pub(crate) mod config;
pub mod event;
pub mod example;
pub mod graph;
pub(crate) mod kernel;
pub(crate) mod op_def;
pub(crate) mod server;
pub(crate) mod step_stats;

pub use cluster::{ClusterDef, JobDef};
pub use config::{ConfigProto, GraphOptions, RewriterConfig, RunMetadata, RunOptions};
pub use event::{Event, Summary, SummaryValue};
pub use example::{BytesList, Example, Feature, FeatureKind, Features, FloatList, Int64List};
pub use graph::{AttrValue, GraphDef, ListValue, NodeDef, TensorShapeProto};
pub use kernel::{AttrConstraint, KernelDef, KernelList};
pub use op_def::{ArgDef, OpDef, TensorAttr, TensorProto};
pub use server::ServerDef;
pub use step_stats::{DeviceStepStats, NodeExecStats, StepStats};

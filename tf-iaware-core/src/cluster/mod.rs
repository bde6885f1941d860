//! Clusters as plain data: the devices a graph can be placed on and their live figures, the
//! `--cluster` specs (synthetic ones included) and TF_CONFIG.

pub mod calibration;
pub(crate) mod device;
pub(crate) mod link;
pub(crate) mod links;
pub mod live;
pub mod model;
mod spec;
pub(crate) mod status;
pub(crate) mod synthetic;
pub mod tf_config;
pub(crate) mod topology;

pub use crate::graph::DeviceType;
pub use model::{Cluster, Device, DeviceId};
pub use spec::ClusterSpec;
pub use status::{LiveSource, LiveStatus};
pub use synthetic::{SyntheticCluster, SyntheticSpec};

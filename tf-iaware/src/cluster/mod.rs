//! Clusters: the devices a graph can be placed on, as plain data, and the `--cluster` specs.

pub mod connect;
pub mod feed;
pub mod live;
pub mod local;
pub mod model;
pub mod spec;
pub mod synthetic;
pub mod tf_config;

pub use connect::{connect, connect_live, LiveConnection};
pub use feed::{LiveOptions, LiveWarning, MetricsFeed};
pub use live::{LiveSource, LiveStatus};
pub use model::{Cluster, Device};
pub use spec::ClusterSpec;
pub use synthetic::{SyntheticCluster, SyntheticSpec};

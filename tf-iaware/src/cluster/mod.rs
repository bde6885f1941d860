//! Clusters: the plain-data model of [`tf_iaware_core::cluster`] (re-exported here), and
//! connecting to a real one — local devices through TensorFlow (`local`), TF_CONFIG clusters and
//! their metrics agents (`connect`, `feed`).

pub use tf_iaware_core::cluster::*;

mod connect;
pub(crate) mod feed;
pub(crate) mod local;
pub mod monitor;

pub use connect::{
    connect, connect_live, connect_tf_config, connect_tf_config_at, connect_tf_config_live,
    LiveConnection,
};
pub use feed::{LiveOptions, LiveWarning, MetricsFeed};

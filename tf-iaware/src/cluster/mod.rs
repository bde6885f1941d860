//! Clusters: the devices a graph can be placed on, as plain data, and the `--cluster` specs.

pub mod model;

pub use model::{Cluster, Device};

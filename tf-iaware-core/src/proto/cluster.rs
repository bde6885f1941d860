//! `ClusterDef`, `JobDef` (cluster.proto): the jobs of a cluster and their tasks' addresses.

use std::collections::BTreeMap;

/// `tensorflow.JobDef`: a job name and its tasks (index → `host:port`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct JobDef {
    /// `name`: the job name.
    #[prost(string, tag = "1")]
    pub name: String,
    /// `tasks`: task index → `host:port`.
    #[prost(btree_map = "int32, string", tag = "2")]
    pub tasks: BTreeMap<i32, String>,
}

/// `tensorflow.ClusterDef`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ClusterDef {
    /// `job`: the jobs of the cluster.
    #[prost(message, repeated, tag = "1")]
    pub job: Vec<JobDef>,
}

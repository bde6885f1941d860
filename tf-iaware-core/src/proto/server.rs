//! `ServerDef`, `ClusterDef`, `JobDef` (tensorflow_server.proto, cluster.proto).

use std::collections::BTreeMap;

/// `tensorflow.JobDef`: a job name and its tasks (index → `host:port`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct JobDef {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(btree_map = "int32, string", tag = "2")]
    pub tasks: BTreeMap<i32, String>,
}

/// `tensorflow.ClusterDef`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ClusterDef {
    #[prost(message, repeated, tag = "1")]
    pub job: Vec<JobDef>,
}

/// `tensorflow.ServerDef`: what `TF_NewServer` takes.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ServerDef {
    #[prost(message, optional, tag = "1")]
    pub cluster: Option<ClusterDef>,
    #[prost(string, tag = "2")]
    pub job_name: String,
    #[prost(int32, tag = "3")]
    pub task_index: i32,
    /// `ConfigProto` for sessions on this server.
    #[prost(message, optional, tag = "4")]
    pub default_session_config: Option<super::ConfigProto>,
    /// `"grpc"`.
    #[prost(string, tag = "5")]
    pub protocol: String,
    #[prost(int32, tag = "6")]
    pub port: i32,
}

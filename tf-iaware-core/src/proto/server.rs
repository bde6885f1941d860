//! `ServerDef` (tensorflow_server.proto).

use super::cluster::ClusterDef;

/// `tensorflow.ServerDef`: what `TF_NewServer` takes.
#[derive(Clone, PartialEq, prost::Message)]
pub struct ServerDef {
    /// `cluster`: the jobs and tasks of the cluster.
    #[prost(message, optional, tag = "1")]
    pub cluster: Option<ClusterDef>,
    /// `job_name`: the job of this server.
    #[prost(string, tag = "2")]
    pub job_name: String,
    /// `task_index`: the task of this server within its job.
    #[prost(int32, tag = "3")]
    pub task_index: i32,
    /// `ConfigProto` for sessions on this server.
    #[prost(message, optional, tag = "4")]
    pub default_session_config: Option<super::ConfigProto>,
    /// `"grpc"`.
    #[prost(string, tag = "5")]
    pub protocol: String,
    /// `port`: port to bind; when non-zero it overrides this task's port in `cluster`.
    #[prost(int32, tag = "6")]
    pub port: i32,
}

//! `KernelList` / `KernelDef` (kernel_def.proto), as returned by `TF_GetRegisteredKernelsForOp`.

/// `tensorflow.KernelList`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct KernelList {
    /// `kernel`: the registered kernels.
    #[prost(message, repeated, tag = "1")]
    pub kernel: Vec<KernelDef>,
}

/// `tensorflow.KernelDef`; the type constraints (field 3) are not read.
#[derive(Clone, PartialEq, prost::Message)]
pub struct KernelDef {
    /// `op`: the op type the kernel implements.
    #[prost(string, tag = "1")]
    pub op: String,
    /// `"CPU"`, `"GPU"`, …
    #[prost(string, tag = "2")]
    pub device_type: String,
    /// `host_memory_arg`: arguments kept in host memory.
    #[prost(string, repeated, tag = "4")]
    pub host_memory_arg: Vec<String>,
    /// `label`: kernel label (selects among kernels of one op and device).
    #[prost(string, tag = "5")]
    pub label: String,
    /// `priority`: preference among kernels that match (higher first).
    #[prost(int32, tag = "6")]
    pub priority: i32,
}

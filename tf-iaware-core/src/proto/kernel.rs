//! `KernelList` / `KernelDef` (kernel_def.proto), as returned by `TF_GetRegisteredKernelsForOp`.

/// `tensorflow.KernelList`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct KernelList {
    /// `kernel`: the registered kernels.
    #[prost(message, repeated, tag = "1")]
    pub kernel: Vec<KernelDef>,
}

/// `tensorflow.KernelDef`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct KernelDef {
    /// `op`: the op type the kernel implements.
    #[prost(string, tag = "1")]
    pub op: String,
    /// `"CPU"`, `"GPU"`, …
    #[prost(string, tag = "2")]
    pub device_type: String,
    /// `constraint`: the types each type attribute may take for this kernel.
    #[prost(message, repeated, tag = "3")]
    pub constraint: Vec<AttrConstraint>,
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

/// `KernelDef.AttrConstraint`: attribute `name` must take one of `allowed_values`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct AttrConstraint {
    /// `name`: the attribute (`T`, `dtype`, …).
    #[prost(string, tag = "1")]
    pub name: String,
    /// `allowed_values`: a list of types (`list.type`).
    #[prost(message, optional, tag = "2")]
    pub allowed_values: Option<super::AttrValue>,
}

impl KernelDef {
    /// Whether this kernel takes a node whose type attributes are `type_of(name)`: every
    /// constraint's attribute is one of its allowed types. An attribute the node does not set
    /// (left to its op's default) or sets to something other than a single type is not held
    /// against the kernel.
    pub fn accepts(&self, type_of: impl Fn(&str) -> Option<i32>) -> bool {
        self.constraint.iter().all(|c| {
            let allowed = c
                .allowed_values
                .as_ref()
                .and_then(|v| v.list.as_ref())
                .map(|l| l.r#type.as_slice())
                .unwrap_or_default();
            match type_of(&c.name) {
                Some(t) if !allowed.is_empty() => allowed.contains(&t),
                _ => true,
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{AttrValue, ListValue};

    #[test]
    fn a_kernel_takes_only_the_types_its_constraints_allow() {
        let k = KernelDef {
            op: "MatMul".into(),
            device_type: "CPU".into(),
            constraint: vec![AttrConstraint {
                name: "T".into(),
                allowed_values: Some(AttrValue {
                    list: Some(ListValue {
                        r#type: vec![1, 2],
                        ..ListValue::default()
                    }),
                    ..AttrValue::default()
                }),
            }],
            ..KernelDef::default()
        };
        assert!(k.accepts(|a| (a == "T").then_some(1)));
        assert!(!k.accepts(|a| (a == "T").then_some(17)));
        assert!(k.accepts(|_| None));
    }
}

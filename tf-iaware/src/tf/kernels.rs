//! Which device types have a registered kernel for an op (`TF_GetRegisteredKernelsForOp`), cached.

use std::collections::HashMap;
use std::ffi::CString;
use std::sync::{Arc, Mutex, OnceLock};

use prost::Message;
use tf_iaware_sys as sys;

use super::status::Status;
use crate::error::{Error, Result};
use crate::graph::proto::{KernelDef, KernelList};
use tf_iaware_core::graph::DeviceType;

/// Device types (`"CPU"`, `"GPU"`, …, sorted, deduplicated) with a kernel registered for op
/// type `op`. Empty for ops that need no kernel (function calls, resolved at run time), for op
/// types TensorFlow does not know, and for ops this build registers without any kernel
/// (`CudnnRNN` in a CPU-only build), which analysis refuses.
///
/// # Errors
/// [`Error::TensorFlow`] if the registry cannot be queried; [`Error::GraphDecode`] if its answer
/// does not decode.
pub fn kernel_device_types(op: &str) -> Result<Vec<DeviceType>> {
    Ok(types_of(kernels(op)?.iter()))
}

/// As [`kernel_device_types`], only the kernels that take the node's types: `type_of(attr)` is
/// the node's type attribute `attr` (`T`, `dtype`, …) as a `DataType` number, `None` where the
/// node leaves it unset. MatMul has CPU kernels, but none for `T=uint16`.
///
/// # Errors
/// As [`kernel_device_types`].
pub fn kernel_device_types_for(
    op: &str,
    type_of: impl Fn(&str) -> Option<i32>,
) -> Result<Vec<DeviceType>> {
    Ok(types_of(
        kernels(op)?.iter().filter(|k| k.accepts(&type_of)),
    ))
}

fn types_of<'a>(kernels: impl Iterator<Item = &'a KernelDef>) -> Vec<DeviceType> {
    let mut types: Vec<DeviceType> = kernels
        .map(|k| DeviceType::from(k.device_type.clone()))
        .collect();
    types.sort();
    types.dedup();
    types
}

/// The registered kernels of op type `op`, cached.
fn kernels(op: &str) -> Result<Arc<Vec<KernelDef>>> {
    static CACHE: OnceLock<Mutex<HashMap<String, Arc<Vec<KernelDef>>>>> = OnceLock::new();
    let cache = CACHE.get_or_init(Default::default);
    if let Some(hit) = cache.lock().unwrap_or_else(|p| p.into_inner()).get(op) {
        return Ok(hit.clone());
    }
    let list = Arc::new(query(op)?);
    cache
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(op.to_string(), list.clone());
    Ok(list)
}

fn query(op: &str) -> Result<Vec<KernelDef>> {
    let name = CString::new(op).map_err(|_| Error::InvalidGraph {
        node: op.into(),
        reason: "op type contains a NUL byte".into(),
    })?;
    let status = Status::new();
    // SAFETY: name is NUL-terminated, status live; the returned buffer is ours to delete.
    let buf = unsafe { sys::TF_GetRegisteredKernelsForOp(name.as_ptr(), status.as_ptr()) };
    let checked = status.check(&format!("TF_GetRegisteredKernelsForOp({op})"));
    if buf.is_null() {
        checked?;
        return Ok(Vec::new());
    }
    // SAFETY: a non-null TF_Buffer holds `length` readable bytes at `data` until deleted.
    let bytes = unsafe {
        let b = &*buf;
        if b.data.is_null() {
            Vec::new()
        } else {
            std::slice::from_raw_parts(b.data as *const u8, b.length).to_vec()
        }
    };
    // SAFETY: buf came from TensorFlow and is deleted exactly once.
    unsafe { sys::TF_DeleteBuffer(buf) };
    checked?;
    let list = KernelList::decode(bytes.as_slice()).map_err(|source| Error::GraphDecode {
        what: format!("KernelList for {op}"),
        source,
    })?;
    Ok(list.kernel)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matmul_has_a_cpu_kernel_and_unknown_ops_have_none() {
        assert!(kernel_device_types("MatMul")
            .unwrap()
            .contains(&DeviceType::Cpu));
        assert!(kernel_device_types("NoSuchOpAnywhere").unwrap().is_empty());
    }

    #[test]
    fn kernels_are_matched_on_the_nodes_types() {
        // DataType: 1 float, 17 uint16.
        let t = |v: i32| move |a: &str| (a == "T").then_some(v);
        assert!(kernel_device_types_for("MatMul", t(1))
            .unwrap()
            .contains(&DeviceType::Cpu));
        assert!(kernel_device_types_for("MatMul", t(17)).unwrap().is_empty());
        assert!(!kernel_device_types_for("MatMul", |_| None)
            .unwrap()
            .is_empty());
    }
}

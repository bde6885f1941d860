//! TensorFlow V2 checkpoint files (`PREFIX.index` + `PREFIX.data-00000-of-00001`) written with
//! TensorFlow's own `SaveV2` op and read back with `RestoreV2`, each run in a small local session
//! on the driver: the files are exactly TensorFlow's format, whatever reads them later.

use std::collections::HashSet;
use std::path::Path;

use tensorflow::{
    DataType, Graph, Operation, Output, Session, SessionOptions, SessionRunArgs, Tensor,
};

use super::tensor::{unsupported, HostTensor, NamedTensor};
use crate::error::{Error, Result};
use crate::tf::{list_checkpoint, CheckpointEntry};

/// What attribute setters return: TensorFlow and C-string errors alike.
pub(crate) type AttrResult = std::result::Result<(), Box<dyn std::error::Error>>;

/// Adds op `name` of type `op_type` to `graph`, `f` setting its inputs and attributes.
pub(crate) fn build_op(
    graph: &mut Graph,
    op_type: &str,
    name: &str,
    f: impl FnOnce(&mut tensorflow::OperationDescription<'_>) -> AttrResult,
) -> Result<Operation> {
    let fail = |e: &dyn std::fmt::Display| Error::tf(format!("building {op_type} `{name}`"), e);
    let mut d = graph.new_operation(op_type, name).map_err(|e| fail(&e))?;
    f(&mut d).map_err(|e| fail(&e))?;
    d.finish().map_err(|e| fail(&e))
}

/// A `Const` string vector.
pub(crate) fn string_const(graph: &mut Graph, name: &str, values: &[String]) -> Result<Operation> {
    let t = Tensor::<String>::new(&[values.len() as u64])
        .with_values(values)
        .map_err(|e| Error::tf(format!("building `{name}`"), e))?;
    build_op(graph, "Const", name, |d| {
        d.set_attr_type("dtype", DataType::String)?;
        Ok(d.set_attr_tensor("value", t)?)
    })
}

/// A `Const` string scalar.
pub(crate) fn string_scalar(graph: &mut Graph, name: &str, value: &str) -> Result<Operation> {
    let t = Tensor::<String>::new(&[])
        .with_values(&[value.to_string()])
        .map_err(|e| Error::tf(format!("building `{name}`"), e))?;
    build_op(graph, "Const", name, |d| {
        d.set_attr_type("dtype", DataType::String)?;
        Ok(d.set_attr_tensor("value", t)?)
    })
}

/// A `RestoreV2` op in `graph` under `name` reading `entries` from the checkpoint at `prefix`
/// (output `i` is `entries[i]`'s value).
pub(crate) fn restore_op(
    graph: &mut Graph,
    name: &str,
    prefix: &str,
    entries: &[(String, DataType)],
) -> Result<Operation> {
    let names: Vec<String> = entries.iter().map(|(n, _)| n.clone()).collect();
    let prefix_op = string_scalar(graph, &format!("{name}/prefix"), prefix)?;
    let names_op = string_const(graph, &format!("{name}/tensor_names"), &names)?;
    let slices_op = string_const(
        graph,
        &format!("{name}/shape_and_slices"),
        &vec![String::new(); names.len()],
    )?;
    let dtypes: Vec<DataType> = entries.iter().map(|(_, t)| *t).collect();
    build_op(graph, "RestoreV2", name, |d| {
        d.add_input(prefix_op);
        d.add_input(names_op);
        d.add_input(slices_op);
        Ok(d.set_attr_type_list("dtypes", &dtypes)?)
    })
}

fn prefix_str(prefix: &Path) -> Result<&str> {
    prefix.to_str().ok_or_else(|| Error::InvalidArgument {
        what: format!("checkpoint prefix {}", prefix.display()),
        reason: "is not valid UTF-8".into(),
    })
}

/// Writes `tensors` as the V2 checkpoint at `prefix` (`prefix.index` and
/// `prefix.data-00000-of-00001`; the folder must exist) with TensorFlow's `SaveV2`.
///
/// # Errors
/// [`Error::InvalidArgument`] if `tensors` is empty, names a tensor twice or holds a dtype
/// checkpoints do not take; [`Error::TensorFlow`] if `SaveV2` fails (a full disk, a folder that
/// is not there).
pub fn write_bundle(prefix: &Path, tensors: &[NamedTensor]) -> Result<()> {
    let prefix_text = prefix_str(prefix)?;
    if tensors.is_empty() {
        return Err(Error::InvalidArgument {
            what: format!("checkpoint {}", prefix.display()),
            reason: "no tensors to save".into(),
        });
    }
    let mut seen = HashSet::new();
    for t in tensors {
        if !seen.insert(t.name.as_str()) {
            return Err(Error::InvalidArgument {
                what: format!("checkpoint {}", prefix.display()),
                reason: format!("tensor `{}` is given twice", t.name),
            });
        }
        if t.name.is_empty() {
            return Err(Error::InvalidArgument {
                what: format!("checkpoint {}", prefix.display()),
                reason: "a tensor has an empty name".into(),
            });
        }
    }
    let mut graph = Graph::new();
    let prefix_op = string_scalar(&mut graph, "save/prefix", prefix_text)?;
    let names: Vec<String> = tensors.iter().map(|t| t.name.clone()).collect();
    let names_op = string_const(&mut graph, "save/tensor_names", &names)?;
    let slices_op = string_const(
        &mut graph,
        "save/shape_and_slices",
        &vec![String::new(); names.len()],
    )?;
    let mut values = Vec::with_capacity(tensors.len());
    for (i, t) in tensors.iter().enumerate() {
        let dtype = t.tensor.data_type();
        let placeholder = build_op(&mut graph, "Placeholder", &format!("save/value_{i}"), |d| {
            Ok(d.set_attr_type("dtype", dtype)?)
        })?;
        values.push(placeholder);
    }
    let inputs: Vec<Output> = values
        .iter()
        .map(|o| Output {
            operation: o.clone(),
            index: 0,
        })
        .collect();
    let dtypes: Vec<DataType> = tensors.iter().map(|t| t.tensor.data_type()).collect();
    let save = build_op(&mut graph, "SaveV2", "save", |d| {
        d.add_input(prefix_op);
        d.add_input(names_op);
        d.add_input(slices_op);
        d.add_input_list(&inputs);
        Ok(d.set_attr_type_list("dtypes", &dtypes)?)
    })?;
    let mut session = Session::new(&SessionOptions::new(), &graph)
        .map_err(|e| Error::tf("TF_NewSession (checkpoint save)", e))?;
    let mut args = SessionRunArgs::new();
    for (placeholder, t) in values.iter().zip(tensors) {
        t.tensor.add_feed(&mut args, placeholder, 0);
    }
    args.add_target(&save);
    session
        .run(&mut args)
        .map_err(|e| Error::tf(format!("SaveV2 to {}", prefix.display()), e))?;
    session
        .close()
        .map_err(|e| Error::tf("TF_CloseSession (checkpoint save)", e))
}

/// Every tensor in the index of the checkpoint at `prefix`, sorted by name (TensorFlow's own
/// checkpoint reader; the values are not read).
///
/// # Errors
/// [`Error::CheckpointFile`] naming the prefix if its index is missing or does not parse.
pub fn list_bundle(prefix: &Path) -> Result<Vec<CheckpointEntry>> {
    list_checkpoint(prefix_str(prefix)?).map_err(|e| Error::CheckpointFile {
        path: prefix.to_path_buf(),
        reason: format!("cannot read its index: {e}"),
    })
}

/// Reads every tensor of the checkpoint at `prefix` with TensorFlow's `RestoreV2`, sorted by
/// name; reading checks each tensor's checksum, so a truncated or corrupt data file is an error.
///
/// # Errors
/// [`Error::CheckpointFile`] naming the prefix if the index or the data cannot be read whole;
/// [`Error::InvalidArgument`] if it holds a dtype [`HostTensor`] cannot.
pub fn read_bundle(prefix: &Path) -> Result<Vec<NamedTensor>> {
    let entries = list_bundle(prefix)?;
    read_entries(prefix, &entries)
}

/// Reads the tensors `entries` (from [`list_bundle`]) of the checkpoint at `prefix`, in
/// `entries`' order.
///
/// # Errors
/// As [`read_bundle`].
pub fn read_entries(prefix: &Path, entries: &[CheckpointEntry]) -> Result<Vec<NamedTensor>> {
    let prefix_text = prefix_str(prefix)?;
    if entries.is_empty() {
        return Ok(Vec::new());
    }
    for e in entries {
        if !HostTensor::supports(e.dtype) {
            return Err(unsupported(
                &format!("checkpoint tensor `{}`", e.name),
                e.dtype,
            ));
        }
    }
    let mut graph = Graph::new();
    let list: Vec<(String, DataType)> = entries.iter().map(|e| (e.name.clone(), e.dtype)).collect();
    let restore = restore_op(&mut graph, "restore", prefix_text, &list)?;
    let mut session = Session::new(&SessionOptions::new(), &graph)
        .map_err(|e| Error::tf("TF_NewSession (checkpoint read)", e))?;
    let mut args = SessionRunArgs::new();
    let tokens: Vec<_> = (0..entries.len())
        .map(|i| args.request_fetch(&restore, i as i32))
        .collect();
    session.run(&mut args).map_err(|e| Error::CheckpointFile {
        path: prefix.to_path_buf(),
        reason: format!("RestoreV2 cannot read it: {e}"),
    })?;
    let mut out = Vec::with_capacity(entries.len());
    for (e, token) in entries.iter().zip(tokens) {
        let tensor = HostTensor::fetch(&mut args, token, e.dtype, &e.name)?;
        if tensor.dims() != e.dims.as_slice() {
            return Err(Error::CheckpointFile {
                path: prefix.to_path_buf(),
                reason: format!(
                    "tensor `{}` has shape {:?} in the index but {:?} in the data",
                    e.name,
                    e.dims,
                    tensor.dims()
                ),
            });
        }
        out.push(NamedTensor {
            name: e.name.clone(),
            tensor,
        });
    }
    session
        .close()
        .map_err(|e| Error::tf("TF_CloseSession (checkpoint read)", e))?;
    Ok(out)
}

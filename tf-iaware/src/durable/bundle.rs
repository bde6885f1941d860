//! TensorFlow V2 checkpoint files (`PREFIX.index` + `PREFIX.data-00000-of-00001`) written with
//! TensorFlow's own `SaveV2` op and read back with `RestoreV2`, each run in a small local session
//! on the driver: the files are exactly TensorFlow's format, whatever reads them later.

use std::collections::HashSet;
use std::path::Path;

use tensorflow::{
    DataType, Graph, Operation, Output, Session, SessionOptions, SessionRunArgs, Tensor,
};

use super::tensor::{unsupported, HostTensor, NamedTensor};
use super::CheckpointEntry;
use crate::error::{Error, Result};
use crate::tf::list_checkpoint;

/// What attribute setters return: TensorFlow and C-string errors alike.
pub(crate) type AttrResult = std::result::Result<(), Box<dyn std::error::Error>>;

/// Adds op `name` of type `op_type` to `graph`, `f` setting its inputs and attributes.
pub(crate) fn build_op(
    graph: &mut Graph,
    op_type: &str,
    name: &str,
    f: impl FnOnce(&mut tensorflow::OperationDescription<'_>) -> AttrResult,
) -> Result<Operation> {
    let fail = |e: &(dyn std::error::Error + 'static)| {
        crate::tf::status::error(format!("building {op_type} `{name}`"), e)
    };
    let mut d = graph.new_operation(op_type, name).map_err(|e| fail(&e))?;
    f(&mut d).map_err(|e| fail(&*e))?;
    d.finish().map_err(|e| fail(&e))
}

/// A `Const` string vector.
pub(crate) fn string_const(graph: &mut Graph, name: &str, values: &[String]) -> Result<Operation> {
    let t = Tensor::<String>::new(&[values.len() as u64])
        .with_values(values)
        .map_err(|e| crate::tf::status::error(format!("building `{name}`"), &e))?;
    build_op(graph, "Const", name, |d| {
        d.set_attr_type("dtype", DataType::String)?;
        Ok(d.set_attr_tensor("value", t)?)
    })
}

/// A `Const` string scalar.
pub(crate) fn string_scalar(graph: &mut Graph, name: &str, value: &str) -> Result<Operation> {
    let t = Tensor::<String>::new(&[])
        .with_values(&[value.to_string()])
        .map_err(|e| crate::tf::status::error(format!("building `{name}`"), &e))?;
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
/// `prefix.data-00000-of-00001`; the folder must exist) with TensorFlow's `SaveV2`. To save the
/// same variables again and again, keep a [`BundleWriter`] (what [`CheckpointDir`] does): its
/// session is built and optimised once.
///
/// [`CheckpointDir`]: super::CheckpointDir
///
/// # Errors
/// [`Error::InvalidArgument`] if `tensors` is empty, names a tensor twice or holds a dtype
/// checkpoints do not take; [`Error::TensorFlow`] if `SaveV2` fails (a full disk, a folder that
/// is not there).
pub fn write_bundle(prefix: &Path, tensors: &[NamedTensor]) -> Result<()> {
    BundleWriter::new(tensors)?.write(prefix, tensors)
}

/// A `SaveV2` graph and its local session for one list of tensor names and dtypes, reused for
/// every save of them (the first run of a session optimises its graph: ~0.1 s for a ResNet-20's
/// 130 tensors, paid once). Shapes may change between saves.
pub struct BundleWriter {
    key: Vec<(String, DataType)>,
    /// Kept alive with the session that runs it.
    _graph: Graph,
    session: Session,
    prefix: Operation,
    values: Vec<Operation>,
    save: Operation,
}

impl std::fmt::Debug for BundleWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BundleWriter")
            .field("tensors", &self.key.len())
            .finish()
    }
}

impl BundleWriter {
    /// A writer for tensors of `tensors`' names and dtypes, in that order.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if `tensors` is empty, names a tensor twice or has an empty
    /// name; [`Error::TensorFlow`] if the graph or the session cannot be built.
    pub fn new(tensors: &[NamedTensor]) -> Result<Self> {
        let refuse = |reason: String| Error::InvalidArgument {
            what: "checkpoint tensors".into(),
            reason,
        };
        if tensors.is_empty() {
            return Err(refuse("no tensors to save".into()));
        }
        let mut seen = HashSet::new();
        for t in tensors {
            if t.name.is_empty() {
                return Err(refuse("a tensor has an empty name".into()));
            }
            if !seen.insert(t.name.as_str()) {
                return Err(refuse(format!("tensor `{}` is given twice", t.name)));
            }
        }
        let key: Vec<(String, DataType)> = tensors
            .iter()
            .map(|t| (t.name.clone(), t.tensor.data_type()))
            .collect();
        let mut graph = Graph::new();
        let prefix = build_op(&mut graph, "Placeholder", "save/prefix", |d| {
            Ok(d.set_attr_type("dtype", DataType::String)?)
        })?;
        let names: Vec<String> = key.iter().map(|(n, _)| n.clone()).collect();
        let names_op = string_const(&mut graph, "save/tensor_names", &names)?;
        let slices_op = string_const(
            &mut graph,
            "save/shape_and_slices",
            &vec![String::new(); names.len()],
        )?;
        let mut values = Vec::with_capacity(key.len());
        for (i, (_, dtype)) in key.iter().enumerate() {
            let dtype = *dtype;
            values.push(build_op(
                &mut graph,
                "Placeholder",
                &format!("save/value_{i}"),
                |d| Ok(d.set_attr_type("dtype", dtype)?),
            )?);
        }
        let inputs: Vec<Output> = values
            .iter()
            .map(|o| Output {
                operation: o.clone(),
                index: 0,
            })
            .collect();
        let dtypes: Vec<DataType> = key.iter().map(|(_, t)| *t).collect();
        let save = build_op(&mut graph, "SaveV2", "save", |d| {
            d.add_input(prefix.clone());
            d.add_input(names_op);
            d.add_input(slices_op);
            d.add_input_list(&inputs);
            Ok(d.set_attr_type_list("dtypes", &dtypes)?)
        })?;
        let session = Session::new(&SessionOptions::new(), &graph)
            .map_err(|e| crate::tf::status::error("TF_NewSession (checkpoint save)", &e))?;
        Ok(BundleWriter {
            key,
            _graph: graph,
            session,
            prefix,
            values,
            save,
        })
    }

    /// Whether `tensors` have this writer's names and dtypes, in its order.
    pub fn fits(&self, tensors: &[NamedTensor]) -> bool {
        tensors.len() == self.key.len()
            && tensors
                .iter()
                .zip(&self.key)
                .all(|(t, (name, dtype))| t.name == *name && t.tensor.data_type() == *dtype)
    }

    /// Writes `tensors` as the V2 checkpoint at `prefix` (see [`write_bundle`]).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if `tensors` do not [fit](BundleWriter::fits) this writer or
    /// `prefix` is not UTF-8; [`Error::TensorFlow`] if `SaveV2` fails.
    pub fn write(&self, prefix: &Path, tensors: &[NamedTensor]) -> Result<()> {
        let prefix_text = prefix_str(prefix)?;
        if !self.fits(tensors) {
            return Err(Error::InvalidArgument {
                what: format!("checkpoint {}", prefix.display()),
                reason: "the tensors are not the names and dtypes this writer was built for".into(),
            });
        }
        let prefix_value = Tensor::<String>::new(&[])
            .with_values(&[prefix_text.to_string()])
            .map_err(|e| crate::tf::status::error("building the checkpoint prefix", &e))?;
        let mut args = SessionRunArgs::new();
        args.add_feed(&self.prefix, 0, &prefix_value);
        for (placeholder, t) in self.values.iter().zip(tensors) {
            t.tensor.add_feed(&mut args, placeholder, 0);
        }
        args.add_target(&self.save);
        self.session
            .run(&mut args)
            .map_err(|e| crate::tf::status::error(format!("SaveV2 to {}", prefix.display()), &e))
    }
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
        .map_err(|e| crate::tf::status::error("TF_NewSession (checkpoint read)", &e))?;
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
        .map_err(|e| crate::tf::status::error("TF_CloseSession (checkpoint read)", &e))?;
    Ok(out)
}

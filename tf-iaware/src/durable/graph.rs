//! A checkpoint and the user's own single-tower graph: its variables ([`graph_variables`]),
//! whether a checkpoint fits them ([`check_fits`]), restoring one into a plain session of the
//! graph ([`restore_into`], [`restore_graph`]: the trained model out) and reading every variable
//! of a session ([`read_variables`], what a checkpoint of it holds).

use std::path::Path;

use tensorflow::{
    DataType, Graph, ImportGraphDefOptions, Operation, Output, Session, SessionOptions,
    SessionRunArgs,
};

use super::bundle::{build_op, list_bundle, restore_op};
use super::tensor::{unsupported, HostTensor, NamedTensor};
use super::CheckpointEntry;
use crate::error::{Error, Result};

/// A variable of a graph: a resource variable (`VarHandleOp`) or a TF1 reference variable
/// (`VariableV2`).
#[derive(Clone, Debug)]
pub struct GraphVariable {
    /// Its op name: the checkpoint key, as Python's `Saver` writes it.
    pub name: String,
    /// Element type.
    pub dtype: DataType,
    /// Dimensions from its `shape` attribute (`None`: unknown rank; `Some(None)` entries:
    /// unknown dimensions, which any checkpointed size fits).
    pub dims: Option<Vec<Option<i64>>>,
    /// Whether it is a resource variable (`VarHandleOp`).
    pub resource: bool,
    /// Its op.
    pub op: Operation,
}

/// Every variable of `graph`, sorted by name.
///
/// # Errors
/// [`Error::BadAttr`] naming a variable whose `dtype` or `shape` attribute cannot be read.
pub fn graph_variables(graph: &Graph) -> Result<Vec<GraphVariable>> {
    let mut out = Vec::new();
    for op in graph.operation_iter() {
        let op_type = op.op_type().unwrap_or_default();
        let resource = match op_type.as_str() {
            "VarHandleOp" => true,
            "VariableV2" | "Variable" => false,
            _ => continue,
        };
        let name = op.name().unwrap_or_default();
        let bad = |attr: &str, e: tensorflow::Status| Error::BadAttr {
            node: name.clone(),
            attr: attr.into(),
            reason: e.to_string(),
        };
        let dtype = op.get_attr_type("dtype").map_err(|e| bad("dtype", e))?;
        let shape = op.get_attr_shape("shape").map_err(|e| bad("shape", e))?;
        let dims = shape
            .dims()
            .map(|rank| (0..rank).map(|i| shape[i]).collect::<Vec<_>>());
        out.push(GraphVariable {
            name,
            dtype,
            dims,
            resource,
            op,
        });
    }
    out.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(out)
}

/// Checks that the checkpoint at `prefix`, whose index lists `entries`, holds every variable of
/// `variables` with the same dtype and a shape that fits. Extra tensors in the checkpoint are
/// allowed (`Saver` allows them too).
///
/// # Errors
/// [`Error::CheckpointMismatch`] naming the first variable that is missing or differs.
pub fn check_fits(
    prefix: &Path,
    entries: &[CheckpointEntry],
    variables: &[GraphVariable],
) -> Result<()> {
    let fail = |variable: &str, reason: String| Error::CheckpointMismatch {
        path: prefix.to_path_buf(),
        variable: variable.to_string(),
        reason,
    };
    for v in variables {
        let Some(e) = entries.iter().find(|e| e.name == v.name) else {
            return Err(fail(&v.name, "is not in the checkpoint".into()));
        };
        if e.dtype != v.dtype {
            return Err(fail(
                &v.name,
                format!(
                    "is {} in the checkpoint but {} in the graph",
                    e.dtype, v.dtype
                ),
            ));
        }
        if let Some(dims) = &v.dims {
            let fits = dims.len() == e.dims.len()
                && dims
                    .iter()
                    .zip(&e.dims)
                    .all(|(g, &c)| g.is_none_or(|g| g < 0 || g as u64 == c));
            if !fits {
                let graph: Vec<String> = dims
                    .iter()
                    .map(|d| d.map_or("?".to_string(), |d| d.to_string()))
                    .collect();
                return Err(fail(
                    &v.name,
                    format!(
                        "has shape {:?} in the checkpoint but [{}] in the graph",
                        e.dims,
                        graph.join(", ")
                    ),
                ));
            }
        }
    }
    Ok(())
}

/// A name prefix no op of `graph` has, for the ops tf-iaware adds to it.
fn fresh_scope(graph: &Graph, base: &str) -> String {
    let taken = |s: &str| {
        graph.operation_iter().any(|op| {
            op.name()
                .is_ok_and(|n| n == s || n.starts_with(&format!("{s}/")))
        })
    };
    let mut k = 0usize;
    loop {
        let scope = if k == 0 {
            base.to_string()
        } else {
            format!("{base}_{k}")
        };
        if !taken(&scope) {
            return scope;
        }
        k += 1;
    }
}

/// Assigns every variable of `graph` its value in the checkpoint at `prefix`, in `session`
/// (a session of `graph`): adds one `RestoreV2` and an assign per variable (under a fresh
/// `tf_iaware_restore` scope) and runs them. Nothing is assigned unless every variable fits.
/// Returns the names of the variables restored, sorted.
///
/// # Errors
/// [`Error::CheckpointFile`] if the checkpoint cannot be read whole;
/// [`Error::CheckpointMismatch`] naming a variable the checkpoint lacks or holds with another
/// dtype or shape; [`Error::TensorFlow`] if building or running the restore fails.
pub fn restore_into(graph: &mut Graph, session: &Session, prefix: &Path) -> Result<Vec<String>> {
    let entries = list_bundle(prefix)?;
    let variables = graph_variables(graph)?;
    check_fits(prefix, &entries, &variables)?;
    if variables.is_empty() {
        return Ok(Vec::new());
    }
    let prefix_text = prefix.to_str().ok_or_else(|| Error::InvalidArgument {
        what: format!("checkpoint prefix {}", prefix.display()),
        reason: "is not valid UTF-8".into(),
    })?;
    let scope = fresh_scope(graph, "tf_iaware_restore");
    let list: Vec<(String, DataType)> = variables
        .iter()
        .map(|v| (v.name.clone(), v.dtype))
        .collect();
    let restore = restore_op(graph, &format!("{scope}/RestoreV2"), prefix_text, &list)?;
    let mut assigns = Vec::with_capacity(variables.len());
    for (i, v) in variables.iter().enumerate() {
        let value = Output {
            operation: restore.clone(),
            index: i as i32,
        };
        let name = format!("{scope}/assign_{i}");
        let assign = if v.resource {
            build_op(graph, "AssignVariableOp", &name, |d| {
                d.add_input(v.op.clone());
                d.add_input(value);
                Ok(d.set_attr_type("dtype", v.dtype)?)
            })?
        } else {
            build_op(graph, "Assign", &name, |d| {
                d.add_input(v.op.clone());
                d.add_input(value);
                Ok(d.set_attr_type("T", v.dtype)?)
            })?
        };
        assigns.push(assign);
    }
    let mut args = SessionRunArgs::new();
    for a in &assigns {
        args.add_target(a);
    }
    session.run(&mut args).map_err(|e| Error::CheckpointFile {
        path: prefix.to_path_buf(),
        reason: format!("restoring it failed: {e}"),
    })?;
    Ok(variables.into_iter().map(|v| v.name).collect())
}

/// The user's trained model: their graph, a plain local session of it with every variable
/// restored from a checkpoint, and the names of those variables.
pub struct RestoredModel {
    /// The user's graph (plus the restore ops tf-iaware added under `tf_iaware_restore`).
    pub graph: Graph,
    /// A plain in-process session of `graph`, variables assigned.
    pub session: Session,
    /// Names of the variables restored, sorted.
    pub variables: Vec<String>,
}

impl std::fmt::Debug for RestoredModel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RestoredModel")
            .field("variables", &self.variables)
            .finish_non_exhaustive()
    }
}

/// Imports the user's single-tower `graph_def` (a serialized GraphDef, as exported from Python
/// or by `Graph::to_graph_def`) into a fresh graph, opens a plain local session of it and
/// restores every variable from the checkpoint at `prefix` ([`restore_into`]).
///
/// # Errors
/// [`Error::TensorFlow`] if the GraphDef does not import or the session does not open; as
/// [`restore_into`] otherwise.
pub fn restore_graph(graph_def: &[u8], prefix: &Path) -> Result<RestoredModel> {
    let mut graph = Graph::new();
    graph
        .import_graph_def(graph_def, &ImportGraphDefOptions::new())
        .map_err(|e| crate::tf::status::error("TF_GraphImportGraphDef", &e))?;
    let session = Session::new(&SessionOptions::new(), &graph)
        .map_err(|e| crate::tf::status::error("TF_NewSession", &e))?;
    let variables = restore_into(&mut graph, &session, prefix)?;
    Ok(RestoredModel {
        graph,
        session,
        variables,
    })
}

/// Reads every variable of `graph` in `session`, sorted by name: what a checkpoint of this
/// session holds (adds a read op per variable under a fresh `tf_iaware_read` scope).
///
/// # Errors
/// [`Error::InvalidArgument`] for a variable of a dtype checkpoints do not take;
/// [`Error::TensorFlow`] if a variable is uninitialised or the run fails.
pub fn read_variables(graph: &mut Graph, session: &Session) -> Result<Vec<NamedTensor>> {
    let variables = graph_variables(graph)?;
    let scope = fresh_scope(graph, "tf_iaware_read");
    let mut reads = Vec::with_capacity(variables.len());
    for (i, v) in variables.iter().enumerate() {
        if !HostTensor::supports(v.dtype) {
            return Err(unsupported(&format!("variable `{}`", v.name), v.dtype));
        }
        let name = format!("{scope}/read_{i}");
        let read = if v.resource {
            build_op(graph, "ReadVariableOp", &name, |d| {
                d.add_input(v.op.clone());
                Ok(d.set_attr_type("dtype", v.dtype)?)
            })?
        } else {
            build_op(graph, "Identity", &name, |d| {
                d.add_input(v.op.clone());
                Ok(d.set_attr_type("T", v.dtype)?)
            })?
        };
        reads.push(read);
    }
    let mut args = SessionRunArgs::new();
    let tokens: Vec<_> = reads.iter().map(|r| args.request_fetch(r, 0)).collect();
    session
        .run(&mut args)
        .map_err(|e| crate::tf::status::error("reading the variables", &e))?;
    variables
        .iter()
        .zip(tokens)
        .map(|(v, token)| {
            Ok(NamedTensor {
                name: v.name.clone(),
                tensor: HostTensor::fetch(&mut args, token, v.dtype, &v.name)?,
            })
        })
        .collect()
}

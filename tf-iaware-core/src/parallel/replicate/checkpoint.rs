//! The ops a checkpoint of the replicated graph needs: for every float variable, a placeholder
//! for its saved value, an assign from it (all grouped under [`RESTORE_OP`]), a read for taking
//! checkpoints and a float flag that says whether it holds a value ([`initialized_op`]) — what
//! the driver's checkpoints and recovery use (`runtime::checkpoint`). Non-float variables (an
//! int64 global step) are not checkpointed.

use std::collections::HashSet;

use super::{refuse, Output, Role};
use crate::error::Result;
use crate::parallel::checkpoint::{initialized_op, restore_value_op, StateVar, RESTORE_OP};
use crate::proto::attr::{self, DT_BOOL, DT_FLOAT};
use crate::proto::NodeDef;

/// Adds the checkpoint ops of every float variable of `out` (see the module docs).
///
/// # Errors
/// [`Error::Replication`](crate::Error::Replication) when the graph already has an op of a name
/// these ops take.
pub(super) fn add_checkpoint_ops(out: &mut Output) -> Result<Vec<StateVar>> {
    let names: HashSet<String> = out.graph_def.node.iter().map(|n| n.name.clone()).collect();
    let mut added: Vec<NodeDef> = Vec::new();
    let mut state = Vec::new();
    let mut assigns = Vec::new();
    for var in &out.graph_def.node {
        let Some((var, assign)) = state_ops(var, &names, &mut added)? else {
            continue;
        };
        assigns.push(format!("^{assign}"));
        state.push(var);
    }
    if state.is_empty() {
        return Ok(state);
    }
    if names.contains(RESTORE_OP) {
        return Err(refuse(
            RESTORE_OP,
            "the graph already has an op of the name tf-iaware's restore op takes",
        ));
    }
    added.push(attr::node(RESTORE_OP, "NoOp", assigns, vec![]));
    for n in added {
        out.push(n, Role::Shared);
    }
    Ok(state)
}

/// The checkpoint ops of `var` added to `added`, if it is a float variable of known shape: its
/// state and the name of its restoring assign.
fn state_ops(
    var: &NodeDef,
    names: &HashSet<String>,
    added: &mut Vec<NodeDef>,
) -> Result<Option<(StateVar, String)>> {
    let resource = match var.op.as_str() {
        "VarHandleOp" => true,
        "VariableV2" | "Variable" => false,
        _ => return Ok(None),
    };
    if attr::get(var, "dtype").and_then(|a| a.r#type) != Some(DT_FLOAT) {
        return Ok(None);
    }
    let Some(shape) = attr::get(var, "shape").and_then(|a| a.shape) else {
        return Ok(None);
    };
    let Some(dims) = shape.dims().filter(|d| d.iter().all(|&x| x >= 0)) else {
        return Ok(None);
    };
    let v = var.name.clone();
    let value = restore_value_op(&v);
    let flag = initialized_op(&v);
    let read = format!("checkpoint/read/{v}");
    let assign = format!("restore/{v}/assign");
    let probe = format!("{flag}/is_initialized");
    for name in [&value, &flag, &read, &assign, &probe] {
        if names.contains(name) {
            return Err(refuse(
                name,
                "the graph already has an op of the name tf-iaware's checkpoint ops take",
            ));
        }
    }
    let float = || ("dtype", attr::dtype(DT_FLOAT));
    let t = || ("T", attr::dtype(DT_FLOAT));
    added.push(attr::node(
        &value,
        "Placeholder",
        vec![],
        vec![float(), ("shape", attr::shape(shape))],
    ));
    let (probe_op, assign_op, read_op, probe_attrs, typed) = if resource {
        (
            "VarIsInitializedOp",
            "AssignVariableOp",
            "ReadVariableOp",
            vec![],
            float(),
        )
    } else {
        (
            "IsVariableInitialized",
            "Assign",
            "Identity",
            vec![float()],
            t(),
        )
    };
    added.push(attr::node(&probe, probe_op, vec![v.clone()], probe_attrs));
    added.push(attr::node(
        &assign,
        assign_op,
        vec![v.clone(), value],
        vec![typed.clone()],
    ));
    added.push(attr::node(&read, read_op, vec![v.clone()], vec![typed]));
    added.push(attr::node(
        &flag,
        "Cast",
        vec![probe],
        vec![("SrcT", attr::dtype(DT_BOOL)), float_dst()],
    ));
    let state = StateVar {
        name: v,
        shape: dims,
        read,
        device: None,
    };
    Ok(Some((state, assign)))
}

/// `DstT = DT_FLOAT`.
fn float_dst() -> (&'static str, Vec<u8>) {
    ("DstT", attr::dtype(DT_FLOAT))
}

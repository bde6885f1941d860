//! What a checkpoint of a replicated graph holds: the names of the ops the replication adds for
//! it ([`RESTORE_OP`], [`restore_value_op`], [`initialized_op`]), the training-state variables
//! ([`StateVar`]) and their saved values ([`Checkpoint`]). Plain data; taking and restoring one
//! through a session is `tf_iaware::runtime::checkpoint`'s.

use serde::Serialize;

use crate::error::{Error, Result};

/// Name of the `NoOp` of a replicated graph that restores every state variable from its
/// placeholder (added by [`parallel::replicate`](crate::parallel::replicate)).
pub const RESTORE_OP: &str = "restore";

/// Name of the placeholder that feeds variable `var`'s checkpointed value to [`RESTORE_OP`].
pub fn restore_value_op(var: &str) -> String {
    format!("restore/{var}/value")
}

/// Name of the float flag that is 1 when variable `var` holds a value (0 after a restarted ps
/// lost it).
pub fn initialized_op(var: &str) -> String {
    format!("checkpoint/initialized/{var}")
}

/// A variable of the training state, with the op of the placed graph that reads it (the ops that
/// restore and probe it are named after it: [`restore_value_op`], [`initialized_op`]).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StateVar {
    /// Variable name (its `VarHandleOp`).
    pub name: String,
    /// Its shape (fixed: no unknown dimensions).
    pub shape: Vec<i64>,
    /// Its `ReadVariableOp`.
    pub read: String,
    /// The device it lives on (a ps task's CPU), when placed.
    pub device: Option<String>,
}

/// One variable's value in a checkpoint.
#[derive(Clone, Debug, PartialEq)]
pub struct SavedTensor {
    /// Variable name.
    pub name: String,
    /// Dimensions of the value.
    pub shape: Vec<u64>,
    /// The values, row-major.
    pub values: Vec<f32>,
}

/// Every state variable's value after `step` training steps, kept in the driver's memory.
#[derive(Clone, Debug, PartialEq)]
pub struct Checkpoint {
    /// Number of steps trained when it was taken (0: right after initialisation).
    pub step: usize,
    /// One tensor per state variable, in [`StateVar`] order.
    pub tensors: Vec<SavedTensor>,
}

impl Checkpoint {
    /// Size of the values, bytes (4 per f32).
    pub fn bytes(&self) -> usize {
        self.tensors.iter().map(|t| t.values.len() * 4).sum()
    }

    /// This checkpoint's tensor for every variable of `state`, in `state`'s order.
    ///
    /// # Errors
    /// [`Error::Checkpoint`] naming the variable that is missing, has another shape than the
    /// graph's, or whose values do not fill its shape.
    pub fn matching<'a>(&'a self, state: &[StateVar]) -> Result<Vec<&'a SavedTensor>> {
        let fail = |variable: &str, reason: String| Error::Checkpoint {
            step: self.step,
            variable: variable.to_string(),
            reason,
        };
        state
            .iter()
            .map(|v| {
                let t = self
                    .tensors
                    .iter()
                    .find(|t| t.name == v.name)
                    .ok_or_else(|| fail(&v.name, "is not in the checkpoint".into()))?;
                let graph_shape: Vec<u64> = v.shape.iter().map(|&d| d.max(0) as u64).collect();
                if t.shape != graph_shape {
                    return Err(fail(
                        &v.name,
                        format!(
                            "has shape {:?} in the checkpoint but {:?} in the graph",
                            t.shape, v.shape
                        ),
                    ));
                }
                let elements: u64 = t.shape.iter().product();
                if t.values.len() as u64 != elements {
                    return Err(fail(
                        &v.name,
                        format!(
                            "has {} values for shape {:?} ({elements} elements)",
                            t.values.len(),
                            t.shape
                        ),
                    ));
                }
                Ok(t)
            })
            .collect()
    }
}

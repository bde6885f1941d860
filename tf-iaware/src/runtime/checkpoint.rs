//! The driver's checkpoint of a data-parallel run: every training-state variable (weights and
//! optimiser slots) fetched from the parameter servers into memory in one run, and restored into
//! a new session after a ps — and the variables it held — was lost.

use tensorflow::{Operation, Tensor};

use super::session::PlacedSession;
use crate::error::{Error, Result};

pub use tf_iaware_core::parallel::checkpoint::*;

/// Fetches every variable of `state` from `session` in one run (under the session's deadline):
/// the checkpoint after `step` steps.
///
/// # Errors
/// [`Error::UnknownOp`] if the graph lacks a read op; [`Error::TensorFlow`] if the run fails (a
/// lost ps, say).
pub(crate) fn save(session: &PlacedSession, state: &[StateVar], step: usize) -> Result<Checkpoint> {
    let reads = state
        .iter()
        .map(|v| session.op(&v.read, "checkpoint read"))
        .collect::<Result<Vec<Operation>>>()?;
    let out = session.run(&[], &[], &reads, false)?;
    let tensors = state
        .iter()
        .zip(out.fetched)
        .map(|(v, t)| SavedTensor {
            name: v.name.clone(),
            shape: t.dims().to_vec(),
            values: t.to_vec(),
        })
        .collect();
    Ok(Checkpoint { step, tensors })
}

/// Assigns every variable of `state` its value in `checkpoint` (one run of [`RESTORE_OP`],
/// the values fed to its placeholders).
///
/// # Errors
/// [`Error::Checkpoint`] if the checkpoint does not fit `state`; [`Error::UnknownOp`] if the
/// graph lacks the restore ops; [`Error::TensorFlow`] if the run fails.
pub(crate) fn restore(
    session: &PlacedSession,
    state: &[StateVar],
    checkpoint: &Checkpoint,
) -> Result<()> {
    let saved = checkpoint.matching(state)?;
    let mut values = Vec::with_capacity(saved.len());
    for t in &saved {
        let tensor = Tensor::<f32>::new(&t.shape)
            .with_values(&t.values)
            .map_err(|e| Error::Checkpoint {
                step: checkpoint.step,
                variable: t.name.clone(),
                reason: format!("cannot become a tensor: {e}"),
            })?;
        values.push(tensor);
    }
    let mut feeds = Vec::with_capacity(values.len());
    for (v, tensor) in state.iter().zip(&values) {
        feeds.push((session.op(&restore_value_op(&v.name), "restore")?, tensor));
    }
    let target = session.op(RESTORE_OP, "restore")?;
    session.run(&feeds, &[target], &[], false).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn var(name: &str, shape: &[i64]) -> StateVar {
        StateVar {
            name: name.into(),
            shape: shape.to_vec(),
            read: format!("{name}/Read/ReadVariableOp"),
            device: None,
        }
    }

    fn checkpoint() -> Checkpoint {
        Checkpoint {
            step: 5,
            tensors: vec![
                SavedTensor {
                    name: "w".into(),
                    shape: vec![2, 3],
                    values: vec![0.5; 6],
                },
                SavedTensor {
                    name: "b".into(),
                    shape: vec![3],
                    values: vec![0.0; 3],
                },
            ],
        }
    }

    #[test]
    fn matching_follows_the_graphs_order_and_counts_bytes() {
        let c = checkpoint();
        let m = c.matching(&[var("b", &[3]), var("w", &[2, 3])]).unwrap();
        assert_eq!(m[0].name, "b");
        assert_eq!(m[1].name, "w");
        assert_eq!(c.bytes(), 36);
    }

    #[test]
    fn a_checkpoint_that_does_not_fit_names_the_variable() {
        let c = checkpoint();
        let err = c.matching(&[var("w", &[3, 2])]).unwrap_err().to_string();
        assert!(err.contains("`w`") && err.contains("[2, 3]"), "{err}");
        let err = c.matching(&[var("gone", &[1])]).unwrap_err().to_string();
        assert!(err.contains("`gone`") && err.contains("not in"), "{err}");
        let mut short = checkpoint();
        short.tensors[1].values.pop();
        let err = short.matching(&[var("b", &[3])]).unwrap_err().to_string();
        assert!(err.contains("step 5") && err.contains("2 values"), "{err}");
    }
}

//! The zoo models' trainable state, for data-parallel plans. Their replicated training graphs
//! are made like any user's: the single-tower graph through
//! [`parallel::replicate`](crate::parallel::replicate) (see `runtime::data_parallel`).

use crate::error::Result;
use crate::parallel::VarInfo;

/// The trainable variables of model `name` with their sizes, in creation order.
///
/// # Errors
/// [`Error::UnknownModel`](crate::Error::UnknownModel); [`Error::TensorFlow`](crate::Error::TensorFlow) if building fails.
pub fn variables(name: &str) -> Result<Vec<VarInfo>> {
    let model = super::build(name, 1, 1)?;
    Ok(model
        .net
        .vars()
        .iter()
        .map(|v| VarInfo {
            name: v.name.clone(),
            bytes: v.shape.iter().product::<i64>().max(1) as u64 * 4,
        })
        .collect())
}

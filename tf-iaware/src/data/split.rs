//! Splitting one data set into training and held-out rows.

use super::dataset::{Dataset, InMemory};
use super::sampler::Sampler;
use crate::error::{Error, Result};
use tf_iaware_core::data::Columns;

/// Splits `data` into (training, held-out) data sets: `fraction` of its rows, drawn with
/// `seed`, held out (at least one row on each side).
///
/// # Errors
/// [`Error::InvalidArgument`] for a fraction outside (0, 1) or fewer than two rows.
pub fn split(data: &InMemory, fraction: f64, seed: u64) -> Result<(InMemory, InMemory)> {
    let n = data.len();
    if !(fraction > 0.0 && fraction < 1.0) || n < 2 {
        return Err(Error::InvalidArgument {
            what: format!("held-out split of {}", data.name()),
            reason: format!(
                "fraction {fraction} of {n} rows: need a fraction in (0, 1) and two rows"
            ),
        });
    }
    let order = Sampler::new(n, seed).take(n);
    let k = ((n as f64 * fraction).round() as usize).clamp(1, n - 1);
    let part = |idx: &[usize], what: &str| -> Result<InMemory> {
        let batch = data.columns().gather(idx, None)?;
        let name = format!("{} ({what})", data.name());
        Ok(InMemory::new(Columns::new(name, batch.tensors)?))
    };
    Ok((
        part(&order[k..], "training")?,
        part(&order[..k], "held out")?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tf_iaware_core::data::HostTensor;

    #[test]
    fn every_row_lands_on_one_side() {
        let x = HostTensor::new(vec![10], (0..10i64).collect::<Vec<_>>().into()).unwrap();
        let data = InMemory::from_tensors("d", [("x", x)]).unwrap();
        let (train, held) = split(&data, 0.3, 1).unwrap();
        assert_eq!((train.len(), held.len()), (7, 3));
        let mut all: Vec<i64> = [&train, &held]
            .iter()
            .flat_map(|d| match &d.columns().get("x").unwrap().values {
                tf_iaware_core::data::Values::I64(v) => v.clone(),
                _ => Vec::new(),
            })
            .collect();
        all.sort_unstable();
        assert_eq!(all, (0..10).collect::<Vec<_>>());
        assert!(split(&data, 1.0, 1).is_err() && split(&data, 0.0, 1).is_err());
    }
}

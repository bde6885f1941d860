//! The 8×8 handwritten digits embedded in the `smartcore` crate: 1,797 images of 8×8 pixels with
//! integer intensities 0–16, ten classes — the copy of the UCI test set that scikit-learn ships as
//! `load_digits`.

use super::dataset::InMemory;
use super::images::LabelledImages;
use crate::error::Result;
use tf_iaware_core::data::InputSpec;

/// Where the digits come from.
pub const DIGITS_SOURCE: &str = "UCI Optical Recognition of Handwritten Digits (Alpaydin & \
     Kaynak, 1998), test set as shipped by scikit-learn, embedded in the smartcore crate 0.7";

/// Their licence.
pub const DIGITS_LICENCE: &str = "data CC BY 4.0 (UCI ML Repository); smartcore Apache-2.0";

/// The digits as images of 8×8×1 with intensities scaled to [0, 1].
pub fn digits() -> LabelledImages {
    let set = smartcore::dataset::digits::load_dataset();
    let pixels = set.data.iter().map(|&v| v / 16.0).collect();
    // Labels are stored as floats 0.0–9.0.
    let labels = set.target.iter().map(|&y| y.round() as u8).collect();
    LabelledImages {
        shape: [8, 8, 1],
        pixels,
        labels,
        classes: 10,
    }
}

/// The digits as (training, held-out) data sets for a graph's image and label inputs (see
/// [`LabelledImages::dataset`]), with `held_out` of each class held out, drawn with `seed`.
///
/// # Errors
/// As [`LabelledImages::dataset`]; [`Error::InvalidArgument`] for a fraction outside (0, 1).
///
/// [`Error::InvalidArgument`]: crate::Error::InvalidArgument
pub fn digits_split(specs: &[InputSpec], held_out: f64, seed: u64) -> Result<(InMemory, InMemory)> {
    let (train, test) = digits().split(held_out, seed)?;
    Ok((
        train.dataset("digits (training)", specs)?,
        test.dataset("digits (held out)", specs)?,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digits_are_the_known_set() {
        let d = digits();
        assert_eq!(d.len(), 1797);
        assert_eq!(d.pixels.len(), 1797 * 64);
        assert!(d.pixels.iter().all(|p| (0.0..=1.0).contains(p)));
        let mut per_class = [0usize; 10];
        for &y in &d.labels {
            per_class[y as usize] += 1;
        }
        // About 180 of each digit.
        assert!(
            per_class.iter().all(|&n| (170..=185).contains(&n)),
            "{per_class:?}"
        );
    }
}

//! Labelled images in memory, their held-out split and their mapping into a model's input.

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::SeedableRng;

use super::dataset::InMemory;
use crate::error::{Error, Result};
use tf_iaware_core::data::{HostTensor, InputSpec, Values};

/// Images of one shape with a class each.
#[derive(Clone, Debug, PartialEq)]
pub struct LabelledImages {
    /// Height, width, channels of one image.
    pub shape: [usize; 3],
    /// Every image's pixels, row-major (height, width, channels), one image after another.
    pub pixels: Vec<f32>,
    /// Every image's class, `0..classes`.
    pub labels: Vec<u8>,
    /// Number of classes.
    pub classes: usize,
}

fn bad(what: &str, reason: String) -> Error {
    Error::InvalidArgument {
        what: what.into(),
        reason,
    }
}

impl LabelledImages {
    /// Number of images.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// Values per image.
    pub(crate) fn image_len(&self) -> usize {
        self.shape.iter().product()
    }

    /// The images at `indices`, in that order.
    fn subset(&self, indices: &[usize]) -> LabelledImages {
        let n = self.image_len();
        let mut pixels = Vec::with_capacity(indices.len() * n);
        for &i in indices {
            pixels.extend_from_slice(&self.pixels[i * n..(i + 1) * n]);
        }
        LabelledImages {
            shape: self.shape,
            pixels,
            labels: indices.iter().map(|&i| self.labels[i]).collect(),
            classes: self.classes,
        }
    }

    /// Splits into (training, held-out) with `held_out` of each class (rounded) held out, drawn
    /// with `seed`: the same seed gives the same split, and no image is in both.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for a fraction outside (0, 1) or a split that leaves either
    /// side empty.
    pub(crate) fn split(
        &self,
        held_out: f64,
        seed: u64,
    ) -> Result<(LabelledImages, LabelledImages)> {
        if !(held_out > 0.0 && held_out < 1.0) {
            return Err(bad(
                "held-out fraction",
                format!("{held_out} is not in (0, 1)"),
            ));
        }
        let mut rng = StdRng::seed_from_u64(seed);
        let (mut train, mut test) = (Vec::new(), Vec::new());
        for class in 0..self.classes {
            let mut members: Vec<usize> = (0..self.len())
                .filter(|&i| self.labels[i] as usize == class)
                .collect();
            members.shuffle(&mut rng);
            let k = (members.len() as f64 * held_out).round() as usize;
            test.extend_from_slice(&members[..k]);
            train.extend_from_slice(&members[k..]);
        }
        if train.is_empty() || test.is_empty() {
            return Err(bad(
                "held-out fraction",
                format!(
                    "{held_out} of {} images leaves {} to train on and {} held out",
                    self.len(),
                    train.len(),
                    test.len()
                ),
            ));
        }
        // Classes interleaved, not in blocks, in a fixed order.
        train.shuffle(&mut rng);
        test.sort_unstable();
        Ok((self.subset(&train), self.subset(&test)))
    }

    /// The images mapped into a model's input of `input` shape (without the batch): `[H, W, C]`
    /// or a flat `[H·W]` of a square image. Each image is enlarged by the largest whole factor
    /// that fits (nearest neighbour), centred with zero padding, and its channels repeated —
    /// the 8×8 digits become 28×28×1 (×3, 2 pixels of padding) for `lenet` and `mlp`, and
    /// 32×32×3 (×4) for the CIFAR-shaped models.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the shape if the images do not fit into it.
    pub(crate) fn fit_to(&self, input: &[i64]) -> Result<LabelledImages> {
        let describe = || format!("{input:?}");
        let (h, w, c) = match *input {
            [h, w, c] if h > 0 && w > 0 && c > 0 => (h as usize, w as usize, c as usize),
            [n] if n > 0 => {
                let side = (n as f64).sqrt().round() as usize;
                if side * side != n as usize {
                    return Err(bad(
                        "model input",
                        format!("flat input {} is not a square image", describe()),
                    ));
                }
                (side, side, 1)
            }
            _ => {
                return Err(bad(
                    "model input",
                    format!(
                        "{} is not an image shape [H, W, C] or a flat square [H·W]",
                        describe()
                    ),
                ))
            }
        };
        let [ih, iw, ic] = self.shape;
        let factor = (h / ih).min(w / iw);
        if factor == 0 {
            return Err(bad(
                "model input",
                format!("{ih}×{iw} images do not fit into {}", describe()),
            ));
        }
        if ic != 1 && ic != c {
            return Err(bad(
                "model input",
                format!("{ic}-channel images cannot fill {c} channels"),
            ));
        }
        let (top, left) = ((h - ih * factor) / 2, (w - iw * factor) / 2);
        let out_len = h * w * c;
        let mut pixels = vec![0.0f32; self.len() * out_len];
        for (image, out) in self
            .pixels
            .chunks(self.image_len())
            .zip(pixels.chunks_mut(out_len))
        {
            for y in 0..ih * factor {
                for x in 0..iw * factor {
                    for ch in 0..c {
                        let src = ((y / factor) * iw + x / factor) * ic + ch.min(ic - 1);
                        out[((top + y) * w + left + x) * c + ch] = image[src];
                    }
                }
            }
        }
        Ok(LabelledImages {
            shape: [h, w, c],
            pixels,
            labels: self.labels.clone(),
            classes: self.classes,
        })
    }
}

impl LabelledImages {
    /// The images as a data set called `name` for a graph's two inputs: the image input (fitted
    /// as `LabelledImages::fit_to` says) and the label input, which the input of the smaller
    /// row is taken to be — `float` one-hot rows of the classes (`[classes]`), or an integer
    /// class (`int64`, `int32` or `uint8`, row `[]` or `[1]`).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] unless `specs` are two inputs, the images fit the image input
    /// and the label input is one of those forms.
    pub fn dataset(&self, name: &str, specs: &[InputSpec]) -> Result<InMemory> {
        let [a, b] = specs else {
            return Err(bad(
                "digits data",
                format!(
                    "feed a graph of two inputs (image, label), not {}",
                    specs.len()
                ),
            ));
        };
        let row = |s: &InputSpec| s.row_len().unwrap_or(usize::MAX);
        let (image, label) = if row(a) <= row(b) { (b, a) } else { (a, b) };
        let fitted = self.fit_to(image.row_shape())?;
        let rows = self.len() as u64;
        let pixels: Values = match image.dtype.0 {
            1 => fitted.pixels.into(),
            2 => fitted
                .pixels
                .iter()
                .map(|&p| f64::from(p))
                .collect::<Vec<_>>()
                .into(),
            _ => {
                return Err(bad(
                    "digits data",
                    format!(
                        "image input `{}` is {}, not float",
                        image.name,
                        image.dtype.name()
                    ),
                ))
            }
        };
        let mut image_shape = vec![rows];
        image_shape.extend(image.row_shape().iter().map(|&d| d as u64));
        let classes = self.classes;
        let labels: Values = match (label.dtype.0, label.row_shape()) {
            (1, [c]) if *c as usize == classes => {
                let mut y = vec![0.0f32; self.len() * classes];
                for (row, &l) in self.labels.iter().enumerate() {
                    y[row * classes + l as usize] = 1.0;
                }
                y.into()
            }
            (9, [] | [1]) => self
                .labels
                .iter()
                .map(|&l| i64::from(l))
                .collect::<Vec<_>>()
                .into(),
            (3, [] | [1]) => self
                .labels
                .iter()
                .map(|&l| i32::from(l))
                .collect::<Vec<_>>()
                .into(),
            (4, [] | [1]) => self.labels.clone().into(),
            _ => {
                return Err(bad(
                    "digits data",
                    format!(
                        "label input `{}` ({} {:?}) is neither float one-hot [{classes}] nor an \
                         integer class",
                        label.name,
                        label.dtype.name(),
                        label.row_shape()
                    ),
                ))
            }
        };
        let mut label_shape = vec![rows];
        label_shape.extend(label.row_shape().iter().map(|&d| d as u64));
        InMemory::from_tensors(
            name,
            [
                (image.name.clone(), HostTensor::new(image_shape, pixels)?),
                (label.name.clone(), HostTensor::new(label_shape, labels)?),
            ],
        )
    }
}

/// Share of rows of `logits` (one row of `classes` scores per image) whose largest score is at
/// the image's label.
pub fn accuracy(logits: &[f32], labels: &[u8], classes: usize) -> f64 {
    if labels.is_empty() || classes == 0 {
        return 0.0;
    }
    let right = logits
        .chunks(classes)
        .zip(labels)
        .filter(|(row, &label)| {
            let best = row
                .iter()
                .enumerate()
                .fold(
                    (0, f32::NEG_INFINITY),
                    |b, (i, &v)| if v > b.1 { (i, v) } else { b },
                );
            best.0 == label as usize
        })
        .count();
    right as f64 / labels.len() as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny() -> LabelledImages {
        LabelledImages {
            shape: [2, 2, 1],
            pixels: (0..40).map(|v| v as f32).collect(),
            labels: (0..10).map(|i| (i % 2) as u8).collect(),
            classes: 2,
        }
    }

    #[test]
    fn split_is_deterministic_stratified_and_disjoint() {
        let d = crate::data::digits();
        let (a, b) = d.split(0.2, 7).unwrap();
        let (a2, b2) = d.split(0.2, 7).unwrap();
        assert_eq!(a, a2);
        assert_eq!(b, b2);
        assert_eq!(a.len() + b.len(), d.len());
        // No held-out image is also a training image (the digits have no exact duplicates
        // across the split's images: compare the pixels themselves).
        let train: std::collections::HashSet<Vec<u32>> = a
            .pixels
            .chunks(64)
            .map(|c| c.iter().map(|v| v.to_bits()).collect())
            .collect();
        let leaked = b
            .pixels
            .chunks(64)
            .filter(|c| train.contains(&c.iter().map(|v| v.to_bits()).collect::<Vec<_>>()))
            .count();
        assert_eq!(leaked, 0);
        for class in 0..10u8 {
            let held = b.labels.iter().filter(|&&y| y == class).count();
            assert!((33..=38).contains(&held), "class {class}: {held} held out");
        }
        let (c, _) = d.split(0.2, 8).unwrap();
        assert_ne!(a.labels, c.labels, "another seed, another split");
    }

    #[test]
    fn split_refuses_absurd_fractions() {
        for f in [0.0, 1.0, -0.5, f64::NAN, 0.01] {
            assert!(tiny().split(f, 1).is_err(), "{f}");
        }
    }

    #[test]
    fn fit_enlarges_pads_and_repeats_channels() {
        let d = tiny();
        let big = d.fit_to(&[5, 5, 3]).unwrap();
        assert_eq!(big.shape, [5, 5, 3]);
        // ×2 into 4×4, at offset (0, 0) with one row and column of padding.
        let first = &big.pixels[..75];
        assert_eq!(first[0..3], [0.0, 0.0, 0.0]);
        assert_eq!(first[(3 * 5 + 3) * 3], 3.0); // bottom-right source pixel
        assert_eq!(first[(4 * 5 + 4) * 3], 0.0); // padding
        let flat = d.fit_to(&[16]).unwrap();
        assert_eq!(flat.shape, [4, 4, 1]);
        assert!(d.fit_to(&[15]).is_err());
        assert!(d.fit_to(&[1, 1, 1]).is_err());
        assert!(d.fit_to(&[4, 4, -1]).is_err());
        let digits = crate::data::digits().fit_to(&[28, 28, 1]).unwrap();
        assert_eq!(digits.pixels.len(), 1797 * 784);
    }

    #[test]
    fn accuracy_counts_arg_max_matches() {
        assert_eq!(
            accuracy(&[0.1, 0.9, 0.8, 0.2, 0.3, 0.7], &[1, 0, 0], 2),
            2.0 / 3.0
        );
        assert_eq!(accuracy(&[], &[], 2), 0.0);
    }
}

//! Host tensors into TensorFlow: a [`HostTensor`] of any element type becomes a [`FeedTensor`],
//! which adds itself to a `SessionRunArgs` as the feed of a placeholder.

use tensorflow::{Operation, SessionRunArgs, Tensor};

use crate::error::{Error, Result};
use tf_iaware_core::data::{Batch, HostTensor, Values};

/// A `tensorflow` tensor of one of the element types a [`Batch`] carries.
#[derive(Debug)]
pub enum FeedTensor {
    /// `float`.
    F32(Tensor<f32>),
    /// `double`.
    F64(Tensor<f64>),
    /// `int32`.
    I32(Tensor<i32>),
    /// `int64`.
    I64(Tensor<i64>),
    /// `uint8`.
    U8(Tensor<u8>),
    /// `bool`.
    Bool(Tensor<bool>),
    /// `string`.
    Str(Tensor<String>),
}

impl FeedTensor {
    /// The tensor holding `t`'s values; `input` names it in errors.
    ///
    /// # Errors
    /// [`Error::DataFormat`] for a string element that is not UTF-8 (the `tensorflow` crate's
    /// string tensors hold `String`s); [`Error::TensorFlow`] if TensorFlow refuses the shape.
    pub fn from_host(input: &str, t: &HostTensor) -> Result<FeedTensor> {
        fn make<T: tensorflow::TensorType>(
            input: &str,
            dims: &[u64],
            v: &[T],
        ) -> Result<Tensor<T>> {
            Tensor::new(dims).with_values(v).map_err(|e| {
                crate::tf::status::error(format!("making the tensor of input `{input}`"), &e)
            })
        }
        let d = &t.shape;
        Ok(match &t.values {
            Values::F32(v) => FeedTensor::F32(make(input, d, v)?),
            Values::F64(v) => FeedTensor::F64(make(input, d, v)?),
            Values::I32(v) => FeedTensor::I32(make(input, d, v)?),
            Values::I64(v) => FeedTensor::I64(make(input, d, v)?),
            Values::U8(v) => FeedTensor::U8(make(input, d, v)?),
            Values::Bool(v) => FeedTensor::Bool(make(input, d, v)?),
            Values::Str(v) => {
                let strings = v
                    .iter()
                    .map(|b| String::from_utf8(b.clone()))
                    .collect::<std::result::Result<Vec<_>, _>>()
                    .map_err(|e| Error::DataFormat {
                        file: format!("input `{input}`"),
                        reason: format!("a string element is not UTF-8 ({e})"),
                    })?;
                FeedTensor::Str(make(input, d, &strings)?)
            }
        })
    }

    /// Adds this tensor as the feed of output `index` of `op`.
    pub fn add_feed<'l>(&'l self, args: &mut SessionRunArgs<'l>, op: &Operation, index: i32) {
        match self {
            FeedTensor::F32(t) => args.add_feed(op, index, t),
            FeedTensor::F64(t) => args.add_feed(op, index, t),
            FeedTensor::I32(t) => args.add_feed(op, index, t),
            FeedTensor::I64(t) => args.add_feed(op, index, t),
            FeedTensor::U8(t) => args.add_feed(op, index, t),
            FeedTensor::Bool(t) => args.add_feed(op, index, t),
            FeedTensor::Str(t) => args.add_feed(op, index, t),
        }
    }

    /// The tensor's dimensions.
    pub fn dims(&self) -> &[u64] {
        match self {
            FeedTensor::F32(t) => t.dims(),
            FeedTensor::F64(t) => t.dims(),
            FeedTensor::I32(t) => t.dims(),
            FeedTensor::I64(t) => t.dims(),
            FeedTensor::U8(t) => t.dims(),
            FeedTensor::Bool(t) => t.dims(),
            FeedTensor::Str(t) => t.dims(),
        }
    }
}

/// Every tensor of `batch` as a [`FeedTensor`], by input name (in name order).
///
/// # Errors
/// As [`FeedTensor::from_host`].
pub fn feeds(batch: &Batch) -> Result<Vec<(String, FeedTensor)>> {
    batch
        .tensors
        .iter()
        .map(|(name, t)| Ok((name.clone(), FeedTensor::from_host(name, t)?)))
        .collect()
}

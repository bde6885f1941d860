//! A user's training data: the [`Dataset`] trait the trainer consumes (batches of named, typed
//! host tensors matched to the graph's inputs), the [`Feeder`] that walks it in seeded epochs and
//! gives each replica its own rows, and the ready sources — arrays built in Rust ([`InMemory`]),
//! NumPy `.npy`/`.npz` and TFRecord files of `tf.train.Example` ([`open`]), [`Synthetic`] rows,
//! and the 8×8 handwritten digits a package ships ([`digits_split`]). A held-out set is a second
//! data set. [`FeedTensor`] turns a batch's tensors into TensorFlow feeds of any element type.
//!
//! ```
//! use tf_iaware::data::{Feeder, HostTensor, InMemory, InputSpec};
//! use tf_iaware::graph::DType;
//!
//! let x = HostTensor::new(vec![4, 2], vec![0.0f32; 8].into())?;
//! let y = HostTensor::new(vec![4], vec![0i64, 1, 1, 0].into())?;
//! let data = InMemory::from_tensors("in memory", [("x", x), ("y", y)])?;
//! // The graph's inputs (from `input_specs(&op_graph, &sidecar)` for a real graph).
//! let specs = [
//!     InputSpec { name: "x".into(), dtype: DType::FLOAT, shape: vec![-1, 2] },
//!     InputSpec { name: "y".into(), dtype: DType(9), shape: vec![-1] },
//! ];
//! let mut feeder = Feeder::new(Box::new(data), &specs, 42)?;
//! let step = feeder.take_step(&[3, 1])?; // two replicas' shares of one step
//! assert_eq!((step[0].rows, step[1].rows), (3, 1));
//! # Ok::<(), tf_iaware::Error>(())
//! ```

pub use tf_iaware_core::{io, record};

mod dataset;
mod digits;
mod feed;
mod files;
mod images;
mod npy;
mod sampler;
mod split;

pub use dataset::{feedable, in_order, Dataset, Feeder, InMemory, Shard, Synthetic};
pub use feed::{feeds, FeedTensor};
pub use files::{open, open_npy, open_npz, open_tfrecords, MAX_DATA_BYTES, TFRECORD_EXTENSIONS};
pub use tf_iaware_core::data::{
    check_label_values, encode_example, encode_npy, input_specs, Batch, Columns, ExampleRows,
    HostTensor, InputSpec, Values,
};

pub use digits::{digits, digits_split, DIGITS_LICENCE, DIGITS_SOURCE};
pub use images::{accuracy, LabelledImages};
pub use sampler::Sampler;
pub use split::split;

/// Names of the data sets `--data` accepts.
pub const DATA_SETS: &[&str] = &["digits", "synthetic"];

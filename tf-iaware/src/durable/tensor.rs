//! [`HostTensor`]: a tensor in the driver's memory whatever its element type, and
//! [`NamedTensor`], one variable's value under its name — what checkpoints hold.

use tensorflow::{
    BFloat16, DataType, FetchToken, Operation, SessionRunArgs, Shape, Tensor, TensorType,
};

use crate::error::{Error, Result};
use crate::parallel::checkpoint::SavedTensor;

macro_rules! host_tensor {
    ($($variant:ident($t:ty)),* $(,)?) => {
        /// A tensor of any element type a variable can have (float, double, the integers, bool,
        /// bfloat16, string), as the `tensorflow` crate holds it.
        #[derive(Debug, PartialEq)]
        pub enum HostTensor {
            $(
                #[doc = concat!("Elements of type `", stringify!($t), "`.")]
                $variant(Tensor<$t>),
            )*
        }

        $(
            impl From<Tensor<$t>> for HostTensor {
                fn from(t: Tensor<$t>) -> Self {
                    HostTensor::$variant(t)
                }
            }
        )*

        // Cloned element by element: the `tensorflow` crate's own `Clone` of a string tensor
        // dereferences a null TF_Tensor (0.21) when the tensor was built on the Rust side.
        impl Clone for HostTensor {
            fn clone(&self) -> Self {
                match self {
                    $(HostTensor::$variant(t) => HostTensor::$variant(
                        Tensor::new(t.dims())
                            .with_values(t)
                            .expect("a tensor's values fill its own dimensions"),
                    ),)*
                }
            }
        }

        impl HostTensor {
            /// Its TensorFlow dtype.
            pub fn data_type(&self) -> DataType {
                match self {
                    $(HostTensor::$variant(_) => <$t>::data_type(),)*
                }
            }

            /// Its dimensions.
            pub fn dims(&self) -> &[u64] {
                match self {
                    $(HostTensor::$variant(t) => t.dims(),)*
                }
            }

            /// Adds the tensor to `args` as the value of `op`'s output `index`.
            pub(crate) fn add_feed<'l>(&'l self, args: &mut SessionRunArgs<'l>, op: &Operation, index: i32) {
                match self {
                    $(HostTensor::$variant(t) => args.add_feed(op, index, t),)*
                }
            }

            /// Takes the fetched tensor of dtype `dtype` from `args`; `what` names it in errors.
            pub(crate) fn fetch(
                args: &mut SessionRunArgs<'_>,
                token: FetchToken,
                dtype: DataType,
                what: &str,
            ) -> Result<HostTensor> {
                let fail = |e: tensorflow::Status| crate::tf::status::error(format!("fetching {what}"), &e);
                $(
                    if dtype == <$t>::data_type() {
                        return args.fetch::<$t>(token).map(HostTensor::$variant).map_err(fail);
                    }
                )*
                Err(unsupported(what, dtype))
            }

            /// Whether a tensor of `dtype` can be held.
            pub fn supports(dtype: DataType) -> bool {
                $(dtype == <$t>::data_type() ||)* false
            }
        }
    };
}

host_tensor!(
    Float(f32),
    Double(f64),
    Int32(i32),
    Int64(i64),
    Int16(i16),
    Int8(i8),
    UInt8(u8),
    UInt16(u16),
    UInt32(u32),
    UInt64(u64),
    Bool(bool),
    BFloat16(BFloat16),
    String(String),
);

/// The error for a dtype [`HostTensor`] cannot hold (half, complex, resource, variant, …).
pub(crate) fn unsupported(what: &str, dtype: DataType) -> Error {
    Error::InvalidArgument {
        what: what.to_string(),
        reason: format!(
            "dtype {dtype} is not one tf-iaware checkpoints (float, double, the integers, bool, \
             bfloat16, string)"
        ),
    }
}

impl HostTensor {
    /// A float tensor of dimensions `dims` holding `values` (row-major).
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if the values do not fill the dimensions.
    pub fn float(dims: &[u64], values: &[f32]) -> Result<Self> {
        Tensor::new(dims)
            .with_values(values)
            .map(HostTensor::Float)
            .map_err(|e| Error::InvalidArgument {
                what: format!("float tensor of shape {dims:?}"),
                reason: e.to_string(),
            })
    }

    /// The values if this is a float tensor.
    pub fn as_f32(&self) -> Option<&[f32]> {
        match self {
            HostTensor::Float(t) => Some(t),
            _ => None,
        }
    }

    /// Its shape as the graph writes it (`Shape` of known dimensions).
    pub fn shape(&self) -> Shape {
        Shape::from(Some(
            self.dims()
                .iter()
                .map(|&d| Some(d as i64))
                .collect::<Vec<_>>(),
        ))
    }
}

/// One tensor of a checkpoint: a variable's (or slot's) name in the user's single-tower graph and
/// its value.
#[derive(Clone, Debug, PartialEq)]
pub struct NamedTensor {
    /// The checkpoint key: the variable's op name (`conv1/kernel`, `conv1/kernel/Adam`).
    pub name: String,
    /// Its value.
    pub tensor: HostTensor,
}

impl NamedTensor {
    /// `tensor` under `name`.
    pub fn new(name: impl Into<String>, tensor: impl Into<HostTensor>) -> Self {
        NamedTensor {
            name: name.into(),
            tensor: tensor.into(),
        }
    }
}

/// The tensors of a driver-memory checkpoint (`runtime::checkpoint`'s [`SavedTensor`]s, float
/// values under the single-tower names), ready to write to disk.
///
/// # Errors
/// [`Error::InvalidArgument`] naming the variable whose values do not fill its shape.
pub fn from_saved(saved: &[SavedTensor]) -> Result<Vec<NamedTensor>> {
    saved
        .iter()
        .map(|t| {
            HostTensor::float(&t.shape, &t.values)
                .map(|tensor| NamedTensor {
                    name: t.name.clone(),
                    tensor,
                })
                .map_err(|e| Error::InvalidArgument {
                    what: format!("variable `{}`", t.name),
                    reason: e.to_string(),
                })
        })
        .collect()
}

/// The float tensors of `tensors` as driver-memory [`SavedTensor`]s (what
/// `runtime::checkpoint` restores into a replicated graph); other dtypes are left out.
pub fn to_saved(tensors: &[NamedTensor]) -> Vec<SavedTensor> {
    tensors
        .iter()
        .filter_map(|t| {
            t.tensor.as_f32().map(|values| SavedTensor {
                name: t.name.clone(),
                shape: t.tensor.dims().to_vec(),
                values: values.to_vec(),
            })
        })
        .collect()
}

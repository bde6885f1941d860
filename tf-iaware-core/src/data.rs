//! A training data set as plain data: typed host tensors ([`Values`], [`HostTensor`]), a table of
//! named columns with one row per example ([`Columns`]), the graph inputs they feed
//! ([`InputSpec`], from the sidecar and the graph's placeholder types) and `tf.train.Example`
//! records decoded into rows ([`ExampleRows`]).
//!
//! Everything a data set can get wrong is checked here, before TensorFlow sees it: a missing
//! input, an element type or a row shape that differs from the graph's, arrays with different row
//! counts, no rows at all. Errors name the input and the data set's file.

mod example;
mod labels;
mod npy;

pub use example::{encode_example, ExampleRows};
pub use labels::check_label_values;
pub use npy::encode_npy;

use std::collections::BTreeMap;

use crate::error::{Error, Result};
use crate::graph::{Attr, DType, OpGraph, Sidecar};

/// One graph input a data set feeds: the placeholder's name, element type and shape (a leading
/// `-1` or fixed number is the batch dimension; the rest is the shape of one row).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InputSpec {
    /// Placeholder name (= array name in an `.npz`, feature name in an Example).
    pub name: String,
    /// Element type the graph takes.
    pub dtype: DType,
    /// Shape, batch dimension first.
    pub shape: Vec<i64>,
}

impl InputSpec {
    /// The shape of one row: the shape without its batch dimension.
    pub fn row_shape(&self) -> &[i64] {
        self.shape.get(1..).unwrap_or(&[])
    }

    /// Elements of one row, or `None` when the row shape has an unknown (`-1`) dimension.
    pub fn row_len(&self) -> Option<usize> {
        self.row_shape().iter().try_fold(1usize, |acc, &d| {
            usize::try_from(d).ok().and_then(|d| acc.checked_mul(d))
        })
    }

    /// Whether a row of `shape` fits (`-1` in the graph's row shape matches any size).
    pub fn accepts_row(&self, shape: &[u64]) -> bool {
        let want = self.row_shape();
        want.len() == shape.len()
            && want
                .iter()
                .zip(shape)
                .all(|(&w, &g)| w < 0 || w as u64 == g)
    }
}

/// The inputs `sidecar` names, with the element type of each placeholder in `graph` (its `dtype`
/// attribute) and the sidecar's shape.
///
/// # Errors
/// [`Error::UnknownOp`] for an input the graph lacks; [`Error::InvalidArgument`] for an input
/// without a batch dimension (a scalar is not fed from data).
pub fn input_specs(graph: &OpGraph, sidecar: &Sidecar) -> Result<Vec<InputSpec>> {
    sidecar
        .inputs
        .iter()
        .map(|(name, shape)| {
            let node = graph.node(graph.require(name, "sidecar `inputs`")?);
            let dtype = match node.attrs.get("dtype") {
                Some(Attr::Type(t)) => *t,
                _ => node.outputs.first().map_or(DType::FLOAT, |o| o.dtype),
            };
            if shape.is_empty() {
                return Err(Error::InvalidArgument {
                    what: format!("sidecar input `{name}`"),
                    reason: "is a scalar: data sets feed inputs with a batch dimension".into(),
                });
            }
            Ok(InputSpec {
                name: name.clone(),
                dtype: dtype.base(),
                shape: shape.clone(),
            })
        })
        .collect()
}

/// A flat buffer of one element type: the values of a tensor, row-major.
#[derive(Clone, Debug, PartialEq)]
pub enum Values {
    /// `float`.
    F32(Vec<f32>),
    /// `double`.
    F64(Vec<f64>),
    /// `int32`.
    I32(Vec<i32>),
    /// `int64`.
    I64(Vec<i64>),
    /// `uint8`.
    U8(Vec<u8>),
    /// `bool`.
    Bool(Vec<bool>),
    /// `string`: each element a byte string.
    Str(Vec<Vec<u8>>),
}

/// Applies `$body` to the vector inside any variant of [`Values`].
macro_rules! each {
    ($v:expr, $x:ident => $body:expr) => {
        match $v {
            Values::F32($x) => $body,
            Values::F64($x) => $body,
            Values::I32($x) => $body,
            Values::I64($x) => $body,
            Values::U8($x) => $body,
            Values::Bool($x) => $body,
            Values::Str($x) => $body,
        }
    };
}

impl Values {
    /// The TensorFlow element type.
    pub fn dtype(&self) -> DType {
        match self {
            Values::F32(_) => DType::FLOAT,
            Values::F64(_) => DType(2),
            Values::I32(_) => DType(3),
            Values::I64(_) => DType(9),
            Values::U8(_) => DType::UINT8,
            Values::Bool(_) => DType(10),
            Values::Str(_) => DType(7),
        }
    }

    /// An empty buffer of `dtype` with room for `capacity` elements, or `None` for an element
    /// type data sets do not hold (half, complex, resource, …).
    pub fn with_capacity(dtype: DType, capacity: usize) -> Option<Values> {
        Some(match dtype.base().0 {
            1 => Values::F32(Vec::with_capacity(capacity)),
            2 => Values::F64(Vec::with_capacity(capacity)),
            3 => Values::I32(Vec::with_capacity(capacity)),
            9 => Values::I64(Vec::with_capacity(capacity)),
            4 => Values::U8(Vec::with_capacity(capacity)),
            10 => Values::Bool(Vec::with_capacity(capacity)),
            7 => Values::Str(Vec::with_capacity(capacity)),
            _ => return None,
        })
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        each!(self, v => v.len())
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The memory the elements take, bytes (a string's bytes plus its vector's header).
    pub fn byte_len(&self) -> u64 {
        let n = self.len() as u64;
        match self {
            Values::Str(v) => v
                .iter()
                .map(|s| (s.len() + std::mem::size_of::<Vec<u8>>()) as u64)
                .sum(),
            Values::F64(_) | Values::I64(_) => n * 8,
            Values::F32(_) | Values::I32(_) => n * 4,
            Values::U8(_) | Values::Bool(_) => n,
        }
    }

    /// Appends elements `range` of `other`; `false` (and nothing appended) when `other` is of
    /// another element type or the range is out of bounds.
    pub fn extend_from(&mut self, other: &Values, range: std::ops::Range<usize>) -> bool {
        macro_rules! ext {
            ($($var:ident),*) => {
                match (self, other) {
                    $((Values::$var(a), Values::$var(b)) => match b.get(range) {
                        Some(s) => { a.extend_from_slice(s); true }
                        None => false,
                    },)*
                    _ => false,
                }
            };
        }
        ext!(F32, F64, I32, I64, U8, Bool, Str)
    }
}

macro_rules! from_vec {
    ($($t:ty => $var:ident),*) => {$(
        impl From<Vec<$t>> for Values {
            fn from(v: Vec<$t>) -> Values {
                Values::$var(v)
            }
        }
    )*};
}
from_vec!(f32 => F32, f64 => F64, i32 => I32, i64 => I64, u8 => U8, bool => Bool, Vec<u8> => Str);

/// A tensor on the host: its shape and its values (`shape`'s product of them).
#[derive(Clone, Debug, PartialEq)]
pub struct HostTensor {
    /// Dimensions; the first is the rows in a data set or a batch.
    pub shape: Vec<u64>,
    /// The values, row-major.
    pub values: Values,
}

impl HostTensor {
    /// A tensor of `shape` holding `values`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] if the number of values is not the shape's product.
    pub fn new(shape: Vec<u64>, values: Values) -> Result<HostTensor> {
        let want = shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d));
        if want != Some(values.len() as u64) {
            return Err(Error::InvalidArgument {
                what: format!("tensor of shape {shape:?}"),
                reason: format!("holds {} values, not the shape's product", values.len()),
            });
        }
        Ok(HostTensor { shape, values })
    }

    /// The first row holding a NaN or infinite value, and that value (`None` for integer,
    /// boolean and string tensors, and for finite floats).
    pub fn first_non_finite(&self) -> Option<(usize, f64)> {
        let per_row = self.row_len().max(1);
        let at = |i: usize, v: f64| (i / per_row, v);
        match &self.values {
            Values::F32(v) => v
                .iter()
                .position(|x| !x.is_finite())
                .map(|i| at(i, f64::from(v[i]))),
            Values::F64(v) => v.iter().position(|x| !x.is_finite()).map(|i| at(i, v[i])),
            _ => None,
        }
    }

    /// The first value that is no class of `classes` (an integer below 0, or `classes` or
    /// above) and its row: `None` for float, boolean and string tensors, and where every value
    /// is a class.
    pub fn first_outside_classes(&self, classes: u64) -> Option<(usize, i64)> {
        let per_row = self.row_len().max(1);
        let outside = |v: i64| v < 0 || v as u64 >= classes;
        let found = match &self.values {
            Values::I64(v) => v.iter().position(|&x| outside(x)).map(|i| (i, v[i])),
            Values::I32(v) => v
                .iter()
                .position(|&x| outside(x.into()))
                .map(|i| (i, i64::from(v[i]))),
            Values::U8(v) => v
                .iter()
                .position(|&x| outside(x.into()))
                .map(|i| (i, i64::from(v[i]))),
            _ => None,
        };
        found.map(|(i, v)| (i / per_row, v))
    }

    /// Rows: the first dimension (1 for a scalar).
    pub fn rows(&self) -> usize {
        self.shape.first().map_or(1, |&r| r as usize)
    }

    /// Elements of one row.
    pub fn row_len(&self) -> usize {
        self.shape
            .get(1..)
            .map_or(1, |s| s.iter().product::<u64>() as usize)
    }
}

impl HostTensor {
    /// The class of each row of a label tensor (`input` names it in errors): the index of the
    /// largest value of a `float`/`double` row (one-hot or scores), or the value of an integer
    /// row of one element (`int64`, `int32`, `uint8`; shape `[rows]` or `[rows, 1]`) — for
    /// held-out accuracy against logits.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the input for strings, `bool`s, integer rows of more
    /// than one element, or a negative class.
    pub fn classes(&self, input: &str) -> Result<Vec<usize>> {
        let n = self.row_len().max(1);
        let bad = |reason: String| Error::InvalidArgument {
            what: format!("labels `{input}`"),
            reason,
        };
        fn argmax<T: PartialOrd + Copy>(row: &[T]) -> usize {
            let mut best = 0;
            for (i, v) in row.iter().enumerate() {
                if *v > row[best] {
                    best = i;
                }
            }
            best
        }
        let class = |v: i64| usize::try_from(v).map_err(|_| bad(format!("class {v} is negative")));
        let one = || {
            if n == 1 {
                Ok(())
            } else {
                Err(bad(format!(
                    "integer rows of {n} elements are not one class each"
                )))
            }
        };
        match &self.values {
            Values::F32(v) => Ok(v.chunks(n).map(argmax).collect()),
            Values::F64(v) => Ok(v.chunks(n).map(argmax).collect()),
            Values::I64(v) => one().and_then(|_| v.iter().map(|&c| class(c)).collect()),
            Values::I32(v) => one().and_then(|_| v.iter().map(|&c| class(c.into())).collect()),
            Values::U8(v) => one().map(|_| v.iter().map(|&c| usize::from(c)).collect()),
            other => Err(bad(format!(
                "{} values are not classes",
                other.dtype().name()
            ))),
        }
    }
}

/// One batch: a tensor per input name, all with the same number of rows.
#[derive(Clone, Debug, PartialEq)]
pub struct Batch {
    /// Rows in every tensor.
    pub rows: usize,
    /// Input name → tensor (`[rows, …row shape]`).
    pub tensors: BTreeMap<String, HostTensor>,
}

/// A data set held in memory: named columns, each a tensor whose first dimension is the rows.
#[derive(Clone, Debug, PartialEq)]
pub struct Columns {
    file: String,
    rows: usize,
    columns: BTreeMap<String, HostTensor>,
}

impl Columns {
    /// The columns of a data set called `file` (a path, "in memory") in errors.
    ///
    /// # Errors
    /// [`Error::DataEmpty`] for no columns or no rows; [`Error::DataRows`] for columns with
    /// different numbers of rows; [`Error::DataFormat`] for a column without a row dimension.
    pub fn new(file: impl Into<String>, columns: BTreeMap<String, HostTensor>) -> Result<Columns> {
        let file = file.into();
        let mut first: Option<(&String, usize)> = None;
        for (name, t) in &columns {
            if t.shape.is_empty() {
                return Err(Error::DataFormat {
                    file,
                    reason: format!("`{name}` is a scalar, not rows"),
                });
            }
            let rows = t.rows();
            match first {
                None => first = Some((name, rows)),
                Some((other, other_rows)) if other_rows != rows => {
                    return Err(Error::DataRows {
                        file,
                        input: name.clone(),
                        rows,
                        other: other.clone(),
                        other_rows,
                    })
                }
                Some(_) => {}
            }
        }
        let rows = match first {
            Some((_, r)) if r > 0 => r,
            _ => return Err(Error::DataEmpty { file }),
        };
        Ok(Columns {
            file,
            rows,
            columns,
        })
    }

    /// The data set's name in errors (its file).
    pub fn file(&self) -> &str {
        &self.file
    }

    /// Rows (examples).
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// The column called `name`.
    pub fn get(&self, name: &str) -> Option<&HostTensor> {
        self.columns.get(name)
    }

    /// Column names, comma-separated (for messages).
    fn names(&self) -> String {
        self.columns.keys().cloned().collect::<Vec<_>>().join(", ")
    }

    /// Checks that every input of `specs` has a column of its element type and row shape.
    /// Columns no input names are allowed (and never fed).
    ///
    /// # Errors
    /// [`Error::DataMissing`], [`Error::DataType`] or [`Error::DataShape`] naming the input.
    pub fn check_against(&self, specs: &[InputSpec]) -> Result<()> {
        for spec in specs {
            let t = self.get(&spec.name).ok_or_else(|| Error::DataMissing {
                file: self.file.clone(),
                input: spec.name.clone(),
                available: self.names(),
            })?;
            if t.values.dtype() != spec.dtype {
                return Err(Error::DataType {
                    file: self.file.clone(),
                    input: spec.name.clone(),
                    expected: spec.dtype.name(),
                    found: t.values.dtype().name(),
                });
            }
            if !spec.accepts_row(&t.shape[1..]) {
                return Err(Error::DataShape {
                    file: self.file.clone(),
                    input: spec.name.clone(),
                    expected: spec.row_shape().to_vec(),
                    found: t.shape[1..].to_vec(),
                });
            }
        }
        Ok(())
    }

    /// The rows at `indices`, in that order, of the columns `names` (every column if `None`).
    ///
    /// # Errors
    /// [`Error::DataShare`] for an index past the last row; [`Error::DataMissing`] for a name
    /// with no column.
    pub fn gather(&self, indices: &[usize], names: Option<&[String]>) -> Result<Batch> {
        if let Some(&bad) = indices.iter().find(|&&i| i >= self.rows) {
            return Err(Error::DataShare {
                file: self.file.clone(),
                rows: bad + 1,
                len: self.rows,
            });
        }
        let all: Vec<String>;
        let names = match names {
            Some(n) => n,
            None => {
                all = self.columns.keys().cloned().collect();
                &all
            }
        };
        let mut tensors = BTreeMap::new();
        for name in names {
            let t = self.get(name).ok_or_else(|| Error::DataMissing {
                file: self.file.clone(),
                input: name.clone(),
                available: self.names(),
            })?;
            let n = t.row_len();
            let mut values = Values::with_capacity(t.values.dtype(), indices.len() * n)
                .unwrap_or_else(|| t.values.clone());
            for &i in indices {
                // Same type and in bounds: checked by `new` and above.
                values.extend_from(&t.values, i * n..(i + 1) * n);
            }
            let mut shape = t.shape.clone();
            shape[0] = indices.len() as u64;
            tensors.insert(name.clone(), HostTensor { shape, values });
        }
        Ok(Batch {
            rows: indices.len(),
            tensors,
        })
    }
}

#[cfg(test)]
mod tests {
    use prost::Message;

    use super::*;
    use crate::proto::{BytesList, Example, Feature, FeatureKind};

    fn spec(name: &str, dtype: DType, shape: &[i64]) -> InputSpec {
        InputSpec {
            name: name.into(),
            dtype,
            shape: shape.to_vec(),
        }
    }

    fn columns() -> Columns {
        let x = HostTensor::new(vec![3, 2], Values::F32(vec![0., 1., 2., 3., 4., 5.])).unwrap();
        let y = HostTensor::new(vec![3], Values::I64(vec![7, 8, 9])).unwrap();
        Columns::new("mem", BTreeMap::from([("x".into(), x), ("y".into(), y)])).unwrap()
    }

    #[test]
    fn gather_takes_rows_in_order() {
        let c = columns();
        let b = c.gather(&[2, 0], None).unwrap();
        assert_eq!(b.rows, 2);
        assert_eq!(b.tensors["x"].shape, [2, 2]);
        assert_eq!(b.tensors["x"].values, Values::F32(vec![4., 5., 0., 1.]));
        assert_eq!(b.tensors["y"].values, Values::I64(vec![9, 7]));
        let only = c.gather(&[1], Some(&["y".to_string()])).unwrap();
        assert_eq!(only.tensors.len(), 1);
        assert!(matches!(
            c.gather(&[3], None),
            Err(Error::DataShare { len: 3, .. })
        ));
    }

    #[test]
    fn classes_from_one_hot_rows_and_integers() {
        let one_hot = HostTensor::new(vec![2, 3], vec![0.0f32, 0.0, 1.0, 0.0, 1.0, 0.0].into());
        assert_eq!(one_hot.unwrap().classes("y").unwrap(), [2, 1]);
        let ints = HostTensor::new(vec![3, 1], vec![4i64, 0, 9].into()).unwrap();
        assert_eq!(ints.classes("y").unwrap(), [4, 0, 9]);
        let neg = HostTensor::new(vec![1], vec![-1i32].into()).unwrap();
        assert!(neg.classes("y").unwrap_err().to_string().contains("`y`"));
        assert!(HostTensor::new(vec![1, 2], vec![1i64, 2].into())
            .unwrap()
            .classes("y")
            .is_err());
    }

    #[test]
    fn columns_refuse_empty_and_ragged_data() {
        let x = HostTensor::new(vec![3, 2], Values::F32(vec![0.; 6])).unwrap();
        let y = HostTensor::new(vec![2], Values::I64(vec![1, 2])).unwrap();
        let e = Columns::new("f.npz", BTreeMap::from([("x".into(), x), ("y".into(), y)]));
        assert!(
            matches!(
                e,
                Err(Error::DataRows {
                    rows: 2,
                    other_rows: 3,
                    ..
                })
            ),
            "{e:?}"
        );
        let empty = HostTensor::new(vec![0, 2], Values::F32(vec![])).unwrap();
        let e = Columns::new("f.npz", BTreeMap::from([("x".into(), empty)]));
        assert!(matches!(e, Err(Error::DataEmpty { .. })));
        assert!(matches!(
            Columns::new("f", BTreeMap::new()),
            Err(Error::DataEmpty { .. })
        ));
        assert!(HostTensor::new(vec![2, 2], Values::F32(vec![0.; 3])).is_err());
    }

    #[test]
    fn check_names_the_input_and_the_file() {
        let c = columns();
        c.check_against(&[spec("x", DType::FLOAT, &[-1, 2]), spec("y", DType(9), &[8])])
            .unwrap();
        let e = c
            .check_against(&[spec("x", DType::FLOAT, &[-1, 3])])
            .unwrap_err();
        assert!(
            matches!(&e, Error::DataShape { input, .. } if input == "x"),
            "{e}"
        );
        assert!(e.to_string().contains("mem"), "{e}");
        let e = c.check_against(&[spec("y", DType(3), &[-1])]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "data mem: input `y` is int64 but the graph takes int32"
        );
        let e = c
            .check_against(&[spec("z", DType::FLOAT, &[-1])])
            .unwrap_err();
        assert!(
            matches!(&e, Error::DataMissing { available, .. } if available == "x, y"),
            "{e}"
        );
        assert!(c
            .check_against(&[spec("x", DType::FLOAT, &[-1, -1])])
            .is_ok());
    }

    #[test]
    fn examples_round_trip_with_conversions() {
        let specs = [
            spec("x", DType::FLOAT, &[-1, 2]),
            spec("label", DType(3), &[-1]),
            spec("raw", DType::UINT8, &[-1, 3]),
            spec("name", DType(7), &[-1, 1]),
        ];
        let mut rows = ExampleRows::new("t.tfrecord", &specs).unwrap();
        for i in 0..2u8 {
            let f = Values::F32(vec![f32::from(i), 0.5]);
            let l = Values::I64(vec![i64::from(i) + 4]);
            let s = Values::Str(vec![vec![b'a' + i]]);
            let bytes = encode_example([("x", &f), ("label", &l), ("name", &s)]);
            // `raw` as one byte string (tf.io.decode_raw's layout).
            let mut ex = Example::decode(&bytes[..]).unwrap();
            ex.features.as_mut().unwrap().feature.insert(
                "raw".into(),
                Feature {
                    kind: Some(FeatureKind::BytesList(BytesList {
                        value: vec![vec![i, 2, 3]],
                    })),
                },
            );
            rows.push_serialized(&ex.encode_to_vec(), i.into()).unwrap();
        }
        let c = rows.into_columns().unwrap();
        assert_eq!(c.rows(), 2);
        c.check_against(&specs).unwrap();
        assert_eq!(
            c.get("x").unwrap().values,
            Values::F32(vec![0., 0.5, 1., 0.5])
        );
        assert_eq!(c.get("label").unwrap().values, Values::I32(vec![4, 5]));
        assert_eq!(c.get("label").unwrap().shape, [2]);
        assert_eq!(
            c.get("raw").unwrap().values,
            Values::U8(vec![0, 2, 3, 1, 2, 3])
        );
        assert_eq!(
            c.get("name").unwrap().values,
            Values::Str(vec![b"a".to_vec(), b"b".to_vec()])
        );
    }

    #[test]
    fn bad_examples_are_typed_errors_naming_input_file_and_record() {
        let specs = [
            spec("x", DType::FLOAT, &[-1, 2]),
            spec("y", DType(9), &[-1]),
        ];
        let mut rows = ExampleRows::new("t.tfrecord", &specs).unwrap();
        let x = Values::F32(vec![1., 2.]);
        let y = Values::I64(vec![1]);
        let e = rows
            .push_serialized(&encode_example([("x", &x)]), 5)
            .unwrap_err();
        assert!(
            matches!(&e, Error::DataMissing { input, .. } if input == "y"),
            "{e}"
        );
        assert!(e.to_string().contains("t.tfrecord (record 5)"), "{e}");
        let three = Values::F32(vec![1., 2., 3.]);
        let e = rows
            .push_serialized(&encode_example([("x", &three), ("y", &y)]), 0)
            .unwrap_err();
        assert!(
            matches!(&e, Error::DataShape { found, .. } if found == &[3]),
            "{e}"
        );
        let e = rows
            .push_serialized(&encode_example([("x", &x), ("y", &x)]), 0)
            .unwrap_err();
        assert!(
            matches!(&e, Error::DataType { input, found, .. } if input == "y" && found == "float_list"),
            "{e}"
        );
        let e = rows.push_serialized(b"\xff\xff\xff", 0).unwrap_err();
        assert!(matches!(e, Error::DataFormat { .. }), "{e}");
        let big = Values::I64(vec![300]);
        let mut u8s = ExampleRows::new("t", &[spec("y", DType::UINT8, &[-1])]).unwrap();
        assert!(u8s
            .push_serialized(&encode_example([("y", &big)]), 0)
            .is_err());
        assert_eq!(rows.rows(), 0, "nothing appended on error");
        assert!(matches!(rows.into_columns(), Err(Error::DataEmpty { .. })));
        assert!(ExampleRows::new("t", &[spec("x", DType::FLOAT, &[-1, -1])]).is_err());
        assert!(ExampleRows::new("t", &[spec("x", DType(19), &[-1])]).is_err());
    }

    #[test]
    fn specs_take_the_placeholder_types() {
        let mut b = crate::graph::OpGraphBuilder::new();
        let x = b.add("x", "Placeholder").unwrap();
        b.node_mut(x)
            .attrs
            .insert("dtype".into(), Attr::Type(DType::FLOAT));
        let y = b.add("y", "Placeholder").unwrap();
        b.node_mut(y)
            .attrs
            .insert("dtype".into(), Attr::Type(DType(9)));
        let g = b.build().unwrap();
        let sidecar = Sidecar {
            inputs: BTreeMap::from([("x".into(), vec![-1, 4]), ("y".into(), vec![-1])]),
            init: "init".into(),
            train: "train".into(),
            loss: "loss".into(),
            one_hot: vec![],
            batch: None,
            logits: None,
            label: None,
        };
        let specs = input_specs(&g, &sidecar).unwrap();
        assert_eq!(specs[0], spec("x", DType::FLOAT, &[-1, 4]));
        assert_eq!(specs[1].dtype, DType(9));
        let mut missing = sidecar.clone();
        missing.inputs.insert("z".into(), vec![-1]);
        assert!(matches!(
            input_specs(&g, &missing),
            Err(Error::UnknownOp { .. })
        ));
    }
}

//! `tf.train.Example` records as data: decoding them into rows of [`Columns`] checked against
//! the graph's inputs, and encoding a row.

use std::collections::BTreeMap;

use prost::Message;

use super::{Columns, HostTensor, InputSpec, Values};
use crate::error::{Error, Result};
use crate::proto::{BytesList, Example, Feature, FeatureKind, Features, FloatList, Int64List};

/// Rows decoded from `tf.train.Example` records for a set of inputs, collected into
/// [`Columns`]. Feature name = input name; `float_list` feeds `float`/`double` inputs,
/// `int64_list` feeds `int64`/`int32`/`uint8`/`bool` inputs (range-checked), `bytes_list` feeds
/// `string` inputs, or a `uint8` input from one byte string of the row's length (as
/// `tf.io.decode_raw`).
#[derive(Clone, Debug)]
pub struct ExampleRows {
    file: String,
    specs: Vec<InputSpec>,
    columns: Vec<Values>,
    rows: usize,
}

impl ExampleRows {
    /// A collector of rows for `specs`, read from `file` (named in errors).
    ///
    /// # Errors
    /// [`Error::DataType`] for an input of an element type no Example list holds;
    /// [`Error::DataShape`] for a row shape with an unknown (`-1`) dimension.
    pub fn new(file: impl Into<String>, specs: &[InputSpec]) -> Result<ExampleRows> {
        let file = file.into();
        let mut columns = Vec::new();
        for spec in specs {
            if spec.row_len().is_none() {
                return Err(Error::DataShape {
                    file,
                    input: spec.name.clone(),
                    expected: spec.row_shape().to_vec(),
                    found: Vec::new(),
                });
            }
            columns.push(
                Values::with_capacity(spec.dtype, 0).ok_or_else(|| Error::DataType {
                    file: file.clone(),
                    input: spec.name.clone(),
                    expected: spec.dtype.name(),
                    found: "tf.train.Example features (float_list, int64_list, bytes_list)".into(),
                })?,
            );
        }
        Ok(ExampleRows {
            file,
            specs: specs.to_vec(),
            columns,
            rows: 0,
        })
    }

    /// Rows added so far.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Names `file` in the errors of later records and as the data set's name (for rows read
    /// from several files).
    pub fn set_file(&mut self, file: impl Into<String>) {
        self.file = file.into();
    }

    /// Decodes one serialized Example (`record` is its index in the file, for errors) and
    /// appends its row.
    ///
    /// # Errors
    /// [`Error::DataFormat`] for bytes that are not an Example; [`Error::DataMissing`],
    /// [`Error::DataType`] or [`Error::DataShape`] (a value count other than the row's
    /// elements) naming the input. Nothing is appended on error.
    pub fn push_serialized(&mut self, bytes: &[u8], record: usize) -> Result<()> {
        let at = || format!("{} (record {record})", self.file);
        let example = Example::decode(bytes).map_err(|e| Error::DataFormat {
            file: at(),
            reason: format!("not a tf.train.Example: {e}"),
        })?;
        let features = example.features.unwrap_or_default().feature;
        let mut row = Vec::with_capacity(self.specs.len());
        for spec in &self.specs {
            let kind = features
                .get(&spec.name)
                .and_then(|f| f.kind.as_ref())
                .ok_or_else(|| Error::DataMissing {
                    file: at(),
                    input: spec.name.clone(),
                    available: features.keys().cloned().collect::<Vec<_>>().join(", "),
                })?;
            row.push(feature_values(kind, spec, &at)?);
        }
        for (col, values) in self.columns.iter_mut().zip(&row) {
            col.extend_from(values, 0..values.len());
        }
        self.rows += 1;
        Ok(())
    }

    /// The rows as columns (`[rows, …row shape]` per input).
    ///
    /// # Errors
    /// [`Error::DataEmpty`] if no row was added.
    pub fn into_columns(self) -> Result<Columns> {
        let mut map = BTreeMap::new();
        for (spec, values) in self.specs.iter().zip(self.columns) {
            let mut shape = vec![self.rows as u64];
            shape.extend(spec.row_shape().iter().map(|&d| d as u64));
            map.insert(spec.name.clone(), HostTensor { shape, values });
        }
        Columns::new(self.file, map)
    }
}

/// One feature's values as `spec`'s element type, checked against its row length.
fn feature_values(kind: &FeatureKind, spec: &InputSpec, at: &dyn Fn() -> String) -> Result<Values> {
    let n = spec.row_len().unwrap_or(0);
    let mismatch = || Error::DataType {
        file: at(),
        input: spec.name.clone(),
        expected: spec.dtype.name(),
        found: kind.name().into(),
    };
    let out_of_range = |v: i64| Error::DataFormat {
        file: at(),
        reason: format!(
            "input `{}`: value {v} does not fit {}",
            spec.name,
            spec.dtype.name()
        ),
    };
    let values = match (kind, spec.dtype.0) {
        (FeatureKind::FloatList(l), 1) => Values::F32(l.value.clone()),
        (FeatureKind::FloatList(l), 2) => Values::F64(l.value.iter().map(|&v| v.into()).collect()),
        (FeatureKind::Int64List(l), 9) => Values::I64(l.value.clone()),
        (FeatureKind::Int64List(l), 3) => Values::I32(
            l.value
                .iter()
                .map(|&v| i32::try_from(v).map_err(|_| out_of_range(v)))
                .collect::<Result<_>>()?,
        ),
        (FeatureKind::Int64List(l), 4) => Values::U8(
            l.value
                .iter()
                .map(|&v| u8::try_from(v).map_err(|_| out_of_range(v)))
                .collect::<Result<_>>()?,
        ),
        (FeatureKind::Int64List(l), 10) => Values::Bool(
            l.value
                .iter()
                .map(|&v| match v {
                    0 => Ok(false),
                    1 => Ok(true),
                    v => Err(out_of_range(v)),
                })
                .collect::<Result<_>>()?,
        ),
        (FeatureKind::BytesList(l), 4) if l.value.len() == 1 => Values::U8(l.value[0].clone()),
        (FeatureKind::BytesList(l), 7) => Values::Str(l.value.clone()),
        _ => return Err(mismatch()),
    };
    if values.len() != n {
        let scalar = spec.row_shape().is_empty() && values.len() == 1;
        return Err(Error::DataShape {
            file: at(),
            input: spec.name.clone(),
            expected: spec.row_shape().to_vec(),
            found: if scalar {
                Vec::new()
            } else {
                vec![values.len() as u64]
            },
        });
    }
    Ok(values)
}

/// One row as a serialized `tf.train.Example`: each named tensor becomes the feature of its name
/// (`float`/`double` → `float_list`, integers and `bool` → `int64_list`, `string` →
/// `bytes_list`). The inverse of [`ExampleRows::push_serialized`], for writing TFRecord data.
pub fn encode_example<'a>(row: impl IntoIterator<Item = (&'a str, &'a Values)>) -> Vec<u8> {
    let feature = row
        .into_iter()
        .map(|(name, values)| {
            let kind = match values {
                Values::F32(v) => FeatureKind::FloatList(FloatList { value: v.clone() }),
                Values::F64(v) => FeatureKind::FloatList(FloatList {
                    value: v.iter().map(|&x| x as f32).collect(),
                }),
                Values::I32(v) => int64s(v.iter().map(|&x| x.into())),
                Values::I64(v) => int64s(v.iter().copied()),
                Values::U8(v) => int64s(v.iter().map(|&x| x.into())),
                Values::Bool(v) => int64s(v.iter().map(|&x| x.into())),
                Values::Str(v) => FeatureKind::BytesList(BytesList { value: v.clone() }),
            };
            (name.to_string(), Feature { kind: Some(kind) })
        })
        .collect();
    Example {
        features: Some(Features { feature }),
    }
    .encode_to_vec()
}

fn int64s(v: impl Iterator<Item = i64>) -> FeatureKind {
    FeatureKind::Int64List(Int64List { value: v.collect() })
}

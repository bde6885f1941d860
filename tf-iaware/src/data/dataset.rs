//! The data set abstraction the trainer consumes: a [`Dataset`] gives any rows of a graph's
//! inputs as a [`Batch`] of typed host tensors; a [`Feeder`] walks it in seeded, reshuffled
//! epochs and hands each replica exactly its share of a step's rows.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::sampler::Sampler;
use crate::error::{Error, Result};
use tf_iaware_core::data::{Batch, Columns, HostTensor, InputSpec, Values};
use tf_iaware_core::graph::DType;

/// A source of training rows for a graph's inputs. Implement it for data that is not on disk in
/// a format [`open`](super::open) reads; [`InMemory`] and [`Synthetic`] are the ready ones.
///
/// Rows are numbered `0..len()`; the same index gives the same row every time (the shuffle is
/// the [`Feeder`]'s). Input names are the graph's placeholder names. A data set is read-only
/// (`Sync`): workers that pull their own rows share one through [`Shard`]s.
pub trait Dataset: Send + Sync {
    /// The data set's name in errors and reports (its file, `digits`, `synthetic`).
    fn name(&self) -> &str;

    /// Rows in one epoch.
    fn len(&self) -> usize;

    /// Whether there are no rows.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Checks that every input of `specs` is provided with the graph's element type and row
    /// shape, before TensorFlow sees a batch.
    ///
    /// # Errors
    /// [`Error::DataMissing`], [`Error::DataType`] or [`Error::DataShape`] naming the input and
    /// [`Dataset::name`].
    fn check(&self, specs: &[InputSpec]) -> Result<()>;

    /// The rows at `indices` (each below [`Dataset::len`]), in that order, of the inputs
    /// `specs`: one tensor per input, `[indices.len(), …row shape]`.
    ///
    /// # Errors
    /// [`Error::DataShare`] for an index out of range; as [`Dataset::check`].
    fn rows(&self, indices: &[usize], specs: &[InputSpec]) -> Result<Batch>;
}

/// A data set held in memory: one array per input name, rows first. Built from arrays made in
/// Rust, or by [`open`](super::open) from `.npy`, `.npz` and TFRecord files.
#[derive(Clone, Debug, PartialEq)]
pub struct InMemory {
    columns: Columns,
}

impl InMemory {
    /// A data set of `columns`.
    pub fn new(columns: Columns) -> InMemory {
        InMemory { columns }
    }

    /// A data set called `name` of named tensors, each `[rows, …row shape]`.
    ///
    /// ```
    /// use tf_iaware::data::{Dataset, HostTensor, InMemory};
    ///
    /// let x = HostTensor::new(vec![3, 2], vec![0.0f32, 1.0, 2.0, 3.0, 4.0, 5.0].into())?;
    /// let y = HostTensor::new(vec![3], vec![0i64, 1, 0].into())?;
    /// let data = InMemory::from_tensors("in memory", [("x", x), ("y", y)])?;
    /// assert_eq!(data.len(), 3);
    /// # Ok::<(), tf_iaware::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::DataEmpty`] for no tensors or no rows; [`Error::DataRows`] for tensors with
    /// different numbers of rows.
    pub fn from_tensors<S: Into<String>>(
        name: &str,
        tensors: impl IntoIterator<Item = (S, HostTensor)>,
    ) -> Result<InMemory> {
        let map = tensors.into_iter().map(|(k, v)| (k.into(), v)).collect();
        Ok(InMemory::new(Columns::new(name, map)?))
    }

    /// The arrays.
    pub fn columns(&self) -> &Columns {
        &self.columns
    }
}

impl Dataset for InMemory {
    fn name(&self) -> &str {
        self.columns.file()
    }

    fn len(&self) -> usize {
        self.columns.rows()
    }

    fn check(&self, specs: &[InputSpec]) -> Result<()> {
        self.columns.check_against(specs)
    }

    fn rows(&self, indices: &[usize], specs: &[InputSpec]) -> Result<Batch> {
        let names: Vec<String> = specs.iter().map(|s| s.name.clone()).collect();
        self.columns.gather(indices, Some(&names))
    }
}

/// Synthetic rows for any graph: uniform noise in [-1, 1) for float inputs, one-hot rows over
/// the last dimension for the inputs named `one_hot`, values in `0..classes` for integer inputs
/// (10 unless [`Synthetic::with_classes`]; an input's own range with
/// [`Synthetic::with_int_range`]), random `bool`s and bytes (below an input's own range, where
/// it has one). Row `i` is the same every time (drawn from the seed and `i`), so an epoch is a
/// fixed data set of `len` rows.
#[derive(Clone, Debug)]
pub struct Synthetic {
    specs: Vec<InputSpec>,
    one_hot: Vec<String>,
    len: usize,
    seed: u64,
    classes: u32,
    /// Integer inputs drawn from `0..high` rather than `0..classes`: input name → `high`.
    ranges: std::collections::BTreeMap<String, u32>,
}

impl Synthetic {
    /// `len` synthetic rows of `specs` (from the graph: [`input_specs`](super::input_specs)),
    /// with the inputs `one_hot` (the sidecar's) as one-hot rows.
    ///
    /// # Errors
    /// [`Error::DataEmpty`] for `len` 0; [`Error::DataType`] for an input of a type it cannot
    /// make (strings, half, complex); [`Error::DataShape`] for a row shape with an unknown (`-1`)
    /// dimension.
    pub fn new(
        specs: &[InputSpec],
        one_hot: &[String],
        len: usize,
        seed: u64,
    ) -> Result<Synthetic> {
        let name = "synthetic";
        if len == 0 {
            return Err(Error::DataEmpty { file: name.into() });
        }
        for spec in specs {
            if spec.row_len().is_none() {
                return Err(Error::DataShape {
                    file: name.into(),
                    input: spec.name.clone(),
                    expected: spec.row_shape().to_vec(),
                    found: Vec::new(),
                });
            }
            if matches!(spec.dtype.0, 7) || Values::with_capacity(spec.dtype, 0).is_none() {
                return Err(Error::DataType {
                    file: name.into(),
                    input: spec.name.clone(),
                    expected: spec.dtype.name(),
                    found: "synthetic numbers".into(),
                });
            }
        }
        Ok(Synthetic {
            specs: specs.to_vec(),
            one_hot: one_hot.to_vec(),
            len,
            seed,
            classes: 10,
            ranges: std::collections::BTreeMap::new(),
        })
    }

    /// Integer inputs take classes `0..classes` (at least 1), unless
    /// [`Synthetic::with_int_range`] gives them their own.
    pub fn with_classes(mut self, classes: u32) -> Synthetic {
        self.classes = classes.max(1);
        self
    }

    /// Integer input `input` takes values `0..high` (at least 1; `uint8` ones at most 256): a
    /// label its classes, token ids the rows of the embedding table they index.
    pub fn with_int_range(mut self, input: &str, high: u32) -> Synthetic {
        self.ranges.insert(input.into(), high.max(1));
        self
    }

    fn spec(&self, name: &str) -> Result<&InputSpec> {
        self.specs
            .iter()
            .find(|s| s.name == name)
            .ok_or_else(|| Error::DataMissing {
                file: "synthetic".into(),
                input: name.into(),
                available: self
                    .specs
                    .iter()
                    .map(|s| s.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }
}

impl Dataset for Synthetic {
    fn name(&self) -> &str {
        "synthetic"
    }

    fn len(&self) -> usize {
        self.len
    }

    fn check(&self, specs: &[InputSpec]) -> Result<()> {
        for want in specs {
            let have = self.spec(&want.name)?;
            if have.dtype != want.dtype {
                return Err(Error::DataType {
                    file: "synthetic".into(),
                    input: want.name.clone(),
                    expected: want.dtype.name(),
                    found: have.dtype.name(),
                });
            }
            let row: Vec<u64> = have.row_shape().iter().map(|&d| d as u64).collect();
            if !want.accepts_row(&row) {
                return Err(Error::DataShape {
                    file: "synthetic".into(),
                    input: want.name.clone(),
                    expected: want.row_shape().to_vec(),
                    found: row,
                });
            }
        }
        Ok(())
    }

    fn rows(&self, indices: &[usize], specs: &[InputSpec]) -> Result<Batch> {
        if let Some(&bad) = indices.iter().find(|&&i| i >= self.len) {
            return Err(Error::DataShare {
                file: "synthetic".into(),
                rows: bad + 1,
                len: self.len,
            });
        }
        let mut tensors = std::collections::BTreeMap::new();
        for (k, want) in specs.iter().enumerate() {
            let spec = self.spec(&want.name)?;
            let n = spec.row_len().unwrap_or(0);
            let one_hot = self.one_hot.contains(&spec.name);
            let range = self.ranges.get(&spec.name).copied();
            let high = range.unwrap_or(self.classes);
            let mut values = Values::with_capacity(spec.dtype, indices.len() * n)
                .unwrap_or(Values::F32(Vec::new()));
            for &i in indices {
                // One stream per (row, input): the same row whatever else is asked.
                let mut rng = StdRng::seed_from_u64(
                    self.seed ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ ((k as u64) << 56),
                );
                let hot = rng.gen_range(0..n.max(1));
                match &mut values {
                    Values::F32(v) if one_hot => {
                        v.extend((0..n).map(|j| f32::from(u8::from(j == hot))))
                    }
                    Values::F64(v) if one_hot => {
                        v.extend((0..n).map(|j| f64::from(u8::from(j == hot))))
                    }
                    Values::F32(v) => v.extend((0..n).map(|_| rng.gen_range(-1.0f32..1.0))),
                    Values::F64(v) => v.extend((0..n).map(|_| rng.gen_range(-1.0f64..1.0))),
                    Values::I32(v) => v.extend((0..n).map(|_| rng.gen_range(0..high) as i32)),
                    Values::I64(v) => v.extend((0..n).map(|_| i64::from(rng.gen_range(0..high)))),
                    // Bytes (pixels) span 0..=255 unless the input has a range of its own.
                    Values::U8(v) => match range {
                        Some(h) => v.extend((0..n).map(|_| rng.gen_range(0..h.min(256)) as u8)),
                        None => v.extend((0..n).map(|_| rng.gen::<u8>())),
                    },
                    Values::Bool(v) => v.extend((0..n).map(|_| rng.gen::<bool>())),
                    Values::Str(_) => {}
                }
            }
            let mut shape = vec![indices.len() as u64];
            shape.extend(spec.row_shape().iter().map(|&d| d as u64));
            tensors.insert(spec.name.clone(), HostTensor::new(shape, values)?);
        }
        Ok(Batch {
            rows: indices.len(),
            tensors,
        })
    }
}

/// Every `count`-th row of a shared data set, starting at row `index`: worker `index` of `count`
/// workers that each pull rows on their own (asynchronous training) reads only its own rows.
#[derive(Clone)]
pub struct Shard {
    data: std::sync::Arc<dyn Dataset>,
    index: usize,
    count: usize,
    name: String,
}

impl std::fmt::Debug for Shard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shard").field("name", &self.name).finish()
    }
}

impl Shard {
    /// Shard `index` of `count` of `data`.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] unless `index < count`; [`Error::DataEmpty`] if the shard has
    /// no rows (fewer rows than shards).
    pub fn new(data: std::sync::Arc<dyn Dataset>, index: usize, count: usize) -> Result<Shard> {
        if index >= count {
            return Err(Error::InvalidArgument {
                what: format!("shard of data {}", data.name()),
                reason: format!("index {index} is not below the count {count}"),
            });
        }
        let name = format!("{} (shard {index} of {count})", data.name());
        let shard = Shard {
            data,
            index,
            count,
            name,
        };
        if shard.is_empty() {
            return Err(Error::DataEmpty { file: shard.name });
        }
        Ok(shard)
    }
}

impl Dataset for Shard {
    fn name(&self) -> &str {
        &self.name
    }

    fn len(&self) -> usize {
        self.data
            .len()
            .saturating_sub(self.index)
            .div_ceil(self.count)
    }

    fn check(&self, specs: &[InputSpec]) -> Result<()> {
        self.data.check(specs)
    }

    fn rows(&self, indices: &[usize], specs: &[InputSpec]) -> Result<Batch> {
        let len = self.len();
        if let Some(&bad) = indices.iter().find(|&&i| i >= len) {
            return Err(Error::DataShare {
                file: self.name.clone(),
                rows: bad + 1,
                len,
            });
        }
        let mapped: Vec<usize> = indices
            .iter()
            .map(|&i| self.index + i * self.count)
            .collect();
        self.data.rows(&mapped, specs)
    }
}

/// Walks a [`Dataset`] for training: every epoch a new seeded permutation of its rows, and each
/// [`Feeder::take`] the next rows of it, so replicas that take their shares of a step one after
/// another get different rows (as `Dataset.shuffle(n).repeat()` would).
pub struct Feeder {
    data: Box<dyn Dataset>,
    specs: Vec<InputSpec>,
    sampler: Sampler,
}

impl std::fmt::Debug for Feeder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Feeder")
            .field("data", &self.data.name())
            .field("specs", &self.specs)
            .field("sampler", &self.sampler)
            .finish()
    }
}

impl Feeder {
    /// A feeder of `data`'s rows for the graph inputs `specs`, shuffled with `seed`; `data` is
    /// checked against `specs` here, once.
    ///
    /// # Errors
    /// [`Error::DataEmpty`] for a data set without rows; as [`Dataset::check`].
    pub fn new(data: Box<dyn Dataset>, specs: &[InputSpec], seed: u64) -> Result<Feeder> {
        if data.is_empty() {
            return Err(Error::DataEmpty {
                file: data.name().into(),
            });
        }
        data.check(specs)?;
        let sampler = Sampler::new(data.len(), seed);
        Ok(Feeder {
            data,
            specs: specs.to_vec(),
            sampler,
        })
    }

    /// The next `rows` rows (one replica's share of a step): `rows` 0 gives an empty batch.
    ///
    /// # Errors
    /// [`Error::DataShare`] if `rows` is more than the data set holds; as [`Dataset::rows`].
    pub fn take(&mut self, rows: usize) -> Result<Batch> {
        let len = self.data.len();
        if rows > len {
            return Err(Error::DataShare {
                file: self.data.name().into(),
                rows,
                len,
            });
        }
        let indices = self.sampler.take(rows);
        self.data.rows(&indices, &self.specs)
    }

    /// One step's batches: `shares[k]` rows for replica `k`, each its own rows.
    ///
    /// # Errors
    /// As [`Feeder::take`].
    pub fn take_step(&mut self, shares: &[usize]) -> Result<Vec<Batch>> {
        shares.iter().map(|&r| self.take(r)).collect()
    }

    /// Rows handed out so far.
    pub fn taken(&self) -> u64 {
        self.sampler.taken
    }

    /// Epochs handed out so far (rows taken / rows in the data set; fractional).
    pub fn epochs(&self) -> f64 {
        self.sampler.taken as f64 / self.data.len() as f64
    }

    /// The data set.
    pub fn dataset(&self) -> &dyn Dataset {
        self.data.as_ref()
    }

    /// The graph inputs fed.
    pub fn specs(&self) -> &[InputSpec] {
        &self.specs
    }
}

/// Every row of `data` once, in order, in batches of `batch` rows, for evaluation on a
/// held-out set. Each item is a batch and how many of its rows are real: with `fixed` (a graph
/// whose batch dimension is fixed) the last batch is filled up to `batch` rows from the start
/// of the data set, and only the first `real` rows should be counted.
///
/// # Errors
/// Each item: as [`Dataset::rows`]. Checks `data` against `specs` first (the first item is then
/// the error).
pub fn in_order<'a>(
    data: &'a dyn Dataset,
    specs: &'a [InputSpec],
    batch: usize,
    fixed: bool,
) -> impl Iterator<Item = Result<(Batch, usize)>> + 'a {
    let len = data.len();
    let batch = batch.max(1);
    let first = match (len, data.check(specs)) {
        (_, Err(e)) => Some(Err(e)),
        (0, _) => Some(Err(Error::DataEmpty {
            file: data.name().into(),
        })),
        _ => None,
    };
    let failed = first.is_some();
    let chunks = (0..if failed { 0 } else { len })
        .step_by(batch)
        .map(move |start| {
            let real = batch.min(len - start);
            let take = if fixed { batch } else { real };
            let indices: Vec<usize> = (start..start + take).map(|i| i % len).collect();
            data.rows(&indices, specs).map(|b| (b, real))
        });
    first.into_iter().chain(chunks)
}

/// Whether `dtype` is one a [`Batch`] can carry (float, double, int32, int64, uint8, bool,
/// string).
pub fn feedable(dtype: DType) -> bool {
    Values::with_capacity(dtype, 0).is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(name: &str, dtype: DType, shape: &[i64]) -> InputSpec {
        InputSpec {
            name: name.into(),
            dtype,
            shape: shape.to_vec(),
        }
    }

    fn data(rows: usize) -> InMemory {
        let x = HostTensor::new(
            vec![rows as u64, 2],
            (0..2 * rows).map(|v| v as f32).collect::<Vec<_>>().into(),
        )
        .unwrap();
        let y = HostTensor::new(
            vec![rows as u64],
            (0..rows as i64).collect::<Vec<_>>().into(),
        )
        .unwrap();
        InMemory::from_tensors("mem", [("x", x), ("y", y)]).unwrap()
    }

    fn specs() -> Vec<InputSpec> {
        vec![
            spec("x", DType::FLOAT, &[-1, 2]),
            spec("y", DType(9), &[-1]),
        ]
    }

    fn ids(b: &Batch) -> Vec<i64> {
        match &b.tensors["y"].values {
            Values::I64(v) => v.clone(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn replicas_get_their_own_rows_and_epochs_reshuffle() {
        let mut f = Feeder::new(Box::new(data(10)), &specs(), 3).unwrap();
        let step = f.take_step(&[3, 7]).unwrap();
        assert_eq!(step[0].rows, 3);
        assert_eq!(step[1].tensors["x"].shape, [7, 2]);
        let mut seen: Vec<i64> = step.iter().flat_map(ids).collect();
        seen.sort_unstable();
        assert_eq!(
            seen,
            (0..10).collect::<Vec<_>>(),
            "one epoch, each row once"
        );
        // Rows stay whole: x of row i is [2i, 2i + 1].
        let Values::F32(x) = &step[0].tensors["x"].values else {
            panic!()
        };
        for (r, &i) in ids(&step[0]).iter().enumerate() {
            assert_eq!(x[2 * r], 2.0 * i as f32);
        }
        assert_eq!(f.epochs(), 1.0);
        let again = Feeder::new(Box::new(data(10)), &specs(), 3)
            .unwrap()
            .take(10)
            .unwrap();
        assert_eq!(
            ids(&again),
            step.iter().flat_map(ids).collect::<Vec<_>>(),
            "the seed fixes it"
        );
        assert_eq!(f.take(0).unwrap().rows, 0);
    }

    #[test]
    fn shards_split_the_rows() {
        let shared: std::sync::Arc<dyn Dataset> = std::sync::Arc::new(data(7));
        let mut all = Vec::new();
        for k in 0..3 {
            let shard = Shard::new(shared.clone(), k, 3).unwrap();
            assert_eq!(shard.len(), [3, 2, 2][k]);
            all.extend(ids(&shard
                .rows(&(0..shard.len()).collect::<Vec<_>>(), &specs())
                .unwrap()));
            assert!(matches!(
                shard.rows(&[3], &specs()),
                Err(Error::DataShare { .. })
            ));
        }
        all.sort_unstable();
        assert_eq!(all, (0..7).collect::<Vec<_>>());
        assert!(Shard::new(shared.clone(), 3, 3).is_err());
        assert!(matches!(
            Shard::new(shared, 7, 8),
            Err(Error::DataEmpty { .. })
        ));
    }

    #[test]
    fn a_share_larger_than_the_data_is_an_error() {
        let mut f = Feeder::new(Box::new(data(4)), &specs(), 1).unwrap();
        let e = f.take(5).unwrap_err();
        assert!(
            matches!(
                e,
                Error::DataShare {
                    rows: 5,
                    len: 4,
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("mem"), "{e}");
    }

    #[test]
    fn feeder_checks_the_data_against_the_graph() {
        let e =
            Feeder::new(Box::new(data(4)), &[spec("x", DType::FLOAT, &[-1, 3])], 1).unwrap_err();
        assert!(matches!(e, Error::DataShape { .. }), "{e}");
        let e = Feeder::new(Box::new(data(4)), &[spec("label", DType(9), &[-1])], 1).unwrap_err();
        assert!(matches!(e, Error::DataMissing { .. }), "{e}");
    }

    #[test]
    fn in_order_covers_every_row_once_and_pads_fixed_batches() {
        let d = data(5);
        let s = specs();
        let loose: Vec<(Batch, usize)> = in_order(&d, &s, 2, false).collect::<Result<_>>().unwrap();
        assert_eq!(
            loose.iter().map(|(b, r)| (b.rows, *r)).collect::<Vec<_>>(),
            [(2, 2), (2, 2), (1, 1)]
        );
        let fixed: Vec<(Batch, usize)> = in_order(&d, &s, 2, true).collect::<Result<_>>().unwrap();
        assert_eq!(fixed[2].0.rows, 2);
        assert_eq!(fixed[2].1, 1);
        assert_eq!(ids(&fixed[2].0), [4, 0]);
        let bad = [spec("z", DType::FLOAT, &[-1])];
        let got: Vec<_> = in_order(&d, &bad, 2, false).collect();
        assert!(matches!(got[..], [Err(Error::DataMissing { .. })]));
    }

    #[test]
    fn synthetic_rows_are_typed_fixed_and_one_hot() {
        let specs = [
            spec("x", DType::FLOAT, &[-1, 3]),
            spec("y", DType::FLOAT, &[-1, 4]),
            spec("label", DType(9), &[-1]),
            spec("mask", DType(10), &[-1, 2]),
        ];
        let s = Synthetic::new(&specs, &["y".into()], 100, 7)
            .unwrap()
            .with_classes(3);
        s.check(&specs).unwrap();
        let a = s.rows(&[5, 9], &specs).unwrap();
        let b = s.rows(&[9], &specs).unwrap();
        let (Values::F32(ya), Values::F32(yb)) = (&a.tensors["y"].values, &b.tensors["y"].values)
        else {
            panic!()
        };
        assert_eq!(ya[4..], yb[..], "row 9 is row 9");
        assert!(ya.chunks(4).all(|r| r.iter().sum::<f32>() == 1.0));
        let Values::I64(l) = &a.tensors["label"].values else {
            panic!()
        };
        assert!(l.iter().all(|&c| (0..3).contains(&c)));
        assert_eq!(a.tensors["mask"].shape, [2, 2]);
        assert!(matches!(
            s.rows(&[100], &specs),
            Err(Error::DataShare { .. })
        ));
        // An input's own range: token ids below a table's 1000 rows, labels of 3 classes.
        let ids = [
            spec("tokens", DType(3), &[-1, 50]),
            spec("label", DType(9), &[-1]),
            spec("small", DType::UINT8, &[-1, 50]),
            spec("pixels", DType::UINT8, &[-1, 50]),
        ];
        let ranged = Synthetic::new(&ids, &[], 40, 7)
            .unwrap()
            .with_classes(3)
            .with_int_range("tokens", 1000)
            .with_int_range("small", 5);
        let b = ranged.rows(&(0..40).collect::<Vec<_>>(), &ids).unwrap();
        let Values::I32(t) = &b.tensors["tokens"].values else {
            panic!()
        };
        assert!(t.iter().all(|&i| (0..1000).contains(&i)));
        assert!(t.iter().any(|&i| i >= 3), "ids are not drawn as classes");
        let Values::I64(l) = &b.tensors["label"].values else {
            panic!()
        };
        assert!(l.iter().all(|&c| (0..3).contains(&c)));
        let (Values::U8(small), Values::U8(pixels)) =
            (&b.tensors["small"].values, &b.tensors["pixels"].values)
        else {
            panic!()
        };
        assert!(small.iter().all(|&c| c < 5));
        assert!(pixels.iter().any(|&p| p >= 5), "bytes span 0..=255");
        assert!(Synthetic::new(&[spec("s", DType(7), &[-1])], &[], 4, 1).is_err());
        assert!(Synthetic::new(&specs, &[], 0, 1).is_err());
        let e = s.check(&[spec("x", DType(3), &[-1, 3])]).unwrap_err();
        assert!(matches!(e, Error::DataType { .. }), "{e}");
    }
}

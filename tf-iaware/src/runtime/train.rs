//! Training a placed graph with synthetic data, as a sidecar describes: init once, then steps,
//! with step times, losses and what ran where.

use std::collections::BTreeMap;

use rand::{rngs::StdRng, Rng, SeedableRng};
use serde::Serialize;
use tensorflow::{DataType, Operation, SessionRunArgs, Tensor};

use super::session::PlacedSession;
use super::stats;
use crate::cluster::Cluster;
use crate::data::{Dataset, FeedTensor, InputSpec, Synthetic};
use crate::error::{Error, Result};
use crate::graph::proto::StepStats;
use crate::graph::DType;
use crate::graph::OpGraph;
use crate::graph::Sidecar;
use crate::placer::Placement;

/// Percentiles and the mean of step wall times, ms.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct StepTimes {
    /// Median, ms.
    pub median: f64,
    /// 10th percentile, ms.
    pub p10: f64,
    /// 90th percentile, ms.
    pub p90: f64,
    /// Mean, ms: what the steps took on average, the throughput's figure. Under a CPU quota it
    /// can be far above the median: short steps run at full speed until the quota of a
    /// scheduling period (100 ms by default) is spent, and one of them waits out the rest.
    pub mean: f64,
}

impl StepTimes {
    /// Percentiles of `ms` (nearest rank); `None` for no samples.
    pub fn from_samples(ms: &[f64]) -> Option<StepTimes> {
        if ms.is_empty() {
            return None;
        }
        let mut s = ms.to_vec();
        s.sort_by(f64::total_cmp);
        let at = |q: f64| s[((q * (s.len() - 1) as f64).round() as usize).min(s.len() - 1)];
        Some(StepTimes {
            median: at(0.5),
            p10: at(0.1),
            p90: at(0.9),
            mean: ms.iter().sum::<f64>() / ms.len() as f64,
        })
    }
}

use tf_iaware_core::limits::{MAX_BATCH, MAX_STEPS};

/// Bytes of a synthetic batch of `dims` float32 elements, checked against overflow and against
/// the memory the machine has available; `what` names the input in errors.
///
/// # Errors
/// [`Error::InvalidArgument`] naming the input for a negative dimension, an element count that
/// overflows, or a batch larger than the available memory.
pub(crate) fn batch_bytes(what: &str, dims: &[u64]) -> Result<u64> {
    let bad = |reason: String| Error::InvalidArgument {
        what: format!("input `{what}` of shape {dims:?}"),
        reason,
    };
    let bytes = dims
        .iter()
        .try_fold(4u64, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| bad("its size overflows 64 bits".into()))?;
    if let Some(available) = crate::data::io::available_memory_bytes() {
        if bytes > available / 2 {
            return Err(bad(format!(
                "a synthetic batch of {bytes} bytes is more than half the {available} bytes of \
                 memory this process may allocate (the least of MemAvailable and its cgroup's \
                 memory limit); use a smaller batch"
            )));
        }
    }
    Ok(bytes)
}

/// Result of a training run.
#[derive(Clone, Debug, Serialize)]
pub struct TrainReport {
    /// Measured steps (warm-up excluded).
    pub steps: usize,
    /// Warm-up steps run before the measured ones.
    pub warmup: usize,
    /// Percentiles of the measured steps, ms.
    pub step_ms: StepTimes,
    /// Every measured step's wall time, ms.
    pub step_ms_all: Vec<f64>,
    /// Samples per second at the median step time.
    pub images_per_sec: f64,
    /// Loss of the first step (warm-up included).
    pub loss_first: f32,
    /// Loss of the last step.
    pub loss_last: f32,
    /// Loss of every step, warm-up included.
    pub losses: Vec<f32>,
    /// Device → number of ops step stats saw run there (from the last, traced, step).
    pub executed: BTreeMap<String, usize>,
    /// Placed ops that ran elsewhere (should be empty).
    pub mismatches: Vec<stats::Mismatch>,
    /// Step stats of the last, traced, step (not serialised).
    #[serde(skip)]
    pub step_stats: Option<StepStats>,
}

/// A session prepared to train with synthetic feeds.
pub struct Trainer {
    session: PlacedSession,
    feeds: Vec<(Operation, Feed)>,
    init: Operation,
    train: Operation,
    loss: Operation,
    batch: usize,
}

impl std::fmt::Debug for Trainer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Trainer")
            .field("session", &self.session)
            .field("feeds", &self.feeds.len())
            .field("batch", &self.batch)
            .finish_non_exhaustive()
    }
}

impl Trainer {
    /// Prepares feeds (a fixed synthetic batch, seeded) for `sidecar`'s inputs, each of its
    /// placeholder's element type (float noise or one-hot rows; integer classes; bools); a
    /// leading `-1` becomes `batch`.
    ///
    /// # Errors
    /// [`Error::UnknownOp`] if the sidecar names ops the graph lacks; [`Error::InvalidArgument`]
    /// if no batch size is known.
    pub fn new(
        session: PlacedSession,
        sidecar: &Sidecar,
        batch: Option<usize>,
        seed: u64,
    ) -> Result<Trainer> {
        let batch =
            batch
                .or_else(|| sidecar.batch_size())
                .ok_or_else(|| Error::InvalidArgument {
                    what: "batch".into(),
                    reason: "the sidecar's inputs have no fixed batch dimension; pass --batch"
                        .into(),
                })?;
        if batch == 0 || batch > MAX_BATCH {
            return Err(Error::InvalidArgument {
                what: "batch".into(),
                reason: format!("{batch}: must be 1 to {MAX_BATCH}"),
            });
        }
        let mut rng = StdRng::seed_from_u64(seed);
        let mut feeds = Vec::new();
        for (name, shape) in &sidecar.inputs {
            let op = session.op(name, "sidecar `inputs`")?;
            let dims = shape
                .iter()
                .map(|&d| match d {
                    -1 => Ok(batch as u64),
                    d if d >= 0 => Ok(d as u64),
                    d => Err(Error::InvalidArgument {
                        what: format!("sidecar input `{name}`"),
                        reason: format!("dimension {d} (only -1, the batch, may be negative)"),
                    }),
                })
                .collect::<Result<Vec<u64>>>()?;
            batch_bytes(name, &dims)?;
            let one_hot = sidecar.one_hot.contains(name);
            let tensor = match op.get_attr_type("dtype") {
                Ok(DataType::Float) | Err(_) => Feed::F32(synthetic(&dims, one_hot, &mut rng)),
                Ok(other) => synthetic_of(name, other, &dims, one_hot, seed)?,
            };
            feeds.push((op, tensor));
        }
        let init = session.op(&sidecar.init, "sidecar `init`")?;
        let train = session.op(&sidecar.train, "sidecar `train`")?;
        let loss = session.op(&sidecar.loss, "sidecar `loss`")?;
        Ok(Trainer {
            session,
            feeds,
            init,
            train,
            loss,
            batch,
        })
    }

    /// Runs the init op.
    ///
    /// # Errors
    /// [`Error::TensorFlow`] if initialisation fails.
    pub fn init(&self) -> Result<()> {
        self.session
            .run(&[], std::slice::from_ref(&self.init), &[], false)
            .map(|_| ())
    }

    /// One training step: runs `train`, fetches the loss. Returns (loss, wall ms, step stats).
    ///
    /// # Errors
    /// [`Error::TensorFlow`] if the step fails; [`Error::NonFiniteLoss`] for NaN/∞ loss.
    pub fn step(&self, index: usize, trace: bool) -> Result<(f32, f64, Option<StepStats>)> {
        let (loss, ms, stats) = self.run_step(trace)?;
        if !loss.is_finite() {
            return Err(Error::NonFiniteLoss { step: index, loss });
        }
        Ok((loss, ms, stats))
    }

    /// One step timed, whatever its loss (a calibration probe measures time on a fixed
    /// synthetic batch, where a diverging loss says nothing). Returns wall ms.
    ///
    /// # Errors
    /// [`Error::TensorFlow`] if the step fails.
    pub(crate) fn time_step(&self) -> Result<f64> {
        self.run_step(false).map(|(_, ms, _)| ms)
    }

    fn run_step(&self, trace: bool) -> Result<(f32, f64, Option<StepStats>)> {
        let mut args = SessionRunArgs::new();
        for (op, t) in &self.feeds {
            t.add_to(&mut args, op);
        }
        args.add_target(&self.train);
        let token = args.request_fetch(&self.loss, 0);
        let (wall, step_stats) = self.session.run_args(&mut args, trace, "training step")?;
        let fetched = args
            .fetch::<f32>(token)
            .map_err(|e| crate::tf::status::error("fetching the loss", &e))?;
        let fetched = Some(&fetched);
        if let Some(t) = fetched.filter(|t| t.len() != 1) {
            return Err(Error::InvalidArgument {
                what: format!("loss `{}`", self.loss.name().unwrap_or_default()),
                reason: format!(
                    "must be a scalar, but the step returned shape {:?}",
                    t.dims()
                ),
            });
        }
        let loss = fetched.and_then(|t| t.first().copied()).unwrap_or(f32::NAN);
        Ok((loss, wall.as_secs_f64() * 1e3, step_stats))
    }

    /// Runs `n` more training steps traced (FULL_TRACE), numbered from `first`, and returns
    /// their step stats: samples for the measured cost model
    /// ([`Measurements::add_step_stats`](crate::cost::Measurements::add_step_stats)).
    ///
    /// # Errors
    /// As [`Trainer::step`].
    pub fn traced_steps(&self, first: usize, n: usize) -> Result<Vec<StepStats>> {
        (first..first + n)
            .filter_map(|i| self.step(i, true).map(|(_, _, s)| s).transpose())
            .collect()
    }

    /// Initialises, runs `warmup` untimed steps and `steps` timed ones; the last step is traced
    /// (FULL_TRACE) to learn what ran where, and checked against `placement` (of the graph and
    /// cluster given with it) when given.
    ///
    /// # Errors
    /// As [`Trainer::step`]; [`Error::InvalidArgument`] for `steps == 0`.
    pub fn train(
        &self,
        steps: usize,
        warmup: usize,
        placement: Option<(&Placement, &OpGraph, &Cluster)>,
    ) -> Result<TrainReport> {
        if steps == 0 || steps > MAX_STEPS || warmup > MAX_STEPS {
            return Err(Error::InvalidArgument {
                what: "steps".into(),
                reason: format!(
                    "{steps} timed and {warmup} warm-up steps: timed steps must be 1 to \
                     {MAX_STEPS}, warm-up steps at most {MAX_STEPS}"
                ),
            });
        }
        self.init()?;
        let mut losses = Vec::with_capacity((steps + warmup).min(4096));
        let mut times = Vec::with_capacity(steps.min(4096));
        let mut last_stats = None;
        for i in 0..warmup + steps {
            let trace = i + 1 == warmup + steps;
            let (loss, ms, stats) = self.step(i, trace)?;
            losses.push(loss);
            // The traced step is slower; it is reported separately, not timed.
            if i >= warmup && !(trace && steps > 1) {
                times.push(ms);
            }
            if stats.is_some() {
                last_stats = stats;
            }
        }
        let executed = last_stats
            .as_ref()
            .map(stats::executed_counts)
            .unwrap_or_default();
        let mismatches = match (&last_stats, placement) {
            (Some(s), Some((p, g, c))) => stats::placement_mismatches(
                s,
                |name| p.device_of(g, c, name),
                |name| g.id(name).map(|id| g.node(id).op.as_str()),
            ),
            _ => Vec::new(),
        };
        Ok(TrainReport {
            executed,
            mismatches,
            step_stats: last_stats,
            ..TrainReport::of_steps(warmup, self.batch, times, losses)
        })
    }
}

impl TrainReport {
    /// The report of `losses` (every step's, warm-up included) and `times` (the measured
    /// steps' wall times, ms) at `batch` samples per step, with nothing traced.
    pub(crate) fn of_steps(warmup: usize, batch: usize, times: Vec<f64>, losses: Vec<f32>) -> Self {
        let step_ms = StepTimes::from_samples(&times).unwrap_or_default();
        TrainReport {
            steps: losses.len().saturating_sub(warmup),
            warmup: warmup.min(losses.len()),
            images_per_sec: if step_ms.median > 0.0 {
                batch as f64 / (step_ms.median / 1e3)
            } else {
                0.0
            },
            step_ms,
            step_ms_all: times,
            loss_first: losses.first().copied().unwrap_or(f32::NAN),
            loss_last: losses.last().copied().unwrap_or(f32::NAN),
            losses,
            executed: BTreeMap::new(),
            mismatches: Vec::new(),
            step_stats: None,
        }
    }
}

/// A synthetic batch of `dims` for input `name` of element type `dtype` (integer classes,
/// bools, doubles: [`Synthetic`]'s rows).
///
/// # Errors
/// [`Error::DataType`] naming the input for a type synthetic rows cannot take (strings).
fn synthetic_of(
    name: &str,
    dtype: DataType,
    dims: &[u64],
    one_hot: bool,
    seed: u64,
) -> Result<Feed> {
    let code = match dtype {
        DataType::Double => 2,
        DataType::Int32 => 3,
        DataType::UInt8 => 4,
        DataType::Int64 => 9,
        DataType::Bool => 10,
        other => {
            return Err(Error::DataType {
                file: "synthetic".into(),
                input: name.into(),
                expected: format!("{other}"),
                found: "synthetic numbers".into(),
            })
        }
    };
    let rows = dims.first().copied().unwrap_or(1).max(1) as usize;
    let mut shape = vec![-1i64];
    shape.extend(dims.iter().skip(1).map(|&d| d as i64));
    let spec = InputSpec {
        name: name.into(),
        dtype: DType(code),
        shape,
    };
    let specs = [spec];
    let one_hot: Vec<String> = if one_hot {
        vec![name.into()]
    } else {
        Vec::new()
    };
    let data = Synthetic::new(&specs, &one_hot, rows, seed)?;
    let batch = data.rows(&(0..rows).collect::<Vec<_>>(), &specs)?;
    let t = batch.tensors.get(name).ok_or_else(|| Error::DataMissing {
        file: "synthetic".into(),
        input: name.into(),
        available: String::new(),
    })?;
    Ok(match FeedTensor::from_host(name, t)? {
        FeedTensor::F32(t) => Feed::F32(t),
        FeedTensor::F64(t) => Feed::F64(t),
        FeedTensor::I32(t) => Feed::I32(t),
        FeedTensor::I64(t) => Feed::I64(t),
        FeedTensor::U8(t) => Feed::U8(t),
        FeedTensor::Bool(t) => Feed::Bool(t),
        FeedTensor::Str(_) => {
            return Err(Error::DataType {
                file: "synthetic".into(),
                input: name.into(),
                expected: "string".into(),
                found: "synthetic numbers".into(),
            })
        }
    })
}

/// A synthetic feed of a numeric type (what [`Trainer`] feeds; `Send`, unlike string tensors).
enum Feed {
    F32(Tensor<f32>),
    F64(Tensor<f64>),
    I32(Tensor<i32>),
    I64(Tensor<i64>),
    U8(Tensor<u8>),
    Bool(Tensor<bool>),
}

impl Feed {
    fn add_to<'a>(&'a self, args: &mut SessionRunArgs<'a>, op: &Operation) {
        match self {
            Feed::F32(t) => args.add_feed(op, 0, t),
            Feed::F64(t) => args.add_feed(op, 0, t),
            Feed::I32(t) => args.add_feed(op, 0, t),
            Feed::I64(t) => args.add_feed(op, 0, t),
            Feed::U8(t) => args.add_feed(op, 0, t),
            Feed::Bool(t) => args.add_feed(op, 0, t),
        }
    }
}

/// A float tensor of `dims`: uniform noise in [-1, 1), or one-hot rows over the last dimension.
fn synthetic(dims: &[u64], one_hot: bool, rng: &mut StdRng) -> Tensor<f32> {
    let mut t = Tensor::<f32>::new(dims);
    if one_hot {
        let classes = dims.last().copied().unwrap_or(1).max(1) as usize;
        for row in t.chunks_mut(classes) {
            row[rng.gen_range(0..classes)] = 1.0;
        }
    } else {
        for v in t.iter_mut() {
            *v = rng.gen_range(-1.0..1.0);
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::StepTimes;

    /// Nine steps at full speed and one that waits out a throttled quota period: the median
    /// says 1 ms, the mean what the ten took on average (8 ms).
    #[test]
    fn the_mean_counts_the_steps_a_quota_holds_back() {
        let mut ms = vec![1.0; 9];
        ms.push(71.0);
        let t = StepTimes::from_samples(&ms).unwrap();
        // Even the 90th percentile misses the one held back.
        assert_eq!((t.median, t.p10, t.p90), (1.0, 1.0, 1.0));
        assert!((t.mean - 8.0).abs() < 1e-12, "{t:?}");
        assert_eq!(StepTimes::from_samples(&[]), None);
    }
}

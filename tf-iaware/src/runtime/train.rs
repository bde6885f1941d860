//! Training a placed graph with synthetic data, as a sidecar describes: init once, then steps,
//! with step times, losses and what ran where.

use std::collections::BTreeMap;

use rand::{rngs::StdRng, Rng, SeedableRng};
use serde::Serialize;
use tensorflow::{Operation, Tensor};

use super::session::PlacedSession;
use super::sidecar::Sidecar;
use super::stats;
use crate::error::{Error, Result};
use crate::graph::OpGraph;
use crate::placer::Placement;
use crate::proto::StepStats;

/// Percentiles of step wall times, ms.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct StepTimes {
    pub median: f64,
    pub p10: f64,
    pub p90: f64,
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
        })
    }
}

/// Result of a training run.
#[derive(Clone, Debug, Serialize)]
pub struct TrainReport {
    /// Measured steps (warm-up excluded).
    pub steps: usize,
    pub warmup: usize,
    pub step_ms: StepTimes,
    /// Every measured step's wall time, ms.
    pub step_ms_all: Vec<f64>,
    /// Samples per second at the median step time.
    pub images_per_sec: f64,
    pub loss_first: f32,
    pub loss_last: f32,
    /// Loss of every step, warm-up included.
    pub losses: Vec<f32>,
    /// Device → number of ops step stats saw run there (from the last, traced, step).
    pub executed: BTreeMap<String, usize>,
    /// Placed ops that ran elsewhere (should be empty).
    pub mismatches: Vec<stats::Mismatch>,
    #[serde(skip)]
    pub step_stats: Option<StepStats>,
}

/// A session prepared to train with synthetic feeds.
pub struct Trainer {
    session: PlacedSession,
    feeds: Vec<(Operation, Tensor<f32>)>,
    init: Operation,
    train: Operation,
    loss: Operation,
    batch: usize,
}

impl Trainer {
    /// Prepares feeds (a fixed synthetic batch, seeded) for `sidecar`'s inputs; a leading `-1`
    /// becomes `batch`.
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
        if batch == 0 {
            return Err(Error::InvalidArgument {
                what: "batch".into(),
                reason: "must be at least 1".into(),
            });
        }
        let mut rng = StdRng::seed_from_u64(seed);
        let mut feeds = Vec::new();
        for (name, shape) in &sidecar.inputs {
            let op = session.op(name, "sidecar `inputs`")?;
            let dims: Vec<u64> = shape
                .iter()
                .map(|&d| if d == -1 { batch as u64 } else { d as u64 })
                .collect();
            feeds.push((
                op,
                synthetic(&dims, sidecar.one_hot.contains(name), &mut rng),
            ));
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

    /// The session.
    pub fn session(&self) -> &PlacedSession {
        &self.session
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

    /// Runs the op called `name` once (e.g. `init_data` after switching plans).
    ///
    /// # Errors
    /// [`Error::UnknownOp`] if the graph has no such op; [`Error::TensorFlow`] if it fails.
    pub fn run_op(&self, name: &str) -> Result<()> {
        let op = self.session.op(name, "Trainer::run_op")?;
        self.session.run(&[], &[op], &[], false).map(|_| ())
    }

    /// One training step: runs `train`, fetches the loss. Returns (loss, wall ms, step stats).
    ///
    /// # Errors
    /// [`Error::TensorFlow`] if the step fails; [`Error::NonFiniteLoss`] for NaN/∞ loss.
    pub fn step(&self, index: usize, trace: bool) -> Result<(f32, f64, Option<StepStats>)> {
        let feeds: Vec<(Operation, &Tensor<f32>)> =
            self.feeds.iter().map(|(o, t)| (o.clone(), t)).collect();
        let out = self.session.run(
            &feeds,
            std::slice::from_ref(&self.train),
            std::slice::from_ref(&self.loss),
            trace,
        )?;
        let loss = out
            .fetched
            .first()
            .and_then(|t| t.first().copied())
            .unwrap_or(f32::NAN);
        if !loss.is_finite() {
            return Err(Error::NonFiniteLoss { step: index, loss });
        }
        Ok((loss, out.wall.as_secs_f64() * 1e3, out.step_stats))
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
    /// (FULL_TRACE) to learn what ran where, and checked against `placement` when given.
    ///
    /// # Errors
    /// As [`Trainer::step`]; [`Error::InvalidArgument`] for `steps == 0`.
    pub fn train(
        &self,
        steps: usize,
        warmup: usize,
        placement: Option<(&Placement, &OpGraph)>,
    ) -> Result<TrainReport> {
        if steps == 0 {
            return Err(Error::InvalidArgument {
                what: "steps".into(),
                reason: "must be at least 1".into(),
            });
        }
        self.init()?;
        let mut losses = Vec::with_capacity(steps + warmup);
        let mut times = Vec::with_capacity(steps);
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
        let step_ms = StepTimes::from_samples(&times).unwrap_or(StepTimes {
            median: 0.0,
            p10: 0.0,
            p90: 0.0,
        });
        let executed = last_stats
            .as_ref()
            .map(stats::executed_counts)
            .unwrap_or_default();
        let mismatches = match (&last_stats, placement) {
            (Some(s), Some((p, g))) => stats::placement_mismatches(s, p, |name| {
                g.id(name).map(|id| g.node(id).op.as_str())
            }),
            _ => Vec::new(),
        };
        Ok(TrainReport {
            steps,
            warmup,
            images_per_sec: if step_ms.median > 0.0 {
                self.batch as f64 / (step_ms.median / 1e3)
            } else {
                0.0
            },
            step_ms,
            step_ms_all: times,
            loss_first: losses[0],
            loss_last: *losses.last().unwrap_or(&losses[0]),
            losses,
            executed,
            mismatches,
            step_stats: last_stats,
        })
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

//! Evaluating the variables on the held-out set, in a local session of one replica.

use std::collections::BTreeMap;

use tensorflow::{Operation, SessionRunArgs};

use super::job::{correct, Job, Metric};
use crate::config::SessionConfig;
use crate::data::{in_order, FeedTensor};
use crate::error::{Error, Result};
use crate::parallel::replicate::{replica_name, replicate, BatchData};
use crate::parallel::{DataParallelPlan, Replica};
use crate::runtime::checkpoint::{self, Checkpoint, StateVar};
use crate::runtime::session::PlacedSession;

/// Held-out rows evaluated per run (the last run is filled up from the start of the set).
const CHUNK: usize = 256;

/// The in-process CPU.
const LOCAL_CPU: &str = "/job:localhost/replica:0/task:0/device:CPU:0";

/// A local session of one replica of the job's graph, its batch one chunk of held-out rows.
pub(crate) struct Evaluator {
    session: PlacedSession,
    state: Vec<StateVar>,
    /// (placeholder, input name) of every input.
    inputs: Vec<(Operation, String)>,
    fetch: Operation,
    metric: Metric,
    chunk: usize,
}

impl Evaluator {
    /// An evaluator of `job`'s metric on its held-out set (`None` without one).
    ///
    /// # Errors
    /// The errors of replicating and importing the graph.
    pub(crate) fn new(job: &Job) -> Result<Option<Evaluator>> {
        let (Some(held_out), Some(metric)) = (&job.held_out, job.metric()) else {
            return Ok(None);
        };
        let chunk = held_out.len().clamp(1, CHUNK);
        let (analyzed, sidecar) = (&job.workload.analyzed, &job.workload.sidecar);
        let plan = DataParallelPlan {
            strategy: "evaluation".into(),
            replicas: vec![Replica {
                device: LOCAL_CPU.into(),
                batch: chunk,
            }],
            variable_devices: BTreeMap::new(),
            global_device: LOCAL_CPU.into(),
            predicted_step_ms: None,
        };
        let rep = replicate(
            &analyzed.graph_def,
            &analyzed.signatures,
            sidecar,
            &plan,
            BatchData::Feed,
        )?;
        let graph = crate::placer::apply::import(&rep.graph_def, "the evaluation graph")?;
        let session = PlacedSession::new(graph, &SessionConfig::default())?;
        let init = session.op(&rep.sidecar.init, "evaluation init")?;
        session.run(&[], &[init], &[], false)?;
        let inputs = job
            .specs
            .iter()
            .map(|s| {
                Ok((
                    session.op(&replica_name(0, &s.name), "evaluation input")?,
                    s.name.clone(),
                ))
            })
            .collect::<Result<Vec<_>>>()?;
        let fetch = match metric {
            // The metric's own logits: the sidecar's (as replicated), or another op a library
            // user named in `Job::with_metric`, in replica 0's tower or outside the towers.
            Metric::Accuracy { logits, .. } if sidecar.logits.as_ref() == Some(logits) => {
                let replicated = rep.sidecar.logits.as_deref().unwrap_or(logits);
                session.op(replicated, "sidecar `logits`")?
            }
            Metric::Accuracy { logits, .. } => session
                .op(&replica_name(0, logits), "metric logits")
                .or_else(|_| session.op(logits, "metric logits"))?,
            Metric::Scalar { tensor, .. } if *tensor == sidecar.loss => {
                session.op(&rep.sidecar.loss, "sidecar `loss`")?
            }
            Metric::Scalar { tensor, .. } => session
                .op(&replica_name(0, tensor), "metric tensor")
                .or_else(|_| session.op(tensor, "metric tensor"))?,
        };
        Ok(Some(Evaluator {
            session,
            state: rep.state,
            inputs,
            fetch,
            metric: metric.clone(),
            chunk,
        }))
    }

    /// The metric of the variables in `checkpoint` over every held-out row of `job`.
    ///
    /// # Errors
    /// [`Error::Checkpoint`] if it does not fit the graph; the data set's errors;
    /// [`Error::TensorFlow`] if a run fails.
    pub(crate) fn evaluate(&self, job: &Job, checkpoint: &Checkpoint) -> Result<f64> {
        checkpoint::restore(&self.session, &self.state, checkpoint)?;
        let Some(held_out) = &job.held_out else {
            return Ok(f64::NAN);
        };
        let (mut sum, mut rows) = (0.0f64, 0usize);
        for item in in_order(held_out.as_ref(), &job.specs, self.chunk, true) {
            let (batch, real) = item?;
            let feeds = self
                .inputs
                .iter()
                .map(|(op, name)| {
                    let t = batch.tensors.get(name).ok_or_else(|| Error::DataMissing {
                        file: held_out.name().into(),
                        input: name.clone(),
                        available: batch.tensors.keys().cloned().collect::<Vec<_>>().join(", "),
                    })?;
                    Ok((op, FeedTensor::from_host(name, t)?))
                })
                .collect::<Result<Vec<_>>>()?;
            let mut args = SessionRunArgs::new();
            for (op, t) in &feeds {
                t.add_feed(&mut args, op, 0);
            }
            let token = args.request_fetch(&self.fetch, 0);
            self.session.run_args(&mut args, false, "evaluation")?;
            let out = args
                .fetch::<f32>(token)
                .map_err(|e| crate::tf::status::error("fetching the evaluated tensor", &e))?;
            match &self.metric {
                Metric::Accuracy { label, .. } => {
                    let labels = match batch.tensors.get(label) {
                        Some(t) => t.classes(label)?,
                        None => Vec::new(),
                    };
                    sum += correct(&out, &labels, real) as f64;
                }
                Metric::Scalar { .. } => {
                    let v = out.first().copied().unwrap_or(f32::NAN);
                    sum += f64::from(v) * real as f64;
                }
            }
            rows += real;
        }
        Ok(sum / rows.max(1) as f64)
    }
}

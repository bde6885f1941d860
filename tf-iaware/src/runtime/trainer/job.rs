//! What is trained: the user's single-tower training graph, its data, a held-out set and the
//! metric measured on it.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use crate::data::{check_label_values, input_specs, Dataset, InputSpec, Synthetic};
use crate::error::{Error, Result};
use crate::graph::analyze::{analyze_graph, Analyzed};
use crate::graph::labels::{
    add_label_range, check_logits, graph_labels, lookup_rows, metric_labels, LabelRange,
};
use crate::graph::Sidecar;
use crate::parallel::replicate::{replicate, BatchData};
use crate::parallel::updates::{add_async_updates, add_backup_accumulators};
use crate::parallel::{DataParallelPlan, Replica, Updates};
use crate::runtime::replicated::{GraphWorkload, Workload};

/// What evaluations measure on the held-out set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Metric {
    /// Held-out accuracy: the fraction of rows whose arg-max of `logits` (op name, output 0,
    /// `[batch, classes]`) is the row's class in input `label` (an integer class, or a one-hot
    /// row). Higher is better.
    Accuracy {
        /// The logits op.
        logits: String,
        /// The label input.
        label: String,
    },
    /// A scalar float tensor of the graph (op name, output 0), averaged over held-out rows
    /// (the loss, say).
    Scalar {
        /// The op.
        tensor: String,
        /// Whether a higher value is better (a target is reached from below).
        higher_is_better: bool,
    },
}

impl Metric {
    /// The metric's name in reports (`accuracy` or the tensor's name).
    pub fn name(&self) -> &str {
        match self {
            Metric::Accuracy { .. } => "accuracy",
            Metric::Scalar { tensor, .. } => tensor,
        }
    }

    /// Whether `value` reaches `target`.
    pub fn reaches(&self, value: f64, target: f64) -> bool {
        match self {
            Metric::Scalar {
                higher_is_better: false,
                ..
            } => value <= target,
            _ => value >= target,
        }
    }
}

/// A training job: the user's graph (single tower, as built; replicated per plan), the rows it
/// trains on and, optionally, a held-out set and the metric measured on it.
pub struct Job {
    pub(crate) workload: Arc<GraphWorkload>,
    pub(crate) specs: Vec<InputSpec>,
    /// The label inputs of the graph's classification ops and of the sidecar's `label`, and
    /// their classes ([`job_labels`]): every row of the data sets is checked against them.
    labels: BTreeMap<String, LabelRange>,
    pub(crate) train: Box<dyn Dataset + Sync>,
    pub(crate) held_out: Option<Box<dyn Dataset + Sync>>,
    pub(crate) metric: Option<Metric>,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Job")
            .field("graph", &self.workload.name)
            .field("train", &self.train.name())
            .field("held_out", &self.held_out.as_ref().map(|d| d.name()))
            .field("metric", &self.metric)
            .finish()
    }
}

impl Job {
    /// A job training graph `name` (`analyzed`, with `sidecar`) on `train`. The data set is
    /// checked against the graph's inputs (names, element types, row shapes) here, before
    /// TensorFlow sees a batch, and every row is read once: no NaN or infinite value, and every
    /// label a classification op takes (`SparseSoftmaxCrossEntropyWithLogits`, `InTopK`) within
    /// the classes of its logits ([`graph_labels`]), and so every label of the input the
    /// sidecar names `label` within the classes of its `logits`. Other integer inputs (token
    /// ids) are features, not checked as classes.
    ///
    /// # Errors
    /// [`Error::UnknownOp`] for a sidecar input the graph lacks; [`Error::Sidecar`] for a
    /// sidecar `label` that is no input or holds no classes ([`Sidecar::check_against`]);
    /// [`Error::DataEmpty`],
    /// [`Error::DataMissing`], [`Error::DataType`], [`Error::DataShape`] naming the input and
    /// the data set; [`Error::DataValue`] naming the file, the input and the row of a NaN,
    /// infinite or out-of-range label value; [`Error::LabelWidth`] for one-hot label rows that
    /// are not as wide as the logits.
    pub fn new(
        name: &str,
        analyzed: Analyzed,
        sidecar: Sidecar,
        train: Box<dyn Dataset + Sync>,
    ) -> Result<Job> {
        Job::with_batches(name, analyzed, sidecar, train, BatchData::Feed)
    }

    /// As [`Job::new`], the replicas' batches fed from `train` or living on the workers.
    fn with_batches(
        name: &str,
        analyzed: Analyzed,
        mut sidecar: Sidecar,
        train: Box<dyn Dataset + Sync>,
        batches: BatchData,
    ) -> Result<Job> {
        sidecar.check_against(&analyzed.op_graph, Path::new(name))?;
        sidecar.infer_one_hot(&analyzed.op_graph, &analyzed.signatures);
        let specs = input_specs(&analyzed.op_graph, &sidecar)?;
        let labels = job_labels(&analyzed.op_graph, &sidecar, &specs);
        check_data(train.as_ref(), &specs, &labels)?;
        Ok(Job {
            workload: Arc::new(GraphWorkload {
                name: name.into(),
                analyzed,
                sidecar,
                data: batches,
            }),
            specs,
            labels,
            train,
            held_out: None,
            metric: None,
        })
    }

    /// Zoo model `name` (batch 64, initial values drawn with `seed`) trained on `train`.
    ///
    /// # Errors
    /// [`Error::UnknownModel`]; as [`Job::new`].
    pub fn zoo(name: &str, seed: u64, train: Box<dyn Dataset + Sync>) -> Result<Job> {
        let m = crate::models::zoo::build(name, 64, seed)?;
        Job::new(name, analyze_graph(m.net.graph())?, m.sidecar, train)
    }

    /// `workload` (a zoo model, built with `seed`, or a graph) trained on synthetic batches
    /// that live on the workers ([`BatchData::Synthetic`]: noise for float inputs, classes for
    /// labels, drawn with `seed` when the variables are initialised): nothing is fed and nothing
    /// crosses the network per step, so steps time the model, not the input pipeline — for
    /// images/s figures and adaptation without the user's data. An epoch is `rows` samples.
    /// (The user's own rows, or [`Synthetic`] rows sent by the driver, train through
    /// [`Job::new`].)
    ///
    /// # Errors
    /// [`Error::UnknownModel`]; [`Error::DataType`] for an input synthetic batches cannot take
    /// (strings); as [`Job::new`].
    pub fn synthetic(workload: &Workload, rows: usize, seed: u64) -> Result<Job> {
        let (name, analyzed, mut sidecar) = match workload {
            Workload::Zoo(name) => {
                let m = crate::models::zoo::build(name, 64, seed)?;
                (name.clone(), analyze_graph(m.net.graph())?, m.sidecar)
            }
            Workload::Graph(g) => (g.name.clone(), g.analyzed.clone(), g.sidecar.clone()),
        };
        sidecar.infer_one_hot(&analyzed.op_graph, &analyzed.signatures);
        let specs = input_specs(&analyzed.op_graph, &sidecar)?;
        let g = &analyzed.op_graph;
        let labels = job_labels(g, &sidecar, &specs);
        let lookups = lookup_rows(g);
        let high = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
        // Integer inputs that are neither a label nor an embedding's ids: within the fewest
        // classes any label takes (10 by default), as before.
        let classes = labels
            .values()
            .filter(|r| !r.one_hot)
            .map(|r| high(r.classes))
            .min();
        let mut data = Synthetic::new(&specs, &sidecar.one_hot, rows, seed)?;
        if let Some(classes) = classes {
            data = data.with_classes(classes);
        }
        // A label within its classes, token ids below the rows of the table they index.
        for spec in specs.iter().filter(|s| s.dtype.is_integer()) {
            let label = labels.get(&spec.name).filter(|r| !r.one_hot);
            let bounds = label.map(|r| r.classes).into_iter();
            if let Some(n) = bounds.chain(lookups.get(&spec.name).copied()).min() {
                data = data.with_int_range(&spec.name, high(n));
            }
        }
        let batches = BatchData::Synthetic { seed: seed as i64 };
        Job::with_batches(&name, analyzed, sidecar, Box::new(data), batches)
    }

    /// Whether steps feed batches from [`Job::train_data`] (`false`: the batches live on the
    /// workers, [`Job::synthetic`]; the data set then only counts samples and epochs).
    pub fn feeds(&self) -> bool {
        self.workload.data == BatchData::Feed
    }

    /// The job's graph as a [`Workload`], to plan it
    /// ([`Connection::plan_data_parallel`](crate::Connection::plan_data_parallel)).
    pub fn workload(&self) -> Workload {
        Workload::Graph(self.workload.clone())
    }

    /// The graph inputs a data set must provide (placeholder names, element types, shapes).
    pub fn inputs(&self) -> &[InputSpec] {
        &self.specs
    }

    /// The graph's name.
    pub fn name(&self) -> &str {
        &self.workload.name
    }

    /// The training data set.
    pub fn train_data(&self) -> &dyn Dataset {
        self.train.as_ref()
    }

    /// The held-out data set, if any.
    pub fn held_out_data(&self) -> Option<&dyn Dataset> {
        self.held_out.as_deref().map(|d| d as &dyn Dataset)
    }

    /// Adds a held-out set, checked like the training set. Unless [`Job::with_metric`] says
    /// otherwise, evaluations measure accuracy when the sidecar names `logits` and one input
    /// is the label (the sidecar's `label`; without it, the first `one_hot` input or the one
    /// integer input), else the mean `loss`. An
    /// accuracy's labels are checked against the logits' width too: integer classes in
    /// `[0, classes)`, one-hot rows `classes` wide.
    ///
    /// # Errors
    /// As [`Job::new`]; [`Error::Sidecar`] if the default metric cannot be found.
    pub fn with_held_out(mut self, held_out: Box<dyn Dataset + Sync>) -> Result<Job> {
        let metric = match self.metric.take() {
            Some(m) => m,
            None => self.default_metric()?,
        };
        check_data(
            held_out.as_ref(),
            &self.specs,
            &self.held_out_labels(&metric),
        )?;
        self.metric = Some(metric);
        self.held_out = Some(held_out);
        Ok(self)
    }

    /// The label ranges held-out rows are checked against under `metric`: the graph's, and an
    /// accuracy's label input against the width of its logits ([`metric_labels`]).
    fn held_out_labels(&self, metric: &Metric) -> BTreeMap<String, LabelRange> {
        let mut labels = self.labels.clone();
        if let Metric::Accuracy { logits, label } = metric {
            let spec = self.specs.iter().find(|s| &s.name == label);
            let g = &self.workload.analyzed.op_graph;
            if let Some(range) = spec.and_then(|s| metric_labels(g, logits, s.dtype.is_integer())) {
                add_label_range(&mut labels, label, range);
            }
        }
        labels
    }

    /// Sets the metric evaluations measure. With a held-out set already added, an accuracy's
    /// labels that the set was not checked against are checked now ([`Job::with_held_out`]).
    ///
    /// # Errors
    /// [`Error::UnknownOp`] for a tensor or label input the graph lacks; [`Error::Sidecar`] for
    /// a label that is not an input, or logits that cannot be logits (a graph input, a
    /// constant, not float, a known rank other than 2: [`check_logits`]); as
    /// [`Job::with_held_out`] for the held-out rows.
    pub fn with_metric(mut self, metric: Metric) -> Result<Job> {
        let g = &self.workload.analyzed.op_graph;
        match &metric {
            Metric::Accuracy { logits, label } => {
                g.require(logits, "metric logits")?;
                check_logits(g, logits)
                    .map_err(|r| self.sidecar_error(format!("metric logits: {r}")))?;
                if !self.specs.iter().any(|s| &s.name == label) {
                    return Err(self.sidecar_error(format!(
                        "the label `{label}` is not one of the inputs ({})",
                        self.input_names()
                    )));
                }
            }
            Metric::Scalar { tensor, .. } => {
                g.require(tensor, "metric tensor")?;
            }
        }
        if let Some(held_out) = &self.held_out {
            let labels = self.held_out_labels(&metric);
            let checked = match &self.metric {
                Some(m) => self.held_out_labels(m),
                None => self.labels.clone(),
            };
            if labels != checked {
                check_values(held_out.as_ref(), &self.specs, &labels)?;
            }
        }
        self.metric = Some(metric);
        Ok(self)
    }

    /// The metric evaluations measure (`None` without a held-out set).
    pub fn metric(&self) -> Option<&Metric> {
        self.metric.as_ref().filter(|_| self.held_out.is_some())
    }

    fn input_names(&self) -> String {
        let names: Vec<&str> = self.specs.iter().map(|s| s.name.as_str()).collect();
        names.join(", ")
    }

    fn sidecar_error(&self, reason: String) -> Error {
        Error::Sidecar {
            path: self.workload.name.clone().into(),
            reason,
        }
    }

    /// Accuracy from the sidecar's `logits` and label input — its `label`, else the first
    /// `one_hot` input, else the one integer input — or the mean loss without `logits`.
    fn default_metric(&self) -> Result<Metric> {
        let sidecar = &self.workload.sidecar;
        let Some(logits) = &sidecar.logits else {
            return Ok(Metric::Scalar {
                tensor: sidecar.loss.clone(),
                higher_is_better: false,
            });
        };
        let label = match (&sidecar.label, sidecar.one_hot.first()) {
            (Some(l), _) | (None, Some(l)) => l.clone(),
            (None, None) => {
                let ints: Vec<&InputSpec> =
                    self.specs.iter().filter(|s| s.dtype.is_integer()).collect();
                match ints.as_slice() {
                    [one] => one.name.clone(),
                    _ => {
                        return Err(self.sidecar_error(format!(
                            "names `logits` but no label input: name it with `label` (\"label\": \
                             \"y\"), list it in `one_hot`, or give exactly one integer input \
                             (inputs: {})",
                            self.input_names()
                        )))
                    }
                }
            }
        };
        Ok(Metric::Accuracy {
            logits: logits.clone(),
            label,
        })
    }

    /// Checks, without TensorFlow, that the graph can be trained with `updates`: replicated
    /// over two replicas and rewritten for it (asynchronous and backup-worker updates need
    /// towers that do not depend on each other).
    ///
    /// # Errors
    /// [`Error::Replication`] naming the op that prevents it.
    pub fn check_updates(&self, updates: Updates) -> Result<()> {
        let device = |k: usize| format!("/job:worker/replica:0/task:{k}/device:CPU:0");
        let plan = DataParallelPlan {
            strategy: "check".into(),
            replicas: (0..2)
                .map(|k| Replica {
                    device: device(k),
                    batch: 1,
                })
                .collect(),
            variable_devices: BTreeMap::new(),
            global_device: device(0),
            predicted_step_ms: None,
        };
        let w = &self.workload;
        let mut rep = replicate(
            &w.analyzed.graph_def,
            &w.analyzed.signatures,
            &w.sidecar,
            &plan,
            BatchData::Feed,
        )?;
        match updates {
            Updates::Sync => Ok(()),
            Updates::Async | Updates::Adaptive => add_async_updates(&mut rep).map(|_| ()),
            Updates::Backup { .. } => add_backup_accumulators(&mut rep, "check").map(|_| ()),
        }
    }
}

fn check_data(
    data: &dyn Dataset,
    specs: &[InputSpec],
    labels: &BTreeMap<String, LabelRange>,
) -> Result<()> {
    if data.is_empty() {
        return Err(Error::DataEmpty {
            file: data.name().into(),
        });
    }
    data.check(specs)?;
    check_values(data, specs, labels)
}

/// Rows read at a time by [`check_values`].
const CHECK_ROWS: usize = 4096;

/// Every row of every input of `data`, read once in chunks: a NaN or infinite value, or a
/// label outside its range in `labels` (input name → range), is an error naming the file, the
/// input and the row — found before any cluster is contacted, rather than as a NaN loss or
/// TensorFlow's own label error at the first step (training rows) or an accuracy no one
/// notices (held-out rows).
///
/// # Errors
/// [`Error::DataValue`]; [`Error::LabelWidth`]; as [`Dataset::rows`].
fn check_values(
    data: &dyn Dataset,
    specs: &[InputSpec],
    labels: &BTreeMap<String, LabelRange>,
) -> Result<()> {
    let n = data.len();
    for start in (0..n).step_by(CHECK_ROWS) {
        let indices: Vec<usize> = (start..(start + CHECK_ROWS).min(n)).collect();
        let batch = data.rows(&indices, specs)?;
        for (input, t) in &batch.tensors {
            if let Some((row, value)) = t.first_non_finite() {
                return Err(Error::DataValue {
                    file: data.name().into(),
                    input: input.clone(),
                    row: start + row,
                    reason: format!("{value} is not a finite number"),
                });
            }
            if let Some(range) = labels.get(input) {
                check_label_values(range, data.name(), input, t, start)?;
            }
        }
    }
    Ok(())
}

/// The label ranges the rows of a job's data sets are checked against: the graph's
/// ([`graph_labels`]), and the sidecar's `label` against the classes of its `logits`
/// ([`metric_labels`]: integer classes in `[0, classes)`, or one-hot rows `classes` wide).
fn job_labels(
    graph: &crate::graph::OpGraph,
    sidecar: &Sidecar,
    specs: &[InputSpec],
) -> BTreeMap<String, LabelRange> {
    let mut labels = graph_labels(graph);
    let (Some(label), Some(logits)) = (&sidecar.label, &sidecar.logits) else {
        return labels;
    };
    let spec = specs.iter().find(|s| &s.name == label);
    if let Some(range) = spec.and_then(|s| metric_labels(graph, logits, s.dtype.is_integer())) {
        add_label_range(&mut labels, label, range);
    }
    labels
}

/// Of the first `real` rows of a batch, those whose arg-max of `logits` (`[rows, classes]`,
/// row-major, one row per entry of `classes`) is their class.
pub(crate) fn correct(logits: &[f32], classes: &[usize], real: usize) -> usize {
    if classes.is_empty() || logits.len() % classes.len() != 0 {
        return 0;
    }
    let k = logits.len() / classes.len();
    if k == 0 {
        return 0;
    }
    logits
        .chunks(k)
        .zip(classes)
        .take(real)
        .filter(|(row, &c)| {
            row.iter()
                .enumerate()
                .max_by(|a, b| a.1.total_cmp(b.1))
                .is_some_and(|(i, _)| i == c)
        })
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn correct_counts_only_real_rows() {
        // Three rows of two classes; the third is padding.
        let logits = [0.1f32, 0.9, 0.8, 0.2, 0.0, 1.0];
        assert_eq!(correct(&logits, &[1, 0, 0], 3), 2);
        assert_eq!(correct(&logits, &[1, 0, 0], 2), 2);
        assert_eq!(correct(&logits, &[0, 0, 1], 2), 1);
    }

    #[test]
    fn a_loss_metric_is_reached_from_above() {
        let loss = Metric::Scalar {
            tensor: "loss".into(),
            higher_is_better: false,
        };
        assert!(loss.reaches(0.1, 0.2) && !loss.reaches(0.3, 0.2));
        let acc = Metric::Accuracy {
            logits: "l".into(),
            label: "y".into(),
        };
        assert!(acc.reaches(0.95, 0.9) && !acc.reaches(0.5, 0.9));
    }
}

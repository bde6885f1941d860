//! The planners on synthetic clusters, by simulation only (no TensorFlow session, no worker
//! processes): one cluster compared planner by planner, and the scale study — thin callers of
//! [`tf_iaware::sim::scale`].

use tf_iaware::cluster::{ClusterSpec, SyntheticSpec};
use tf_iaware::sim::data_parallel::DpWorkload;
use tf_iaware::sim::scale::{self, Planner, Study, StudyOptions};

use crate::error::{Error, Result};
use crate::event::{Event, OnEvent};
use crate::report::SimulatedReport;

/// The synthetic cluster of `text`, which must be a `synthetic:…` spec.
///
/// # Errors
/// [`Error::Conflict`] for another kind of cluster; the library's error for a bad spec.
pub fn synthetic_cluster(text: &str) -> Result<SyntheticSpec> {
    match ClusterSpec::parse(text)? {
        ClusterSpec::Synthetic(s) => Ok(SyntheticSpec::parse(&s)?),
        other => Err(Error::Conflict(format!(
            "--sim-cluster must be a synthetic:… spec, not `{other}`"
        ))),
    }
}

/// What both simulated modes take (ResNet-20 is the data-parallel model).
#[derive(Clone, Debug)]
pub struct SimOptions {
    /// The synthetic cluster (for the scale study: its distributions, links and seed).
    pub cluster: SyntheticSpec,
    /// Planners: data-parallel ones and per-op ones.
    pub strategies: Vec<Planner>,
    /// Ops of the synthetic layered DAG the per-op strategies place.
    pub ops: usize,
    /// Batch per worker of the data-parallel planners, samples.
    pub batch_per_worker: usize,
    /// Timed runs of each planner (the least time is reported).
    pub repeats: usize,
    /// Backup workers of `sync-backup`.
    pub backups: usize,
}

impl SimOptions {
    fn check(&self) -> Result<()> {
        for (option, value) in [
            ("--batch-per-worker", self.batch_per_worker),
            ("--ops", self.ops),
        ] {
            if value == 0 {
                return Err(Error::InvalidOption {
                    option,
                    value: "0".into(),
                    reason: "must be at least 1".into(),
                });
            }
        }
        Ok(())
    }
}

/// Every planner of `o` on `o.cluster`, by simulation.
///
/// # Errors
/// [`Error::InvalidOption`] for a zero count; the library's error for a planner that fails.
pub fn simulate(o: &SimOptions) -> Result<SimulatedReport> {
    o.check()?;
    let workload = DpWorkload::resnet20();
    let cluster = o.cluster.build();
    let batch = cluster.workers.len() * o.batch_per_worker;
    let rows = scale::compare(
        &cluster,
        &o.strategies,
        &workload,
        batch,
        o.backups,
        o.ops,
        o.repeats.max(1),
    )?;
    Ok(SimulatedReport {
        cluster: o.cluster.to_string(),
        model: workload.name,
        ops: o.ops,
        rows,
        workers: cluster.workers.len(),
        ps: cluster.ps.len(),
        global_batch: batch,
    })
}

/// The scale study: the data-parallel planners of `o` over `workers` workers, the per-op ones
/// over `ops` ops (on 64 devices) and over `workers` devices; each row is sent as
/// [`Event::StudyRow`] as soon as it is measured.
///
/// # Errors
/// [`Error::InvalidOption`] for a zero count; the library's error for bad sizes;
/// [`Error::Report`] when `on_event` fails.
pub fn scale_study(
    o: &SimOptions,
    workers: &[usize],
    ops: &[usize],
    on_event: &mut OnEvent<'_>,
) -> Result<Study> {
    o.check()?;
    let (mut dp, mut per_op) = (Vec::new(), Vec::new());
    for &s in &o.strategies {
        match s {
            Planner::DataParallel(s) => dp.push(s),
            Planner::PerOp(s) => per_op.push(s),
        }
    }
    let options = StudyOptions {
        workers: workers.to_vec(),
        ops: ops.to_vec(),
        dp_planners: dp,
        per_op,
        base: o.cluster.clone(),
        batch_per_worker: o.batch_per_worker,
        workload: DpWorkload::resnet20(),
        repeats: o.repeats.max(1),
        backups: o.backups,
        ..StudyOptions::default()
    };
    let mut reported = Ok(());
    let study = scale::run(&options, &mut |r| {
        if reported.is_ok() {
            reported = on_event(Event::StudyRow(r));
        }
    })?;
    reported.map_err(Error::Report)?;
    Ok(study)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn options() -> SimOptions {
        SimOptions {
            cluster: synthetic_cluster("synthetic:workers=8:ps=2").expect("a synthetic spec"),
            strategies: ["replica-setter", "infra-aware", "heft"]
                .iter()
                .map(|s| s.parse().expect("a known planner"))
                .collect(),
            ops: 50,
            batch_per_worker: 4,
            repeats: 1,
            backups: 1,
        }
    }

    #[test]
    fn only_synthetic_clusters_are_simulated() {
        assert!(matches!(
            synthetic_cluster("local:cpu=2"),
            Err(Error::Conflict(m)) if m.contains("synthetic")
        ));
    }

    #[test]
    fn zero_counts_are_refused_by_name() {
        let mut o = options();
        o.ops = 0;
        assert!(matches!(
            simulate(&o),
            Err(Error::InvalidOption {
                option: "--ops",
                ..
            })
        ));
    }

    #[test]
    fn one_row_per_planner_on_the_whole_cluster() {
        let report = simulate(&options()).expect("simulated");
        assert_eq!(report.rows.len(), 3);
        assert_eq!((report.workers, report.ps), (8, 2));
        assert_eq!(report.global_batch, 32);
        let planners: Vec<&str> = report.rows.iter().map(|r| r.planner.as_str()).collect();
        assert_eq!(planners, ["replica-setter", "infra-aware", "heft"]);
    }

    #[test]
    fn the_study_sends_every_row() {
        let mut seen = 0;
        let study = scale_study(&options(), &[4, 8], &[100], &mut |e| {
            if let Event::StudyRow(_) = e {
                seen += 1;
            }
            Ok(())
        })
        .expect("studied");
        assert_eq!(seen, study.rows.len());
        assert!(!study.rows.is_empty());
    }

    #[test]
    fn a_failing_handler_ends_the_study() {
        let err = scale_study(&options(), &[4], &[100], &mut |_| {
            Err(std::io::Error::other("stdout is closed"))
        });
        assert!(matches!(err, Err(Error::Report(_))));
    }
}

//! The one data-parallel planner: a strategy ([`DataParallelStrategy`]) and what is known of the
//! workers → the plan, the rules that re-size it while training ([`Feedback`]), the plan over
//! the tasks still alive after a failure, and the size of a worker calibration's probe steps.
//!
//! Every door plans through [`DataParallelPlanner`]: the library's `plan_data_parallel`, the
//! trainer (first plan, LB-BSP re-sizes, live re-planning, recovery) and the benchmark, so the
//! figures a benchmark shows are those a user's plan gets. Its constants
//! ([`InfraAwareOptions::default`], [`MAX_PROBE_BATCH`], [`RESIZE_EVERY`]) are the only
//! planning constants.
//!
//! A calibrated strategy plans from a worker calibration when one is known
//! ([`DataParallelPlanner::with_calibration`]); without one it starts at once from each
//! worker's **nominal** figures — capability × live availability of its device, where the
//! availability counts a CPU quota as the share of the machine's cores it leaves — and learns
//! the workers' real throughput from its own traced training steps ([`Feedback`], as LB-BSP
//! does), so planning never stops a job that has no calibration yet.

use super::live::{live_capacities, memory_cap, ps_capacities, ReplicaMemory};
use super::network::VarInfo;
use super::plan::{infra_aware, replica_setter, DataParallelPlan, Replica, WorkerCapacity};
use super::DataParallelStrategy;
use super::{InfraAwareOptions, Shares, Updates};
use crate::cluster::model::MIN_AVAILABILITY;
use crate::cluster::Cluster;
use crate::error::{Error, Result};

/// Most samples per step of a worker calibration's small probes (the shares a plan can give a
/// worker are timed too, see [`ProbeSize::global_batch`]).
pub const MAX_PROBE_BATCH: usize = 32;

/// Steps between the traced steps that measure `infra-aware`'s replicas while training
/// ([`Feedback::every`]).
pub const RESIZE_EVERY: usize = 4;

/// How large a worker calibration's probe steps are: [`ProbeSize::batch`] samples (and its
/// quarter and half), then each worker at the shares a plan of `global_batch` can give it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProbeSize {
    /// Samples of the largest small probe: the global batch ÷ the workers, 1 to
    /// [`MAX_PROBE_BATCH`].
    pub batch: usize,
    /// The global batch whose shares are timed too.
    pub global_batch: usize,
}

/// LB-BSP-style re-sizing of a synchronous plan's shares from measured replica times.
#[derive(Clone, Debug)]
pub struct Feedback {
    /// Every `every`-th step is traced to measure the replicas (the interval doubling, up to
    /// eight times, while decisions keep the shares); after three measurements of each the
    /// shares are re-sized when the lower confidence bound of the predicted gain, given the noise
    /// of those measurements, is at least `options.min_gain`
    /// ([`decide_resize`](crate::parallel::noise::decide_resize)).
    pub every: usize,
    /// The figures the plan was made from (fixed per-step costs, workers that may be used) at
    /// the live availability; nominal figures when the workers were not calibrated.
    pub capacity: Vec<WorkerCapacity>,
    /// Parameter servers and their relative speed, as for [`infra_aware`].
    pub ps: Vec<(String, f64)>,
    /// The variables.
    pub vars: Vec<VarInfo>,
    /// The planner's options.
    pub options: InfraAwareOptions,
}

/// The one data-parallel planner (see the module docs): a strategy, the workers, ps tasks,
/// variables and global batch of a job, and what is known of the workers.
#[derive(Clone, Debug, PartialEq)]
pub struct DataParallelPlanner {
    strategy: DataParallelStrategy,
    workers: Vec<String>,
    ps: Vec<String>,
    vars: Vec<VarInfo>,
    global_batch: usize,
    memory: Option<ReplicaMemory>,
    /// Each worker's calibrated figures at the availability they were measured at; empty:
    /// not calibrated (nominal figures, learnt while training).
    calibration: Vec<WorkerCapacity>,
    options: InfraAwareOptions,
}

impl DataParallelPlanner {
    /// A planner of `strategy` for `global_batch` samples per step over `workers`, the
    /// variables `vars` on the `ps` tasks.
    ///
    /// # Errors
    /// [`Error::Infeasible`] without workers or ps tasks; [`Error::InvalidArgument`] for a zero
    /// batch, a batch smaller than the workers of an equal-share strategy, or as many backup
    /// workers as workers.
    pub fn new(
        strategy: DataParallelStrategy,
        workers: &[String],
        ps: &[String],
        vars: &[VarInfo],
        global_batch: usize,
    ) -> Result<Self> {
        if let Updates::Backup { backups } = strategy.updates() {
            check_backups(backups, workers.len())?;
        }
        let planner = DataParallelPlanner {
            strategy,
            workers: workers.to_vec(),
            ps: ps.to_vec(),
            vars: vars.to_vec(),
            global_batch,
            memory: None,
            calibration: Vec::new(),
            options: InfraAwareOptions::default(),
        };
        // Equal shares are checked here; calibrated ones when planned (they may leave workers out).
        if strategy.shares() == Shares::Equal {
            replica_setter(workers, ps, vars, global_batch)?;
        } else {
            super::plan::check(workers.len(), ps, global_batch)?;
        }
        Ok(planner)
    }

    /// The same planner, shares capped by what each worker's free memory holds of `memory`.
    pub fn with_memory(mut self, memory: Option<ReplicaMemory>) -> Self {
        self.memory = memory;
        self
    }

    /// The same planner with the workers' calibrated figures (each at the availability it was
    /// measured at; workers that are not the planner's are ignored).
    pub fn with_calibration(mut self, calibration: Vec<WorkerCapacity>) -> Self {
        self.calibration = calibration
            .into_iter()
            .filter(|c| self.workers.contains(&c.device))
            .collect();
        self
    }

    /// The strategy.
    pub fn strategy(&self) -> DataParallelStrategy {
        self.strategy
    }

    /// Worker devices.
    pub fn workers(&self) -> &[String] {
        &self.workers
    }

    /// Parameter-server devices.
    pub fn ps(&self) -> &[String] {
        &self.ps
    }

    /// The variables.
    pub fn vars(&self) -> &[VarInfo] {
        &self.vars
    }

    /// Samples per synchronous step over every replica.
    pub fn global_batch(&self) -> usize {
        self.global_batch
    }

    /// A replica's memory, when known.
    pub fn memory(&self) -> Option<&ReplicaMemory> {
        self.memory.as_ref()
    }

    /// The calibration the plans are made from (`None`: nominal figures).
    pub fn calibration(&self) -> Option<&[WorkerCapacity]> {
        (!self.calibration.is_empty()).then_some(self.calibration.as_slice())
    }

    /// The planner's options (the one set of planning constants).
    pub fn options(&self) -> &InfraAwareOptions {
        &self.options
    }

    /// Whether the strategy sizes shares from the workers' capability (a calibration, or
    /// nominal figures learnt while training).
    pub fn sizes_shares(&self) -> bool {
        self.strategy.shares() == Shares::Calibrated
    }

    /// The probe steps a worker calibration of this job takes.
    pub fn probe(&self) -> ProbeSize {
        ProbeSize {
            batch: (self.global_batch / self.workers.len().max(1)).clamp(1, MAX_PROBE_BATCH),
            global_batch: self.global_batch,
        }
    }

    /// The workers' figures at `cluster`'s live availability (capped by free memory): the
    /// calibration rescaled ([`live_capacities`]), or without one each worker's nominal figures
    /// ([`nominal_capacities`]).
    pub fn capacities(&self, cluster: &Cluster) -> Vec<WorkerCapacity> {
        if self.calibration.is_empty() {
            nominal_capacities(&self.workers, cluster, self.memory.as_ref())
        } else {
            live_capacities(&self.calibration, cluster, self.memory.as_ref())
        }
    }

    /// The plan over every worker and ps task at `cluster`'s live state.
    ///
    /// # Errors
    /// As [`DataParallelPlanner::plan_over`].
    pub fn plan(&self, cluster: &Cluster) -> Result<DataParallelPlan> {
        self.plan_over(&self.workers, &self.ps, cluster)
    }

    /// The plan over `workers` and `ps` (a subset: the tasks still alive): equal shares for
    /// TensorFlow's recipes; for the infra-aware ones, shares that balance the step from the
    /// workers' figures at the live availability ([`DataParallelPlanner::capacities`]) — every
    /// worker keeps at least one sample while its figures are nominal, so its training steps
    /// measure it.
    ///
    /// # Errors
    /// The planners' errors ([`Error::Infeasible`] naming the workers when the batch does not
    /// fit in their memory, …).
    pub fn plan_over(
        &self,
        workers: &[String],
        ps: &[String],
        cluster: &Cluster,
    ) -> Result<DataParallelPlan> {
        let mut plan = match self.strategy.shares() {
            Shares::Equal => replica_setter(workers, ps, &self.vars, self.global_batch)?,
            Shares::Calibrated => {
                let capacity: Vec<WorkerCapacity> = self
                    .capacities(cluster)
                    .into_iter()
                    .filter(|c| workers.contains(&c.device))
                    .collect();
                let ps_capacity = ps_capacities(ps, cluster);
                if self.calibration.is_empty() {
                    nominal_plan(&capacity, &ps_capacity, &self.vars, self.global_batch)?
                } else {
                    infra_aware(
                        &capacity,
                        &ps_capacity,
                        &self.vars,
                        self.global_batch,
                        &self.options,
                    )?
                }
            }
        };
        plan.strategy = self.strategy.to_string();
        Ok(plan)
    }

    /// The LB-BSP feedback of a synchronous `infra-aware` plan at `cluster`'s live state,
    /// traced every `every` steps (`None` for other strategies or `every == 0`).
    pub fn feedback(&self, cluster: &Cluster, every: usize) -> Option<Feedback> {
        (self.strategy == DataParallelStrategy::InfraAware && every > 0).then(|| Feedback {
            every,
            capacity: self.capacities(cluster),
            ps: ps_capacities(&self.ps, cluster),
            vars: self.vars.clone(),
            options: self.options.clone(),
        })
    }

    /// Predicted step time of `plan` from the workers' figures at `cluster`'s live state, ms
    /// (the slowest replica plus the per-replica synchronisation cost); `None` while the
    /// figures are nominal or a replica's worker is unknown.
    pub fn predict_step_ms(&self, plan: &DataParallelPlan, cluster: &Cluster) -> Option<f64> {
        if self.calibration.is_empty() {
            return None;
        }
        crate::parallel::noise::plan_step_ms(
            plan,
            &self.capacities(cluster),
            self.options.per_replica_overhead_ms,
        )
    }

    /// Leaves `lost` devices (workers or ps tasks) out of later plans.
    pub fn forget(&mut self, lost: &[String]) {
        self.workers.retain(|w| !lost.contains(w));
        self.ps.retain(|p| !lost.contains(p));
        self.calibration.retain(|c| !lost.contains(&c.device));
    }

    /// A worker measured `factor` times as fast as its figures say (0.5: half as fast) at
    /// `cluster`'s availability now: its figures become what was measured (a calibrated worker's
    /// figures rescaled; nominal figures become a calibration of that worker).
    pub fn rescale(&mut self, device: &str, factor: f64, cluster: &Cluster) {
        if !(factor.is_finite() && factor > 0.0 && self.workers.iter().any(|w| w == device)) {
            return;
        }
        if self.calibration.is_empty() {
            self.calibration = nominal_capacities(&self.workers, cluster, None);
        }
        let now = cluster
            .index_of(device)
            .map(|i| cluster.devices[i].availability);
        let Some(c) = self.calibration.iter_mut().find(|c| c.device == device) else {
            return;
        };
        let live = live_capacities(std::slice::from_ref(c), cluster, None);
        let base = live.into_iter().next().unwrap_or_else(|| c.clone());
        *c = WorkerCapacity {
            samples_per_sec: base.samples_per_sec * factor,
            fixed_ms: base.fixed_ms / factor,
            availability: now.or(base.availability),
            ..base
        };
    }
}

/// Checks that `backups` backup workers of `workers` leave a gradient to aggregate.
///
/// # Errors
/// [`Error::InvalidArgument`] naming the backup workers.
pub fn check_backups(backups: usize, workers: usize) -> Result<()> {
    if backups >= workers {
        return Err(Error::InvalidArgument {
            what: "backup workers".into(),
            reason: format!(
                "{backups} of {workers} workers: at least one gradient must be aggregated"
            ),
        });
    }
    Ok(())
}

/// Nominal throughput of a device with the whole of its capability, samples/s per FLOP/s: the
/// figures of an uncalibrated worker are only compared with each other (shares in proportion),
/// and the training steps replace them.
const NOMINAL_SAMPLES_PER_FLOP: f64 = 1e-7;

/// Each worker's nominal figures at `cluster`'s live state: a throughput in proportion to its
/// device's capability × live availability — for a CPU device, × the cores of its allotment
/// (what a reading says its process may use: the machine's allowed CPUs, or an enclosing
/// group's quota; a quota on the process's own cgroup is lost availability), so a 0.25-core
/// worker is an eighth of an idle 2-core one — no fixed cost, free memory as the cap with
/// `memory`. A worker that is not a device of `cluster` gets the nominal CPU capability at full
/// availability.
pub fn nominal_capacities(
    workers: &[String],
    cluster: &Cluster,
    memory: Option<&ReplicaMemory>,
) -> Vec<WorkerCapacity> {
    workers
        .iter()
        .map(|w| {
            let (flops, availability, max_batch) = match cluster.index_of(w) {
                Some(i) => {
                    let d = &cluster.devices[i];
                    let cores = match d.device_type {
                        crate::graph::DeviceType::Cpu => d
                            .live
                            .allotment
                            .filter(|c| c.is_finite() && *c > 0.0)
                            .unwrap_or(1.0),
                        _ => 1.0,
                    };
                    (d.peak_flops * cores, d.availability, memory_cap(d, memory))
                }
                None => (crate::cluster::device::NOMINAL_CPU_FLOPS, 1.0, None),
            };
            let availability = availability.max(MIN_AVAILABILITY);
            WorkerCapacity {
                availability: Some(availability),
                max_batch,
                ..WorkerCapacity::rate(w, flops * availability * NOMINAL_SAMPLES_PER_FLOP)
            }
        })
        .collect()
}

/// The plan of uncalibrated workers: shares in proportion to their nominal throughput, each
/// worker at least one sample (so every worker's training steps measure it) and at most its
/// memory cap; variables on the ps as [`infra_aware`] lays them out.
fn nominal_plan(
    capacity: &[WorkerCapacity],
    ps: &[(String, f64)],
    vars: &[VarInfo],
    global_batch: usize,
) -> Result<DataParallelPlan> {
    let ps_names: Vec<String> = ps.iter().map(|(p, _)| p.clone()).collect();
    super::plan::check(capacity.len(), &ps_names, global_batch)?;
    let mut plan = infra_aware(
        capacity,
        ps,
        vars,
        global_batch,
        &InfraAwareOptions {
            min_relative_throughput: 0.0,
            per_replica_overhead_ms: 0.0,
            min_gain: 0.0,
        },
    )?;
    let shares = proportional_shares(capacity, global_batch);
    plan.replicas = capacity
        .iter()
        .zip(shares)
        .filter(|(_, b)| *b > 0)
        .map(|(c, batch)| Replica {
            device: c.device.clone(),
            batch,
        })
        .collect();
    plan.predicted_step_ms = None;
    Ok(plan)
}

/// `total` samples in proportion to the workers' throughputs (largest remainders), each at least
/// one while there are samples for all and at most its memory cap where the others can take
/// the rest.
fn proportional_shares(capacity: &[WorkerCapacity], total: usize) -> Vec<usize> {
    let n = capacity.len();
    let rates: Vec<f64> = capacity
        .iter()
        .map(|c| {
            if c.samples_per_sec.is_finite() && c.samples_per_sec > 0.0 {
                c.samples_per_sec
            } else {
                0.0
            }
        })
        .collect();
    let sum: f64 = rates.iter().sum();
    let floor = usize::from(total >= n);
    let spare = total - floor * n;
    let ideal: Vec<f64> = rates
        .iter()
        .map(|r| {
            if sum > 0.0 {
                spare as f64 * r / sum
            } else {
                spare as f64 / n as f64
            }
        })
        .collect();
    let mut shares: Vec<usize> = ideal.iter().map(|x| floor + x.floor() as usize).collect();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| {
        (ideal[b] - ideal[b].floor())
            .total_cmp(&(ideal[a] - ideal[a].floor()))
            .then(a.cmp(&b))
    });
    let mut left = total - shares.iter().sum::<usize>();
    for &i in order.iter().cycle().take(n * 2) {
        if left == 0 {
            break;
        }
        shares[i] += 1;
        left -= 1;
    }
    // Memory caps: the excess goes to workers with room, most throughput first.
    let mut excess = 0;
    for (s, c) in shares.iter_mut().zip(capacity) {
        let cap = c.max_batch.unwrap_or(usize::MAX);
        if *s > cap {
            excess += *s - cap;
            *s = cap;
        }
    }
    let mut by_rate: Vec<usize> = (0..n).collect();
    by_rate.sort_by(|&a, &b| rates[b].total_cmp(&rates[a]).then(a.cmp(&b)));
    for i in by_rate {
        let room = capacity[i].max_batch.unwrap_or(usize::MAX) - shares[i];
        let take = room.min(excess);
        shares[i] += take;
        excess -= take;
    }
    shares
}

#[cfg(test)]
mod tests;

//! HEFT (Topcuoglu, Hariri and Wu, 2002): ops in decreasing *upward rank* (mean op time plus the
//! longest mean-cost path to the exit), each on the device where it finishes earliest, inserted
//! into the earliest idle slot long enough for it (insertion-based policy). Colocation groups are
//! placed with their first scheduled costly member; a device is a candidate only while the group
//! fits in its free memory. Devices of one compute pool share one timeline (their capacity). The
//! strategy returns the schedule, or everything on the fastest device unless the simulator says the
//! schedule is clearly faster (greedy earliest-finish choices can split a chain across a slow link;
//! see `split`).

use super::sched::{timelines, Schedule, State, NONE};
use super::split::keep_split_if_it_pays;
use super::{Placement, Strategy};
use crate::cluster::{Cluster, DeviceId};
use crate::cost::CostModel;
use crate::error::Result;
use crate::graph::{NodeId, OpGraph};

/// Upward rank of every op, seconds: `rank(i) = w̄(i) + max over consumers j of (c̄(i, j) +
/// rank(j))`, with `w̄` the mean op time over the devices with a kernel and `c̄` the mean transfer
/// time of the edge between distinct devices (0 inside a colocation group).
pub(crate) fn upward_ranks(cost: &CostModel) -> Vec<f64> {
    let dag = cost.dag();
    let mut rank = vec![0.0f64; cost.num_nodes()];
    for &i in dag.topo().iter().rev() {
        let g = cost.group_of(i);
        let tail = dag
            .succs(i)
            .iter()
            .map(|e| {
                let c = e.node;
                let comm = if cost.group_of(c) == g {
                    0.0
                } else {
                    cost.mean_transfer_time(e.bytes)
                };
                comm + rank[c]
            })
            .fold(0.0, f64::max);
        rank[i] = cost.mean_op_time(i) + tail;
    }
    rank
}

/// Ops by decreasing `rank`, ties in topological order (so producers always come first). Ranks
/// equal to 1 part in 10⁹ of the largest tie (rounding differences of sums taken in another
/// order).
pub(crate) fn by_rank(cost: &CostModel, rank: &[f64]) -> Vec<NodeId> {
    let dag = cost.dag();
    let top = rank.iter().copied().fold(0.0, f64::max);
    let unit = if top > 0.0 { top * 1e-9 } else { 1.0 };
    let key: Vec<u64> = rank.iter().map(|&r| (r / unit).round() as u64).collect();
    let mut order: Vec<NodeId> = dag.topo().to_vec();
    order.sort_by(|&a, &b| {
        key[b]
            .cmp(&key[a])
            .then(dag.position(a).cmp(&dag.position(b)))
    });
    order
}

/// The smallest f64 above `x` (for "finishing at `x` is still good enough").
fn next_up(x: f64) -> f64 {
    if x.is_finite() {
        let bits = x.to_bits();
        f64::from_bits(if x >= 0.0 { bits + 1 } else { bits - 1 })
    } else {
        x
    }
}

/// Idle intervals of one lane of a device, sorted; the last one is open-ended.
#[derive(Clone, Debug)]
struct Lane {
    gaps: Vec<(f64, f64)>,
}

impl Lane {
    fn new() -> Self {
        Lane {
            gaps: vec![(0.0, f64::INFINITY)],
        }
    }

    /// Earliest start ≥ `ready` of an idle slot of length `dur`, and the gap it falls in.
    #[cfg(test)]
    fn earliest(&self, ready: f64, dur: f64) -> (f64, usize) {
        // `bound` infinite: there is always the open-ended gap.
        self.earliest_before(ready, dur, f64::INFINITY)
            .unwrap_or((ready, self.gaps.len() - 1))
    }

    /// [`Lane::earliest`] if the op would finish before `bound`, else `None` (without scanning
    /// the gaps that start too late to beat it).
    #[inline]
    fn earliest_before(&self, ready: f64, dur: f64, bound: f64) -> Option<(f64, usize)> {
        // Ready after the lane's last op starts its open-ended gap: every earlier gap ends
        // before `ready`, so that is the answer (the common case, O(1)).
        let last = self.gaps.len() - 1;
        if ready >= self.gaps[last].0 {
            return (ready + dur < bound).then_some((ready, last));
        }
        // Gaps ending before ready + dur cannot hold the op.
        let need = ready + dur;
        let mut k = self
            .gaps
            .partition_point(|g| g.1 < need - 1e-12 * need.abs().max(1.0));
        loop {
            let (a, b) = self.gaps[k];
            let st = a.max(ready);
            if st + dur >= bound {
                // This gap and every later one start too late.
                return None;
            }
            if st + dur <= b + 1e-12 * b.abs().max(1.0) || k == last {
                return Some((st, k));
            }
            k += 1;
        }
    }

    /// Length of the longest gap before the open-ended one, seconds.
    fn widest_closed(&self) -> f64 {
        self.gaps[..self.gaps.len() - 1]
            .iter()
            .map(|g| g.1 - g.0)
            .fold(0.0, f64::max)
    }

    fn occupy(&mut self, k: usize, st: f64, end: f64) {
        let (a, b) = self.gaps[k];
        let mut repl: [(f64, f64); 2] = [(0.0, 0.0); 2];
        let mut m = 0;
        if st > a {
            repl[m] = (a, st);
            m += 1;
        }
        if end < b {
            repl[m] = (end, b);
            m += 1;
        }
        self.gaps.splice(k..=k, repl[..m].iter().copied());
    }
}

/// Runs HEFT and returns its schedule.
///
/// # Errors
/// [`Error::Infeasible`](crate::Error::Infeasible) naming a group that fits on no device (kernels
/// or memory).
pub fn heft_schedule(graph: &OpGraph, cluster: &Cluster, cost: &CostModel) -> Result<Schedule> {
    heft_schedule_on(graph, cluster, cost, None)
}

/// [`heft_schedule`] using only the devices `only` marks (one flag per device), except for a
/// colocation group none of them has kernels for, which may use any device.
///
/// # Errors
/// As [`heft_schedule`].
pub(crate) fn heft_schedule_on(
    graph: &OpGraph,
    cluster: &Cluster,
    cost: &CostModel,
    only: Option<&[bool]>,
) -> Result<Schedule> {
    let mut state = State::new(graph, cluster, cost)?;
    let nd = cost.num_devices();
    // Lanes of all timelines in one array (device d books lanes base[tl[d]]..base[tl[d] + 1]),
    // and the start of each lane's open-ended gap kept apart so the common case never touches
    // the gap lists.
    let (tl, base) = timelines(cost);
    let total = base[base.len() - 1];
    let mut lanes: Vec<Lane> = vec![Lane::new(); total];
    let mut open: Vec<f64> = vec![0.0; total];
    // Per lane: at least the length of its longest closed gap (s).
    let mut widest: Vec<f64> = vec![0.0; total];
    let rank = upward_ranks(cost);
    let mut ready_at = vec![0.0f64; nd];
    for i in by_rank(cost, &rank) {
        if state.should_float(i) {
            state.float(i);
            continue;
        }
        state.newly_placed.clear();
        state.data_ready_all(i, &mut ready_at);
        let g = cost.group_of(i);
        let placed = state.group_dev[g];
        let devices = if placed == NONE {
            0..nd
        } else {
            placed as usize..placed as usize + 1
        };
        let kernels = cost.group_devices(g);
        let need = cost.group_memory(g);
        // Devices outside `only` are left out unless the group can run on none inside.
        let only = only.filter(|m| m.iter().zip(kernels).any(|(&a, &k)| a && k));
        // Try first the device of the input that arrives last (data locality makes it the
        // likely winner), so the bound below prunes the others early.
        let home = cost
            .dag()
            .preds(i)
            .iter()
            .map(|e| e.node)
            .filter(|&p| state.node_dev[p] != NONE)
            .max_by(|&a, &b| state.finish[a].total_cmp(&state.finish[b]))
            .map(|p| DeviceId::new(state.node_dev[p] as usize))
            .filter(|d| devices.contains(&d.index()));
        // (finish, start, device, lane, gap; usize::MAX: the open-ended gap). Ties go to the
        // lower device index.
        let mut best: Option<(f64, f64, DeviceId, usize, usize)> = None;
        let devices = devices.map(DeviceId::new);
        for d in home.into_iter().chain(devices.filter(|&d| Some(d) != home)) {
            if placed == NONE
                && !(kernels[d] && need <= state.mem_left[d] && only.is_none_or(|m| m[d]))
            {
                continue;
            }
            let ready = ready_at[d];
            let dur = cost.op_time(i, d);
            // Finishing at `bound` or later cannot win (equal only wins for a lower index).
            let bound = match best {
                None => f64::INFINITY,
                Some(b) if d < b.2 => next_up(b.0),
                Some(b) => b.0,
            };
            if ready + dur >= bound {
                continue;
            }
            for l in base[tl[d]]..base[tl[d] + 1] {
                let found = if ready >= open[l] {
                    Some((ready, usize::MAX))
                } else if dur > widest[l] {
                    // No closed gap is long enough: after the lane's last op.
                    Some((open[l], usize::MAX)).filter(|_| open[l] + dur < bound)
                } else {
                    lanes[l].earliest_before(ready, dur, bound)
                };
                if let Some((st, k)) = found {
                    let eft = st + dur;
                    let better = match best {
                        None => true,
                        Some(b) => eft < b.0 || (eft == b.0 && d < b.2),
                    };
                    if better {
                        best = Some((eft, st, d, l, k));
                    }
                }
            }
        }
        let Some((eft, st, d, l, k)) = best else {
            return Err(state.no_device(i));
        };
        let lane = &mut lanes[l];
        let k = if k == usize::MAX {
            lane.gaps.len() - 1
        } else {
            k
        };
        let split = lane.gaps[k];
        lane.occupy(k, st, eft);
        open[l] = lane.gaps[lane.gaps.len() - 1].0;
        if split.1.is_finite() {
            // A closed gap was cut: if it may have been the widest, measure again.
            if split.1 - split.0 >= widest[l] {
                widest[l] = lane.widest_closed();
            }
        } else if st > split.0 {
            // The open gap was cut: the idle time before the op is a new closed gap.
            widest[l] = widest[l].max(st - split.0);
        }
        state.commit(i, d, st, eft)?;
    }
    state.finish_groups()
}

/// The `heft` strategy.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Heft {
    /// Least predicted gain (share, 0–1) for which a split is kept
    /// ([`PlaceOptions::min_split_gain`](super::PlaceOptions::min_split_gain)).
    pub min_split_gain: f64,
}

impl Default for Heft {
    fn default() -> Self {
        Heft {
            min_split_gain: super::MIN_SPLIT_GAIN,
        }
    }
}

impl Strategy for Heft {
    fn name(&self) -> &'static str {
        "heft"
    }

    fn place_with_cost(
        &self,
        graph: &OpGraph,
        cluster: &Cluster,
        cost: &CostModel,
    ) -> Result<Placement> {
        let s = heft_schedule(graph, cluster, cost)?;
        // A greedy list schedule can split a graph across a slow link where one device alone
        // would be faster, or faster only within the prediction's noise.
        let best =
            keep_split_if_it_pays(graph, cluster, cost, s.group_device, self.min_split_gain)?;
        Placement::from_groups(self.name(), graph, cluster, &best)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::tests::{cluster, graph, model};

    /// Topcuoglu et al. 2002, Fig. 2 / Table 1: 10 tasks, 3 processors, edge weights are the
    /// communication costs between distinct processors.
    fn textbook() -> (OpGraph, Cluster, CostModel) {
        let edges = [
            (0, 1, 18),
            (0, 2, 12),
            (0, 3, 9),
            (0, 4, 11),
            (0, 5, 14),
            (1, 7, 19),
            (1, 8, 16),
            (2, 6, 23),
            (3, 7, 27),
            (3, 8, 23),
            (4, 8, 13),
            (5, 7, 15),
            (6, 9, 17),
            (7, 9, 11),
            (8, 9, 13),
        ];
        let w: [[f64; 3]; 10] = [
            [14.0, 16.0, 9.0],
            [13.0, 19.0, 18.0],
            [11.0, 13.0, 19.0],
            [13.0, 8.0, 17.0],
            [12.0, 13.0, 10.0],
            [13.0, 16.0, 9.0],
            [7.0, 15.0, 11.0],
            [5.0, 11.0, 14.0],
            [18.0, 12.0, 20.0],
            [21.0, 7.0, 16.0],
        ];
        let g = graph(10, &edges);
        // Latency 0, 1 byte/s: a transfer costs its byte count in seconds.
        let c = cluster(3, 0.0, 1.0);
        let m = model(&g, &c, &w);
        (g, c, m)
    }

    #[test]
    fn textbook_ranks() {
        let (_, _, m) = textbook();
        let r = upward_ranks(&m);
        let expect = [
            108.0, 77.0, 80.0, 80.0, 69.0, 63.333, 42.667, 35.667, 44.333, 14.667,
        ];
        for (i, (&got, &want)) in r.iter().zip(&expect).enumerate() {
            assert!(
                (got - want).abs() < 1e-3,
                "rank of n{}: {got} ≠ {want}",
                i + 1
            );
        }
        // n1, n3, n4, n2, n5, n6, n9, n7, n8, n10.
        assert_eq!(
            by_rank(&m, &r),
            [0, 2, 3, 1, 4, 5, 8, 6, 7, 9].map(NodeId::new).to_vec()
        );
    }

    #[test]
    fn textbook_schedule_has_makespan_80() {
        let (g, c, m) = textbook();
        let s = heft_schedule(&g, &c, &m).unwrap();
        assert_eq!(s.makespan, 80.0);
        // The published schedule (devices 0–2 are P1–P3): n1 P3 0–9, n3 P3 9–28, n4 P2 18–26,
        // n2 P1 27–40, n5 P3 28–38, n6 P2 26–42, n9 P2 56–68, n7 P3 38–49, n8 P1 57–62,
        // n10 P2 73–80.
        let expect: [(usize, f64, f64); 10] = [
            (2, 0.0, 9.0),
            (0, 27.0, 40.0),
            (2, 9.0, 28.0),
            (1, 18.0, 26.0),
            (2, 28.0, 38.0),
            (1, 26.0, 42.0),
            (2, 38.0, 49.0),
            (0, 57.0, 62.0),
            (1, 56.0, 68.0),
            (1, 73.0, 80.0),
        ];
        for (i, &(d, st, ft)) in expect.iter().enumerate() {
            assert_eq!(
                (s.device[i].index(), s.start[i], s.finish[i]),
                (d, st, ft),
                "n{}",
                i + 1
            );
        }
    }

    #[test]
    fn insertion_fills_an_earlier_gap() {
        let mut lane = Lane::new();
        lane.occupy(0, 0.0, 2.0);
        let (st, k) = lane.earliest(5.0, 1.0);
        assert_eq!((st, k), (5.0, 0));
        lane.occupy(k, 5.0, 6.0);
        assert_eq!(lane.gaps, vec![(2.0, 5.0), (6.0, f64::INFINITY)]);
        // A 3 s op ready at 2 fits the 2–5 gap; a 4 s one goes after 6.
        assert_eq!(lane.earliest(2.0, 3.0), (2.0, 0));
        assert_eq!(lane.earliest(2.0, 4.0), (6.0, 1));
        assert_eq!(lane.earliest(0.0, 0.0), (2.0, 0));
    }

    #[test]
    fn heft_is_never_predicted_slower_than_one_device() {
        use crate::cluster::model::Link;
        use crate::sim::synthetic::{cluster as hosts, LayeredDag};
        // Chains of wide tensors on four hosts joined by a slow network: splitting rarely pays.
        let mut worse = 0;
        for seed in 0..12 {
            let g = LayeredDag {
                seed,
                ..LayeredDag::new(200, 4)
            }
            .build()
            .unwrap();
            let mut c = hosts(4, 4, seed);
            c.link_defaults.cross_host = Link::new(5e-3, 2.5e6);
            let cost = CostModel::new(&g, &c).unwrap();
            let nodes = |p: &Placement| crate::placer::resolve::assignment(&g, &c, p).unwrap();
            let heft = Heft::default().place_with_cost(&g, &c, &cost).unwrap();
            let single = crate::placer::simple::SingleFastest
                .place_with_cost(&g, &c, &cost)
                .unwrap();
            let t = |p: &Placement| crate::sim::simulate(&cost, &nodes(p)).unwrap().step_time;
            assert!(t(&heft) <= t(&single) * (1.0 + 1e-9), "seed {seed}");
            let raw = heft_schedule(&g, &c, &cost).unwrap();
            let raw = Placement::from_groups("raw", &g, &c, &raw.group_device).unwrap();
            if t(&raw) > t(&single) {
                worse += 1;
            }
        }
        assert!(
            worse > 0,
            "the raw list schedule loses somewhere, so the guard is exercised"
        );
    }
}

//! The last word of every strategy that splits a graph by simulation (`heft`, `etf`,
//! `infra-aware`): a split is kept only when the simulator predicts it *clearly* faster than
//! everything on the fastest single device, by at least
//! [`PlaceOptions::min_split_gain`](super::PlaceOptions::min_split_gain).
//!
//! A split is priced with more figures than one device is: the other devices' calibrated speed,
//! the links between them, the transfers' overlap with compute. Each adds error, and a worker that
//! answers late slows every transfer it takes part in — above all a CPU-quota'd task, which after
//! burning its quota waits out the rest of the CFS period, so a tensor sent to it waits too (the
//! simulator does not model these waits yet). On `paper`, heft's splits predicted 7–17 % faster
//! than one device ran from 15 % slower to 11 % faster, five of six no faster at all
//! (`benches/results/heft-split-margin/`): a predicted gain below 20 % is no evidence of a gain
//! there, while the split surely pays with transfers and with one more task that can slow down or
//! fail.
//! Where splits pay (a fast accelerator beside CPUs, devices on separate hosts) predicted gains
//! are far larger.

use super::simple::fastest_device_groups;
use crate::cluster::{Cluster, DeviceId};
use crate::cost::CostModel;
use crate::error::Result;
use crate::graph::OpGraph;

/// Default of [`PlaceOptions::min_split_gain`](super::PlaceOptions::min_split_gain): a split must
/// be predicted at least 20 % faster than the fastest single device (module docs).
pub const MIN_SPLIT_GAIN: f64 = 0.20;

/// The predicted step time, seconds, of the placement that puts colocation group `g` on
/// `groups[g]`.
fn step_time(cost: &CostModel, groups: &[DeviceId]) -> Result<f64> {
    let nodes: Vec<DeviceId> = cost.node_ids().map(|i| groups[cost.group_of(i)]).collect();
    Ok(crate::sim::simulate(cost, &nodes)?.step_time)
}

/// `split` (a device per colocation group), or everything on the fastest device when the
/// simulator does not predict `split` at least `min_gain` (share, 0–1) faster. A graph that no
/// single device holds keeps `split`.
///
/// # Errors
/// From the simulator.
pub(crate) fn keep_split_if_it_pays(
    graph: &OpGraph,
    cluster: &Cluster,
    cost: &CostModel,
    split: Vec<DeviceId>,
    min_gain: f64,
) -> Result<Vec<DeviceId>> {
    let Ok(single) = fastest_device_groups(graph, cluster, cost) else {
        return Ok(split);
    };
    if single == split {
        return Ok(split);
    }
    if step_time(cost, &split)? < step_time(cost, &single)? * (1.0 - min_gain) {
        Ok(split)
    } else {
        Ok(single)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sim::tests::{cluster, graph, ids, model};

    /// `a` (1 s) and `b` (`b_seconds`) join in `c` (free); two devices with 10 ms links. On one
    /// device the step is `1 + b`; split (`b` on the other device) it is 1 s.
    fn fork(b_seconds: f64) -> (OpGraph, Cluster, CostModel) {
        let g = graph(3, &[(0, 2, 1), (1, 2, 1)]);
        let c = cluster(2, 0.01, f64::MAX);
        let m = model(&g, &c, &[[1.0, 1.0], [b_seconds, b_seconds], [0.0, 0.0]]);
        (g, c, m)
    }

    #[test]
    fn a_split_within_the_margin_goes_back_to_one_device() {
        // 1.2 s alone against 1.0 s split: 16.7 % faster, below the 20 % margin.
        let (g, c, m) = fork(0.2);
        let split = ids(&[0, 1, 0]);
        let kept = keep_split_if_it_pays(&g, &c, &m, split.clone(), MIN_SPLIT_GAIN).unwrap();
        assert_eq!(kept, ids(&[0, 0, 0]));
        // Without a margin the same split is kept: it is predicted faster.
        assert_eq!(
            keep_split_if_it_pays(&g, &c, &m, split, 0.0).unwrap(),
            ids(&[0, 1, 0])
        );
    }

    #[test]
    fn a_split_that_clears_the_margin_is_kept() {
        // 1.5 s alone against 1.0 s split: a third faster.
        let (g, c, m) = fork(0.5);
        let split = ids(&[0, 1, 0]);
        let kept = keep_split_if_it_pays(&g, &c, &m, split.clone(), MIN_SPLIT_GAIN).unwrap();
        assert_eq!(kept, split);
        // A margin larger than the gain refuses it.
        assert_eq!(
            keep_split_if_it_pays(&g, &c, &m, split, 0.4).unwrap(),
            ids(&[0, 0, 0])
        );
    }

    #[test]
    fn a_slower_split_is_never_kept() {
        // `a` on the other device: 1 s, then a 10 ms hop to `c`, against 1.001 s on one device.
        let (g, c, m) = fork(0.001);
        let kept = keep_split_if_it_pays(&g, &c, &m, ids(&[1, 0, 0]), 0.0).unwrap();
        assert_eq!(kept, ids(&[0, 0, 0]));
    }
}

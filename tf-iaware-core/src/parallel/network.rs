//! The network of a synchronous parameter-server step, pure: every replica pulls every
//! variable from its ps task before computing and pushes its gradient back after, so a ps task
//! moves `replicas × its bytes` each way per step over its one link, and many workers contend
//! for the ps links — what limits real clusters as they grow. Variables can be kept whole or
//! sharded over the ps tasks (TensorFlow's partitioned variables, `name/part_K`) to even the
//! ps loads out.

use serde::{Deserialize, Serialize};

/// A trainable variable: its name and size.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VarInfo {
    /// Name of the variable (or of its colocation group).
    pub name: String,
    /// Size of the variable, bytes.
    pub bytes: u64,
}

/// Links of a ps step.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PsNetwork {
    /// Bandwidth of each ps task's link, bytes/s, in the order of the ps list.
    pub ps_bandwidth: Vec<f64>,
    /// Bandwidth of a worker's own link (the slowest worker's), bytes/s.
    pub worker_bandwidth: f64,
    /// Latency of one transfer, seconds.
    pub latency_s: f64,
}

impl PsNetwork {
    /// One direction (pull the variables, or push the gradients) with `replicas` replicas and
    /// `ps_bytes[p]` bytes held by ps `p`, ms: one latency plus the longer of the busiest ps
    /// link (`replicas × bytes / bandwidth`, links shared equally) and a worker's own link
    /// (every byte once). 0 without replicas.
    pub(crate) fn phase_ms(&self, replicas: usize, ps_bytes: &[u64]) -> f64 {
        if replicas == 0 {
            return 0.0;
        }
        let total: u64 = ps_bytes.iter().sum();
        let ps = ps_bytes
            .iter()
            .zip(&self.ps_bandwidth)
            .map(|(&b, &bw)| replicas as f64 * b as f64 / bw)
            .fold(0.0, f64::max);
        let worker = total as f64 / self.worker_bandwidth;
        (self.latency_s + ps.max(worker)) * 1e3
    }

    /// Both directions of a step, ms ([`PsNetwork::phase_ms`] twice: the pull and the push
    /// do not overlap the computation in a synchronous step).
    pub(crate) fn sync_ms(&self, replicas: usize, ps_bytes: &[u64]) -> f64 {
        2.0 * self.phase_ms(replicas, ps_bytes)
    }

    /// Least [`PsNetwork::sync_ms`] any placement of `total_bytes` of variables over the ps
    /// tasks can reach with `replicas` replicas: the bytes spread in exact proportion to the ps
    /// bandwidths, ms.
    pub(crate) fn ideal_sync_ms(&self, replicas: usize, total_bytes: u64) -> f64 {
        if replicas == 0 {
            return 0.0;
        }
        let bw: f64 = self.ps_bandwidth.iter().sum();
        let ps = replicas as f64 * total_bytes as f64 / bw;
        let worker = total_bytes as f64 / self.worker_bandwidth;
        2.0 * (self.latency_s + ps.max(worker)) * 1e3
    }
}

/// How variables are laid over the ps tasks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum Sharding {
    /// Each variable whole on one ps (TensorFlow's default; the busiest ps holds at least the
    /// largest variable).
    #[default]
    Whole,
    /// Variables larger than an eighth of a ps's fair share split into equal parts
    /// (`name/part_K`, as `tf.compat.v1.fixed_size_partitioner` names them), so the ps loads
    /// come within a small piece of their fair shares.
    Balanced,
}

/// Pieces per fair ps share under [`Sharding::Balanced`].
const PIECES_PER_SHARE: u64 = 8;

/// One variable, or one part of a sharded variable, on its ps.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct VariableShard {
    /// What the plan calls it: the variable's name, or `name/part_K`.
    pub name: String,
    /// Bytes of this piece.
    pub bytes: u64,
    /// Index of its ps task.
    pub ps: usize,
}

/// Lays `vars` over ps tasks of relative capacity `ps_weight` (bandwidth or speed; their
/// number is the number of ps): pieces largest first onto the ps with the lowest load relative
/// to its weight (ties: the first). With [`Sharding::Balanced`], a variable larger than an
/// eighth of the fair share (total ÷ ps) is split into parts of at most that size.
/// Empty without ps.
pub(crate) fn place_variables(
    vars: &[VarInfo],
    ps_weight: &[f64],
    sharding: Sharding,
) -> Vec<VariableShard> {
    let np = ps_weight.len();
    if np == 0 {
        return Vec::new();
    }
    let total: u64 = vars.iter().map(|v| v.bytes).sum();
    let piece = (total / (np as u64 * PIECES_PER_SHARE)).max(1);
    let mut pieces: Vec<(String, u64)> = Vec::with_capacity(vars.len());
    for v in vars {
        let parts = match sharding {
            Sharding::Whole => 1,
            Sharding::Balanced => v.bytes.div_ceil(piece).max(1),
        };
        if parts == 1 {
            pieces.push((v.name.clone(), v.bytes));
        } else {
            for k in 0..parts {
                let bytes = v.bytes / parts + u64::from(k < v.bytes % parts);
                pieces.push((format!("{}/part_{k}", v.name), bytes));
            }
        }
    }
    pieces.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let mut load = vec![0f64; np];
    pieces
        .into_iter()
        .map(|(name, bytes)| {
            let cost = |i: usize| (load[i] + bytes as f64) / ps_weight[i].max(1e-9);
            let pick = (0..np)
                .min_by(|&a, &b| cost(a).total_cmp(&cost(b)))
                .unwrap_or(0);
            load[pick] += bytes as f64;
            VariableShard {
                name,
                bytes,
                ps: pick,
            }
        })
        .collect()
}

/// Bytes on each of `ps` ps tasks.
pub(crate) fn ps_bytes(shards: &[VariableShard], ps: usize) -> Vec<u64> {
    let mut bytes = vec![0u64; ps];
    for s in shards {
        if let Some(b) = bytes.get_mut(s.ps) {
            *b += s.bytes;
        }
    }
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars() -> Vec<VarInfo> {
        [("big", 800u64), ("mid", 150), ("small", 50)]
            .iter()
            .map(|&(n, b)| VarInfo {
                name: n.into(),
                bytes: b,
            })
            .collect()
    }

    #[test]
    fn sharding_evens_out_the_ps_loads() {
        let whole = place_variables(&vars(), &[1.0; 4], Sharding::Whole);
        assert_eq!(whole.len(), 3);
        assert_eq!(ps_bytes(&whole, 4), vec![800, 150, 50, 0]);
        let sharded = place_variables(&vars(), &[1.0; 4], Sharding::Balanced);
        let loads = ps_bytes(&sharded, 4);
        assert_eq!(loads.iter().sum::<u64>(), 1000);
        // Fair share 250, pieces of at most 31 bytes: every ps within one piece of it.
        assert!(loads.iter().all(|&l| (219..=281).contains(&l)), "{loads:?}");
        assert!(sharded.iter().any(|s| s.name == "big/part_0"));
        assert!(sharded.iter().all(|s| s.bytes <= 31));
        // A faster ps takes more.
        let weighted = ps_bytes(
            &place_variables(&vars(), &[3.0, 1.0], Sharding::Balanced),
            2,
        );
        assert!(weighted[0] > 2 * weighted[1], "{weighted:?}");
        assert!(place_variables(&vars(), &[], Sharding::Balanced).is_empty());
    }

    #[test]
    fn ps_links_are_shared_by_every_replica() {
        let net = PsNetwork {
            ps_bandwidth: vec![1e6, 1e6],
            worker_bandwidth: 1e7,
            latency_s: 1e-3,
        };
        // 10 replicas × 1000 B on the busiest ps at 1 MB/s: 10 ms + 1 ms latency, each way.
        assert!((net.phase_ms(10, &[1000, 500]) - 11.0).abs() < 1e-9);
        assert!((net.sync_ms(10, &[1000, 500]) - 22.0).abs() < 1e-9);
        // One replica: its own link (1500 B at 10 MB/s = 0.15 ms) vs the ps (1 ms).
        assert!((net.phase_ms(1, &[1000, 500]) - 2.0).abs() < 1e-9);
        assert_eq!(net.phase_ms(0, &[1000, 500]), 0.0);
        // Ideal spread: 1500 B over 2 MB/s × 10 replicas = 7.5 ms + 1 ms, each way.
        assert!((net.ideal_sync_ms(10, 1500) - 17.0).abs() < 1e-9);
        assert!(net.ideal_sync_ms(10, 1500) <= net.sync_ms(10, &[750, 750]) + 1e-12);
    }
}

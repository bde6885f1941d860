//! Synthetic layered DAGs and heterogeneous clusters, seeded, for benchmarks and tests of the
//! placers and the simulator.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::cluster::{Cluster, Device};
use crate::error::{Error, Result};
use crate::graph::{Attr, DType, DeviceType, NodeId, OpGraph, OpGraphBuilder};

/// Shape of a synthetic layered DAG.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LayeredDag {
    /// Total number of ops (the first layer holds sources).
    pub ops: usize,
    /// Ops per layer.
    pub width: usize,
    /// Inputs per op, each from a distinct op of the previous layer (fewer if that layer is
    /// smaller).
    pub fan_in: usize,
    /// Every `colocate_every`-th op is colocated (`_class`) with its first input; 0: never.
    pub colocate_every: usize,
    /// Seed of the random choices (inputs, op types, sizes).
    pub seed: u64,
}

impl LayeredDag {
    /// `ops` ops in layers of `width`, fan-in 2, every 10th op colocated, seed 1.
    pub fn new(ops: usize, width: usize) -> Self {
        LayeredDag {
            ops,
            width,
            fan_in: 2,
            colocate_every: 10,
            seed: 1,
        }
    }

    /// Builds the graph: sources are `Placeholder`s; other ops are `MatMul` (first two inputs),
    /// `AddN` or `Relu` with float outputs `[64, H]`, `H` one of 128…1024.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for `ops`, `width` or `fan_in` of 0.
    pub fn build(&self) -> Result<OpGraph> {
        if self.ops == 0 || self.width == 0 || self.fan_in == 0 {
            return Err(Error::InvalidArgument {
                what: "synthetic layered DAG".into(),
                reason: format!(
                    "ops ({}), width ({}) and fan_in ({}) must be positive",
                    self.ops, self.width, self.fan_in
                ),
            });
        }
        let mut rng = StdRng::seed_from_u64(self.seed);
        let mut b = OpGraphBuilder::new();
        let mut prev: Vec<NodeId> = Vec::new();
        let mut layer: Vec<NodeId> = Vec::with_capacity(self.width);
        let mut picks: Vec<NodeId> = Vec::with_capacity(self.fan_in);
        let sizes = [128i64, 256, 512, 1024];
        for i in 0..self.ops {
            let l = i / self.width;
            if i % self.width == 0 && i > 0 {
                prev = std::mem::take(&mut layer);
            }
            let h = sizes[rng.gen_range(0..sizes.len())];
            let name = format!("l{l}/n{}", i % self.width);
            if l == 0 {
                let id = b.add(&name, "Placeholder")?;
                b.output(id, DType::FLOAT, Some(vec![64, h]));
                layer.push(id);
                continue;
            }
            let k = self.fan_in.min(prev.len());
            picks.clear();
            while picks.len() < k {
                let p = prev[rng.gen_range(0..prev.len())];
                if !picks.contains(&p) {
                    picks.push(p);
                }
            }
            let op = match (k, rng.gen_range(0..3)) {
                (1, _) | (_, 0) => "Relu",
                (_, 1) => "MatMul",
                _ => "AddN",
            };
            let id = b.add(&name, op)?;
            let used = if op == "Relu" {
                &picks[..1]
            } else {
                &picks[..]
            };
            for &p in used {
                b.connect(p, 0, id);
            }
            b.output(id, DType::FLOAT, Some(vec![64, h]));
            if self.colocate_every > 0 && i % self.colocate_every == 0 {
                let target = b.node_mut(picks[0]).name.clone();
                b.node_mut(id)
                    .attrs
                    .insert("_class".into(), Attr::Strs(vec![format!("loc:@{target}")]));
            }
            layer.push(id);
        }
        b.build()
    }
}

/// A heterogeneous CPU cluster: `devices` devices spread round-robin over `hosts` hosts
/// (`10.0.0.H:2222`, one TensorFlow task each), peak 10–40 GFLOP/s and availability 0.3–1,
/// drawn with `seed`.
pub fn cluster(devices: usize, hosts: usize, seed: u64) -> Cluster {
    let mut rng = StdRng::seed_from_u64(seed);
    let hosts = hosts.max(1);
    Cluster::new(
        (0..devices)
            .map(|i| {
                let h = i % hosts;
                let mut d = Device::nominal(
                    &format!("/job:worker/replica:0/task:{h}/device:CPU:{}", i / hosts),
                    DeviceType::Cpu,
                    None,
                    &format!("10.0.{}.{}:2222", h / 250, h % 250 + 1),
                );
                d.peak_flops = rng.gen_range(1e10..4e10);
                d.availability = rng.gen_range(0.3..1.0);
                d
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::DeviceId;

    #[test]
    fn layered_dag_has_the_asked_shape() {
        let g = LayeredDag::new(1000, 50).build().unwrap();
        assert_eq!(g.len(), 1000);
        assert!(g.groups().len() < 1000, "some ops are colocated");
        let order = g.topo_order().unwrap();
        assert_eq!(order.len(), 1000);
        assert!(g.nodes().iter().skip(50).all(|n| !n.inputs.is_empty()));
        assert_eq!(
            LayeredDag::new(1000, 50).build().unwrap().nodes()[700].op,
            g.nodes()[700].op,
            "seeded"
        );
        assert!(LayeredDag::new(0, 5).build().is_err());
        let c = cluster(8, 3, 7);
        assert_eq!(c.devices.len(), 8);
        c.validate().unwrap();
        assert_eq!(
            c.locality(DeviceId::new(0), DeviceId::new(3)),
            crate::cluster::link::Locality::SameProcess
        );
        assert_eq!(
            c.locality(DeviceId::new(0), DeviceId::new(1)),
            crate::cluster::link::Locality::CrossHost
        );
    }
}

//! Synchronous data-parallel training graphs: one replica of a zoo model per worker (its share of
//! the global batch as a fixed synthetic batch living on that worker), shared variables on the
//! parameter servers, gradients weighted by share and summed on the variable's ps, one momentum
//! update per variable. The graph comes with the [`Placement`] that pins every op.

use std::collections::HashMap;

use tensorflow::DataType;

use super::builder::{Net, TowerLoss};
use super::zoo::{check_batch, input_shape, logits, LEARNING_RATE, MOMENTUM};
use crate::error::{Error, Result};
use crate::parallel::{DataParallelPlan, VarInfo};
use crate::placer::Placement;
use crate::runtime::checkpoint::StateVar;
use crate::runtime::Sidecar;

/// A data-parallel training graph, its placement, and how to train it (no feeds: every replica
/// reads its own synthetic batch) and how to checkpoint and restore it.
pub struct Replicated {
    pub net: Net,
    pub placement: Placement,
    pub sidecar: Sidecar,
    /// The training state (variables and optimiser slots) a checkpoint holds, with the ops that
    /// read, restore and probe it ([`Net::checkpoint_ops`]).
    pub state: Vec<StateVar>,
}

/// Name prefix of replica `k`'s ops.
pub fn replica_prefix(k: usize) -> String {
    format!("replica_{k}")
}

/// The trainable variables of model `name` with their sizes, in creation order.
///
/// # Errors
/// [`Error::UnknownModel`]; [`Error::TensorFlow`] if building fails.
pub fn variables(name: &str) -> Result<Vec<VarInfo>> {
    let model = super::build(name, 1, 1)?;
    Ok(model
        .net
        .vars()
        .iter()
        .map(|v| VarInfo {
            name: v.name.clone(),
            bytes: v.shape.iter().product::<i64>().max(1) as u64 * 4,
        })
        .collect())
}

/// Builds model `name` replicated as `plan` says.
///
/// # Errors
/// [`Error::InvalidArgument`] for a plan without replicas or with an empty share;
/// [`Error::UnknownModel`]; [`Error::TensorFlow`] if building fails.
pub fn build(name: &str, plan: &DataParallelPlan, seed: u64) -> Result<Replicated> {
    if plan.replicas.is_empty() {
        return Err(Error::InvalidArgument {
            what: "data-parallel plan".into(),
            reason: "has no replicas".into(),
        });
    }
    let total = plan.global_batch();
    check_batch(total)?;
    let (shape, classes) = input_shape(name)?;
    let mut net = Net::new(seed);
    let var_devices: HashMap<String, String> = plan
        .variable_devices
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    net.set_variable_devices(var_devices, Some(plan.global_device.clone()));
    let mut towers = Vec::with_capacity(plan.replicas.len());
    for (k, replica) in plan.replicas.iter().enumerate() {
        if replica.batch == 0 {
            return Err(Error::InvalidArgument {
                what: "data-parallel plan".into(),
                reason: format!("replica on {} has an empty share", replica.device),
            });
        }
        let prefix = replica_prefix(k);
        let b = replica.batch as i64;
        let loss = net.tower(&prefix, Some(&replica.device), |n| {
            let image: Vec<i64> = std::iter::once(b).chain(shape.iter().copied()).collect();
            // Named by share, so a re-planned graph brings its own batch (see `init_data`).
            let x = n.synthetic_input(&format!("data_b{b}/x"), &image, false)?;
            let y = n.synthetic_input(&format!("data_b{b}/y"), &[b, classes], true)?;
            let l = logits(n, name, x)?;
            n.softmax_xent_loss(l, y, "loss")
        })?;
        towers.push(TowerLoss {
            loss,
            weight: replica.batch as f32 / total as f32,
            prefix,
            device: Some(replica.device.clone()),
        });
    }
    // The global loss: the replicas' losses weighted by their shares.
    let weighted = towers
        .iter()
        .map(|t| {
            let w = net.const_f32(&format!("loss_weights/{}", t.prefix), &[], &[t.weight])?;
            let op = net.op(
                "Mul",
                &format!("loss_weights/{}/mul", t.prefix),
                &[t.loss.clone(), w],
                |d| Ok(d.set_attr_type("T", DataType::Float)?),
            )?;
            Ok(tensorflow::Output {
                operation: op,
                index: 0,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let k = weighted.len() as i64;
    net.op_list("AddN", "loss", &weighted, |d| {
        d.set_attr_int("N", k)?;
        Ok(d.set_attr_type("T", DataType::Float)?)
    })?;
    net.minimize_momentum(&towers, LEARNING_RATE, MOMENTUM)?;
    let state = net
        .checkpoint_ops()?
        .iter()
        .map(|v| {
            Ok(StateVar {
                name: v.name.clone(),
                shape: v.shape.clone(),
                read: v
                    .read
                    .operation
                    .name()
                    .map_err(|e| Error::tf(format!("naming the read of `{}`", v.name), e))?,
                device: v.device.clone(),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let placement = complete_placement(&net, plan);
    let sidecar = Sidecar {
        inputs: Default::default(),
        init: "init".into(),
        train: "train".into(),
        loss: "loss".into(),
        one_hot: Vec::new(),
        batch: Some(total),
    };
    Ok(Replicated {
        net,
        placement,
        sidecar,
        state,
    })
}

/// Every op gets a device: recorded ones keep theirs, gradient ops `replica_k/…` go to replica
/// `k`, anything else to the global device.
fn complete_placement(net: &Net, plan: &DataParallelPlan) -> Placement {
    let mut p = Placement::new(&plan.strategy);
    let recorded = net.placement();
    for op in net.graph().operation_iter() {
        let Ok(name) = op.name() else { continue };
        let device = recorded.get(&name).cloned().unwrap_or_else(|| {
            plan.replicas
                .iter()
                .enumerate()
                .find(|(k, _)| name.starts_with(&format!("{}/", replica_prefix(*k))))
                .map_or_else(|| plan.global_device.clone(), |(_, r)| r.device.clone())
        });
        p.devices.insert(name, device);
    }
    p
}

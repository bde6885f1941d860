//! Training ops: gradients of every tower's loss, momentum-SGD updates of every variable, and
//! the `train` and `init` groups.

use tensorflow::{DataType, Operation, Output};

use super::{Inputs, Net, TowerLoss};
use crate::error::{Error, Result};

impl Net {
    /// Adds gradients of `loss` w.r.t. every variable and momentum-SGD updates
    /// (`ResourceApplyMomentum`, slot `VAR/Momentum` colocated with `VAR`), then the `train`
    /// and `init` ops.
    ///
    /// # Errors
    /// [`Error::TensorFlow`] if TensorFlow has no gradient for an op of the model.
    pub(crate) fn minimize_momentum(
        &mut self,
        towers: &[TowerLoss],
        learning_rate: f32,
        momentum: f32,
    ) -> Result<()> {
        let reads: Vec<Output> = self.vars.iter().map(|v| v.read.clone()).collect();
        let mut tower_grads = Vec::with_capacity(towers.len());
        for t in towers {
            let prefix = if t.prefix.is_empty() {
                "gradients".to_string()
            } else {
                format!("{}/gradients", t.prefix)
            };
            let grads = self
                .graph
                .add_gradients(Some(&prefix), std::slice::from_ref(&t.loss), &reads, None)
                .map_err(|e| crate::tf::status::error("TF_AddGradients", &e))?;
            tower_grads.push(grads);
        }
        let lr = self.scalar("SGD/learning_rate", learning_rate)?;
        let mom = self.scalar("SGD/momentum", momentum)?;
        let mut applies = Vec::new();
        let vars = self.vars.clone();
        for (v, var) in vars.iter().enumerate() {
            let mut parts = Vec::with_capacity(towers.len());
            for (t, grads) in towers.iter().zip(&tower_grads) {
                let Some(grad) = grads[v].clone() else {
                    return Err(Error::InvalidGraph {
                        node: var.name.clone(),
                        reason: "no gradient reaches this variable".into(),
                    });
                };
                if towers.len() == 1 && t.weight == 1.0 {
                    parts.push(grad);
                    continue;
                }
                // Each replica scales its own gradient by its share of the batch.
                let scaled = self.tower(&t.prefix, t.device.as_deref(), |n| {
                    let w = n.scalar(&format!("scale/{}/weight", var.name), t.weight)?;
                    n.op("Mul", &format!("scale/{}", var.name), &[grad, w], |d| {
                        Ok(d.set_attr_type("T", DataType::Float)?)
                    })
                })?;
                parts.push(Self::out(scaled));
            }
            let var_device = var.device.clone();
            let apply = self.on_device(var_device, |n| {
                let grad = if parts.len() == 1 {
                    parts[0].clone()
                } else {
                    let name = n.unique(format!("SGD/aggregate_{}", var.name));
                    let k = parts.len() as i64;
                    Self::out(n.op_inputs("AddN", &name, &[Inputs::List(&parts)], |d| {
                        d.set_attr_int("N", k)?;
                        Ok(d.set_attr_type("T", DataType::Float)?)
                    })?)
                };
                let slot = n.raw_variable(
                    &format!("{}/Momentum", var.name),
                    &var.shape,
                    Some(&var.name),
                )?;
                let zeros = n.filled(
                    &format!("{}/Momentum/Initializer", var.name),
                    &var.shape,
                    0.0,
                )?;
                n.assign_initial(&slot, zeros)?;
                n.slots.push(slot.clone());
                let inputs = [
                    Self::out(var.handle.clone()),
                    Self::out(slot.handle.clone()),
                    lr.clone(),
                    grad,
                    mom.clone(),
                ];
                n.op(
                    "ResourceApplyMomentum",
                    &format!("SGD/update_{}", var.name),
                    &inputs,
                    |d| {
                        d.set_attr_type("T", DataType::Float)?;
                        d.set_attr_bool("use_locking", false)?;
                        Ok(d.set_attr_bool("use_nesterov", false)?)
                    },
                )
            })?;
            applies.push(apply);
        }
        self.group("train", &applies)?;
        let data_deps = self.data_initializers.clone();
        self.group("init_data", &data_deps)?;
        let init_deps = self.initializers.clone();
        self.group("init", &init_deps)?;
        Ok(())
    }

    /// An `init` op that runs every initialiser created so far (for graphs that do not train;
    /// [`Net::minimize_momentum`] makes its own).
    pub(crate) fn init_op(&mut self) -> Result<Operation> {
        let deps = self.initializers.clone();
        self.group("init", &deps)
    }

    /// A `NoOp` named `name` that runs after every op of `deps` (like `tf.group`).
    fn group(&mut self, name: &str, deps: &[Operation]) -> Result<Operation> {
        self.op("NoOp", name, &[], |d| {
            for a in deps {
                d.add_control_input(a);
            }
            Ok(())
        })
    }
}

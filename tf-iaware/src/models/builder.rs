//! [`Net`]: a small layer vocabulary over `tensorflow::Graph` for building training graphs the way
//! TF2/Keras exports them — resource variables (`VarHandleOp` / `ReadVariableOp`), seeded
//! initialisers, gradients from `TF_AddGradients`, momentum slots colocated with their variables
//! through `_class`, and one `init` and one `train` op.

use std::collections::{BTreeMap, HashMap};

use tensorflow::{DataType, Graph, Operation, OperationDescription, Output, Shape, Tensor};

use crate::error::{Error, Result};

mod layers;
mod train;

/// A trainable variable: its handle and the tensor read from it each step.
#[derive(Clone)]
pub(crate) struct Var {
    pub name: String,
    pub handle: Operation,
    pub read: Output,
    pub shape: Vec<i64>,
    /// Device the variable was created on (`None`: TensorFlow decides).
    pub device: Option<String>,
}

/// One replica's loss, its weight in the global loss (its share of the global batch), the name
/// prefix of its ops (`""` for a single model) and its device.
pub(crate) struct TowerLoss {
    pub loss: Output,
    pub weight: f32,
    pub prefix: String,
    pub device: Option<String>,
}

/// A graph under construction.
///
/// `Net::tower` builds layers under a name prefix and on a device; variables are created
/// once and shared. Ops created under a device context are recorded in `Net::placement`.
/// (Data-parallel replicas of a zoo model are made from its single-tower graph by
/// [`parallel::replicate`](crate::parallel::replicate), like any user's graph.)
pub struct Net {
    graph: Graph,
    scope: Vec<String>,
    vars: Vec<Var>,
    var_index: HashMap<String, usize>,
    initializers: Vec<Operation>,
    /// Initialisers of synthetic-data variables only (run by `init_data`).
    data_initializers: Vec<Operation>,
    /// Optimiser slot variables (`VAR/Momentum`), in creation order.
    slots: Vec<Var>,
    seed: i64,
    counter: usize,
    /// Name prefix of the tower being built.
    tower: Option<String>,
    /// Device of the ops being created.
    device: Option<String>,
    /// Op name → device, for ops created under a device context.
    placement: BTreeMap<String, String>,
    /// Variable name → device.
    var_devices: HashMap<String, String>,
    /// Device of variables not in `var_devices` and of global ops (loss, train, init).
    default_device: Option<String>,
}

impl std::fmt::Debug for Net {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Net")
            .field("scope", &self.scope)
            .field("variables", &self.vars.len())
            .field("slots", &self.slots.len())
            .field("seed", &self.seed)
            .field("tower", &self.tower)
            .finish_non_exhaustive()
    }
}

/// How inputs are attached: one argument each, or one list argument.
enum Inputs<'a> {
    Each(&'a [Output]),
    List(&'a [Output]),
}

/// What attribute setters return: TensorFlow and C-string errors alike.
pub(crate) type AttrResult = std::result::Result<(), Box<dyn std::error::Error>>;

fn tf_err(what: &str, e: impl Into<Box<dyn std::error::Error>>) -> Error {
    crate::tf::status::error(format!("building {what}"), &*e.into())
}

impl Net {
    /// An empty graph; `seed` makes every initialiser deterministic.
    pub(crate) fn new(seed: u64) -> Net {
        Net {
            graph: Graph::new(),
            scope: Vec::new(),
            vars: Vec::new(),
            var_index: HashMap::new(),
            initializers: Vec::new(),
            data_initializers: Vec::new(),
            slots: Vec::new(),
            seed: (seed % (i64::MAX as u64)) as i64,
            counter: 0,
            tower: None,
            device: None,
            placement: BTreeMap::new(),
            var_devices: HashMap::new(),
            default_device: None,
        }
    }

    /// Op name → device of every op created under a device context.
    pub(crate) fn placement(&self) -> &BTreeMap<String, String> {
        &self.placement
    }

    /// Builds one replica: ops get the name prefix `prefix/` and `device`; variables are shared.
    pub(crate) fn tower<T>(
        &mut self,
        prefix: &str,
        device: Option<&str>,
        f: impl FnOnce(&mut Net) -> Result<T>,
    ) -> Result<T> {
        let saved_tower = self.tower.replace(prefix.to_string());
        let saved_device = std::mem::replace(&mut self.device, device.map(String::from));
        let out = f(self);
        self.tower = saved_tower;
        self.device = saved_device;
        out
    }

    /// Runs `f` with ops going to `device`.
    pub(crate) fn on_device<T>(
        &mut self,
        device: Option<String>,
        f: impl FnOnce(&mut Net) -> Result<T>,
    ) -> Result<T> {
        let saved = std::mem::replace(&mut self.device, device);
        let out = f(self);
        self.device = saved;
        out
    }

    /// The device of global ops.
    pub fn default_device(&self) -> Option<String> {
        self.default_device.clone()
    }

    /// The graph built so far.
    pub fn graph(&self) -> &Graph {
        &self.graph
    }

    /// Consumes the builder, returning the graph.
    pub fn into_graph(self) -> Graph {
        self.graph
    }

    /// Trainable variables, in creation order.
    pub(crate) fn vars(&self) -> &[Var] {
        &self.vars
    }

    /// Runs `f` with `name` pushed on the name scope.
    pub(crate) fn scoped<T>(
        &mut self,
        name: &str,
        f: impl FnOnce(&mut Net) -> Result<T>,
    ) -> Result<T> {
        self.scope.push(name.to_string());
        let out = f(self);
        self.scope.pop();
        out
    }

    /// A unique, scoped op name from `base`.
    fn name(&mut self, base: &str) -> String {
        let mut full: String = self
            .tower
            .iter()
            .chain(self.scope.iter())
            .cloned()
            .collect::<Vec<_>>()
            .join("/");
        if !full.is_empty() {
            full.push('/');
        }
        full.push_str(base);
        self.unique(full)
    }

    /// `full` if no op has that name yet, else `full_N` for the first free `N`.
    fn unique(&mut self, full: String) -> String {
        let taken = |g: &Graph, n: &str| g.operation_by_name(n).ok().flatten().is_some();
        if !taken(&self.graph, &full) {
            return full;
        }
        loop {
            self.counter += 1;
            let candidate = format!("{full}_{}", self.counter);
            if !taken(&self.graph, &candidate) {
                return candidate;
            }
        }
    }

    /// Adds an op of type `ty` named (uniquely, in scope) `base`, with `inputs` and attributes
    /// set by `attrs`.
    pub(crate) fn op(
        &mut self,
        ty: &str,
        base: &str,
        inputs: &[Output],
        attrs: impl FnOnce(&mut OperationDescription<'_>) -> AttrResult,
    ) -> Result<Operation> {
        let name = self.name(base);
        self.op_named(ty, &name, inputs, attrs)
    }

    /// Adds an op with the exact (unscoped) name `name`.
    fn op_named(
        &mut self,
        ty: &str,
        name: &str,
        inputs: &[Output],
        attrs: impl FnOnce(&mut OperationDescription<'_>) -> AttrResult,
    ) -> Result<Operation> {
        self.op_inputs(ty, name, &[Inputs::Each(inputs)], attrs)
    }

    fn op_inputs(
        &mut self,
        ty: &str,
        name: &str,
        inputs: &[Inputs<'_>],
        attrs: impl FnOnce(&mut OperationDescription<'_>) -> AttrResult,
    ) -> Result<Operation> {
        let name = name.to_string();
        let mut d = self
            .graph
            .new_operation(ty, &name)
            .map_err(|e| tf_err(&name, e))?;
        for group in inputs {
            match group {
                Inputs::Each(each) => each.iter().for_each(|i| d.add_input(i.clone())),
                Inputs::List(list) => d.add_input_list(list),
            }
        }
        attrs(&mut d).map_err(|e| tf_err(&name, e))?;
        let op = d.finish().map_err(|e| tf_err(&name, e))?;
        if let Some(device) = &self.device {
            self.placement.insert(name, device.clone());
        }
        Ok(op)
    }

    fn out(op: Operation) -> Output {
        Output {
            operation: op,
            index: 0,
        }
    }

    /// A float32 placeholder of a fixed shape.
    pub(crate) fn placeholder(&mut self, name: &str, shape: &[i64]) -> Result<Output> {
        let shape = Shape::from(shape);
        self.op("Placeholder", name, &[], |d| {
            d.set_attr_type("dtype", DataType::Float)?;
            Ok(d.set_attr_shape("shape", &shape)?)
        })
        .map(Self::out)
    }

    /// An int32 vector constant.
    pub(crate) fn const_i32(&mut self, name: &str, values: &[i32]) -> Result<Output> {
        let t = Tensor::<i32>::new(&[values.len() as u64])
            .with_values(values)
            .map_err(|e| tf_err(name, e))?;
        self.op("Const", name, &[], |d| {
            d.set_attr_type("dtype", DataType::Int32)?;
            Ok(d.set_attr_tensor("value", t)?)
        })
        .map(Self::out)
    }

    /// A float32 constant of any shape.
    pub(crate) fn const_f32(&mut self, name: &str, dims: &[u64], values: &[f32]) -> Result<Output> {
        let t = Tensor::<f32>::new(dims)
            .with_values(values)
            .map_err(|e| tf_err(name, e))?;
        self.op("Const", name, &[], |d| {
            d.set_attr_type("dtype", DataType::Float)?;
            Ok(d.set_attr_tensor("value", t)?)
        })
        .map(Self::out)
    }

    fn scalar(&mut self, name: &str, v: f32) -> Result<Output> {
        self.const_f32(name, &[], &[v])
    }

    /// A resource variable initialised with a truncated normal of `stddev` (seeded), or with the
    /// constant `fill` when `stddev` is 0.
    pub(crate) fn variable(
        &mut self,
        base: &str,
        shape: &[i64],
        stddev: f32,
        fill: f32,
    ) -> Result<Var> {
        let mut canonical = self.scope.join("/");
        if !canonical.is_empty() {
            canonical.push('/');
        }
        canonical.push_str(base);
        if let Some(&i) = self.var_index.get(&canonical) {
            return Ok(self.vars[i].clone());
        }
        // Variables live outside any tower, on their own device.
        let device = self
            .var_devices
            .get(&canonical)
            .cloned()
            .or_else(|| self.default_device.clone());
        let saved_scope = std::mem::take(&mut self.scope);
        let saved_tower = self.tower.take();
        let saved_device = std::mem::replace(&mut self.device, device);
        let var = self.create_variable(&canonical, shape, stddev, fill);
        self.scope = saved_scope;
        self.tower = saved_tower;
        self.device = saved_device;
        let var = var?;
        self.var_index.insert(canonical, self.vars.len());
        self.vars.push(var.clone());
        Ok(var)
    }

    /// Creates variable `base` (an absolute name) with its initialiser.
    fn create_variable(
        &mut self,
        base: &str,
        shape: &[i64],
        stddev: f32,
        fill: f32,
    ) -> Result<Var> {
        let var = self.raw_variable(base, shape, None)?;
        let init = if stddev > 0.0 {
            self.seed += 1;
            let seed = self.seed;
            let dims = self.const_i32(
                &format!("{base}/Initializer/shape"),
                &shape.iter().map(|&d| d as i32).collect::<Vec<_>>(),
            )?;
            let normal = self.op(
                "TruncatedNormal",
                &format!("{base}/Initializer/TruncatedNormal"),
                &[dims],
                |d| {
                    d.set_attr_type("dtype", DataType::Float)?;
                    d.set_attr_int("seed", 87654321)?;
                    Ok(d.set_attr_int("seed2", seed)?)
                },
            )?;
            let std = self.scalar(&format!("{base}/Initializer/stddev"), stddev)?;
            Self::out(self.op(
                "Mul",
                &format!("{base}/Initializer/mul"),
                &[Self::out(normal), std],
                |d| Ok(d.set_attr_type("T", DataType::Float)?),
            )?)
        } else {
            self.filled(&format!("{base}/Initializer"), shape, fill)?
        };
        self.assign_initial(&var, init)?;
        Ok(var)
    }

    fn filled(&mut self, base: &str, shape: &[i64], value: f32) -> Result<Output> {
        let dims = self.const_i32(
            &format!("{base}/shape"),
            &shape.iter().map(|&d| d as i32).collect::<Vec<_>>(),
        )?;
        let v = self.scalar(&format!("{base}/value"), value)?;
        self.op("Fill", &format!("{base}/Fill"), &[dims, v], |d| {
            d.set_attr_type("T", DataType::Float)?;
            Ok(d.set_attr_type("index_type", DataType::Int32)?)
        })
        .map(Self::out)
    }

    /// `VarHandleOp` + `ReadVariableOp`, optionally colocated with another variable via `_class`.
    fn raw_variable(
        &mut self,
        base: &str,
        shape: &[i64],
        colocate_with: Option<&str>,
    ) -> Result<Var> {
        let tf_shape = Shape::from(shape);
        let handle_name = self.name(base);
        let class = colocate_with.map(|c| vec![format!("loc:@{c}")]);
        let handle = self.op("VarHandleOp", base, &[], |d| {
            d.set_attr_type("dtype", DataType::Float)?;
            d.set_attr_shape("shape", &tf_shape)?;
            d.set_attr_string("shared_name", &handle_name)?;
            if let Some(class) = &class {
                d.set_attr_string_list("_class", class)?;
            }
            Ok(())
        })?;
        let read = self.op_named(
            "ReadVariableOp",
            &format!("{handle_name}/Read/ReadVariableOp"),
            &[Self::out(handle.clone())],
            |d| Ok(d.set_attr_type("dtype", DataType::Float)?),
        )?;
        Ok(Var {
            name: handle_name,
            handle,
            read: Self::out(read),
            shape: shape.to_vec(),
            device: self.device.clone(),
        })
    }

    fn assign_initial(&mut self, var: &Var, value: Output) -> Result<()> {
        let assign = self.op_named(
            "AssignVariableOp",
            &format!("{}/Assign", var.name),
            &[Self::out(var.handle.clone()), value],
            |d| Ok(d.set_attr_type("dtype", DataType::Float)?),
        )?;
        self.initializers.push(assign);
        Ok(())
    }

    /// A non-trainable float variable on the current device holding a fixed synthetic batch:
    /// uniform noise in [-1, 1) (seeded), or — with `one_hot` — one-hot rows over the last
    /// dimension. Initialised by `init`; read every step without feeding anything.
    pub(crate) fn synthetic_input(
        &mut self,
        base: &str,
        shape: &[i64],
        one_hot: bool,
    ) -> Result<Output> {
        let prefix: String = self
            .tower
            .iter()
            .chain(self.scope.iter())
            .cloned()
            .collect::<Vec<_>>()
            .join("/");
        let full = if prefix.is_empty() {
            base.to_string()
        } else {
            format!("{prefix}/{base}")
        };
        let saved_scope = std::mem::take(&mut self.scope);
        let saved_tower = self.tower.take();
        let result = (|| {
            let var = self.raw_variable(&full, shape, None)?;
            self.seed += 1;
            let seed = self.seed;
            let value = if one_hot {
                let classes = *shape.last().unwrap_or(&1);
                let rows: i64 = shape.iter().rev().skip(1).product();
                let dims = self.const_i32(&format!("{full}/Initializer/rows"), &[rows as i32])?;
                let hi = Tensor::<i32>::new(&[])
                    .with_values(&[classes as i32])
                    .map_err(|e| tf_err(&full, e))?;
                let lo = Tensor::<i32>::new(&[])
                    .with_values(&[0])
                    .map_err(|e| tf_err(&full, e))?;
                let hi = self.op("Const", &format!("{full}/Initializer/maxval"), &[], |d| {
                    d.set_attr_type("dtype", DataType::Int32)?;
                    Ok(d.set_attr_tensor("value", hi)?)
                })?;
                let lo = self.op("Const", &format!("{full}/Initializer/minval"), &[], |d| {
                    d.set_attr_type("dtype", DataType::Int32)?;
                    Ok(d.set_attr_tensor("value", lo)?)
                })?;
                let labels = self.op(
                    "RandomUniformInt",
                    &format!("{full}/Initializer/labels"),
                    &[dims, Self::out(lo), Self::out(hi)],
                    |d| {
                        d.set_attr_type("Tout", DataType::Int32)?;
                        d.set_attr_type("T", DataType::Int32)?;
                        d.set_attr_int("seed", 1234567)?;
                        Ok(d.set_attr_int("seed2", seed)?)
                    },
                )?;
                let on = self.scalar(&format!("{full}/Initializer/on"), 1.0)?;
                let off = self.scalar(&format!("{full}/Initializer/off"), 0.0)?;
                let depth = Tensor::<i32>::new(&[])
                    .with_values(&[classes as i32])
                    .map_err(|e| tf_err(&full, e))?;
                let depth = self.op("Const", &format!("{full}/Initializer/depth"), &[], |d| {
                    d.set_attr_type("dtype", DataType::Int32)?;
                    Ok(d.set_attr_tensor("value", depth)?)
                })?;
                Self::out(self.op(
                    "OneHot",
                    &format!("{full}/Initializer/one_hot"),
                    &[Self::out(labels), Self::out(depth), on, off],
                    |d| {
                        d.set_attr_type("T", DataType::Float)?;
                        d.set_attr_type("TI", DataType::Int32)?;
                        Ok(d.set_attr_int("axis", -1)?)
                    },
                )?)
            } else {
                let dims = self.const_i32(
                    &format!("{full}/Initializer/shape"),
                    &shape.iter().map(|&d| d as i32).collect::<Vec<_>>(),
                )?;
                let u = self.op(
                    "RandomUniform",
                    &format!("{full}/Initializer/uniform"),
                    &[dims],
                    |d| {
                        d.set_attr_type("dtype", DataType::Float)?;
                        d.set_attr_type("T", DataType::Int32)?;
                        d.set_attr_int("seed", 1234567)?;
                        Ok(d.set_attr_int("seed2", seed)?)
                    },
                )?;
                // [0, 1) → [-1, 1)
                let two = self.scalar(&format!("{full}/Initializer/two"), 2.0)?;
                let one = self.scalar(&format!("{full}/Initializer/one"), 1.0)?;
                let m = self.op(
                    "Mul",
                    &format!("{full}/Initializer/scale"),
                    &[Self::out(u), two],
                    |d| Ok(d.set_attr_type("T", DataType::Float)?),
                )?;
                Self::out(self.op(
                    "Sub",
                    &format!("{full}/Initializer/shift"),
                    &[Self::out(m), one],
                    |d| Ok(d.set_attr_type("T", DataType::Float)?),
                )?)
            };
            self.assign_initial(&var, value)?;
            if let Some(assign) = self.initializers.last() {
                self.data_initializers.push(assign.clone());
            }
            Ok(var.read)
        })();
        self.scope = saved_scope;
        self.tower = saved_tower;
        result
    }
}

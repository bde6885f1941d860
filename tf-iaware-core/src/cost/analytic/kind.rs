//! Which formula costs an op type: the tables of free, memory-bound, element-wise and optimiser
//! ops, and the [`OpKind`] each op type resolves to.

/// How an op type is costed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpClass {
    /// No work: handles, constants, views, shape queries, control flow.
    Free,
    /// Moves memory and computes nothing (concat, split, transpose, gather, …).
    MemoryBound,
    /// Computes: FLOPs from a shape formula, bytes = inputs + outputs.
    Compute,
}

const FREE_OPS: &[&str] = &[
    "NoOp",
    "Const",
    "HostConst",
    "Placeholder",
    "PlaceholderV2",
    "PlaceholderWithDefault",
    "VarHandleOp",
    "VariableV2",
    "Variable",
    "VarIsInitializedOp",
    "IsVariableInitialized",
    "ReadVariableOp",
    "Identity",
    "IdentityN",
    "Reshape",
    "Squeeze",
    "ExpandDims",
    "StopGradient",
    "PreventGradient",
    "Shape",
    "ShapeN",
    "Size",
    "Rank",
    "BroadcastGradientArgs",
    "_Arg",
    "_Retval",
    "_Send",
    "_Recv",
    "_HostSend",
    "_HostRecv",
    "Enter",
    "Exit",
    "Merge",
    "Switch",
    "NextIteration",
    "LoopCond",
    "ControlTrigger",
    "Assert",
    "PrintV2",
    "SaveV2",
    "RestoreV2",
    "MergeV2Checkpoints",
    "DestroyResourceOp",
];

const MEMORY_OPS: &[&str] = &[
    "Concat",
    "ConcatV2",
    "ConcatOffset",
    "Pack",
    "Unpack",
    "Split",
    "SplitV",
    "Slice",
    "StridedSlice",
    "StridedSliceGrad",
    "Tile",
    "TileGrad",
    "Transpose",
    "ConjugateTranspose",
    "Pad",
    "PadV2",
    "MirrorPad",
    "Gather",
    "GatherV2",
    "GatherNd",
    "ResourceGather",
    "ScatterNd",
    "UnsortedSegmentSum",
    "Cast",
    "OneHot",
    "Fill",
    "ZerosLike",
    "OnesLike",
    "BroadcastTo",
    "Reverse",
    "ReverseV2",
    "Range",
    "RandomUniform",
    "RandomUniformInt",
    "RandomStandardNormal",
    "TruncatedNormal",
    "StatelessRandomUniformV2",
    "StatelessRandomNormalV2",
    "DepthToSpace",
    "SpaceToDepth",
    "Snapshot",
    "DeepCopy",
    "Copy",
    "CopyHost",
    "InvertPermutation",
    "DynamicStitch",
    "ParallelDynamicStitch",
];

/// Ops that cost `k` FLOPs per output element.
const ELEMENTWISE_OPS: &[(&str, f64)] = &[
    ("Add", 1.0),
    ("AddV2", 1.0),
    ("Sub", 1.0),
    ("Mul", 1.0),
    ("Div", 1.0),
    ("RealDiv", 1.0),
    ("DivNoNan", 2.0),
    ("FloorDiv", 2.0),
    ("FloorMod", 2.0),
    ("Maximum", 1.0),
    ("Minimum", 1.0),
    ("Neg", 1.0),
    ("Abs", 1.0),
    ("Sign", 1.0),
    ("Square", 1.0),
    ("SquaredDifference", 2.0),
    ("Reciprocal", 1.0),
    ("Floor", 1.0),
    ("Ceil", 1.0),
    ("Round", 1.0),
    ("Less", 1.0),
    ("LessEqual", 1.0),
    ("Greater", 1.0),
    ("GreaterEqual", 1.0),
    ("Equal", 1.0),
    ("NotEqual", 1.0),
    ("LogicalAnd", 1.0),
    ("LogicalOr", 1.0),
    ("LogicalNot", 1.0),
    ("Select", 1.0),
    ("SelectV2", 1.0),
    ("ClipByValue", 2.0),
    ("BiasAdd", 1.0),
    ("BiasAddV1", 1.0),
    ("Relu", 1.0),
    ("Relu6", 2.0),
    ("LeakyRelu", 2.0),
    ("Elu", 4.0),
    ("Selu", 5.0),
    ("ReluGrad", 1.0),
    ("Relu6Grad", 2.0),
    ("LeakyReluGrad", 2.0),
    ("EluGrad", 2.0),
    ("SeluGrad", 3.0),
    ("Sqrt", 4.0),
    ("Rsqrt", 4.0),
    ("SqrtGrad", 3.0),
    ("RsqrtGrad", 4.0),
    ("ReciprocalGrad", 2.0),
    ("Exp", 8.0),
    ("Expm1", 8.0),
    ("Log", 8.0),
    ("Log1p", 8.0),
    ("Tanh", 8.0),
    ("Sigmoid", 8.0),
    ("TanhGrad", 3.0),
    ("SigmoidGrad", 3.0),
    ("Softplus", 10.0),
    ("SoftplusGrad", 10.0),
    ("Softsign", 3.0),
    ("Pow", 16.0),
    ("Erf", 10.0),
    ("Sin", 8.0),
    ("Cos", 8.0),
    ("IsFinite", 1.0),
    ("Sum", 1.0),
    ("Mean", 1.0),
    ("Max", 1.0),
    ("Min", 1.0),
    ("Prod", 1.0),
    ("All", 1.0),
    ("Any", 1.0),
    ("ArgMax", 1.0),
    ("ArgMin", 1.0),
    ("EuclideanNorm", 2.0),
    ("L2Loss", 2.0),
    ("BiasAddGrad", 1.0),
    ("Softmax", 5.0),
    ("LogSoftmax", 5.0),
    ("AssignAdd", 1.0),
    ("AssignSub", 1.0),
    ("AssignAddVariableOp", 1.0),
    ("AssignSubVariableOp", 1.0),
];

/// Reductions and other ops whose FLOPs scale with the *input* rather than the output.
const INPUT_SCALED: &[&str] = &[
    "Sum",
    "Mean",
    "Max",
    "Min",
    "Prod",
    "All",
    "Any",
    "ArgMax",
    "ArgMin",
    "EuclideanNorm",
    "L2Loss",
    "BiasAddGrad",
];

/// Optimiser updates: FLOPs per element of the variable (dense updates).
const OPTIMISERS: &[(&str, f64)] = &[
    ("GradientDescent", 2.0),
    ("ProximalGradientDescent", 8.0),
    ("Momentum", 4.0),
    ("KerasMomentum", 4.0),
    ("Adagrad", 5.0),
    ("AdagradV2", 6.0),
    ("ProximalAdagrad", 10.0),
    ("AdagradDA", 12.0),
    ("Adadelta", 14.0),
    ("Adam", 15.0),
    ("AdamWithAmsgrad", 17.0),
    ("AdaMax", 12.0),
    ("RMSProp", 10.0),
    ("CenteredRMSProp", 14.0),
    ("Ftrl", 20.0),
    ("FtrlV2", 22.0),
    ("AddSign", 10.0),
    ("PowerSign", 12.0),
];

/// How one op type is costed; resolved once per op type by `OpKind::of`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum OpKind {
    /// No work (see [`OpClass::Free`]).
    Free,
    /// Memory-bound: bytes = inputs + outputs.
    Memory,
    /// `Assign`/`AssignVariableOp`: reads the value, writes the variable.
    Assign,
    /// `MatMul` and its fused/sparse forms.
    MatMul,
    /// `BatchMatMul`, V2, V3.
    BatchMatMul,
    /// `Conv2D` and `_FusedConv2D`.
    Conv2D,
    /// `Conv2DBackpropInput`.
    Conv2DBackpropInput,
    /// `Conv2DBackpropFilter`.
    Conv2DBackpropFilter,
    /// `DepthwiseConv2dNative`.
    Depthwise,
    /// `DepthwiseConv2dNativeBackpropInput`.
    DepthwiseBackpropInput,
    /// `DepthwiseConv2dNativeBackpropFilter`.
    DepthwiseBackpropFilter,
    /// `MaxPool`, `AvgPool` (window from `ksize`).
    Pool,
    /// `MaxPoolV2` (window is an input tensor).
    MaxPoolV2,
    /// `MaxPoolGrad`, `MaxPoolGradV2`.
    MaxPoolGrad,
    /// `AvgPoolGrad`.
    AvgPoolGrad,
    /// `FusedBatchNorm` (V2, V3, `_FusedBatchNormEx`).
    BatchNorm,
    /// `FusedBatchNormGrad` (V2, V3).
    BatchNormGrad,
    /// `(Sparse)SoftmaxCrossEntropyWithLogits`.
    CrossEntropy,
    /// `AddN`, `AccumulateNV2`.
    AddN,
    /// Element-wise ops, softmax and reductions: `per_element` FLOPs per output element (per
    /// input element when `input_scaled`).
    Elementwise {
        /// FLOPs per element.
        per_element: f64,
        /// Whether elements are counted on the first input (reductions).
        input_scaled: bool,
    },
    /// `Apply*`/`ResourceApply*`/`ResourceSparseApply*`: `per_element` FLOPs per updated
    /// element.
    Optimiser {
        /// FLOPs per element.
        per_element: f64,
        /// Whether only the gradient's rows are updated.
        sparse: bool,
    },
    /// No formula: one FLOP per output element, bytes = inputs + outputs.
    Unknown,
}

impl OpKind {
    /// The kind of op type `op`.
    pub(crate) fn of(op: &str) -> OpKind {
        if let Some((name, sparse)) = optimiser(op) {
            let per_element = OPTIMISERS
                .iter()
                .find(|(n, _)| *n == name)
                .map_or(5.0, |&(_, k)| k);
            return OpKind::Optimiser {
                per_element,
                sparse,
            };
        }
        if FREE_OPS.contains(&op) {
            return OpKind::Free;
        }
        if MEMORY_OPS.contains(&op) {
            return OpKind::Memory;
        }
        match op {
            "Assign" | "AssignVariableOp" => OpKind::Assign,
            "MatMul" | "_FusedMatMul" | "SparseMatMul" => OpKind::MatMul,
            "BatchMatMul" | "BatchMatMulV2" | "BatchMatMulV3" => OpKind::BatchMatMul,
            "Conv2D" | "_FusedConv2D" => OpKind::Conv2D,
            "Conv2DBackpropInput" => OpKind::Conv2DBackpropInput,
            "Conv2DBackpropFilter" => OpKind::Conv2DBackpropFilter,
            "DepthwiseConv2dNative" => OpKind::Depthwise,
            "DepthwiseConv2dNativeBackpropInput" => OpKind::DepthwiseBackpropInput,
            "DepthwiseConv2dNativeBackpropFilter" => OpKind::DepthwiseBackpropFilter,
            "MaxPool" | "AvgPool" => OpKind::Pool,
            "MaxPoolV2" => OpKind::MaxPoolV2,
            "MaxPoolGrad" | "MaxPoolGradV2" => OpKind::MaxPoolGrad,
            "AvgPoolGrad" => OpKind::AvgPoolGrad,
            "FusedBatchNorm" | "FusedBatchNormV2" | "FusedBatchNormV3" | "_FusedBatchNormEx" => {
                OpKind::BatchNorm
            }
            "FusedBatchNormGrad" | "FusedBatchNormGradV2" | "FusedBatchNormGradV3" => {
                OpKind::BatchNormGrad
            }
            "SoftmaxCrossEntropyWithLogits" | "SparseSoftmaxCrossEntropyWithLogits" => {
                OpKind::CrossEntropy
            }
            "AddN" | "AccumulateNV2" => OpKind::AddN,
            _ => match ELEMENTWISE_OPS.iter().find(|(name, _)| *name == op) {
                Some(&(_, k)) => OpKind::Elementwise {
                    per_element: k,
                    input_scaled: INPUT_SCALED.contains(&op),
                },
                None => OpKind::Unknown,
            },
        }
    }

    /// The class of ops of this kind.
    pub(crate) fn class(self) -> OpClass {
        match self {
            OpKind::Free => OpClass::Free,
            OpKind::Memory | OpKind::Assign => OpClass::MemoryBound,
            _ => OpClass::Compute,
        }
    }
}

/// The class of op type `op`.
pub fn classify(op: &str) -> OpClass {
    OpKind::of(op).class()
}

/// An optimiser update (`ApplyAdam`, `ResourceApplyAdam`, `ResourceSparseApplyAdagrad`, …): the
/// optimiser's name and whether it is sparse.
fn optimiser(op: &str) -> Option<(&str, bool)> {
    let rest = op.strip_prefix("Resource").unwrap_or(op);
    let (rest, sparse) = match rest.strip_prefix("Sparse") {
        Some(r) => (r, true),
        None => (rest, false),
    };
    Some((rest.strip_prefix("Apply")?, sparse))
}

//! Where each op runs: the per-op strategies ([`tf_iaware_core::placer`]: TensorFlow's own
//! rules, round-robin, random, single-fastest, infra-aware, ETF, HEFT) and [`apply`], which
//! writes a [`Placement`]'s device strings onto a GraphDef.

pub mod apply;

pub use tf_iaware_core::placer::*;

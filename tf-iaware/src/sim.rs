//! What a placement is predicted to do: the discrete-event simulation of a step
//! ([`tf_iaware_core::sim`]), the [`report`] every `place`/`simulate` output carries, with its
//! Chrome traces, and the [`scale`] study of the planners.

pub use tf_iaware_core::sim::*;
pub use tf_iaware_core::{report, scale};

//! [`OpSignature`]: what TensorFlow's op registry says of an op type — the names of its inputs
//! and whether it is stateful — read once per op type when a graph is analysed, so later stages
//! (the data-parallel replication) find an optimizer's `grad` input by name, not by position.

use prost::Message;
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::proto::OpDef;

/// An op type's inputs and statefulness.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OpSignature {
    /// Input argument names, one per input, when every argument is a single tensor; `None` for
    /// ops with list arguments (`AddN`, `ConcatV2`, …), whose input count depends on attributes.
    pub inputs: Option<Vec<String>>,
    /// The op has side effects or state (variables, random numbers, queues, asserts).
    pub stateful: bool,
}

impl OpSignature {
    /// Position of input argument `name` (for single-tensor signatures).
    pub(crate) fn input(&self, name: &str) -> Option<usize> {
        self.inputs.as_ref()?.iter().position(|n| n == name)
    }

    /// The signature in a serialized `OpDef`.
    ///
    /// # Errors
    /// [`Error::GraphDecode`] for bytes that are not an OpDef.
    pub fn from_op_def(bytes: &[u8], op: &str) -> Result<Self> {
        let def = OpDef::decode(bytes).map_err(|source| Error::GraphDecode {
            what: format!("OpDef of {op}"),
            source,
        })?;
        let single = def
            .input_arg
            .iter()
            .all(|a| a.number_attr.is_empty() && a.type_list_attr.is_empty());
        Ok(OpSignature {
            inputs: single.then(|| def.input_arg.iter().map(|a| a.name.clone()).collect()),
            stateful: def.is_stateful,
        })
    }
}

//! Handles of ops and tensors that survive placement: a user's `Operation`/`Output` from the
//! graph they built, an op name, or `"name:k"`, all reduced to names that the placed graph (a
//! re-import of the same GraphDef, names unchanged) resolves.

use std::fmt;

use tensorflow::{Operation, Output};

use crate::error::{Error, Result};

/// An op by name, as it is in the original graph and in every placed copy of it.
pub trait OpHandle {
    /// The op's name.
    ///
    /// # Errors
    /// [`Error::Handle`] if the handle has no usable name (an op whose name is not UTF-8).
    fn op_name(&self) -> Result<String>;
}

impl OpHandle for Operation {
    fn op_name(&self) -> Result<String> {
        self.name().map_err(|e| Error::Handle {
            handle: "an Operation".into(),
            reason: format!("its name is not UTF-8 ({e})"),
        })
    }
}

impl OpHandle for str {
    fn op_name(&self) -> Result<String> {
        TensorRef::parse(self).map(|t| t.op)
    }
}

impl OpHandle for String {
    fn op_name(&self) -> Result<String> {
        self.as_str().op_name()
    }
}

impl<T: OpHandle + ?Sized> OpHandle for &T {
    fn op_name(&self) -> Result<String> {
        (**self).op_name()
    }
}

/// A tensor: output `index` of the op called `op`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TensorRef {
    /// Name of the op that produces the tensor.
    pub op: String,
    /// Which of the op's outputs (0-based).
    pub index: usize,
}

impl TensorRef {
    /// Output `index` of `op`.
    pub fn new(op: impl Into<String>, index: usize) -> Self {
        TensorRef {
            op: op.into(),
            index,
        }
    }

    /// Parses TensorFlow's tensor names: `"op"` (output 0) or `"op:k"`.
    ///
    /// # Errors
    /// [`Error::Handle`] for an empty name or an index that is not a number.
    pub(crate) fn parse(name: &str) -> Result<Self> {
        let bad = |reason: &str| Error::Handle {
            handle: format!("`{name}`"),
            reason: reason.into(),
        };
        let (op, index) = match name.rsplit_once(':') {
            Some((op, k)) => (
                op,
                k.parse::<usize>()
                    .map_err(|_| bad("the part after `:` must be an output index"))?,
            ),
            None => (name, 0),
        };
        if op.is_empty() {
            return Err(bad("empty op name"));
        }
        Ok(TensorRef::new(op, index))
    }
}

impl fmt::Display for TensorRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.op, self.index)
    }
}

/// A tensor by op name and output index.
pub trait TensorHandle {
    /// The tensor's op name and output index.
    ///
    /// # Errors
    /// [`Error::Handle`] if the handle does not name a tensor (bad `"op:k"` text, a name that
    /// is not UTF-8, a negative index).
    fn tensor_ref(&self) -> Result<TensorRef>;
}

impl TensorHandle for Output {
    fn tensor_ref(&self) -> Result<TensorRef> {
        let index = usize::try_from(self.index).map_err(|_| Error::Handle {
            handle: format!(
                "an Output of `{}`",
                self.operation.op_name().unwrap_or_default()
            ),
            reason: format!("negative output index {}", self.index),
        })?;
        Ok(TensorRef::new(self.operation.op_name()?, index))
    }
}

/// An `Operation` as a tensor is its output 0.
impl TensorHandle for Operation {
    fn tensor_ref(&self) -> Result<TensorRef> {
        Ok(TensorRef::new(self.op_name()?, 0))
    }
}

impl TensorHandle for TensorRef {
    fn tensor_ref(&self) -> Result<TensorRef> {
        Ok(self.clone())
    }
}

impl TensorHandle for str {
    fn tensor_ref(&self) -> Result<TensorRef> {
        TensorRef::parse(self)
    }
}

impl TensorHandle for String {
    fn tensor_ref(&self) -> Result<TensorRef> {
        TensorRef::parse(self)
    }
}

impl<T: TensorHandle + ?Sized> TensorHandle for &T {
    fn tensor_ref(&self) -> Result<TensorRef> {
        (**self).tensor_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tensor_names_parse_like_tensorflow() {
        assert_eq!(TensorRef::parse("loss").unwrap(), TensorRef::new("loss", 0));
        assert_eq!(
            TensorRef::parse("split:1").unwrap(),
            TensorRef::new("split", 1)
        );
        assert_eq!(
            TensorRef::parse("scope/a:b:2").unwrap(),
            TensorRef::new("scope/a:b", 2)
        );
        assert_eq!(TensorRef::new("x", 3).to_string(), "x:3");
        for bad in ["", ":0", "x:", "x:-1", "x:one"] {
            let e = TensorRef::parse(bad).unwrap_err();
            assert!(matches!(e, Error::Handle { .. }), "{bad}: {e}");
        }
        assert_eq!("a/b:1".op_name().unwrap(), "a/b");
    }
}

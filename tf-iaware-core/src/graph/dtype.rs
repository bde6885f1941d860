//! TensorFlow `DataType` values as plain data (types.proto numbering).

use serde::{Deserialize, Serialize};

/// A TensorFlow `DataType` enum value. Reference types are the base value + 100.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DType(pub i32);

impl DType {
    /// `DT_FLOAT`: 32-bit float.
    pub const FLOAT: DType = DType(1);
    /// `DT_UINT8`.
    pub const UINT8: DType = DType(4);
    pub(crate) const RESOURCE: DType = DType(20);
    /// Offset of the `*_REF` types.
    const REF_OFFSET: i32 = 100;

    /// Whether this is a reference type (`float_ref`, …), as produced by TF1 `VariableV2`.
    pub(crate) fn is_ref(self) -> bool {
        self.0 > Self::REF_OFFSET
    }

    /// Whether this is a resource handle (`DT_RESOURCE`).
    pub(crate) fn is_resource(self) -> bool {
        self == Self::RESOURCE
    }

    /// The non-reference type.
    pub fn base(self) -> DType {
        if self.is_ref() {
            DType(self.0 - Self::REF_OFFSET)
        } else {
            self
        }
    }

    /// Whether the base type is an integer type (`int8` … `int64`, `uint8` … `uint64`; not the
    /// quantised types): what integer class labels and token ids are.
    pub fn is_integer(self) -> bool {
        matches!(self.base().0, 3 | 4 | 5 | 6 | 9 | 17 | 22 | 23)
    }

    /// Bytes per element, or `None` where elements have no fixed size (strings, resources, variants).
    pub fn size_bytes(self) -> Option<u64> {
        Some(match self.base().0 {
            1 | 3 | 13 | 22 => 4,            // float, int32, qint32, uint32
            2 | 9 | 8 | 23 => 8,             // double, int64, complex64, uint64
            4 | 6 | 10 | 11 | 12 => 1,       // uint8, int8, bool, qint8, quint8
            5 | 14 | 15 | 16 | 17 | 19 => 2, // int16, bfloat16, qint16, quint16, uint16, half
            18 => 16,                        // complex128
            _ => return None,
        })
    }

    /// Short name as TensorFlow prints it (`float`, `int32`, `float_ref`, …).
    pub fn name(self) -> String {
        let base = match self.base().0 {
            1 => "float",
            2 => "double",
            3 => "int32",
            4 => "uint8",
            5 => "int16",
            6 => "int8",
            7 => "string",
            8 => "complex64",
            9 => "int64",
            10 => "bool",
            14 => "bfloat16",
            17 => "uint16",
            19 => "half",
            20 => "resource",
            21 => "variant",
            22 => "uint32",
            23 => "uint64",
            other => return format!("dtype({other})"),
        };
        if self.is_ref() {
            format!("{base}_ref")
        } else {
            base.to_string()
        }
    }
}

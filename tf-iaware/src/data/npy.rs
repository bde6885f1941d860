//! One NumPy `.npy` array read from a stream — a file on disk or a member of a `.npz` archive —
//! straight into the typed values of a [`HostTensor`]: the header says how many bytes the values
//! take, that size is checked against the memory data may still use before anything is
//! allocated, and the values are decoded in small chunks, so the bytes are held once (never the
//! file's bytes and the values side by side) and a decompression bomb stops at its header.

use std::io::Read;

use npyz::{NpyFile, TypeChar};

use crate::error::{Error, Result};
use tf_iaware_core::data::{HostTensor, Values};

/// Bytes decoded at a time.
const CHUNK_BYTES: usize = 64 << 10;

/// The array of one `.npy` stream; `file` names it in errors, `left` is the memory its values
/// may take, bytes. C order, little-endian (or single-byte) `float32`, `float64`, `int32`,
/// `int64`, `uint8` or `bool`.
///
/// # Errors
/// [`Error::DataFormat`] naming `file` for a stream that is no `.npy` array, a Fortran-order,
/// structured or unsupported dtype, values that need more than `left` bytes (said before they
/// are read), or a stream that ends before its values do (truncated).
pub(crate) fn read_npy(reader: impl Read, left: u64, file: &str) -> Result<HostTensor> {
    let bad = |reason: String| Error::DataFormat {
        file: file.into(),
        reason,
    };
    let npy = NpyFile::new(reader).map_err(|e| bad(format!("not a .npy array: {e}")))?;
    let header = npy.header().clone();
    if header.order() == npyz::Order::Fortran {
        return Err(bad(
            "is in Fortran order; save np.ascontiguousarray(a) instead".into(),
        ));
    }
    let npyz::DType::Plain(ty) = header.dtype() else {
        return Err(bad(format!(
            "has a structured dtype ({}); save one plain array per input",
            header.dtype().descr()
        )));
    };
    let size = ty.size_field();
    let kind = match (ty.type_char(), size) {
        (TypeChar::Float, 4) => Kind::F32,
        (TypeChar::Float, 8) => Kind::F64,
        (TypeChar::Int, 4) => Kind::I32,
        (TypeChar::Int, 8) => Kind::I64,
        (TypeChar::Uint, 1) => Kind::U8,
        (TypeChar::Bool, 1) => Kind::Bool,
        _ => return Err(unsupported(file, &ty)),
    };
    if ty.endianness() == npyz::Endianness::Big && size > 1 {
        return Err(unsupported(file, &ty));
    }
    let elements = header.len();
    let need = elements.checked_mul(size);
    if need.is_none_or(|n| n > left) {
        return Err(bad(format!(
            "its shape {:?} needs {} bytes of {ty}, more than the {left} bytes of memory data may \
             still use (half of what this process may allocate: the least of MemAvailable and \
             its cgroup's memory limit)",
            header.shape(),
            need.map_or("more than 2^64".into(), |n| n.to_string()),
        )));
    }
    // `need` ≤ `left` ≤ the memory available: the element count fits a usize.
    let elements = elements as usize;
    let mut stream = npy.into_inner();
    let truncated = |got: usize| {
        bad(format!(
            "is truncated: its shape {:?} needs {elements} values of {ty} but the stream ends \
             after {got}",
            header.shape()
        ))
    };
    let io = |e: std::io::Error| bad(format!("reading its values: {e}"));
    let values = match kind {
        Kind::F32 => Values::F32(decode(
            &mut stream,
            elements,
            f32::from_le_bytes,
            truncated,
            io,
        )?),
        Kind::F64 => Values::F64(decode(
            &mut stream,
            elements,
            f64::from_le_bytes,
            truncated,
            io,
        )?),
        Kind::I32 => Values::I32(decode(
            &mut stream,
            elements,
            i32::from_le_bytes,
            truncated,
            io,
        )?),
        Kind::I64 => Values::I64(decode(
            &mut stream,
            elements,
            i64::from_le_bytes,
            truncated,
            io,
        )?),
        Kind::U8 => Values::U8(decode(
            &mut stream,
            elements,
            u8::from_le_bytes,
            truncated,
            io,
        )?),
        Kind::Bool => Values::Bool(decode(
            &mut stream,
            elements,
            |[b]: [u8; 1]| b != 0,
            truncated,
            io,
        )?),
    };
    HostTensor::new(header.shape().to_vec(), values)
}

/// The element types a data set holds.
enum Kind {
    F32,
    F64,
    I32,
    I64,
    U8,
    Bool,
}

fn unsupported(file: &str, ty: &npyz::TypeStr) -> Error {
    Error::DataFormat {
        file: file.into(),
        reason: format!(
            "has dtype `{ty}`; data sets hold little-endian float32 (<f4), float64 (<f8), int32 \
             (<i4), int64 (<i8), uint8 (|u1) or bool (|b1)"
        ),
    }
}

/// `elements` values of `N` bytes each from `stream`, decoded by `from_bytes` a chunk at a time
/// into one vector allocated once.
fn decode<T, const N: usize>(
    stream: &mut impl Read,
    elements: usize,
    from_bytes: impl Fn([u8; N]) -> T,
    truncated: impl Fn(usize) -> Error,
    io: impl Fn(std::io::Error) -> Error,
) -> Result<Vec<T>> {
    let mut out = Vec::with_capacity(elements);
    let mut chunk = vec![0u8; CHUNK_BYTES.min(elements.saturating_mul(N)).max(N)];
    while out.len() < elements {
        let want = ((elements - out.len()) * N).min(chunk.len());
        let buf = &mut chunk[..want];
        let mut filled = 0;
        while filled < want {
            match stream.read(&mut buf[filled..]) {
                Ok(0) => return Err(truncated(out.len() + filled / N)),
                Ok(n) => filled += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(io(e)),
            }
        }
        out.extend(buf.chunks_exact(N).map(|b| {
            let mut a = [0u8; N];
            a.copy_from_slice(b);
            from_bytes(a)
        }));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `.npy` file of `descr` values of `shape` (a Python tuple), then `body`.
    fn npy(descr: &str, shape: &str, body: &[u8]) -> Vec<u8> {
        let dims: Vec<u64> = shape
            .trim_matches(|c| c == '(' || c == ')')
            .split(',')
            .filter_map(|d| d.trim().parse().ok())
            .collect();
        tf_iaware_core::data::encode_npy(descr, &dims, body)
    }

    #[test]
    fn values_of_every_type_are_decoded_across_chunks() {
        let n = CHUNK_BYTES / 4 * 3 + 5; // three chunks and a part
        let body: Vec<u8> = (0..n as i32).flat_map(|v| v.to_le_bytes()).collect();
        let t = read_npy(&npy("<i4", &format!("({n},)"), &body)[..], 1 << 30, "a").unwrap();
        let Values::I32(v) = &t.values else {
            panic!("{t:?}")
        };
        assert_eq!(v.len(), n);
        assert!(v.iter().enumerate().all(|(i, &x)| x == i as i32));
        let t = read_npy(&npy("|b1", "(2, 2)", &[0, 1, 2, 0])[..], 64, "b").unwrap();
        assert_eq!(t.values, Values::Bool(vec![false, true, true, false]));
        let f = 1.5f64.to_le_bytes();
        let t = read_npy(&npy("<f8", "(1,)", &f)[..], 64, "c").unwrap();
        assert_eq!(t.values, Values::F64(vec![1.5]));
    }

    #[test]
    fn oversized_truncated_and_unsupported_arrays_are_refused_by_name() {
        // A header claiming 2^40 float32 values is refused before anything is allocated.
        let e = read_npy(&npy("<f4", "(1099511627776,)", &[])[..], 1 << 30, "big.npy");
        let e = e.unwrap_err().to_string();
        assert!(
            e.contains("big.npy") && e.contains("4398046511104 bytes"),
            "{e}"
        );
        let e = read_npy(&npy("<f4", "(3,)", &[0; 8])[..], 64, "short.npy").unwrap_err();
        assert!(e.to_string().contains("ends after 2"), "{e}");
        let e = read_npy(&npy(">f4", "(1,)", &[0; 4])[..], 64, "be.npy").unwrap_err();
        assert!(e.to_string().contains("little-endian"), "{e}");
        let e = read_npy(&npy("<c8", "(1,)", &[0; 8])[..], 64, "c.npy").unwrap_err();
        assert!(e.to_string().contains("dtype"), "{e}");
        assert!(read_npy(&b"not numpy"[..], 64, "x").is_err());
    }
}

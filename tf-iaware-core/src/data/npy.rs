//! Writing NumPy `.npy` files: the bytes of a version-1.0 file, for data sets made in Rust (the
//! readers of `tf_iaware::data` take them back) and for tests of the readers.

/// The bytes of a version-1.0 `.npy` file: the header for `descr` (NumPy's dtype string:
/// `<f4`, `<i8`, `|u1`, `|b1`, …) and `shape` (C order), padded to a multiple of 64 bytes as
/// NumPy writes it, then `body` — the values as `descr` says, which are not checked against it.
///
/// ```
/// use tf_iaware_core::data::encode_npy;
///
/// let values: Vec<u8> = [1.5f32, -2.0].iter().flat_map(|v| v.to_le_bytes()).collect();
/// let bytes = encode_npy("<f4", &[2], &values);
/// assert!(bytes.starts_with(b"\x93NUMPY\x01\x00"));
/// assert_eq!((bytes.len() - values.len()) % 64, 0);
/// ```
pub fn encode_npy(descr: &str, shape: &[u64], body: &[u8]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(u64::to_string).collect();
    // A Python tuple as NumPy writes it: `()`, `(3,)`, `(3, 2)`.
    let tuple = match dims.as_slice() {
        [one] => format!("({one},)"),
        _ => format!("({})", dims.join(", ")),
    };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {tuple}, }}");
    // Magic (6), version (2) and length (2) bytes, the header and its newline: a multiple of 64.
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    // A header of more than 65,535 bytes would need format 2.0; shapes of that many
    // dimensions are not data sets.
    out.extend_from_slice(&(header.len().min(u16::MAX as usize) as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(body);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn headers_are_padded_and_shapes_written_as_numpy_does() {
        let b = encode_npy("<i8", &[3, 2], &[0; 48]);
        assert_eq!((b.len() - 48) % 64, 0);
        let text = std::str::from_utf8(&b[10..b.len() - 48]).unwrap();
        assert!(
            text.contains("'shape': (3, 2), }") && text.ends_with('\n'),
            "{text}"
        );
        let one = encode_npy("|u1", &[4], &[0; 4]);
        assert!(std::str::from_utf8(&one[10..one.len() - 4])
            .unwrap()
            .contains("'shape': (4,), }"));
        let scalar = encode_npy("<f8", &[], &[0; 8]);
        assert!(std::str::from_utf8(&scalar[10..scalar.len() - 8])
            .unwrap()
            .contains("'shape': ()"));
    }
}

//! TFRecord framing: TensorFlow's container of length-delimited, checksummed records (the format
//! of `tf.io.TFRecordWriter`, of `tf.data.TFRecordDataset` and of TensorBoard's event files).
//!
//! One record on disk, in order (all integers little-endian):
//!
//! | part        | bytes    | what                                             |
//! |-------------|----------|--------------------------------------------------|
//! | length      | 8        | `u64`, the number of data bytes                  |
//! | length CRC  | 4        | masked CRC32C of the 8 length bytes              |
//! | data        | `length` | the payload (a serialized `tf.train.Example`, …) |
//! | data CRC    | 4        | masked CRC32C of the data                        |
//!
//! The masked CRC is `((crc >> 15) | (crc << 17)) + 0xa282ead8` (wrapping), CRC32C being the
//! Castagnoli polynomial. [`Frame`] describes this once; [`RecordWriter`] and [`RecordReader`] are
//! both driven by it. Compressed (GZIP/ZLIB) TFRecord files are not read.
//!
//! ```
//! use tf_iaware_core::record::{RecordReader, RecordWriter};
//!
//! let mut w = RecordWriter::new(Vec::new());
//! w.write_record(b"hello")?;
//! w.write_record(b"")?;
//! let bytes = w.into_inner()?;
//! let records: Vec<Vec<u8>> = RecordReader::new(&bytes[..], "in memory").collect::<Result<_, _>>()?;
//! assert_eq!(records, vec![b"hello".to_vec(), Vec::new()]);
//! # Ok::<(), tf_iaware_core::Error>(())
//! ```

use std::io::{Read, Write};

use crate::error::{Error, RecordPart, Result};

/// CRC32C (Castagnoli, the iSCSI polynomial), as TFRecord uses it.
const CRC32C: crc::Crc<u32> = crc::Crc::<u32>::new(&crc::CRC_32_ISCSI);

/// The largest record [`RecordReader`] accepts by default, bytes (256 MiB): a corrupt length is
/// refused instead of allocated. [`RecordReader::with_max_record_bytes`] changes it.
pub const DEFAULT_MAX_RECORD_BYTES: u64 = 256 << 20;

/// The one description of a record's frame: its sizes and checksums, used by both the writer and
/// the reader.
#[derive(Debug, Clone, Copy)]
pub struct Frame;

impl Frame {
    /// Bytes of the length field.
    pub const LENGTH_BYTES: usize = 8;
    /// Bytes of each CRC field.
    pub const CRC_BYTES: usize = 4;
    /// Bytes before the data: the length and its CRC.
    pub const HEADER_BYTES: usize = Self::LENGTH_BYTES + Self::CRC_BYTES;
    /// Bytes after the data: its CRC.
    pub const FOOTER_BYTES: usize = Self::CRC_BYTES;
    /// The constant added when masking a CRC.
    pub const MASK_DELTA: u32 = 0xa282_ead8;

    /// The masked CRC32C of `bytes`, as stored in a record.
    pub fn masked_crc(bytes: &[u8]) -> u32 {
        let crc = CRC32C.checksum(bytes);
        crc.rotate_right(15).wrapping_add(Self::MASK_DELTA)
    }

    /// The header of a record of `len` data bytes: the length and its masked CRC.
    pub fn header(len: u64) -> [u8; Self::HEADER_BYTES] {
        let mut h = [0u8; Self::HEADER_BYTES];
        let length = len.to_le_bytes();
        h[..Self::LENGTH_BYTES].copy_from_slice(&length);
        h[Self::LENGTH_BYTES..].copy_from_slice(&Self::masked_crc(&length).to_le_bytes());
        h
    }

    /// The footer of a record holding `data`: its masked CRC.
    pub fn footer(data: &[u8]) -> [u8; Self::FOOTER_BYTES] {
        Self::masked_crc(data).to_le_bytes()
    }

    /// The data length a header holds, or the part that is wrong ([`RecordPart::LengthCrc`]).
    pub fn parse_header(header: &[u8; Self::HEADER_BYTES]) -> std::result::Result<u64, RecordPart> {
        let (length, crc) = header.split_at(Self::LENGTH_BYTES);
        if crc != Self::masked_crc(length).to_le_bytes() {
            return Err(RecordPart::LengthCrc);
        }
        let mut le = [0u8; Self::LENGTH_BYTES];
        le.copy_from_slice(length);
        Ok(u64::from_le_bytes(le))
    }

    /// Whether `footer` is the masked CRC of `data`.
    pub fn footer_matches(data: &[u8], footer: &[u8; Self::FOOTER_BYTES]) -> bool {
        *footer == Self::footer(data)
    }
}

/// Writes records to `W`, framed as [`Frame`] says.
#[derive(Debug)]
pub struct RecordWriter<W: Write> {
    inner: W,
    name: std::path::PathBuf,
}

impl<W: Write> RecordWriter<W> {
    /// A writer appending records to `inner` (a file, a `Vec<u8>`).
    pub fn new(inner: W) -> Self {
        RecordWriter {
            inner,
            name: std::path::PathBuf::new(),
        }
    }

    /// Names `path` (the file `W` writes) in errors.
    pub fn with_name(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.name = path.into();
        self
    }

    /// Appends one record holding `data`.
    ///
    /// # Errors
    /// [`Error::Io`] naming the file ([`RecordWriter::with_name`]) if `W` fails.
    pub fn write_record(&mut self, data: &[u8]) -> Result<()> {
        let name = &self.name;
        let io = |e| Error::io(name, e);
        self.inner
            .write_all(&Frame::header(data.len() as u64))
            .map_err(io)?;
        self.inner.write_all(data).map_err(io)?;
        self.inner.write_all(&Frame::footer(data)).map_err(io)
    }

    /// Flushes `W`.
    ///
    /// # Errors
    /// [`Error::Io`] if `W` fails.
    pub fn flush(&mut self) -> Result<()> {
        self.inner.flush().map_err(|e| Error::io(&self.name, e))
    }

    /// Flushes and returns `W`.
    ///
    /// # Errors
    /// [`Error::Io`] if the flush fails.
    pub fn into_inner(mut self) -> Result<W> {
        self.flush()?;
        Ok(self.inner)
    }
}

/// Reads records from `R`: an iterator of each record's data, checked against its CRCs.
///
/// It ends at a clean end of input (after a whole record); a partial record, a CRC mismatch or an
/// oversized length is an error naming the source and the record's byte offset, after which the
/// iterator ends.
#[derive(Debug)]
pub struct RecordReader<R: Read> {
    inner: R,
    name: String,
    offset: u64,
    max_record_bytes: u64,
    done: bool,
}

impl<R: Read> RecordReader<R> {
    /// A reader of `inner`; `name` (a path, "in memory") names it in errors.
    pub fn new(inner: R, name: impl Into<String>) -> Self {
        RecordReader {
            inner,
            name: name.into(),
            offset: 0,
            max_record_bytes: DEFAULT_MAX_RECORD_BYTES,
            done: false,
        }
    }

    /// Refuses records longer than `max` bytes ([`DEFAULT_MAX_RECORD_BYTES`] otherwise).
    pub fn with_max_record_bytes(mut self, max: u64) -> Self {
        self.max_record_bytes = max;
        self
    }

    /// The byte offset of the next record (the input's length once all is read).
    pub fn offset(&self) -> u64 {
        self.offset
    }

    fn truncated(&self, part: RecordPart) -> Error {
        Error::RecordTruncated {
            file: self.name.clone(),
            offset: self.offset,
            part,
        }
    }

    /// Reads into `buf` fully; `Ok(n)` with `n < buf.len()` at the end of input.
    fn read_full(&mut self, buf: &mut [u8]) -> Result<usize> {
        let mut n = 0;
        while n < buf.len() {
            match self.inner.read(&mut buf[n..]) {
                Ok(0) => break,
                Ok(k) => n += k,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::io(&self.name, e)),
            }
        }
        Ok(n)
    }

    fn next_record(&mut self) -> Result<Option<Vec<u8>>> {
        let mut header = [0u8; Frame::HEADER_BYTES];
        let got = self.read_full(&mut header)?;
        if got == 0 {
            return Ok(None);
        }
        if got < Frame::HEADER_BYTES {
            let part = if got < Frame::LENGTH_BYTES {
                RecordPart::Length
            } else {
                RecordPart::LengthCrc
            };
            return Err(self.truncated(part));
        }
        let len = Frame::parse_header(&header).map_err(|part| Error::RecordCrc {
            file: self.name.clone(),
            offset: self.offset,
            part,
        })?;
        if len > self.max_record_bytes {
            return Err(Error::RecordTooLarge {
                file: self.name.clone(),
                offset: self.offset,
                len,
                max: self.max_record_bytes,
            });
        }
        // Read through `take` so a truncated file never allocates more than it holds.
        let mut data = Vec::new();
        (&mut self.inner)
            .take(len)
            .read_to_end(&mut data)
            .map_err(|e| Error::io(&self.name, e))?;
        if (data.len() as u64) < len {
            return Err(self.truncated(RecordPart::Data));
        }
        let mut footer = [0u8; Frame::FOOTER_BYTES];
        if self.read_full(&mut footer)? < Frame::FOOTER_BYTES {
            return Err(self.truncated(RecordPart::DataCrc));
        }
        if !Frame::footer_matches(&data, &footer) {
            return Err(Error::RecordCrc {
                file: self.name.clone(),
                offset: self.offset,
                part: RecordPart::DataCrc,
            });
        }
        self.offset += (Frame::HEADER_BYTES + Frame::FOOTER_BYTES) as u64 + len;
        Ok(Some(data))
    }
}

impl<R: Read> Iterator for RecordReader<R> {
    type Item = Result<Vec<u8>>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        match self.next_record() {
            Ok(Some(data)) => Some(Ok(data)),
            Ok(None) => {
                self.done = true;
                None
            }
            Err(e) => {
                self.done = true;
                Some(Err(e))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(records: &[&[u8]]) -> Vec<u8> {
        let mut w = RecordWriter::new(Vec::new());
        for r in records {
            w.write_record(r).unwrap();
        }
        w.into_inner().unwrap()
    }

    fn read(bytes: &[u8]) -> Vec<Result<Vec<u8>>> {
        RecordReader::new(bytes, "t.tfrecord").collect()
    }

    proptest::proptest! {
        #[test]
        fn any_records_round_trip(records in proptest::collection::vec(
            proptest::collection::vec(proptest::num::u8::ANY, 0..64), 0..8)) {
            let refs: Vec<&[u8]> = records.iter().map(Vec::as_slice).collect();
            let got: Vec<Vec<u8>> = read(&write(&refs)).into_iter().map(Result::unwrap).collect();
            proptest::prop_assert_eq!(got, records);
        }

        #[test]
        fn any_bytes_end_in_records_or_one_error(bytes in proptest::collection::vec(
            proptest::num::u8::ANY, 0..256)) {
            let got = read(&bytes);
            // Every item but the last is a record; the reader stops after an error.
            proptest::prop_assert!(got.iter().rev().skip(1).all(Result::is_ok));
        }
    }

    #[test]
    fn crc32c_is_castagnoli() {
        // The check value of CRC-32C (RFC 3720, B.4).
        assert_eq!(CRC32C.checksum(b"123456789"), 0xe306_9283);
    }

    #[test]
    fn reads_and_writes_what_tensorflow_writes() {
        // Written by Python TensorFlow's tf.io.TFRecordWriter (tests/fixtures/make_data.py).
        let tf = include_bytes!("../../tests/fixtures/data_record_vector.tfrecord");
        let long: Vec<u8> = (0..300).map(|i| (i % 256) as u8).collect();
        let want: Vec<&[u8]> = vec![b"", b"hello", &long];
        let got: Vec<Vec<u8>> = read(tf).into_iter().map(Result::unwrap).collect();
        assert_eq!(got, want);
        assert_eq!(
            write(&want),
            tf.to_vec(),
            "byte for byte as TensorFlow writes"
        );
    }

    #[test]
    fn records_round_trip_and_offsets_advance() {
        let bytes = write(&[b"a", b"", &[7u8; 1000]]);
        assert_eq!(bytes.len(), 3 * 16 + 1 + 1000);
        let mut r = RecordReader::new(&bytes[..], "t");
        assert_eq!(r.next().unwrap().unwrap(), b"a");
        assert_eq!(r.offset(), 17);
        assert_eq!(r.next().unwrap().unwrap(), b"");
        assert_eq!(r.next().unwrap().unwrap(), vec![7u8; 1000]);
        assert!(r.next().is_none());
        assert_eq!(r.offset(), bytes.len() as u64);
        assert!(read(&[]).is_empty());
    }

    #[test]
    fn every_truncation_is_an_error_naming_the_part_and_offset() {
        let bytes = write(&[b"first", b"second"]);
        let second = 16 + 5;
        for cut in second + 1..bytes.len() {
            let got = read(&bytes[..cut]);
            assert_eq!(got.len(), 2, "cut at {cut}");
            assert_eq!(got[0].as_ref().unwrap(), b"first");
            let e = got[1].as_ref().unwrap_err();
            let Error::RecordTruncated { file, offset, part } = e else {
                panic!("cut at {cut}: {e}")
            };
            assert_eq!((file.as_str(), *offset), ("t.tfrecord", second as u64));
            let want = match cut - second {
                1..=7 => RecordPart::Length,
                8..=11 => RecordPart::LengthCrc,
                12..=17 => RecordPart::Data,
                _ => RecordPart::DataCrc,
            };
            assert_eq!(*part, want, "cut at {cut}");
            assert!(e.to_string().contains("t.tfrecord"), "{e}");
        }
    }

    #[test]
    fn flipped_bits_are_crc_errors() {
        let bytes = write(&[b"payload"]);
        for (at, part) in [
            (0, RecordPart::LengthCrc),
            (9, RecordPart::LengthCrc),
            (13, RecordPart::DataCrc),
            (21, RecordPart::DataCrc),
        ] {
            let mut bad = bytes.clone();
            bad[at] ^= 0x10;
            let got = read(&bad);
            assert!(
                matches!(got[..], [Err(Error::RecordCrc { part: p, offset: 0, .. })] if p == part),
                "byte {at}: {got:?}"
            );
        }
    }

    #[test]
    fn a_huge_length_is_refused_before_allocating() {
        let mut bytes = Frame::header(u64::MAX).to_vec();
        bytes.extend_from_slice(b"tiny");
        let got = read(&bytes);
        assert!(
            matches!(got[..], [Err(Error::RecordTooLarge { len: u64::MAX, .. })]),
            "{got:?}"
        );
        // Under the cap but longer than the input: truncated, and only what is there is read.
        let mut bytes = Frame::header(1 << 20).to_vec();
        bytes.extend_from_slice(b"tiny");
        let got = read(&bytes);
        assert!(
            matches!(
                got[..],
                [Err(Error::RecordTruncated {
                    part: RecordPart::Data,
                    ..
                })]
            ),
            "{got:?}"
        );
        let bytes = write(&[&[0u8; 100]]);
        let r = RecordReader::new(&bytes[..], "t").with_max_record_bytes(99);
        assert!(matches!(
            r.collect::<Vec<_>>()[..],
            [Err(Error::RecordTooLarge {
                len: 100,
                max: 99,
                ..
            })]
        ));
    }
}

//! The layout of a checkpoint directory: one sub-directory per checkpoint, `ckpt-<step>/`,
//! holding TensorFlow's V2 files under the prefix [`PREFIX_NAME`] and the trainer's state
//! ([`STATE_FILE`]); and TensorFlow's `checkpoint` state file ([`CheckpointState`]), the text
//! proto `tf.train.latest_checkpoint` reads.

use crate::error::{Error, Result};

/// Name of TensorFlow's state file in a checkpoint directory.
pub const STATE_FILE_NAME: &str = "checkpoint";
/// File name of the V2 prefix inside each checkpoint's sub-directory.
pub const PREFIX_NAME: &str = "model.ckpt";
/// The V2 data file of a single-shard checkpoint, after the prefix.
pub const DATA_SUFFIX: &str = ".data-00000-of-00001";
/// The V2 index file, after the prefix.
pub const INDEX_SUFFIX: &str = ".index";
/// The trainer's state ([`TrainState`](super::TrainState) as JSON) inside each checkpoint.
pub const STATE_FILE: &str = "train_state.json";
/// The lock file a run holds in its checkpoint directory (its pid inside), so that a second run
/// on the same directory is refused.
pub const LOCK_FILE: &str = ".tf-iaware.lock";
/// Largest `checkpoint` state file read (16 MiB: hundreds of thousands of kept checkpoints).
pub const MAX_STATE_FILE_BYTES: u64 = 16 << 20;
/// Largest V2 index file handed to TensorFlow's reader (256 MiB: millions of tensors).
pub const MAX_INDEX_BYTES: u64 = 256 << 20;
/// Bytes of the footer at the end of a V2 index file (a LevelDB-style table): two block handles
/// padded to 40 bytes, then the table's magic number.
pub const INDEX_FOOTER_LEN: usize = 48;
/// The magic number that ends every table file TensorFlow writes (`kTableMagicNumber`).
const TABLE_MAGIC: u64 = 0xdb47_7524_8b80_fb57;
/// Bytes after each block of a table: its type and its CRC32C.
const BLOCK_TRAILER_LEN: u64 = 5;
/// Prefix of the sub-directory names of checkpoints.
const DIR_PREFIX: &str = "ckpt-";
/// Prefix of the temporary directories a checkpoint is written into before it is renamed.
const TEMP_PREFIX: &str = ".ckpt-";

/// Every file a checkpoint's sub-directory holds when tf-iaware wrote it: the only files it
/// ever deletes there.
pub fn checkpoint_files() -> [String; 3] {
    [
        format!("{PREFIX_NAME}{INDEX_SUFFIX}"),
        format!("{PREFIX_NAME}{DATA_SUFFIX}"),
        STATE_FILE.to_string(),
    ]
}

/// Sub-directory name of the checkpoint after `step` steps (`ckpt-1200`).
pub fn checkpoint_dir_name(step: u64) -> String {
    format!("{DIR_PREFIX}{step}")
}

/// The step of a checkpoint sub-directory name, `None` for any other name.
pub fn parse_checkpoint_dir_name(name: &str) -> Option<u64> {
    let digits = name.strip_prefix(DIR_PREFIX)?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Name of the temporary directory the checkpoint of `step` is written into by process `pid`
/// (hidden, so no reader takes it for a checkpoint).
pub fn temp_dir_name(step: u64, pid: u32) -> String {
    format!("{TEMP_PREFIX}{step}.tmp-{pid}")
}

/// Name a checkpoint directory of `step` is moved to by process `pid` before a new checkpoint
/// of the same step replaces it (deleted once the new one is in place).
pub fn replaced_dir_name(step: u64, pid: u32) -> String {
    format!("{TEMP_PREFIX}{step}.old-{pid}")
}

/// Name a torn checkpoint of `step` is moved to (kept for the user to inspect; never read
/// again and never deleted).
pub fn torn_dir_name(step: u64, pid: u32) -> String {
    format!("{TEMP_PREFIX}{step}.torn-{pid}")
}

/// The process id of a temporary or replaced directory of [`temp_dir_name`]'s or
/// [`replaced_dir_name`]'s making (what may be deleted after that process is gone), `None` for
/// any other name (torn checkpoints included).
pub fn temp_dir_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix(TEMP_PREFIX)?;
    let (step, pid) = rest
        .split_once(".tmp-")
        .or_else(|| rest.split_once(".old-"))?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(step) || !digits(pid) {
        return None;
    }
    pid.parse().ok()
}

/// The step of a state-file path of this layout (`ckpt-1200/model.ckpt`), `None` for a path
/// another tool wrote (`model.ckpt-1200`, an absolute path).
pub fn parse_relative_prefix(path: &str) -> Option<u64> {
    let (dir, file) = path.split_once('/')?;
    if file != PREFIX_NAME {
        return None;
    }
    parse_checkpoint_dir_name(dir)
}

/// The prefix of the checkpoint of `step`, relative to the checkpoint directory
/// (`ckpt-1200/model.ckpt`), as the state file records it.
pub fn relative_prefix(step: u64) -> String {
    format!("{}/{PREFIX_NAME}", checkpoint_dir_name(step))
}

/// The steps of `steps` (any order) that keeping the newest `keep` leaves to delete, oldest
/// first. `keep` 0 keeps everything.
pub fn to_prune(steps: &[u64], keep: usize) -> Vec<u64> {
    let mut sorted = steps.to_vec();
    sorted.sort_unstable();
    sorted.dedup();
    if keep == 0 || sorted.len() <= keep {
        return Vec::new();
    }
    sorted.truncate(sorted.len() - keep);
    sorted
}

/// One unsigned LEB128 varint of at most 10 bytes at the start of `bytes`: its value and length.
fn varint(bytes: &[u8]) -> Option<(u64, usize)> {
    let mut v: u64 = 0;
    for (i, &b) in bytes.iter().take(10).enumerate() {
        let part = u64::from(b & 0x7f);
        if i == 9 && part > 1 {
            return None;
        }
        v |= part << (7 * i);
        if b & 0x80 == 0 {
            return Some((v, i + 1));
        }
    }
    None
}

/// Checks the footer of a V2 index file of `len` bytes whose last bytes are `tail` (at least
/// [`INDEX_FOOTER_LEN`] of them): the table's magic number, and a meta-index and an index block
/// that lie inside the file before the footer. What TensorFlow's reader would refuse, said
/// before it is given the file.
///
/// # Errors
/// What is wrong, in words.
pub fn check_index_footer(len: u64, tail: &[u8]) -> std::result::Result<(), String> {
    if len < INDEX_FOOTER_LEN as u64 || tail.len() < INDEX_FOOTER_LEN {
        return Err(format!(
            "{len} bytes, shorter than an index's {INDEX_FOOTER_LEN}-byte footer"
        ));
    }
    let footer = &tail[tail.len() - INDEX_FOOTER_LEN..];
    let mut magic = [0u8; 8];
    magic.copy_from_slice(&footer[40..]);
    if u64::from_le_bytes(magic) != TABLE_MAGIC {
        return Err("no table magic number at its end: not a V2 checkpoint index".into());
    }
    let body = len - INDEX_FOOTER_LEN as u64;
    let mut at = 0;
    for block in ["meta-index", "index"] {
        let handle = &footer[at..40];
        let (offset, n) = varint(handle).ok_or(format!("its {block} handle does not decode"))?;
        let (size, m) =
            varint(&handle[n..]).ok_or(format!("its {block} handle does not decode"))?;
        at += n + m;
        let end = offset
            .checked_add(size)
            .and_then(|e| e.checked_add(BLOCK_TRAILER_LEN));
        if end.is_none_or(|e| e > body) {
            return Err(format!(
                "its {block} block ({size} bytes at {offset}) lies past the {body} bytes before \
                 the footer"
            ));
        }
    }
    Ok(())
}

/// TensorFlow's `CheckpointState` (checkpoint_state.proto) in its text format, as the
/// `checkpoint` file of a directory holds it: the latest prefix and every kept one, oldest first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CheckpointState {
    /// `model_checkpoint_path`: the latest checkpoint's prefix (relative to the directory).
    pub model_checkpoint_path: String,
    /// `all_model_checkpoint_paths`: the kept prefixes, oldest first (the latest last).
    pub all_model_checkpoint_paths: Vec<String>,
}

impl CheckpointState {
    /// The text proto, one field a line.
    pub fn to_text(&self) -> String {
        let mut out = format!(
            "model_checkpoint_path: \"{}\"\n",
            escape(&self.model_checkpoint_path)
        );
        for p in &self.all_model_checkpoint_paths {
            out.push_str(&format!("all_model_checkpoint_paths: \"{}\"\n", escape(p)));
        }
        out
    }

    /// Reads the text proto (the two path fields; other fields, such as the timestamps Python
    /// writes, are skipped). `what` names the file in errors.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming the line that is not `field: "string"`.
    pub fn parse(text: &str, what: &str) -> Result<Self> {
        let mut state = CheckpointState::default();
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = |reason: &str| Error::InvalidArgument {
                what: format!("{what} line {}", i + 1),
                reason: reason.to_string(),
            };
            let (field, value) = line.split_once(':').ok_or_else(|| bad("no `:`"))?;
            let field = field.trim();
            if field != "model_checkpoint_path" && field != "all_model_checkpoint_paths" {
                continue;
            }
            let value = value.trim();
            let inner = value
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .ok_or_else(|| bad("the value is not a quoted string"))?;
            let value = unescape(inner).ok_or_else(|| bad("bad escape in the string"))?;
            if field == "model_checkpoint_path" {
                state.model_checkpoint_path = value;
            } else {
                state.all_model_checkpoint_paths.push(value);
            }
        }
        Ok(state)
    }
}

fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

fn unescape(s: &str) -> Option<String> {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next()? {
            '"' => out.push('"'),
            '\\' => out.push('\\'),
            '\'' => out.push('\''),
            'n' => out.push('\n'),
            't' => out.push('\t'),
            _ => return None,
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoint_names_round_trip_and_others_are_not_ours() {
        assert_eq!(
            parse_checkpoint_dir_name(&checkpoint_dir_name(1200)),
            Some(1200)
        );
        for other in [
            "ckpt-",
            "ckpt-12a",
            "ckpt--1",
            "model.ckpt-3",
            "ckpt-1.tmp",
            ".ckpt-1",
        ] {
            assert_eq!(parse_checkpoint_dir_name(other), None, "{other}");
        }
        assert_eq!(temp_dir_pid(&temp_dir_name(5, 42)), Some(42));
        assert_eq!(temp_dir_pid(&replaced_dir_name(5, 43)), Some(43));
        assert_eq!(temp_dir_pid(&torn_dir_name(5, 44)), None);
        assert_eq!(temp_dir_pid("ckpt-5"), None);
        assert_eq!(temp_dir_pid(".ckpt-5.tmp-"), None);
        assert_eq!(temp_dir_pid(".ckpt-x.tmp-3"), None);
        assert_eq!(relative_prefix(7), "ckpt-7/model.ckpt");
        assert_eq!(parse_relative_prefix(&relative_prefix(7)), Some(7));
        assert_eq!(parse_relative_prefix("model.ckpt-7"), None);
        assert_eq!(parse_relative_prefix("/abs/ckpt-7/model.ckpt"), None);
    }

    #[test]
    fn pruning_keeps_the_newest() {
        assert_eq!(to_prune(&[30, 10, 20, 40], 2), vec![10, 20]);
        assert!(to_prune(&[1, 2], 2).is_empty());
        assert!(to_prune(&[1, 2, 3], 0).is_empty());
    }

    #[test]
    fn the_state_file_round_trips_and_reads_pythons() {
        let s = CheckpointState {
            model_checkpoint_path: "ckpt-3/model.ckpt".into(),
            all_model_checkpoint_paths: vec!["ckpt-2/model.ckpt".into(), "a\"b\\c".into()],
        };
        assert_eq!(CheckpointState::parse(&s.to_text(), "f").unwrap(), s);
        let python = "model_checkpoint_path: \"model.ckpt-20\"\n\
            all_model_checkpoint_paths: \"model.ckpt-10\"\n\
            all_model_checkpoint_paths: \"model.ckpt-20\"\n\
            all_model_checkpoint_timestamps: 1700000000.5\n\
            last_preserved_timestamp: 1699999999.0\n";
        let p = CheckpointState::parse(python, "f").unwrap();
        assert_eq!(p.model_checkpoint_path, "model.ckpt-20");
        assert_eq!(p.all_model_checkpoint_paths.len(), 2);
        let err = CheckpointState::parse("model_checkpoint_path: x\n", "d/checkpoint")
            .unwrap_err()
            .to_string();
        assert!(err.contains("d/checkpoint line 1"), "{err}");
    }

    /// A footer of handles (`meta` offset, size) and (`index` offset, size) for a file of `len`.
    fn footer(meta: (u64, u64), index: (u64, u64)) -> Vec<u8> {
        let mut f = Vec::new();
        for v in [meta.0, meta.1, index.0, index.1] {
            let mut v = v;
            while v >= 0x80 {
                f.push(v as u8 | 0x80);
                v >>= 7;
            }
            f.push(v as u8);
        }
        f.resize(40, 0);
        f.extend_from_slice(&TABLE_MAGIC.to_le_bytes());
        f
    }

    #[test]
    fn an_index_footer_is_checked_before_tensorflow_reads_it() {
        let good = footer((0, 20), (25, 30));
        assert_eq!(check_index_footer(60 + 48, &good), Ok(()));
        // A block past the footer, a torn file, garbage, another file type.
        let e = check_index_footer(50 + 48, &good).unwrap_err();
        assert!(e.contains("index block"), "{e}");
        assert!(check_index_footer(47, &good[1..]).is_err());
        assert!(check_index_footer(4096, &[0; 48])
            .unwrap_err()
            .contains("magic"));
        let huge = footer((u64::MAX, u64::MAX), (0, 1));
        assert!(check_index_footer(1 << 40, &huge).is_err());
        let mut bad = good.clone();
        bad[..10].fill(0xff);
        assert!(check_index_footer(1 << 20, &bad)
            .unwrap_err()
            .contains("decode"));
    }

    proptest::proptest! {
        #[test]
        fn any_footer_is_checked_without_panicking(
            tail in proptest::collection::vec(proptest::num::u8::ANY, 0..100),
            len in proptest::num::u64::ANY,
        ) {
            let _ = check_index_footer(len, &tail);
        }

        #[test]
        fn any_state_round_trips_and_any_text_parses_or_is_refused(
            latest in ".{0,40}",
            all in proptest::collection::vec(".{0,40}", 0..4),
            text in ".{0,200}",
        ) {
            let s = CheckpointState {
                model_checkpoint_path: latest,
                all_model_checkpoint_paths: all,
            };
            proptest::prop_assert_eq!(CheckpointState::parse(&s.to_text(), "f").unwrap(), s);
            let _ = CheckpointState::parse(&text, "f");
            let _ = parse_relative_prefix(&text);
            let _ = temp_dir_pid(&text);
        }
    }
}

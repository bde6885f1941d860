//! The one error type of the `tf_iaware` crate. Every variant names the culprit (the op, the
//! device string, the file, the field) so a message is actionable on its own.

use std::path::PathBuf;

/// Result with [`Error`] as the default error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in tf-iaware.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    // ----- Graphs -------------------------------------------------------------------------------
    /// Bytes that do not decode as a GraphDef.
    #[error("not a valid GraphDef ({what}): {source}")]
    GraphDecode {
        /// Where the bytes came from (a file, a buffer).
        what: String,
        /// The underlying error.
        #[source]
        source: prost::DecodeError,
    },
    /// A GraphDef function library TensorFlow cannot import (a function that calls itself,
    /// directly or through others, aborts TensorFlow's shape inference).
    #[error("function library of {what}: {reason}")]
    FunctionLibrary {
        /// Where the GraphDef came from (a file, a buffer).
        what: String,
        /// What is wrong, naming the functions.
        reason: String,
    },
    /// A structurally broken graph (dangling input, duplicate name, …).
    #[error("invalid graph: node `{node}`: {reason}")]
    InvalidGraph {
        /// Name of the node.
        node: String,
        /// What is wrong, in words.
        reason: String,
    },
    /// An attribute that is present but does not decode or has the wrong kind.
    #[error("node `{node}`: attribute `{attr}`: {reason}")]
    BadAttr {
        /// Name of the node.
        node: String,
        /// Name of the attribute.
        attr: String,
        /// What is wrong, in words.
        reason: String,
    },
    /// An op name that the graph does not contain (from a sidecar, a placement, a CLI flag).
    #[error("{context}: no op named `{op}` in the graph")]
    UnknownOp {
        /// Where the op name came from (a sidecar, a placement, a flag).
        context: String,
        /// Name of the op.
        op: String,
    },

    /// A node, group or device id (`kind`) out of range for what it indexes, which holds `len`
    /// of them (an id from another graph or cluster, or a number a user gave).
    #[error("{kind} {id} is out of range: there are {len} {kind}s (ids 0 to {len} - 1)")]
    BadId {
        /// What the id indexes: `node`, `group` or `device`.
        kind: &'static str,
        /// The id that was given.
        id: usize,
        /// How many of them there are.
        len: usize,
    },

    /// An op or tensor handle that names nothing usable, or that the placed graph lacks (the
    /// `handle` is quoted as the user gave it).
    #[error("handle {handle}: {reason}")]
    Handle {
        /// The handle as the user gave it.
        handle: String,
        /// What is wrong with the handle, in words.
        reason: String,
    },

    /// A training graph that cannot be replicated data-parallel safely; `op` is the culprit.
    #[error("cannot replicate the graph data-parallel: op `{op}`: {reason}")]
    Replication {
        /// Name of the op.
        op: String,
        /// What is wrong, in words.
        reason: String,
    },

    // ----- Devices and placement ----------------------------------------------------------------
    /// A device string that does not parse.
    #[error("malformed device string `{device}`: {reason}")]
    MalformedDevice {
        /// The device string as given.
        device: String,
        /// What is wrong, in words.
        reason: String,
    },
    /// A device that is not part of the cluster.
    #[error("op `{op}` is placed on `{device}`, which is not a device of this cluster (devices: {known})")]
    UnknownDevice {
        /// Name of the op.
        op: String,
        /// The device string the op is placed on.
        device: String,
        /// The cluster's devices, comma-separated.
        known: String,
    },
    /// An op whose kernels, on every device type, take other types than the node's (MatMul on
    /// uint16): no placement can run it.
    #[error("op `{op}` (type {op_type}) has no kernel for {types} on any device type (its kernels, on {available}, take other types)")]
    NoKernelForTypes {
        /// Name of the op.
        op: String,
        /// Type of the op (`MatMul`, …).
        op_type: String,
        /// The node's type attributes, `T=uint16, …`.
        types: String,
        /// Device types that have kernels for the op type, comma-separated.
        available: String,
    },
    /// A device whose type has no registered kernel for the op.
    #[error("op `{op}` (type {op_type}) has no kernel for the device type of `{device}` (kernels: {available})")]
    NoKernel {
        /// Name of the op.
        op: String,
        /// Type of the op (`MatMul`, …).
        op_type: String,
        /// The device string the op is placed on.
        device: String,
        /// Device types that do have a kernel for the op, comma-separated.
        available: String,
    },
    /// An op type TensorFlow registers but for which this TensorFlow build has no kernel on
    /// any device type (`CudnnRNN` in a CPU-only build): no placement can run it.
    #[error("op `{op}` (type {op_type}): this TensorFlow build has no kernel for {op_type} on any device type, so no device can run it (an op of another build, such as a GPU-only op in a CPU-only build?)")]
    NoKernelAnywhere {
        /// Name of the op.
        op: String,
        /// Type of the op (`CudnnRNN`, …).
        op_type: String,
    },
    /// Ops that TensorFlow must colocate were given different devices; `other` is the
    /// (op, device) it conflicts with (boxed to keep the error small).
    #[error("colocation group of `{group}` is split: `{op}` is on `{device}` but `{}` is on `{}`", .other.0, .other.1)]
    SplitColocation {
        /// Name of the colocation group (its first member).
        group: String,
        /// Name of an op of the group.
        op: String,
        /// The device string `op` is placed on.
        device: String,
        /// The (op, device) pair it conflicts with.
        other: Box<(String, String)>,
    },
    /// No device can hold a colocation group (memory, kernels).
    #[error("no device can take colocation group `{group}`: {reason}")]
    Infeasible {
        /// Name of the colocation group (its first member).
        group: String,
        /// What is wrong, in words.
        reason: String,
    },
    /// A strategy name that is not known.
    #[error("unknown strategy `{name}` (known: {known})")]
    UnknownStrategy {
        /// The strategy name that was given.
        name: String,
        /// The known strategies, comma-separated.
        known: String,
    },

    // ----- Clusters -----------------------------------------------------------------------------
    /// A `--cluster` string that does not parse.
    #[error("bad cluster spec `{spec}`: {reason}")]
    ClusterSpec {
        /// The spec as given.
        spec: String,
        /// What is wrong, in words.
        reason: String,
    },
    /// A TF_CONFIG document that is not what TensorFlow accepts.
    #[error("bad TF_CONFIG ({origin}): {reason}")]
    TfConfig {
        /// Where the document came from (the environment variable, a file).
        origin: String,
        /// What is wrong, in words.
        reason: String,
    },
    /// A field of a `synthetic:` cluster spec that does not parse or is out of range: `field` is
    /// its key (`workers`, `avail`, `cap`, `net`, …), `value` the text given for it.
    #[error("bad synthetic cluster spec `{spec}`: field `{field}` = `{value}`: {reason}")]
    SyntheticSpec {
        /// The spec as given.
        spec: String,
        /// The key of the field (`workers`, `avail`, `cap`, `net`, …).
        field: String,
        /// The text given for the field.
        value: String,
        /// What is wrong, in words.
        reason: String,
    },
    /// A TensorFlow server could not be kept to its task's own address (the executable does
    /// not export `bind`, the address is not this machine's, a wildcard listener was found).
    #[error("TensorFlow server of /job:{job}/task:{task} ({address}): {reason}")]
    ServerListen {
        /// The server's job.
        job: String,
        /// Its task index.
        task: i32,
        /// The address it was to listen on (TF_CONFIG's for the task).
        address: String,
        /// What went wrong and what to do.
        reason: String,
    },

    // ----- TensorFlow and running ---------------------------------------------------------------
    /// A TensorFlow C API call failed.
    #[error("TensorFlow {call} failed: {code}: {message}")]
    TensorFlow {
        /// The C API function that was called.
        call: String,
        /// TensorFlow's status code: what kind of failure (a deadline passed, a task
        /// unavailable, …), to act on; never the message text.
        code: TfCode,
        /// TensorFlow's status message.
        message: String,
    },
    /// The linked libtensorflow is not the version this code is written against.
    #[error("libtensorflow {found} is linked ({path}) but tf-iaware needs {expected}; rebuild with TF_IAWARE_LIB_DIR pointing at {expected} or let tf-iaware-sys fetch it")]
    TensorFlowVersion {
        /// Version of the linked library.
        found: String,
        /// Version this code is written against.
        expected: String,
        /// Path of the linked library.
        path: String,
    },
    /// A sidecar (`F.json`) that is missing or malformed.
    #[error("sidecar {path}: {reason}")]
    Sidecar {
        /// Path of the sidecar file.
        path: PathBuf,
        /// What is wrong, in words.
        reason: String,
    },
    /// A training step produced a loss that is not finite.
    #[error("step {step}: loss is {loss}")]
    NonFiniteLoss {
        /// Training step (0-based).
        step: usize,
        /// The loss value.
        loss: f32,
    },
    /// An unknown model name for the zoo.
    #[error("unknown model `{name}` (known: {known})")]
    UnknownModel {
        /// The model name that was given.
        name: String,
        /// The known models, comma-separated.
        known: String,
    },
    /// A checkpoint that does not fit the graph it is restored into.
    #[error("checkpoint of step {step}: variable `{variable}` {reason}")]
    Checkpoint {
        /// Training step of the checkpoint.
        step: usize,
        /// Name of the variable.
        variable: String,
        /// What is wrong, in words.
        reason: String,
    },
    /// A checkpoint on disk that cannot be read whole (`path`: its prefix, index or data file, or
    /// its state sidecar): missing, truncated, corrupt — a torn write or a damaged disk.
    #[error("checkpoint {path}: {reason}")]
    CheckpointFile {
        /// The checkpoint prefix or the file that is missing or damaged.
        path: PathBuf,
        /// What is wrong, in words.
        reason: String,
    },
    /// A checkpoint on disk that does not fit the graph it is restored into: `variable` is
    /// missing from it, or has another dtype or shape there.
    #[error("checkpoint {path} does not fit the graph: variable `{variable}` {reason}")]
    CheckpointMismatch {
        /// The checkpoint prefix.
        path: PathBuf,
        /// Name of the variable.
        variable: String,
        /// What differs, in words.
        reason: String,
    },
    /// A checkpoint's saved trainer state ([`TrainState`](crate::durable::TrainState)) with a
    /// field out of range or at odds with the checkpoint (its step, the other fields).
    #[error("checkpoint state {path}: field `{field}`: {reason}")]
    CheckpointState {
        /// The state file.
        path: PathBuf,
        /// The field (`global_step`, `extra.sync_samples`, …).
        field: String,
        /// What is wrong with it, in words.
        reason: String,
    },
    /// A checkpoint folder that holds checkpoints of which none can be resumed (each torn or
    /// with a state out of range): nothing was restored and nothing was changed.
    #[error("checkpoint folder {dir}: none of its {found} checkpoints can be resumed (newest: {newest}); move them out of the folder to start afresh, or restore a copy")]
    NoUsableCheckpoint {
        /// The checkpoint folder.
        dir: PathBuf,
        /// Checkpoints found in it.
        found: usize,
        /// Why the newest cannot be used.
        newest: String,
    },
    /// A checkpoint folder another run holds (its lock file is locked).
    #[error("checkpoint folder {dir} is in use by {holder} (lock {lock}); two runs must not share a checkpoint folder: wait for it to end or give this run another --checkpoint-dir")]
    CheckpointLocked {
        /// The checkpoint folder.
        dir: PathBuf,
        /// Its lock file.
        lock: PathBuf,
        /// Who holds it (`process 1234`, or `another process` when its pid cannot be read).
        holder: String,
    },
    /// A TensorBoard event file that does not parse (`offset`: byte offset of the bad record).
    #[error("event file {path}: record at byte {offset}: {reason}")]
    EventFile {
        /// Path of the event file.
        path: PathBuf,
        /// Byte offset of the record that is wrong.
        offset: u64,
        /// What is wrong, in words.
        reason: String,
    },
    /// Training lost tasks it cannot do without (every worker, or every ps and none came back).
    #[error("step {step}: cannot recover from losing {lost}: {reason}")]
    Unrecoverable {
        /// Training step (0-based).
        step: usize,
        /// The tasks that were lost.
        lost: String,
        /// What is wrong, in words.
        reason: String,
    },
    /// A task of the cluster that does not answer and cannot be done without (the session
    /// master named by the caller, a ps that holds variables).
    #[error("task {task} at {address} does not answer: {reason}")]
    TaskDown {
        /// `job:index` of the task.
        task: String,
        /// Its `host:port` from TF_CONFIG.
        address: String,
        /// Why it is needed, and what to do.
        reason: String,
    },
    /// A nonsensical numeric argument (batch 0, steps 0, …).
    #[error("invalid {what}: {reason}")]
    InvalidArgument {
        /// What was being read, written or checked (a file, a field, an argument).
        what: String,
        /// What is wrong, in words.
        reason: String,
    },

    // ----- Monitoring ---------------------------------------------------------------------------
    /// Prometheus exposition text that does not parse.
    #[error("metrics exposition line {line}: {reason}")]
    Exposition {
        /// Line number (1-based).
        line: usize,
        /// What is wrong, in words.
        reason: String,
    },
    /// A metrics endpoint that failed (refused, timed out, bad status).
    #[error("metrics endpoint {endpoint}: {reason}")]
    Scrape {
        /// URL of the endpoint.
        endpoint: String,
        /// What failed (refused, timed out, bad status, …).
        reason: String,
    },
    /// A `/proc` or cgroup file that was read but does not have the expected format.
    #[error("{path}: unexpected format: {reason}")]
    ProcFormat {
        /// Path of the `/proc` or cgroup file.
        path: PathBuf,
        /// What is wrong, in words.
        reason: String,
    },
    /// The metrics agent could not start listening on `listen`.
    #[error("metrics agent on {listen}: {reason}")]
    Agent {
        /// The address the agent tried to listen on (`host:port`).
        listen: String,
        /// What is wrong, in words.
        reason: String,
    },
    /// A capability whose cargo feature this build left out: `what` needs the `feature` feature
    /// of the `tf-iaware` crate (e.g. `agent`, `scrape`). Match on `feature` to fall back.
    #[error("{what} is not compiled in: build tf-iaware with the `{feature}` feature")]
    NotCompiled {
        /// The cargo feature that would bring it.
        feature: &'static str,
        /// What was asked for, naming its target (an address, an endpoint).
        what: String,
    },
    /// A background thread or runtime of the monitor (`what`) could not be started.
    #[error("could not start the monitor's {what}: {source}")]
    MonitorThread {
        /// Which thread or runtime (`sampler`, `agent`, …).
        what: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },

    // ----- Cost model and simulation -------------------------------------------------------------
    /// Calibration samples that cannot be fitted (too few sizes, times that do not grow, …);
    /// `subject` names the device or link.
    #[error("calibration of {subject}: {reason}")]
    Calibration {
        /// The device or link being calibrated.
        subject: String,
        /// What is wrong, in words.
        reason: String,
    },

    // ----- Data ---------------------------------------------------------------------------------
    /// A TFRecord file that ends inside a record: `part` of the record at byte `offset` is cut.
    #[error("{file}: truncated TFRecord: the record at byte {offset} ends inside its {part}")]
    RecordTruncated {
        /// The file (or what the bytes came from).
        file: String,
        /// Byte offset of the record's start.
        offset: u64,
        /// The part that is cut.
        part: RecordPart,
    },
    /// A TFRecord whose `part` (the length CRC or the data CRC) does not match: a corrupt file.
    #[error("{file}: corrupt TFRecord: the record at byte {offset} fails its {part} check")]
    RecordCrc {
        /// The file (or what the bytes came from).
        file: String,
        /// Byte offset of the record's start.
        offset: u64,
        /// The CRC that does not match ([`RecordPart::LengthCrc`](RecordPart) or
        /// [`RecordPart::DataCrc`](RecordPart)).
        part: RecordPart,
    },
    /// A TFRecord longer than the reader accepts (a corrupt length, or a cap set too low).
    #[error(
        "{file}: the TFRecord at byte {offset} claims {len} bytes, more than the {max} accepted"
    )]
    RecordTooLarge {
        /// The file (or what the bytes came from).
        file: String,
        /// Byte offset of the record's start.
        offset: u64,
        /// The length the record claims, bytes.
        len: u64,
        /// The cap, bytes.
        max: u64,
    },

    /// A data set lacks an input the graph needs (`input` is the placeholder's name).
    #[error("data {file}: no `{input}` for the graph's input of that name (it has: {available})")]
    DataMissing {
        /// The data set (a file, a directory, "in memory").
        file: String,
        /// The graph input it lacks.
        input: String,
        /// What it does have, comma-separated.
        available: String,
    },
    /// A data set's values for `input` are not of the graph input's element type.
    #[error("data {file}: input `{input}` is {found} but the graph takes {expected}")]
    DataType {
        /// The data set (a file, a directory, "in memory").
        file: String,
        /// The graph input.
        input: String,
        /// The graph's element type (`float`, `int64`, …).
        expected: String,
        /// What the data holds (`int64`, `float_list`, …).
        found: String,
    },
    /// A data set's rows for `input` are not of the graph input's shape (without the batch).
    #[error("data {file}: input `{input}` has rows of shape {found:?} but the graph takes {expected:?} (after the batch dimension)")]
    DataShape {
        /// The data set (a file, a directory, "in memory").
        file: String,
        /// The graph input.
        input: String,
        /// The graph's shape of one row (`-1`: any).
        expected: Vec<i64>,
        /// The data's shape of one row.
        found: Vec<u64>,
    },
    /// A value of a data set that no training step can take (NaN or infinite), found before
    /// any cluster is contacted.
    #[error("data {file}: input `{input}`, row {row}: {reason}")]
    DataValue {
        /// The data set (a file, a directory, "in memory").
        file: String,
        /// The graph input.
        input: String,
        /// The row (0-based).
        row: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// A label input of one-hot rows (or class probabilities) whose width is not the number
    /// of classes of the logits it is compared with.
    #[error("data {file}: input `{input}` holds label rows of {width} values, but `{logits}` scores {classes} classes (one-hot rows need one value per class)")]
    LabelWidth {
        /// The data set (a file, a directory, "in memory").
        file: String,
        /// The graph input.
        input: String,
        /// Values per row of the data.
        width: u64,
        /// The logits' classes (their last dimension).
        classes: u64,
        /// The op holding the logits.
        logits: String,
    },
    /// The arrays of a data set hold different numbers of rows.
    #[error("data {file}: `{input}` has {rows} rows but `{other}` has {other_rows}")]
    DataRows {
        /// The data set (a file, a directory, "in memory").
        file: String,
        /// One array.
        input: String,
        /// Its rows.
        rows: usize,
        /// Another array.
        other: String,
        /// Its rows.
        other_rows: usize,
    },
    /// A data set with no rows.
    #[error("data {file}: no rows")]
    DataEmpty {
        /// The data set (a file, a directory, "in memory").
        file: String,
    },
    /// One replica's share of a step asks for more rows than the data set holds.
    #[error("data {file}: a share of {rows} rows is more than the {len} rows the data set holds; use a smaller batch or more data")]
    DataShare {
        /// The data set (a file, a directory, "in memory").
        file: String,
        /// Rows asked for.
        rows: usize,
        /// Rows the data set holds.
        len: usize,
    },
    /// A data file that is not what its format says (an `.npy` header, an Example record, …).
    #[error("data {file}: {reason}")]
    DataFormat {
        /// The file (with the record or array inside it, where known).
        file: String,
        /// What is wrong, in words.
        reason: String,
    },

    // ----- I/O ----------------------------------------------------------------------------------
    /// A file that could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// Path of the file.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
    /// JSON that could not be read or written.
    #[error("{what}: {source}")]
    Json {
        /// What was being read or written (a file, a document).
        what: String,
        /// The underlying error.
        #[source]
        source: serde_json::Error,
    },
}

impl Error {
    /// Wraps an I/O error with the path it concerns.
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    /// Wraps a failed TensorFlow call: `call` names it, `code` and `message` are its status's.
    pub fn tf(call: impl Into<String>, code: TfCode, message: impl Into<String>) -> Self {
        Error::TensorFlow {
            call: call.into(),
            code,
            message: message.into(),
        }
    }

    /// TensorFlow's status code, for a failed TensorFlow call ([`Error::TensorFlow`]).
    pub fn tf_code(&self) -> Option<TfCode> {
        match self {
            Error::TensorFlow { code, .. } => Some(*code),
            _ => None,
        }
    }
}

/// TensorFlow's status codes (`TF_Code` of the C API, `error_codes.proto`), all 17: what kind of
/// failure a TensorFlow call reports. Displayed as TensorFlow names them (`DEADLINE_EXCEEDED`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TfCode {
    /// Not an error (0).
    Ok,
    /// The operation was cancelled, typically by the caller (1).
    Cancelled,
    /// An error of an unknown kind, or a code this build does not know (2).
    Unknown,
    /// The caller gave an invalid argument, whatever the state of the system (3).
    InvalidArgument,
    /// The deadline passed before the operation completed (4): a run's `timeout_in_ms`, an
    /// operation timeout.
    DeadlineExceeded,
    /// Some requested entity (a file, a session, an op) was not found (5).
    NotFound,
    /// An entity to create already exists (6).
    AlreadyExists,
    /// The caller may not run the operation (7).
    PermissionDenied,
    /// A resource (memory, disk, a quota) is exhausted (8).
    ResourceExhausted,
    /// The system is not in the state the operation needs, e.g. an uninitialised variable (9).
    FailedPrecondition,
    /// The operation was aborted, typically by a concurrency conflict (10).
    Aborted,
    /// Iterating past the valid range (11).
    OutOfRange,
    /// Not implemented or not enabled (12).
    Unimplemented,
    /// A broken invariant inside TensorFlow (13).
    Internal,
    /// The service (a task, a connection) is unavailable, most likely for a while (14).
    Unavailable,
    /// Unrecoverable data loss or corruption (15).
    DataLoss,
    /// The request has no valid credentials (16).
    Unauthenticated,
}

impl TfCode {
    /// Every code, in the order of their numbers.
    pub const ALL: [TfCode; 17] = [
        TfCode::Ok,
        TfCode::Cancelled,
        TfCode::Unknown,
        TfCode::InvalidArgument,
        TfCode::DeadlineExceeded,
        TfCode::NotFound,
        TfCode::AlreadyExists,
        TfCode::PermissionDenied,
        TfCode::ResourceExhausted,
        TfCode::FailedPrecondition,
        TfCode::Aborted,
        TfCode::OutOfRange,
        TfCode::Unimplemented,
        TfCode::Internal,
        TfCode::Unavailable,
        TfCode::DataLoss,
        TfCode::Unauthenticated,
    ];

    /// The code numbered `n` (`TF_Code`'s value); a number TensorFlow does not define is
    /// [`TfCode::Unknown`], as TensorFlow treats one from another error space.
    pub fn from_number(n: u32) -> TfCode {
        usize::try_from(n)
            .ok()
            .and_then(|i| TfCode::ALL.get(i).copied())
            .unwrap_or(TfCode::Unknown)
    }

    /// `TF_Code`'s value of the code.
    pub fn number(self) -> u32 {
        self as u32
    }

    /// TensorFlow's name of the code (`error_codes.proto`): `DEADLINE_EXCEEDED`, ….
    pub fn name(self) -> &'static str {
        match self {
            TfCode::Ok => "OK",
            TfCode::Cancelled => "CANCELLED",
            TfCode::Unknown => "UNKNOWN",
            TfCode::InvalidArgument => "INVALID_ARGUMENT",
            TfCode::DeadlineExceeded => "DEADLINE_EXCEEDED",
            TfCode::NotFound => "NOT_FOUND",
            TfCode::AlreadyExists => "ALREADY_EXISTS",
            TfCode::PermissionDenied => "PERMISSION_DENIED",
            TfCode::ResourceExhausted => "RESOURCE_EXHAUSTED",
            TfCode::FailedPrecondition => "FAILED_PRECONDITION",
            TfCode::Aborted => "ABORTED",
            TfCode::OutOfRange => "OUT_OF_RANGE",
            TfCode::Unimplemented => "UNIMPLEMENTED",
            TfCode::Internal => "INTERNAL",
            TfCode::Unavailable => "UNAVAILABLE",
            TfCode::DataLoss => "DATA_LOSS",
            TfCode::Unauthenticated => "UNAUTHENTICATED",
        }
    }
}

impl std::fmt::Display for TfCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// The part of a TFRecord record a reading error concerns (see [`crate::record`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RecordPart {
    /// The 8-byte length.
    Length,
    /// The masked CRC32C of the length.
    LengthCrc,
    /// The payload.
    Data,
    /// The masked CRC32C of the payload.
    DataCrc,
}

impl std::fmt::Display for RecordPart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            RecordPart::Length => "length",
            RecordPart::LengthCrc => "length CRC",
            RecordPart::Data => "data",
            RecordPart::DataCrc => "data CRC",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_code_has_its_number_and_tensorflows_name() {
        for (n, code) in TfCode::ALL.iter().enumerate() {
            assert_eq!(code.number() as usize, n);
            assert_eq!(TfCode::from_number(n as u32), *code);
        }
        assert_eq!(TfCode::DeadlineExceeded.number(), 4);
        assert_eq!(TfCode::Unavailable.number(), 14);
        assert_eq!(TfCode::Unauthenticated.number(), 16);
        assert_eq!(TfCode::DeadlineExceeded.to_string(), "DEADLINE_EXCEEDED");
        assert_eq!(
            TfCode::FailedPrecondition.to_string(),
            "FAILED_PRECONDITION"
        );
        let names: std::collections::BTreeSet<&str> =
            TfCode::ALL.iter().map(|c| c.name()).collect();
        assert_eq!(names.len(), 17, "distinct names");
    }

    #[test]
    fn a_number_tensorflow_does_not_define_is_unknown() {
        assert_eq!(TfCode::from_number(17), TfCode::Unknown);
        assert_eq!(TfCode::from_number(u32::MAX), TfCode::Unknown);
    }

    #[test]
    fn a_tensorflow_error_keeps_its_code_and_names_it() {
        let e = Error::tf("Session::run(loss)", TfCode::DeadlineExceeded, "Timed out");
        assert_eq!(e.tf_code(), Some(TfCode::DeadlineExceeded));
        assert_eq!(
            e.to_string(),
            "TensorFlow Session::run(loss) failed: DEADLINE_EXCEEDED: Timed out"
        );
        assert_eq!(
            serde_json::to_string(&TfCode::DeadlineExceeded).unwrap(),
            "\"DEADLINE_EXCEEDED\""
        );
        let other = Error::InvalidArgument {
            what: "x".into(),
            reason: "y".into(),
        };
        assert_eq!(other.tf_code(), None);
    }
}

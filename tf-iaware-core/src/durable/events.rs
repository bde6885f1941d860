//! TensorBoard event records as plain data: the [`Event`]s of an event file (the first says the
//! file version, the others carry scalars), the file's name, the tags the trainer logs, and the
//! scalars read back out of events. Framing them as TFRecords and the file I/O are
//! `tf_iaware::durable::events`'.

use prost::Message;

use crate::error::{Error, Result};
use crate::proto::{Event, Summary, SummaryValue};

/// `file_version` of the first event of every file TensorBoard reads.
pub const FILE_VERSION: &str = "brain.Event:2";

/// The tags of the scalars the trainer logs.
pub mod tags {
    /// Training loss of the step (mean over the global batch).
    pub const LOSS: &str = "loss";
    /// Held-out metric (accuracy on held-out data), when evaluated.
    pub const HELD_OUT: &str = "held_out/accuracy";
    /// Training throughput, images (examples) per second over the logging interval.
    pub const IMAGES_PER_SEC: &str = "throughput/images_per_sec";
    /// Re-plans made so far (a worker lost, or its availability changed).
    pub const REPLANS: &str = "plan/replans";

    /// Tag of `worker`'s share of the global batch (examples per step).
    pub fn worker_share(worker: &str) -> String {
        format!("share/{}", super::name_part(worker))
    }

    /// Tag of `worker`'s availability (0–1, the fraction of its capacity the job can use).
    pub fn worker_availability(worker: &str) -> String {
        format!("availability/{}", super::name_part(worker))
    }
}

/// `text` as one tag or file-name component: letters, digits, `-` and `.` kept, anything else
/// `_`, underscores trimmed (`/job:worker/task:1` → `job_worker_task_1`); `_` when nothing is left.
pub fn name_part(text: &str) -> String {
    let s: String = text
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let s = s.trim_matches('_').to_string();
    if s.is_empty() {
        "_".into()
    } else {
        s
    }
}

/// Name of an event file: `events.out.tfevents.<unix_secs>.<host>` plus `.<pid>.<n>` (as
/// TensorFlow 2 names its own), `n` making names of one process and second unique.
pub fn event_file_name(unix_secs: u64, host: &str, pid: u32, n: u32) -> String {
    format!("events.out.tfevents.{unix_secs}.{host}.{pid}.{n}")
}

/// The first event of a file: its version, at `wall_time` (seconds since the Unix epoch).
pub fn file_version_event(wall_time: f64) -> Event {
    Event {
        wall_time,
        step: 0,
        file_version: Some(FILE_VERSION.into()),
        summary: None,
    }
}

/// One event carrying `scalars` (tag, value) at `step` and `wall_time`.
pub fn scalars_event(wall_time: f64, step: i64, scalars: &[(&str, f32)]) -> Event {
    Event {
        wall_time,
        step,
        file_version: None,
        summary: Some(Summary {
            value: scalars
                .iter()
                .map(|&(tag, v)| SummaryValue {
                    tag: tag.to_string(),
                    simple_value: Some(v),
                })
                .collect(),
        }),
    }
}

/// One logged scalar, as read back from an event file.
#[derive(Clone, Debug, PartialEq)]
pub struct ScalarPoint {
    /// Its tag.
    pub tag: String,
    /// The step it was logged at.
    pub step: i64,
    /// When, seconds since the Unix epoch.
    pub wall_time: f64,
    /// The value.
    pub value: f32,
}

/// The scalars (`simple_value`s) of `event`, in order.
pub fn scalar_points(event: &Event) -> Vec<ScalarPoint> {
    event
        .summary
        .iter()
        .flat_map(|s| &s.value)
        .filter_map(|v| {
            v.simple_value.map(|value| ScalarPoint {
                tag: v.tag.clone(),
                step: event.step,
                wall_time: event.wall_time,
                value,
            })
        })
        .collect()
}

/// Decodes one record's bytes as an [`Event`]; `file` and `offset` name it in errors.
///
/// # Errors
/// [`Error::EventFile`] if the bytes are not an `Event`.
pub fn decode_event(bytes: &[u8], file: &std::path::Path, offset: u64) -> Result<Event> {
    Event::decode(bytes).map_err(|e| Error::EventFile {
        path: file.to_path_buf(),
        offset,
        reason: format!("not an Event: {e}"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn scalars_round_trip_through_event_bytes() {
        let e = scalars_event(
            1.7e9,
            42,
            &[(tags::LOSS, 0.5), (tags::IMAGES_PER_SEC, 812.0)],
        );
        let back = decode_event(&e.encode_to_vec(), Path::new("f"), 0).unwrap();
        assert_eq!(back, e);
        let points = scalar_points(&back);
        assert_eq!(points.len(), 2);
        assert_eq!(points[1].tag, "throughput/images_per_sec");
        assert_eq!(points[1].step, 42);
        assert_eq!(points[1].value, 812.0);
        let v = decode_event(&file_version_event(1.0).encode_to_vec(), Path::new("f"), 0).unwrap();
        assert_eq!(v.file_version.as_deref(), Some("brain.Event:2"));
        assert!(scalar_points(&v).is_empty());
    }

    #[test]
    fn worker_tags_are_one_component_and_bad_bytes_name_the_file() {
        assert_eq!(
            tags::worker_share("/job:worker/task:1"),
            "share/job_worker_task_1"
        );
        assert_eq!(tags::worker_availability("w0"), "availability/w0");
        assert_eq!(tags::worker_share("//"), "share/_");
        let err = decode_event(&[0xff, 0xff], Path::new("logs/ev"), 24)
            .unwrap_err()
            .to_string();
        assert!(err.contains("logs/ev") && err.contains("24"), "{err}");
        assert_eq!(
            event_file_name(1700000000, "h", 7, 0),
            "events.out.tfevents.1700000000.h.7.0"
        );
    }
}

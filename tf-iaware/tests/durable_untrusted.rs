//! A checkpoint directory as untrusted input (issue 36): links named like checkpoints or like a
//! dead run's temporary folders are never followed (nothing outside the directory is read or
//! deleted), FIFOs and devices are refused without blocking, a saved state out of range is
//! skipped for the previous consistent checkpoint, none usable is an error, and a second writer
//! is refused by the directory's lock. Real `SaveV2`/`RestoreV2`.

use std::fs;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tf_iaware::durable::{CheckpointDir, HostTensor, NamedTensor, TrainState};
use tf_iaware::tensorflow::Tensor;
use tf_iaware::Error;

/// A state as the trainer writes it after `step` updates of 4 samples.
fn state(step: u64) -> TrainState {
    let mut s = TrainState::at_step(step);
    s.examples_seen = step * 4;
    s.train_seconds = step as f64 * 0.1;
    s.saved_unix_s = 1.7e9;
    s.extra.insert("seed".into(), 1.into());
    s.extra.insert("sync_samples".into(), (step * 4).into());
    s
}

fn tensors(step: u64) -> Vec<NamedTensor> {
    vec![NamedTensor::new(
        "v",
        HostTensor::float(&[2], &[step as f32, 1.0]).unwrap(),
    )]
}

fn mkfifo(path: &Path) {
    let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

/// Every file under `dir` (links not followed) with its bytes or link target.
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    for e in fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let m = fs::symlink_metadata(&p).unwrap();
        if m.file_type().is_symlink() {
            out.push((
                p.clone(),
                fs::read_link(&p).unwrap().into_os_string().into_vec(),
            ));
        } else if m.is_dir() {
            out.extend(snapshot(&p));
        } else {
            out.push((p.clone(), fs::read(&p).unwrap_or_default()));
        }
    }
    out.sort();
    out
}

#[test]
fn links_under_our_names_are_left_alone_and_nothing_outside_is_deleted() {
    let root = tempfile::tempdir().unwrap();
    let (ck, outside, other) = (
        root.path().join("ck"),
        root.path().join("outside"),
        root.path().join("other"),
    );
    for d in [&ck, &outside, &other] {
        fs::create_dir(d).unwrap();
    }
    for name in [
        "model.ckpt-1000.index",
        "model.ckpt.index",
        "model.ckpt.data-00000-of-00001",
        "train_state.json",
    ] {
        fs::write(outside.join(name), b"theirs").unwrap();
        fs::write(other.join(name), b"theirs too").unwrap();
    }
    fs::write(root.path().join("precious"), b"keep").unwrap();
    // A link named like a checkpoint, like a dead run's temporary and replaced folders, like
    // its temporary state file, and like the state file itself.
    symlink("../outside", ck.join("ckpt-1")).unwrap();
    symlink(&other, ck.join(".ckpt-3.tmp-4294967295")).unwrap();
    symlink(&other, ck.join(".ckpt-5.old-4294967295")).unwrap();
    symlink(
        root.path().join("precious"),
        ck.join(".checkpoint.tmp-4294967295"),
    )
    .unwrap();
    let before = (snapshot(&outside), snapshot(&other));

    let checkpoints = CheckpointDir::open(&ck, 2).unwrap();
    // The link is no checkpoint: nothing to resume.
    assert!(checkpoints.load_latest().unwrap().is_none());
    for step in [2, 4, 6, 8] {
        checkpoints.save(&state(step), &tensors(step)).unwrap();
    }
    let steps: Vec<u64> = checkpoints.list().unwrap().iter().map(|c| c.step).collect();
    assert_eq!(steps, [8, 6]);
    assert_eq!((snapshot(&outside), snapshot(&other)), before);
    assert_eq!(fs::read(root.path().join("precious")).unwrap(), b"keep");
    for link in [
        "ckpt-1",
        ".ckpt-3.tmp-4294967295",
        ".ckpt-5.old-4294967295",
        ".checkpoint.tmp-4294967295",
    ] {
        let m = fs::symlink_metadata(ck.join(link)).unwrap();
        assert!(m.file_type().is_symlink(), "{link} left as it was");
    }
    drop(checkpoints);

    // A link named like the checkpoint a save writes: refused, left alone.
    symlink("../outside", ck.join("ckpt-10")).unwrap();
    let checkpoints = CheckpointDir::open(&ck, 2).unwrap();
    let e = checkpoints.save(&state(10), &tensors(10)).unwrap_err();
    assert!(e.to_string().contains("ckpt-10") && e.to_string().contains("symbolic link"));
    assert_eq!((snapshot(&outside), snapshot(&other)), before);
    assert_eq!(checkpoints.load_latest().unwrap().unwrap().info.step, 8);
}

#[test]
fn fifos_devices_and_links_in_a_checkpoint_are_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let checkpoints = CheckpointDir::open(d, 0).unwrap();
    for step in [10, 20, 30, 40, 50] {
        checkpoints.save(&state(step), &tensors(step)).unwrap();
    }
    // 50: its state a FIFO; 40: a link to /dev/zero; 30: its index a FIFO; 20: its data a link
    // to a whole checkpoint's data elsewhere. Each would block, flood or read outside.
    let replace = |step: u64, file: &str| {
        let p = d.join(format!("ckpt-{step}/{file}"));
        fs::remove_file(&p).unwrap();
        p
    };
    mkfifo(&replace(50, "train_state.json"));
    symlink("/dev/zero", replace(40, "train_state.json")).unwrap();
    mkfifo(&replace(30, "model.ckpt.index"));
    let data = "model.ckpt.data-00000-of-00001";
    let copy = d.join("elsewhere");
    fs::copy(d.join(format!("ckpt-20/{data}")), &copy).unwrap();
    symlink(&copy, replace(20, data)).unwrap();

    let started = Instant::now();
    let loaded = checkpoints.load_latest().unwrap().unwrap();
    assert!(started.elapsed() < Duration::from_secs(20));
    assert_eq!(loaded.info.step, 10);
    let why: Vec<&str> = loaded.skipped.iter().map(|(_, w)| w.as_str()).collect();
    assert_eq!(why.len(), 4, "{why:?}");
    assert!(
        why[0].contains("FIFO") && why[0].contains("train_state.json"),
        "{}",
        why[0]
    );
    assert!(why[1].contains("symbolic link"), "{}", why[1]);
    assert!(
        why[2].contains("FIFO") && why[2].contains(".index"),
        "{}",
        why[2]
    );
    assert!(
        why[3].contains("symbolic link") && why[3].contains(data),
        "{}",
        why[3]
    );
    // Moved aside whole (nothing deleted), the state file naming the one used.
    let pid = std::process::id();
    assert!(
        fs::symlink_metadata(d.join(format!(".ckpt-40.torn-{pid}/train_state.json")))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    let text = fs::read_to_string(d.join("checkpoint")).unwrap();
    assert!(
        text.starts_with("model_checkpoint_path: \"ckpt-10/"),
        "{text}"
    );
    drop(checkpoints);

    // TensorFlow's state file as a FIFO, then as a link to /dev/zero: refused on open.
    fs::remove_file(d.join("checkpoint")).unwrap();
    mkfifo(&d.join("checkpoint"));
    let e = CheckpointDir::open(d, 0).unwrap_err().to_string();
    assert!(e.contains("checkpoint") && e.contains("FIFO"), "{e}");
    fs::remove_file(d.join("checkpoint")).unwrap();
    symlink("/dev/zero", d.join("checkpoint")).unwrap();
    let e = CheckpointDir::open(d, 0).unwrap_err().to_string();
    assert!(e.contains("symbolic link"), "{e}");
}

#[test]
fn a_state_out_of_range_falls_back_and_none_usable_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let checkpoints = CheckpointDir::open(d, 0).unwrap();
    for step in [10, 20] {
        checkpoints.save(&state(step), &tensors(step)).unwrap();
    }
    let write = |step: u64, text: &str| {
        fs::write(d.join(format!("ckpt-{step}/train_state.json")), text).unwrap();
    };
    let mut bad = state(20);
    bad.extra
        .insert("sync_samples".into(), 1_000_000_000_000_000u64.into());
    write(20, &bad.to_json().unwrap());
    let loaded = checkpoints.load_latest().unwrap().unwrap();
    assert_eq!(loaded.info.step, 10);
    assert!(
        loaded.skipped[0].1.contains("extra.sync_samples"),
        "{:?}",
        loaded.skipped
    );

    // The only one left, with each figure of the audit out of range: an error naming the file
    // and the field; nothing moved.
    for (text, field) in [
        ("{}".to_string(), "format"),
        (
            r#"{"format": 1, "global_step": 18446744073709551615}"#.into(),
            "global_step",
        ),
        (r#"{"format": 1, "global_step": 0}"#.into(), "global_step"),
        (
            r#"{"format": 1, "global_step": 10, "train_seconds": 1e300}"#.into(),
            "train_seconds",
        ),
    ] {
        write(10, &text);
        let e = checkpoints.load_latest().unwrap_err();
        assert!(
            matches!(e, Error::NoUsableCheckpoint { found: 1, .. }),
            "{e}"
        );
        let e = e.to_string();
        assert!(
            e.contains("ckpt-10/train_state.json") && e.contains(&format!("`{field}`")),
            "{text}: {e}"
        );
        assert!(d.join("ckpt-10/model.ckpt.index").exists());
    }
}

#[test]
fn a_global_step_variable_at_odds_with_the_state_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let checkpoints = CheckpointDir::open(dir.path(), 0).unwrap();
    let mut t = tensors(10);
    t.push(NamedTensor::new(
        "global_step",
        Tensor::<i64>::new(&[]).with_values(&[7]).unwrap(),
    ));
    checkpoints.save(&state(10), &t).unwrap();
    let e = checkpoints.load_latest().unwrap_err().to_string();
    assert!(e.contains("`global_step` holds 7"), "{e}");
}

#[test]
fn a_second_writer_is_refused_naming_the_first_and_readers_inspect() {
    let dir = tempfile::tempdir().unwrap();
    let first = CheckpointDir::open(dir.path(), 2).unwrap();
    first.save(&state(1), &tensors(1)).unwrap();
    let e = CheckpointDir::open(dir.path(), 2).unwrap_err();
    assert!(matches!(e, Error::CheckpointLocked { .. }), "{e}");
    let e = e.to_string();
    assert!(
        e.contains(&std::process::id().to_string()) && e.contains(".tf-iaware.lock"),
        "{e}"
    );
    // A reader lists and loads while the writer holds the directory, and may not save.
    let reader = CheckpointDir::inspect(dir.path()).unwrap();
    assert_eq!(reader.load_latest().unwrap().unwrap().info.step, 1);
    assert!(reader.save(&state(2), &tensors(2)).is_err());
    // Clones share the lock; the last one dropped releases it.
    let clone = first.clone();
    drop(first);
    assert!(CheckpointDir::open(dir.path(), 2).is_err());
    drop(clone);
    CheckpointDir::open(dir.path(), 2).unwrap();
}

//! [`CheckpointDir`]: a directory of checkpoints on the driver's own disk, each written whole or
//! not at all, the last K kept, the newest complete one found again after a crash.
//!
//! Layout (`tf_iaware_core::durable::layout`): `D/ckpt-<step>/model.ckpt.index`,
//! `…/model.ckpt.data-00000-of-00001` (TensorFlow's V2 files, through `SaveV2`) and
//! `…/train_state.json` ([`TrainState`]), plus TensorFlow's `D/checkpoint` state file, so
//! `tf.train.latest_checkpoint(D)` and `tf.train.load_checkpoint(D)` find the newest one.

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use tf_iaware_core::durable::layout::{
    self, checkpoint_dir_name, checkpoint_files, parse_checkpoint_dir_name, parse_relative_prefix,
    relative_prefix, CheckpointState, PREFIX_NAME, STATE_FILE, STATE_FILE_NAME,
};
use tf_iaware_core::durable::TrainState;

use parking_lot::Mutex;
use std::sync::Arc;

use super::bundle::{read_bundle, BundleWriter};
use super::tensor::{to_saved, NamedTensor};
use crate::error::{Error, Result};
use crate::parallel::checkpoint::Checkpoint;

/// One checkpoint of a [`CheckpointDir`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckpointInfo {
    /// Global step it was taken at.
    pub step: u64,
    /// Its sub-directory (`D/ckpt-<step>`).
    pub dir: PathBuf,
    /// Its V2 prefix (`D/ckpt-<step>/model.ckpt`): what `RestoreV2`, `tf.train.load_checkpoint`
    /// and `Saver.restore` take.
    pub prefix: PathBuf,
}

/// A checkpoint read back whole: its tensors and the trainer's state.
#[derive(Clone, Debug)]
pub struct LoadedCheckpoint {
    /// Which checkpoint.
    pub info: CheckpointInfo,
    /// The trainer's state at that step.
    pub state: TrainState,
    /// Every tensor, sorted by name.
    pub tensors: Vec<NamedTensor>,
    /// Newer checkpoints that were torn and skipped (moved aside), with why.
    pub skipped: Vec<(PathBuf, String)>,
}

impl LoadedCheckpoint {
    /// The float tensors as a driver-memory checkpoint (`runtime::checkpoint`'s, what a
    /// replicated graph's restore op takes), at the state's global step. Tensors of other dtypes
    /// are left out, as the replicated graph's checkpoint ops leave them out.
    pub fn memory_checkpoint(&self) -> Checkpoint {
        Checkpoint {
            step: usize::try_from(self.state.global_step).unwrap_or(usize::MAX),
            tensors: to_saved(&self.tensors),
        }
    }
}

/// A checkpoint directory: see the module documentation. Clones share one cached `SaveV2`
/// session ([`BundleWriter`]), rebuilt when the tensors' names or dtypes change.
#[derive(Clone, Debug)]
pub struct CheckpointDir {
    dir: PathBuf,
    keep: usize,
    writer: Arc<Mutex<Option<BundleWriter>>>,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |e| Error::io(path, e)
}

fn sync_file(path: &Path) -> Result<()> {
    File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(io(path))
}

/// Flushes a directory's entries (a rename or a new file in it) to disk.
fn sync_dir(path: &Path) -> Result<()> {
    File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(io(path))
}

/// Deletes the files tf-iaware writes in a checkpoint's sub-directory (the state file, and
/// every `model.ckpt*` file: the V2 files and the temporary files `SaveV2` writes before renaming
/// them), then the directory if that left it empty. Anything else in it is left alone (and so
/// is the directory, with a warning).
fn remove_checkpoint_dir(dir: &Path) -> Result<()> {
    for entry in fs::read_dir(dir).map_err(io(dir))? {
        let entry = entry.map_err(io(dir))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let ours = name.starts_with(PREFIX_NAME) || checkpoint_files().iter().any(|f| *f == name);
        if !ours || !entry.path().is_file() {
            continue;
        }
        match fs::remove_file(entry.path()) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io(entry.path(), e)),
        }
    }
    if let Err(e) = fs::remove_dir(dir) {
        log::warn!(
            "checkpoint directory {} not removed: it holds files tf-iaware did not write ({e})",
            dir.display()
        );
    }
    Ok(())
}

/// The pid of a temporary state file of [`CheckpointDir::write_state_file`]'s making.
fn state_temp_pid(name: &str) -> Option<u32> {
    let pid = name.strip_prefix(&format!(".{STATE_FILE_NAME}.tmp-"))?;
    if pid.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    pid.parse().ok()
}

fn pid_alive(pid: u32) -> bool {
    pid == std::process::id() || Path::new("/proc").join(pid.to_string()).exists()
}

impl CheckpointDir {
    /// Opens (creating it if needed) the checkpoint directory `dir`, keeping the newest `keep`
    /// checkpoints when saving (0: keep all). Temporary directories left by a process that died
    /// while writing a checkpoint are removed.
    ///
    /// # Errors
    /// [`Error::Io`] if the directory cannot be created or read; [`Error::InvalidArgument`] if
    /// its `checkpoint` state file was written by another tool (tf-iaware would overwrite it:
    /// use another directory).
    pub fn open(dir: impl Into<PathBuf>, keep: usize) -> Result<Self> {
        let dir = dir.into();
        fs::create_dir_all(&dir).map_err(io(&dir))?;
        let state_path = dir.join(STATE_FILE_NAME);
        match fs::read_to_string(&state_path) {
            Ok(text) => {
                let state = CheckpointState::parse(&text, &state_path.display().to_string())?;
                let foreign = std::iter::once(&state.model_checkpoint_path)
                    .chain(&state.all_model_checkpoint_paths)
                    .find(|p| !p.is_empty() && parse_relative_prefix(p).is_none());
                if let Some(p) = foreign {
                    return Err(Error::InvalidArgument {
                        what: format!("checkpoint directory {}", dir.display()),
                        reason: format!(
                            "its `{STATE_FILE_NAME}` file names `{p}`, a checkpoint another tool \
                             wrote; tf-iaware would overwrite that file, so give it a directory \
                             of its own"
                        ),
                    });
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io(state_path, e)),
        }
        for entry in fs::read_dir(&dir).map_err(io(&dir))? {
            let entry = entry.map_err(io(&dir))?;
            let name = entry.file_name();
            let Some(name) = name.to_str() else {
                continue;
            };
            if let Some(pid) = state_temp_pid(name).filter(|&p| !pid_alive(p)) {
                log::info!(
                    "removing {} (left by process {pid})",
                    entry.path().display()
                );
                fs::remove_file(entry.path()).map_err(io(&entry.path()))?;
                continue;
            }
            let Some(pid) = layout::temp_dir_pid(name) else {
                continue;
            };
            if pid_alive(pid) || !entry.path().is_dir() {
                continue;
            }
            log::info!(
                "removing {} (left by process {pid})",
                entry.path().display()
            );
            remove_checkpoint_dir(&entry.path())?;
        }
        Ok(CheckpointDir {
            dir,
            keep,
            writer: Arc::default(),
        })
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// How many checkpoints saving keeps (0: all).
    pub fn keep(&self) -> usize {
        self.keep
    }

    fn info(&self, step: u64) -> CheckpointInfo {
        let dir = self.dir.join(checkpoint_dir_name(step));
        CheckpointInfo {
            step,
            prefix: dir.join(PREFIX_NAME),
            dir,
        }
    }

    /// The checkpoints in the directory, newest (highest step) first. Listed by name: whether
    /// each is whole is known only when it is read ([`CheckpointDir::load`]).
    ///
    /// # Errors
    /// [`Error::Io`] if the directory cannot be read.
    pub fn list(&self) -> Result<Vec<CheckpointInfo>> {
        let mut steps = Vec::new();
        for entry in fs::read_dir(&self.dir).map_err(io(&self.dir))? {
            let entry = entry.map_err(io(&self.dir))?;
            if !entry.path().is_dir() {
                continue;
            }
            if let Some(step) = entry
                .file_name()
                .to_str()
                .and_then(parse_checkpoint_dir_name)
            {
                steps.push(step);
            }
        }
        steps.sort_unstable_by(|a, b| b.cmp(a));
        Ok(steps.into_iter().map(|s| self.info(s)).collect())
    }

    /// Writes the checkpoint of `state.global_step`: `tensors` (the user's single-tower variable
    /// names) through `SaveV2` and `state` as JSON into a temporary directory, flushed to disk,
    /// then renamed into place in one step; then deletes checkpoints beyond the newest `keep`
    /// and rewrites the `checkpoint` state file (atomically, last). A crash at any point leaves
    /// the previous checkpoints whole. A checkpoint of the same step is replaced.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for tensors `SaveV2` cannot take (none, a name twice, an
    /// unsupported dtype); [`Error::TensorFlow`] if `SaveV2` fails; [`Error::Io`] naming the
    /// file that could not be written, flushed or renamed.
    pub fn save(&self, state: &TrainState, tensors: &[NamedTensor]) -> Result<CheckpointInfo> {
        let pid = std::process::id();
        let step = state.global_step;
        let temp = self.dir.join(layout::temp_dir_name(step, pid));
        if temp.exists() {
            remove_checkpoint_dir(&temp)?;
        }
        fs::create_dir(&temp).map_err(io(&temp))?;
        let written = self.write_into(&temp, state, tensors);
        if let Err(e) = written {
            let _ = remove_checkpoint_dir(&temp);
            return Err(e);
        }
        let info = self.info(step);
        let replaced = if info.dir.exists() {
            let aside = self.dir.join(layout::replaced_dir_name(step, pid));
            fs::rename(&info.dir, &aside).map_err(io(&info.dir))?;
            Some(aside)
        } else {
            None
        };
        fs::rename(&temp, &info.dir).map_err(io(&temp))?;
        sync_dir(&self.dir)?;
        if let Some(aside) = replaced {
            remove_checkpoint_dir(&aside)?;
        }
        self.prune(step)?;
        self.write_state_file(step)?;
        Ok(info)
    }

    fn write_into(&self, temp: &Path, state: &TrainState, tensors: &[NamedTensor]) -> Result<()> {
        let prefix = temp.join(PREFIX_NAME);
        let mut writer = self.writer.lock();
        if !writer.as_ref().is_some_and(|w| w.fits(tensors)) {
            *writer = Some(BundleWriter::new(tensors)?);
        }
        if let Some(w) = writer.as_ref() {
            w.write(&prefix, tensors)?;
        }
        drop(writer);
        let state_path = temp.join(STATE_FILE);
        let mut f = File::create(&state_path).map_err(io(&state_path))?;
        f.write_all(state.to_json()?.as_bytes())
            .and_then(|()| f.sync_all())
            .map_err(io(&state_path))?;
        for name in checkpoint_files() {
            sync_file(&temp.join(name))?;
        }
        sync_dir(temp)
    }

    /// Deletes the checkpoints beyond the newest `keep`, never `latest`.
    fn prune(&self, latest: u64) -> Result<()> {
        let steps: Vec<u64> = self.list()?.iter().map(|c| c.step).collect();
        for step in layout::to_prune(&steps, self.keep) {
            if step != latest {
                remove_checkpoint_dir(&self.info(step).dir)?;
            }
        }
        Ok(())
    }

    /// Rewrites `D/checkpoint` (temporary file, flush, rename) naming `latest` and every
    /// checkpoint left, oldest first.
    fn write_state_file(&self, latest: u64) -> Result<()> {
        let mut all: Vec<u64> = self.list()?.iter().map(|c| c.step).collect();
        all.reverse();
        if let Some(i) = all.iter().position(|&s| s == latest) {
            let s = all.remove(i);
            all.push(s);
        }
        let state = CheckpointState {
            model_checkpoint_path: relative_prefix(latest),
            all_model_checkpoint_paths: all.into_iter().map(relative_prefix).collect(),
        };
        let path = self.dir.join(STATE_FILE_NAME);
        let temp = self
            .dir
            .join(format!(".{STATE_FILE_NAME}.tmp-{}", std::process::id()));
        let mut f = File::create(&temp).map_err(io(&temp))?;
        f.write_all(state.to_text().as_bytes())
            .and_then(|()| f.sync_all())
            .map_err(io(&temp))?;
        fs::rename(&temp, &path).map_err(io(&path))?;
        sync_dir(&self.dir)
    }

    /// Reads checkpoint `info` whole: its state file and every tensor (`RestoreV2`, which checks
    /// each tensor's checksum).
    ///
    /// # Errors
    /// [`Error::CheckpointFile`] naming the file that is missing, truncated or corrupt.
    pub fn load(&self, info: &CheckpointInfo) -> Result<LoadedCheckpoint> {
        let state_path = info.dir.join(STATE_FILE);
        let text = fs::read_to_string(&state_path).map_err(|e| Error::CheckpointFile {
            path: state_path.clone(),
            reason: format!("cannot read the train state: {e}"),
        })?;
        let state =
            TrainState::from_json(&text, &state_path.display().to_string()).map_err(|e| {
                Error::CheckpointFile {
                    path: state_path.clone(),
                    reason: e.to_string(),
                }
            })?;
        for suffix in [layout::INDEX_SUFFIX, layout::DATA_SUFFIX] {
            let file = info.dir.join(format!("{PREFIX_NAME}{suffix}"));
            if !file.is_file() {
                return Err(Error::CheckpointFile {
                    path: file,
                    reason: "is missing".into(),
                });
            }
        }
        let tensors = read_bundle(&info.prefix)?;
        Ok(LoadedCheckpoint {
            info: info.clone(),
            state,
            tensors,
            skipped: Vec::new(),
        })
    }

    /// The newest checkpoint that reads whole, `None` if there is none. A newer one that is
    /// torn ([`Error::CheckpointFile`]: a truncated data file, a missing index) is skipped with
    /// a warning and moved aside to `D/.ckpt-<step>.torn-<pid>` (kept for inspection, never read
    /// again), so the next save's pruning and the state file forget it.
    ///
    /// # Errors
    /// [`Error::Io`] if the directory cannot be read or a torn checkpoint cannot be moved;
    /// errors other than a torn checkpoint (an unsupported dtype) are returned as they are.
    pub fn load_latest(&self) -> Result<Option<LoadedCheckpoint>> {
        let mut skipped = Vec::new();
        for info in self.list()? {
            match self.load(&info) {
                Ok(mut loaded) => {
                    loaded.skipped = skipped;
                    if !loaded.skipped.is_empty() {
                        self.write_state_file(info.step)?;
                    }
                    return Ok(Some(loaded));
                }
                Err(e @ Error::CheckpointFile { .. }) => {
                    let aside = self
                        .dir
                        .join(layout::torn_dir_name(info.step, std::process::id()));
                    log::warn!(
                        "checkpoint of step {} is torn ({e}); using the previous one (moved to {})",
                        info.step,
                        aside.display()
                    );
                    fs::rename(&info.dir, &aside).map_err(io(&info.dir))?;
                    skipped.push((info.dir.clone(), e.to_string()));
                }
                Err(e) => return Err(e),
            }
        }
        Ok(None)
    }
}

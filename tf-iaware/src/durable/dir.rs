//! [`CheckpointDir`]: a directory of checkpoints on the driver's own disk, each written whole or
//! not at all, the last K kept, the newest usable one found again after a crash.
//!
//! Layout (`tf_iaware_core::durable::layout`): `D/ckpt-<step>/model.ckpt.index`,
//! `…/model.ckpt.data-00000-of-00001` (TensorFlow's V2 files, through `SaveV2`) and
//! `…/train_state.json` ([`TrainState`]), plus TensorFlow's `D/checkpoint` state file, so
//! `tf.train.latest_checkpoint(D)` and `tf.train.load_checkpoint(D)` find the newest one.
//!
//! The directory is input nobody vouches for. Every name in it is looked up without following a
//! symbolic link ([`Folder`]); only folders and regular files of tf-iaware's own naming are
//! deleted (a link, FIFO or folder under those names is left alone, with a warning); a file is
//! read only if it is a regular file, and at most a documented number of bytes of it; a saved
//! state is range-checked ([`TrainState::check`]) before a run trusts it; and a writer holds the
//! directory's lock (`D/.tf-iaware.lock`) as long as it is open, so a second run is refused.

use std::fs::{self, File};
use std::io::Write;
use std::path::{Path, PathBuf};

use tf_iaware_core::durable::layout::{
    self, check_index_footer, checkpoint_dir_name, checkpoint_files, parse_checkpoint_dir_name,
    parse_relative_prefix, relative_prefix, CheckpointState, INDEX_FOOTER_LEN, MAX_INDEX_BYTES,
    MAX_STATE_FILE_BYTES, PREFIX_NAME, STATE_FILE, STATE_FILE_NAME,
};
use tf_iaware_core::durable::{TrainState, MAX_STATE_BYTES};

use parking_lot::Mutex;
use std::sync::Arc;

use super::bundle::{read_bundle, BundleWriter};
use super::folder::{Folder, Kind, Removal};
use super::lock::DirLock;
use super::tensor::{to_saved, HostTensor, NamedTensor};
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
    /// Newer checkpoints that were torn or held a state out of range, skipped (and moved aside
    /// by a writer), with why.
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
/// session ([`BundleWriter`]), rebuilt when the tensors' names or dtypes change, and the
/// directory's lock, released when the last clone is dropped.
#[derive(Clone, Debug)]
pub struct CheckpointDir {
    dir: PathBuf,
    folder: Arc<Folder>,
    keep: usize,
    writer: Arc<Mutex<Option<BundleWriter>>>,
    /// The directory's lock; `None` for a directory opened to [inspect](CheckpointDir::inspect).
    lock: Option<Arc<DirLock>>,
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |e| Error::io(path, e)
}

fn sync_file(path: &Path) -> Result<()> {
    File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(io(path))
}

/// The pid of a temporary state file of [`CheckpointDir::write_state_file`]'s making.
fn state_temp_pid(name: &str) -> Option<u32> {
    let pid = name.strip_prefix(&format!(".{STATE_FILE_NAME}.tmp-"))?;
    if pid.is_empty() || !pid.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    pid.parse().ok()
}

fn state_temp_name() -> String {
    format!(".{STATE_FILE_NAME}.tmp-{}", std::process::id())
}

fn pid_alive(pid: u32) -> bool {
    pid == std::process::id() || Path::new("/proc").join(pid.to_string()).exists()
}

/// The value of an integer scalar tensor, `None` for any other.
fn int_scalar(t: &HostTensor) -> Option<i128> {
    match t {
        HostTensor::Int32(v) if v.dims().is_empty() => v.first().map(|&x| i128::from(x)),
        HostTensor::Int64(v) if v.dims().is_empty() => v.first().map(|&x| i128::from(x)),
        _ => None,
    }
}

impl CheckpointDir {
    /// Opens (creating it if needed) the checkpoint directory `dir` to write checkpoints into,
    /// keeping the newest `keep` when saving (0: keep all). The directory is locked
    /// (`D/.tf-iaware.lock`, holding this process's pid) until the last clone is dropped.
    /// Temporary files and folders left by a process that died while writing a checkpoint are
    /// removed (only regular files and folders of tf-iaware's naming; a link under such a name
    /// is left alone with a warning).
    ///
    /// # Errors
    /// [`Error::CheckpointLocked`] naming the process if another run holds the directory;
    /// [`Error::Io`] if the directory cannot be created or read; [`Error::CheckpointFile`] if
    /// its `checkpoint` state file is not a regular file (a link, a FIFO) or larger than
    /// [`MAX_STATE_FILE_BYTES`]; [`Error::InvalidArgument`] if that file was written by another
    /// tool (tf-iaware would overwrite it: use another directory).
    pub fn open(dir: impl Into<PathBuf>, keep: usize) -> Result<Self> {
        let dir = dir.into();
        fs::create_dir_all(&dir).map_err(io(&dir))?;
        let folder = Folder::open(&dir)?;
        let lock = DirLock::take(&folder)?;
        let opened = CheckpointDir {
            dir,
            folder: Arc::new(folder),
            keep,
            writer: Arc::default(),
            lock: Some(Arc::new(lock)),
        };
        opened.check_state_file()?;
        opened.clear_stale()?;
        Ok(opened)
    }

    /// Opens the checkpoint directory `dir` to list and read its checkpoints only, while a run
    /// may be writing them: no lock is taken, nothing is removed or moved, and
    /// [`CheckpointDir::save`] is refused.
    ///
    /// # Errors
    /// [`Error::Io`] if the directory cannot be opened.
    pub fn inspect(dir: impl Into<PathBuf>) -> Result<Self> {
        let dir = dir.into();
        let folder = Folder::open(&dir)?;
        Ok(CheckpointDir {
            dir,
            folder: Arc::new(folder),
            keep: 0,
            writer: Arc::default(),
            lock: None,
        })
    }

    /// Refuses a `checkpoint` state file that is not ours to overwrite.
    fn check_state_file(&self) -> Result<()> {
        let path = self.folder.join(STATE_FILE_NAME);
        if self.folder.kind(STATE_FILE_NAME)?.is_none() {
            return Ok(());
        }
        let bytes = self
            .folder
            .read(STATE_FILE_NAME, MAX_STATE_FILE_BYTES)
            .map_err(|reason| Error::CheckpointFile {
                path: path.clone(),
                reason,
            })?;
        let text = String::from_utf8_lossy(&bytes);
        let state = CheckpointState::parse(&text, &path.display().to_string())?;
        let foreign = std::iter::once(&state.model_checkpoint_path)
            .chain(&state.all_model_checkpoint_paths)
            .find(|p| !p.is_empty() && parse_relative_prefix(p).is_none());
        if let Some(p) = foreign {
            return Err(Error::InvalidArgument {
                what: format!("checkpoint directory {}", self.dir.display()),
                reason: format!(
                    "its `{STATE_FILE_NAME}` file names `{p}`, a checkpoint another tool \
                     wrote; tf-iaware would overwrite that file, so give it a directory \
                     of its own"
                ),
            });
        }
        Ok(())
    }

    /// Removes what dead writers left, and says which names of ours are not what we write.
    fn clear_stale(&self) -> Result<()> {
        for name in self.folder.names()? {
            let Some(name) = name.to_str() else {
                continue;
            };
            if let Some(pid) = state_temp_pid(name).filter(|&p| !pid_alive(p)) {
                log::info!(
                    "removing {} (left by process {pid})",
                    self.folder.join(name).display()
                );
                if let Removal::Left(kind) = self.folder.remove_file(name)? {
                    self.leave(name, kind);
                }
            } else if let Some(pid) = layout::temp_dir_pid(name).filter(|&p| !pid_alive(p)) {
                log::info!(
                    "removing {} (left by process {pid})",
                    self.folder.join(name).display()
                );
                self.remove_checkpoint_dir(name)?;
            } else if parse_checkpoint_dir_name(name).is_some() {
                match self.folder.kind(name)? {
                    Some(Kind::Dir) | None => {}
                    Some(kind) => self.leave(name, kind),
                }
            }
        }
        Ok(())
    }

    /// Warns that `name`, named like what tf-iaware writes, is `kind` and is left alone.
    fn leave(&self, name: &str, kind: Kind) {
        log::warn!(
            "{} is {}, not what tf-iaware writes under that name: left alone (never read or \
             deleted)",
            self.folder.join(name).display(),
            kind.describe()
        );
    }

    /// Deletes the files tf-iaware writes in the checkpoint sub-directory `name` (the state file,
    /// and every regular `model.ckpt*` file: the V2 files and the temporary files `SaveV2`
    /// writes before renaming them), then the directory if that left it empty. A link under that
    /// name, and anything else in it, is left alone with a warning (and so is the directory).
    fn remove_checkpoint_dir(&self, name: &str) -> Result<()> {
        let sub = match self.folder.dir(name) {
            Ok(Some(sub)) => sub,
            Ok(None) => {
                let kind = self.folder.kind(name)?.unwrap_or(Kind::Symlink);
                self.leave(name, kind);
                return Ok(());
            }
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                return Ok(());
            }
            Err(e) => return Err(e),
        };
        for entry in sub.names()? {
            let Some(entry) = entry.to_str() else {
                continue;
            };
            let ours =
                entry.starts_with(PREFIX_NAME) || checkpoint_files().iter().any(|f| f == entry);
            if !ours {
                continue;
            }
            if let Removal::Left(kind) = sub.remove_file(entry)? {
                log::warn!(
                    "{} is {}, not a file tf-iaware wrote: left alone",
                    sub.join(entry).display(),
                    kind.describe()
                );
            }
        }
        if let Err(e) = self.folder.remove_dir(name) {
            log::warn!(
                "checkpoint directory {} not removed: it holds files tf-iaware did not write ({e})",
                self.folder.join(name).display()
            );
        }
        Ok(())
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

    /// The checkpoints in the directory, newest (highest step) first: the folders (never links)
    /// named `ckpt-<step>`. Listed by name: whether each is whole is known only when it is read
    /// ([`CheckpointDir::load`]).
    ///
    /// # Errors
    /// [`Error::Io`] if the directory cannot be read.
    pub fn list(&self) -> Result<Vec<CheckpointInfo>> {
        let mut steps = Vec::new();
        for name in self.folder.names()? {
            let Some(step) = name.to_str().and_then(parse_checkpoint_dir_name) else {
                continue;
            };
            if let Some(Kind::Dir) = self.folder.kind(&checkpoint_dir_name(step))? {
                steps.push(step);
            }
        }
        steps.sort_unstable_by(|a, b| b.cmp(a));
        Ok(steps.into_iter().map(|s| self.info(s)).collect())
    }

    /// Refuses writing through a directory opened to inspect.
    fn writable(&self) -> Result<()> {
        match self.lock {
            Some(_) => Ok(()),
            None => Err(Error::InvalidArgument {
                what: format!("checkpoint directory {}", self.dir.display()),
                reason: "was opened to inspect (CheckpointDir::inspect): open it to save".into(),
            }),
        }
    }

    /// Writes the checkpoint of `state.global_step`: `tensors` (the user's single-tower variable
    /// names) through `SaveV2` and `state` as JSON into a temporary directory, flushed to disk,
    /// then renamed into place in one step; then deletes checkpoints beyond the newest `keep`
    /// and rewrites the `checkpoint` state file (atomically, last). A crash at any point leaves
    /// the previous checkpoints whole. A checkpoint of the same step is replaced.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for tensors `SaveV2` cannot take (none, a name twice, an
    /// unsupported dtype) or a directory opened to inspect; [`Error::TensorFlow`] if `SaveV2`
    /// fails; [`Error::CheckpointFile`] if `ckpt-<step>` is there but not a folder (a link: it is
    /// left alone); [`Error::Io`] naming the file that could not be written, flushed or renamed.
    pub fn save(&self, state: &TrainState, tensors: &[NamedTensor]) -> Result<CheckpointInfo> {
        self.writable()?;
        let pid = std::process::id();
        let step = state.global_step;
        let temp_name = layout::temp_dir_name(step, pid);
        let temp = self.dir.join(&temp_name);
        if self.folder.kind(&temp_name)?.is_some() {
            self.remove_checkpoint_dir(&temp_name)?;
        }
        fs::create_dir(&temp).map_err(io(&temp))?;
        let written = self.write_into(&temp, state, tensors);
        if let Err(e) = written {
            let _ = self.remove_checkpoint_dir(&temp_name);
            return Err(e);
        }
        let info = self.info(step);
        let name = checkpoint_dir_name(step);
        let replaced = match self.folder.kind(&name)? {
            None => None,
            Some(Kind::Dir) => {
                let aside = layout::replaced_dir_name(step, pid);
                fs::rename(&info.dir, self.dir.join(&aside)).map_err(io(&info.dir))?;
                Some(aside)
            }
            Some(kind) => {
                let _ = self.remove_checkpoint_dir(&temp_name);
                return Err(Error::CheckpointFile {
                    path: info.dir,
                    reason: format!(
                        "is {}, not a checkpoint folder tf-iaware wrote: it is left alone; move \
                         it out of the directory",
                        kind.describe()
                    ),
                });
            }
        };
        fs::rename(&temp, &info.dir).map_err(io(&temp))?;
        self.folder.sync()?;
        if let Some(aside) = replaced {
            self.remove_checkpoint_dir(&aside)?;
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
        // The temporary folder is new (created by this call): nothing in it is anyone else's.
        let state_path = temp.join(STATE_FILE);
        let mut f = File::create_new(&state_path).map_err(io(&state_path))?;
        f.write_all(state.to_json()?.as_bytes())
            .and_then(|()| f.sync_all())
            .map_err(io(&state_path))?;
        for name in checkpoint_files() {
            sync_file(&temp.join(name))?;
        }
        Folder::open(temp)?.sync()
    }

    /// Deletes the checkpoints beyond the newest `keep`, never `latest`.
    fn prune(&self, latest: u64) -> Result<()> {
        let steps: Vec<u64> = self.list()?.iter().map(|c| c.step).collect();
        for step in layout::to_prune(&steps, self.keep) {
            if step != latest {
                self.remove_checkpoint_dir(&checkpoint_dir_name(step))?;
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
        let temp_name = state_temp_name();
        let temp = self.folder.join(&temp_name);
        if let Removal::Left(kind) = self.folder.remove_file(&temp_name)? {
            return Err(Error::CheckpointFile {
                path: temp,
                reason: format!(
                    "is {}: left alone; move it out of the directory",
                    kind.describe()
                ),
            });
        }
        let mut f = self.folder.create_new(&temp_name)?;
        f.write_all(state.to_text().as_bytes())
            .and_then(|()| f.sync_all())
            .map_err(io(&temp))?;
        // A rename replaces the name: a link named `checkpoint` is replaced, never written through.
        let path = self.folder.join(STATE_FILE_NAME);
        fs::rename(&temp, &path).map_err(io(&path))?;
        self.folder.sync()
    }

    /// Reads checkpoint `info` whole: its state file (a regular file of at most
    /// [`MAX_STATE_BYTES`], checked with [`TrainState::check`]), its index (a regular file of
    /// at most [`MAX_INDEX_BYTES`] whose footer is a table's) and every tensor (`RestoreV2`,
    /// which checks each tensor's checksum). An integer scalar named like a global step must
    /// hold the state's step.
    ///
    /// # Errors
    /// [`Error::CheckpointFile`] naming the file that is missing, not a regular file, too large,
    /// truncated or corrupt; [`Error::CheckpointState`] naming the field of the state that is
    /// out of range or at odds with the checkpoint.
    pub fn load(&self, info: &CheckpointInfo) -> Result<LoadedCheckpoint> {
        let torn = |path: PathBuf| move |reason: String| Error::CheckpointFile { path, reason };
        let name = checkpoint_dir_name(info.step);
        let sub = self
            .folder
            .dir(&name)?
            .ok_or_else(|| Error::CheckpointFile {
                path: info.dir.clone(),
                reason: "is not a folder (a link is never followed)".into(),
            })?;
        let state_path = info.dir.join(STATE_FILE);
        let bytes = sub
            .read(STATE_FILE, MAX_STATE_BYTES)
            .map_err(|r| torn(state_path.clone())(format!("the train state {r}")))?;
        let what = state_path.display().to_string();
        let state = std::str::from_utf8(&bytes)
            .map_err(|e| Error::InvalidArgument {
                what: what.clone(),
                reason: format!("not UTF-8 ({e})"),
            })
            .and_then(|text| TrainState::from_json(text, &what))
            .map_err(|e| torn(state_path.clone())(e.to_string()))?;
        state.check(info.step, &state_path)?;
        let index = format!("{PREFIX_NAME}{}", layout::INDEX_SUFFIX);
        let (len, tail) = sub
            .tail(&index, MAX_INDEX_BYTES, INDEX_FOOTER_LEN)
            .map_err(torn(info.dir.join(&index)))?;
        check_index_footer(len, &tail).map_err(torn(info.dir.join(&index)))?;
        let data = format!("{PREFIX_NAME}{}", layout::DATA_SUFFIX);
        sub.open_regular(&data, u64::MAX)
            .map_err(torn(info.dir.join(&data)))?;
        let tensors = read_bundle(&info.prefix)?;
        for t in &tensors {
            let value = int_scalar(&t.tensor).filter(|_| t.name.contains("global_step"));
            // The trainer saves a step beyond an int32 as its largest value.
            let max = if let HostTensor::Int32(_) = t.tensor {
                i128::from(i32::MAX)
            } else {
                i128::MAX
            };
            if let Some(v) = value.filter(|&v| v != i128::from(state.global_step).min(max)) {
                return Err(Error::CheckpointState {
                    path: state_path,
                    field: "global_step".into(),
                    reason: format!(
                        "is {} but the checkpoint's variable `{}` holds {v}",
                        state.global_step, t.name
                    ),
                });
            }
        }
        Ok(LoadedCheckpoint {
            info: info.clone(),
            state,
            tensors,
            skipped: Vec::new(),
        })
    }

    /// The newest checkpoint that reads whole with a state in range, `None` if the directory
    /// holds no checkpoint. Newer ones that are torn ([`Error::CheckpointFile`]: a truncated
    /// data file, a missing index, a link or FIFO instead of a file) or hold a state out of range
    /// ([`Error::CheckpointState`]) are skipped with a warning and, by a directory opened to
    /// write, moved aside to `D/.ckpt-<step>.torn-<pid>` (kept for inspection, never read again),
    /// so the next save's pruning and the state file forget them.
    ///
    /// # Errors
    /// [`Error::NoUsableCheckpoint`] if there are checkpoints but none of them is usable (then
    /// nothing is moved); [`Error::Io`] if the directory cannot be read or a skipped checkpoint
    /// cannot be moved; errors other than an unusable checkpoint (an unsupported dtype) are
    /// returned as they are.
    pub fn load_latest(&self) -> Result<Option<LoadedCheckpoint>> {
        let infos = self.list()?;
        let mut skipped: Vec<(CheckpointInfo, String)> = Vec::new();
        for info in &infos {
            match self.load(info) {
                Ok(mut loaded) => {
                    if self.lock.is_some() && !skipped.is_empty() {
                        for (torn, _) in &skipped {
                            let aside = self
                                .dir
                                .join(layout::torn_dir_name(torn.step, std::process::id()));
                            log::warn!(
                                "checkpoint of step {} moved to {}",
                                torn.step,
                                aside.display()
                            );
                            fs::rename(&torn.dir, &aside).map_err(io(&torn.dir))?;
                        }
                        self.write_state_file(info.step)?;
                    }
                    loaded.skipped = skipped.into_iter().map(|(i, why)| (i.dir, why)).collect();
                    return Ok(Some(loaded));
                }
                Err(e @ (Error::CheckpointFile { .. } | Error::CheckpointState { .. })) => {
                    log::warn!(
                        "checkpoint of step {} cannot be resumed ({e}); trying the one before",
                        info.step
                    );
                    skipped.push((info.clone(), e.to_string()));
                }
                Err(e) => return Err(e),
            }
        }
        match skipped.into_iter().next() {
            None => Ok(None),
            Some((_, newest)) => Err(Error::NoUsableCheckpoint {
                dir: self.dir.clone(),
                found: infos.len(),
                newest,
            }),
        }
    }
}

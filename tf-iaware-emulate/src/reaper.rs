//! Emulated clusters die with the process that started them (the driver), however it dies —
//! SIGKILL included.
//!
//! - **Processes.** Task servers and co-tenant hogs are started with `PR_SET_PDEATHSIG` =
//!   SIGKILL, so the kernel kills them when their parent dies. The kernel sends that signal when
//!   the *thread* that forked them ends, so every child is forked by one thread that lives as
//!   long as the process ([`spawn`]), whichever thread asks.
//! - **Folders and cgroups**, which the kernel leaves behind: a reaper (`tf-iaware reap --owner
//!   PID`, started with the first cluster, [`watch`]) waits for end-of-file on a pipe that only
//!   the driver holds. The driver's death closes it; the reaper then kills whatever is left in the
//!   driver's cgroups (`tf-iaware-PID-…`), removes them, removes the driver's cluster folders
//!   (`owner.pid` = PID) and exits. After an orderly end (the clusters dropped) it finds nothing.
//!   It runs in a process group of its own, so a signal to the driver's group spares it.

use std::io::Read;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{mpsc, Mutex, OnceLock};
use std::time::Duration;

use super::cgroup::{self, Hierarchy};

/// Name prefix of an emulated cluster's temporary folder.
pub(crate) const FOLDER_PREFIX: &str = "tf-iaware-emulated-";
/// File in that folder holding the pid of the process that made it.
pub(crate) const OWNER_FILE: &str = "owner.pid";

/// Removes the folders of emulated clusters under `tmp` whose owner process is gone (killed
/// with SIGKILL, say), as stale cgroups are removed; returns how many it removed.
pub(crate) fn remove_stale_folders(tmp: &Path) -> usize {
    remove_folders(tmp, |pid| !Path::new(&format!("/proc/{pid}")).exists())
}

/// Removes the folders of emulated clusters under `tmp` whose owner (the pid in their
/// `owner.pid`) `whose` picks; returns how many it removed.
pub(crate) fn remove_folders(tmp: &Path, whose: impl Fn(u32) -> bool) -> usize {
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return 0;
    };
    let mut removed = 0;
    for e in entries.flatten() {
        let path = e.path();
        let is_ours = path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with(FOLDER_PREFIX));
        if !is_ours {
            continue;
        }
        let Some(pid) = std::fs::read_to_string(path.join(OWNER_FILE))
            .ok()
            .and_then(|t| t.trim().parse::<u32>().ok())
        else {
            continue;
        };
        if whose(pid) && std::fs::remove_dir_all(&path).is_ok() {
            log::info!("removed the folder of a dead run: {}", path.display());
            removed += 1;
        }
    }
    removed
}

/// How long the reaper waits for killed processes to leave their cgroups.
const CGROUP_GRACE: Duration = Duration::from_secs(10);

type Request = (Command, mpsc::Sender<std::io::Result<Child>>);

/// The thread that forks every child: it lives as long as the process.
fn spawner() -> Option<&'static mpsc::Sender<Request>> {
    static SPAWNER: OnceLock<Option<mpsc::Sender<Request>>> = OnceLock::new();
    SPAWNER
        .get_or_init(|| {
            let (tx, rx) = mpsc::channel::<Request>();
            let started = std::thread::Builder::new()
                .name("emulate-spawner".into())
                .spawn(move || {
                    for (mut cmd, reply) in rx {
                        let _ = reply.send(cmd.spawn());
                    }
                });
            match started {
                Ok(_) => Some(tx),
                Err(e) => {
                    log::warn!(
                        "no spawner thread ({e}): children die with the thread that starts them"
                    );
                    None
                }
            }
        })
        .as_ref()
}

/// Starts `cmd` so that it is killed (SIGKILL) when this process dies, from the spawner thread.
///
/// # Errors
/// The error of `spawn` (the program cannot be run).
pub(crate) fn spawn(mut cmd: Command) -> std::io::Result<Child> {
    let parent = std::process::id();
    // SAFETY: prctl and getppid are async-signal-safe; the child asks the kernel to kill it when
    // its parent dies, and exits at once if the parent died before it asked.
    unsafe {
        cmd.pre_exec(move || {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            if libc::getppid() as u32 != parent {
                libc::_exit(1);
            }
            Ok(())
        });
    }
    let Some(spawner) = spawner() else {
        return cmd.spawn();
    };
    let (reply, answer) = mpsc::channel();
    if let Err(mpsc::SendError((mut cmd, _))) = spawner.send((cmd, reply)) {
        return cmd.spawn();
    }
    answer
        .recv()
        .unwrap_or_else(|_| Err(std::io::Error::other("the spawner thread ended")))
}

/// Starts this process's reaper (`exe reap --owner PID`) unless it runs already. A reaper that
/// cannot start is a warning: a later cluster's start still removes what a dead run left.
pub(crate) fn watch(exe: &Path) {
    static PIPE: Mutex<Option<ChildStdin>> = Mutex::new(None);
    let mut pipe = PIPE.lock().unwrap_or_else(|p| p.into_inner());
    if pipe.is_some() {
        return;
    }
    let started = Command::new(exe)
        .args(["reap", "--owner", &std::process::id().to_string()])
        .env("RUST_LOG", "warn")
        .env("TF_CPP_MIN_LOG_LEVEL", "3")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn();
    match started {
        // The write end stays open until this process dies (it is never written, never closed);
        // it is close-on-exec, so no child holds it.
        Ok(mut child) => *pipe = child.stdin.take(),
        Err(e) => log::warn!(
            "no reaper ({}: {e}): if this process is killed, its clusters' folders and cgroups \
             stay until the next start",
            exe.display()
        ),
    }
}

/// The reaper's life: waits until `owner` closes the pipe on standard input (it died, or ended),
/// then removes what its emulated clusters left and exits.
pub fn reap(owner: u32) -> ! {
    let mut sink = [0u8; 64];
    let mut stdin = std::io::stdin().lock();
    while matches!(stdin.read(&mut sink), Ok(n) if n > 0) {}
    let (groups, folders) = remove_leftovers(owner, &std::env::temp_dir());
    if groups + folders > 0 {
        log::warn!("process {owner} died: removed {groups} cgroups and {folders} cluster folders");
    }
    std::process::exit(0)
}

/// Kills what is left in `owner`'s cgroups, removes them and `owner`'s cluster folders under
/// `tmp`; returns how many cgroups and folders it removed.
pub(crate) fn remove_leftovers(owner: u32, tmp: &Path) -> (usize, usize) {
    let groups = match Hierarchy::detect() {
        Ok(h) => cgroup::remove_owned(&h, owner, CGROUP_GRACE),
        Err(_) => 0,
    };
    let folders = remove_folders(tmp, |pid| pid == owner);
    (groups, folders)
}

#[cfg(test)]
mod folder_tests {
    use super::*;

    #[test]
    fn folders_of_dead_runs_are_removed_and_live_ones_kept() {
        let tmp = tempfile::tempdir().unwrap();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let dead = child.id();
        child.wait().unwrap();
        let stale = tmp.path().join(format!("{FOLDER_PREFIX}stale"));
        let live = tmp.path().join(format!("{FOLDER_PREFIX}live"));
        let other = tmp.path().join("someone-elses");
        for (dir, pid) in [(&stale, dead), (&live, std::process::id()), (&other, dead)] {
            std::fs::create_dir(dir).unwrap();
            std::fs::write(dir.join(OWNER_FILE), pid.to_string()).unwrap();
        }
        assert_eq!(remove_stale_folders(tmp.path()), 1);
        assert!(!stale.exists());
        assert!(live.exists() && other.exists());
        // The reaper removes its owner's folders, alive or not, and nobody else's.
        assert_eq!(remove_folders(tmp.path(), |pid| pid == dead), 0);
        assert_eq!(
            remove_folders(tmp.path(), |pid| pid == std::process::id()),
            1
        );
        assert!(!live.exists() && other.exists());
    }
}

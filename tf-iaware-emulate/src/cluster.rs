//! [`EmulatedCluster`]: worker and ps processes (`tf-iaware worker`) on 127.0.0.1 with unequal
//! capacity — a CPU-quota cgroup per worker, co-tenant hog processes inside chosen workers'
//! cgroups, shaped links through a user-space proxy — torn down on drop, on Ctrl-C and on panic,
//! and when the driver is killed (its children die with it, a reaper removes folder and cgroups).

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::cgroup::{self, CpuCgroup, Hierarchy};
use super::proxy::LinkProxy;
use super::reaper::{self, remove_stale_folders, FOLDER_PREFIX, OWNER_FILE};
use super::scenario::Scenario;
use tf_iaware::cluster::tf_config::{TaskId, TfConfig};
use tf_iaware::{Error, Result};

/// One task process: what it was started with, so it can be started again the same way.
struct Task {
    id: TaskId,
    child: Child,
    log: PathBuf,
    /// Arguments of `exe` (the `worker` subcommand and its flags).
    args: Vec<String>,
    /// Port its gRPC server binds.
    port: u16,
    /// Times it was restarted (names the log of each incarnation).
    restarts: usize,
}

/// A running emulated cluster. Dropping it kills every process and removes every cgroup.
pub struct EmulatedCluster {
    scenario: Scenario,
    exe: PathBuf,
    tasks: Vec<Task>,
    hogs: Vec<Option<Child>>,
    cgroups: Vec<Option<CpuCgroup>>,
    proxies: Vec<LinkProxy>,
    tf_config: TfConfig,
    /// Address reserved for a `chief` task run by an outside program, if asked for.
    chief: Option<String>,
    dir: tempfile::TempDir,
    /// Why CPU quotas are not enforced, when they are not.
    pub quota_warning: Option<String>,
}

/// A live cluster as the signal handler sees it: its folder (the key), pids and cgroup folders.
type Registration = (PathBuf, Vec<u32>, Vec<PathBuf>);

/// Every live emulated cluster of this process, for the signal handler.
static ACTIVE: Mutex<Vec<Registration>> = Mutex::new(Vec::new());

/// `n` distinct free ports on 127.0.0.1: all are held open until every one is chosen, so the
/// kernel cannot hand out the same port twice.
fn free_ports(n: usize) -> Result<Vec<u16>> {
    let listeners = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").map_err(|e| Error::io("127.0.0.1:0", e)))
        .collect::<Result<Vec<_>>>()?;
    listeners
        .iter()
        .map(|l| {
            l.local_addr()
                .map(|a| a.port())
                .map_err(|e| Error::io("127.0.0.1:0", e))
        })
        .collect()
}

/// Starts `exe args…` with its output in `log`, to die with this process
/// ([`reaper::spawn`](super::reaper)).
fn spawn(exe: &Path, args: &[String], log: &Path) -> Result<Child> {
    let out = std::fs::File::create(log).map_err(|e| Error::io(log, e))?;
    let err = out.try_clone().map_err(|e| Error::io(log, e))?;
    let mut cmd = Command::new(exe);
    cmd.args(args);
    // Quiet unless the user asked otherwise: each task's log file keeps warnings and errors,
    // not TensorFlow's start-up chatter (a set variable is inherited as it is).
    for (var, quiet) in [("TF_CPP_MIN_LOG_LEVEL", "2"), ("RUST_LOG", "warn")] {
        if std::env::var_os(var).is_none() {
            cmd.env(var, quiet);
        }
    }
    cmd.stdin(Stdio::null()).stdout(out).stderr(err);
    reaper::spawn(cmd).map_err(|e| Error::io(exe, e))
}

fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(8)..].join("\n")
}

/// The cluster's folder (TF_CONFIG views, task logs), marked as this process's, once the
/// folders of drivers that died are removed and a reaper watches this process (whatever kills
/// it, the reaper removes the folder and the cgroups made later).
fn make_folder(exe: &Path) -> Result<tempfile::TempDir> {
    remove_stale_folders(&std::env::temp_dir());
    reaper::watch(exe);
    let dir = tempfile::Builder::new()
        .prefix(FOLDER_PREFIX)
        .tempdir()
        .map_err(|e| Error::io("/tmp", e))?;
    // Who owns the folder: a later start removes it if this process died without cleaning up.
    let owner = dir.path().join(OWNER_FILE);
    std::fs::write(&owner, std::process::id().to_string()).map_err(|e| Error::io(&owner, e))?;
    Ok(dir)
}

/// The CPU cgroup hierarchy, with the groups of drivers that died removed; or why CPU quotas
/// are not enforced, as the warning (also logged) the cluster keeps.
fn cpu_hierarchy() -> (std::result::Result<Hierarchy, String>, Option<String>) {
    let hierarchy = Hierarchy::detect();
    if let Ok(h) = &hierarchy {
        cgroup::remove_stale(h);
    }
    let quota_warning = hierarchy.as_ref().err().map(|why| {
        let msg = format!("CPU quotas are not enforced ({why}); co-tenant hogs still run");
        log::warn!("{msg}");
        msg
    });
    (hierarchy, quota_warning)
}

/// The ports servers and metrics agents bind on 127.0.0.1, and the address reserved for an
/// outside chief.
struct Ports {
    worker: Vec<u16>,
    ps: Vec<u16>,
    worker_metrics: Vec<u16>,
    ps_metrics: Vec<u16>,
    chief: Option<String>,
}

impl Ports {
    /// Distinct free ports for `workers` workers and `ps` parameter servers (a gRPC and a
    /// metrics port each), and one for a chief if `chief`.
    fn reserve(workers: usize, ps: usize, chief: bool) -> Result<Ports> {
        let (n, m) = (workers, ps);
        let ports = free_ports(2 * (n + m) + usize::from(chief))?;
        Ok(Ports {
            worker: ports[..n].to_vec(),
            ps: ports[n..n + m].to_vec(),
            worker_metrics: ports[n + m..2 * n + m].to_vec(),
            ps_metrics: ports[2 * n + m..2 * (n + m)].to_vec(),
            chief: chief.then(|| format!("127.0.0.1:{}", ports[2 * (n + m)])),
        })
    }
}

/// The cluster as its tasks and tf-iaware see it.
struct Views {
    /// What tf-iaware dials: a proxy where a worker's link is shaped; metrics agents under
    /// `"metrics"`; no chief.
    tf_config: TfConfig,
    /// The view file of the ps and of workers without a shaped link (with the chief, if any).
    shared: PathBuf,
    /// Each worker's view file: the shared one, or its own for a worker behind a shaped link.
    worker: Vec<PathBuf>,
    /// The link proxies the views dial through.
    proxies: Vec<LinkProxy>,
}

/// Starts the link proxies of `scenario`'s shaped links and writes the tasks' cluster views
/// (TF_CONFIG files) into `dir`.
fn write_views(scenario: &Scenario, ports: &Ports, dir: &Path) -> Result<Views> {
    // What peers dial: a proxy where a link is shaped.
    let n = scenario.workers.len();
    let mut proxies: Vec<LinkProxy> = Vec::new();
    let mut dial = Vec::with_capacity(n);
    for (k, spec) in scenario.workers.iter().enumerate() {
        match &spec.link {
            Some(link) => {
                let proxy = LinkProxy::start(("127.0.0.1", ports.worker[k]), link.clone())?;
                dial.push(format!("127.0.0.1:{}", proxy.port()));
                proxies.push(proxy);
            }
            None => dial.push(format!("127.0.0.1:{}", ports.worker[k])),
        }
    }
    let addresses =
        |ports: &[u16]| -> Vec<String> { ports.iter().map(|p| format!("127.0.0.1:{p}")).collect() };
    let cluster_json = serde_json::json!({
        "cluster": {
            "worker": dial,
            "ps": addresses(&ports.ps),
        },
        "metrics": {
            "worker": addresses(&ports.worker_metrics),
            "ps": addresses(&ports.ps_metrics),
        },
    });
    let tf_config = TfConfig::parse(&cluster_json.to_string(), "emulated cluster")?;
    // What the tasks are started with: the cluster, and the outside chief if there is one.
    let with_chief = |mut view: serde_json::Value| {
        if let (Some(address), Some(jobs)) = (&ports.chief, view["cluster"].as_object_mut()) {
            jobs.insert("chief".into(), serde_json::json!([address]));
        }
        view
    };
    let shared = dir.join("tf_config.json");
    std::fs::write(&shared, with_chief(cluster_json).to_string())
        .map_err(|e| Error::io(&shared, e))?;
    // A worker behind a shaped link also reaches its peers through shaped proxies, so the
    // tensors it pulls (variables from the ps) cross the slow link too: its own cluster view.
    let mut worker: Vec<PathBuf> = vec![shared.clone(); n];
    for (k, spec) in scenario.workers.iter().enumerate() {
        let Some(link) = &spec.link else { continue };
        let mut through = |port: u16| -> Result<String> {
            let proxy = LinkProxy::start(("127.0.0.1", port), link.clone())?;
            let address = format!("127.0.0.1:{}", proxy.port());
            proxies.push(proxy);
            Ok(address)
        };
        let ps_view = ports
            .ps
            .iter()
            .map(|&p| through(p))
            .collect::<Result<Vec<_>>>()?;
        let mut worker_view = Vec::with_capacity(n);
        for (j, &p) in ports.worker.iter().enumerate() {
            worker_view.push(if j == k { dial[k].clone() } else { through(p)? });
        }
        let view =
            with_chief(serde_json::json!({"cluster": {"worker": worker_view, "ps": ps_view}}));
        let path = dir.join(format!("tf_config_worker{k}.json"));
        std::fs::write(&path, view.to_string()).map_err(|e| Error::io(&path, e))?;
        worker[k] = path;
    }
    Ok(Views {
        tf_config,
        shared,
        worker,
        proxies,
    })
}

impl EmulatedCluster {
    /// Starts `scenario`: one ps per `scenario.ps`, one worker per spec, each a `exe worker`
    /// process (`exe` is the `tf-iaware` binary), waits until every gRPC port answers.
    ///
    /// # Errors
    /// [`Error::Io`] if a process or cgroup cannot be created; [`Error::TensorFlow`]-style
    /// [`Error::InvalidArgument`] naming the task whose server did not come up (with its log).
    pub fn start(scenario: &Scenario, exe: &Path) -> Result<EmulatedCluster> {
        Self::start_with(scenario, exe, false)
    }

    /// As [`EmulatedCluster::start`]; with `chief`, also reserves a free port on 127.0.0.1 for
    /// a `chief` task that an outside program runs (TF2's `ClusterCoordinator`) and lists it in
    /// every task's cluster view: TensorFlow's workers must know the coordinator's job to
    /// serve it. [`EmulatedCluster::tf_config`] leaves the chief out (tf-iaware's own sessions
    /// do not use it); [`EmulatedCluster::chief`] gives its address.
    ///
    /// # Errors
    /// As [`EmulatedCluster::start`].
    pub fn start_with(scenario: &Scenario, exe: &Path, chief: bool) -> Result<EmulatedCluster> {
        // Several clusters may live in one process (tests): number them for unique cgroup names.
        static SERIAL: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let serial = SERIAL.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = make_folder(exe)?;
        let (hierarchy, quota_warning) = cpu_hierarchy();
        let n = scenario.workers.len();
        let ports = Ports::reserve(n, scenario.ps, chief)?;
        let views = write_views(scenario, &ports, dir.path())?;
        let mut cluster = EmulatedCluster {
            scenario: scenario.clone(),
            exe: exe.to_path_buf(),
            tasks: Vec::new(),
            hogs: (0..n).map(|_| None).collect(),
            cgroups: (0..n).map(|_| None).collect(),
            proxies: views.proxies,
            tf_config: views.tf_config,
            chief: ports.chief.clone(),
            dir,
            quota_warning,
        };
        for (i, &p) in ports.ps.iter().enumerate() {
            cluster.start_task("ps", i, p, &views.shared, ports.ps_metrics[i])?;
        }
        for (k, &p) in ports.worker.iter().enumerate() {
            cluster.start_task("worker", k, p, &views.worker[k], ports.worker_metrics[k])?;
            if let Ok(h) = &hierarchy {
                let spec = &scenario.workers[k];
                let group =
                    CpuCgroup::create(h, &format!("{serial}-worker{k}"), spec.cpu, spec.busy)?;
                group.add_tf(cluster.tasks.last().map_or(0, |t| t.child.id()))?;
                cluster.cgroups[k] = Some(group);
            }
            cluster.set_busy(k, scenario.workers[k].busy)?;
        }
        cluster.register();
        let ports: Vec<(usize, u16)> = ports
            .ps
            .iter()
            .chain(&ports.worker)
            .copied()
            .enumerate()
            .collect();
        cluster.wait_ready(&ports, Duration::from_secs(60))?;
        Ok(cluster)
    }

    /// Starts task `job:index`: a `worker` process serving gRPC on `port` and its metrics on
    /// `metrics_port`, with the cluster view `view`; its log is `JOBINDEX.log`.
    fn start_task(
        &mut self,
        job: &str,
        index: usize,
        port: u16,
        view: &Path,
        metrics_port: u16,
    ) -> Result<()> {
        let log = self.dir.path().join(format!("{job}{index}.log"));
        let mut args = vec![
            "worker".to_string(),
            "--tf-config".into(),
            view.display().to_string(),
            "--job".into(),
            job.into(),
            "--task".into(),
            index.to_string(),
            "--port".into(),
            port.to_string(),
        ];
        // Every task serves its metrics: workers' and ps' availability feed the plans.
        args.extend(["--metrics".to_string(), format!("127.0.0.1:{metrics_port}")]);
        let child = spawn(&self.exe, &args, &log)?;
        self.tasks.push(Task {
            id: TaskId {
                job: job.into(),
                index,
            },
            child,
            log,
            args,
            port,
            restarts: 0,
        });
        Ok(())
    }

    /// Records (or refreshes) this cluster's processes and cgroups for the signal handler,
    /// keyed by its temporary folder.
    fn register(&self) {
        let pids = self.pids();
        let groups = self
            .cgroups
            .iter()
            .flatten()
            .map(|g| g.path().to_path_buf())
            .collect();
        let key = self.dir.path().to_path_buf();
        let mut active = ACTIVE.lock().unwrap_or_else(|p| p.into_inner());
        active.retain(|(k, _, _)| *k != key);
        active.push((key, pids, groups));
    }

    fn pids(&self) -> Vec<u32> {
        self.tasks
            .iter()
            .map(|t| t.child.id())
            .chain(self.hogs.iter().flatten().map(Child::id))
            .collect()
    }

    fn wait_ready(&mut self, ports: &[(usize, u16)], timeout: Duration) -> Result<()> {
        let start = Instant::now();
        for &(t, port) in ports {
            loop {
                if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                    break;
                }
                let task = &mut self.tasks[t];
                if let Ok(Some(status)) = task.child.try_wait() {
                    return Err(Error::InvalidArgument {
                        what: format!("emulated task {}:{}", task.id.job, task.id.index),
                        reason: format!(
                            "exited with {status} before serving:\n{}",
                            tail(&task.log)
                        ),
                    });
                }
                if start.elapsed() > timeout {
                    return Err(Error::InvalidArgument {
                        what: format!("emulated task {}:{}", task.id.job, task.id.index),
                        reason: format!(
                            "did not open port {port} within {timeout:?}:\n{}",
                            tail(&task.log)
                        ),
                    });
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Ok(())
    }

    /// The cluster as TF_CONFIG (addresses peers dial; metrics agents under `"metrics"`).
    pub fn tf_config(&self) -> &TfConfig {
        &self.tf_config
    }

    /// Address of the `chief` task reserved by [`EmulatedCluster::start_with`], if any.
    pub fn chief(&self) -> Option<&str> {
        self.chief.as_deref()
    }

    /// The task sessions should be mastered by: ps 0, which has no CPU quota, so coordinating a
    /// step is not charged to an emulated worker.
    pub fn master(&self) -> TaskId {
        TaskId {
            job: "ps".into(),
            index: 0,
        }
    }

    /// Connects to the cluster through [`EmulatedCluster::master`]: its devices and how to open
    /// sessions on it.
    ///
    /// # Errors
    /// [`Error::TensorFlow`] if the master cannot be reached.
    pub fn connect(
        &self,
    ) -> Result<(
        tf_iaware::cluster::Cluster,
        tf_iaware::runtime::SessionConfig,
    )> {
        tf_iaware::cluster::connect_tf_config_at(&self.tf_config, &self.master())
    }

    /// The library's entry point on this cluster: a [`tf_iaware::Connection`] through
    /// [`EmulatedCluster::master`], reading every task's metrics agent, that owns the cluster
    /// (its processes end when the connection is dropped).
    ///
    /// # Errors
    /// As [`tf_iaware::Connection::from_running`].
    pub fn into_connection(self) -> Result<tf_iaware::Connection> {
        let name = format!("emulated:{}", self.scenario.name);
        let tf_config = self.tf_config.clone();
        let master = self.master();
        tf_iaware::Connection::from_running(&name, tf_config, &master, Box::new(self))
    }

    /// The scenario, with co-tenant loads as currently set.
    pub fn scenario(&self) -> &Scenario {
        &self.scenario
    }

    /// Sets worker `k`'s co-tenant load to `busy` of its quota. With cgroups, a hog that always
    /// wants CPU runs in the node's `cotenant` group, which gets `busy` of the quota and
    /// TensorFlow the rest; without, a hog duty-cycled to `busy × quota` cores runs beside it.
    ///
    /// # Errors
    /// [`Error::Io`] if the hog cannot be started or its cgroup written.
    pub fn set_busy(&mut self, k: usize, busy: f64) -> Result<()> {
        self.scenario.workers[k].busy = busy;
        let cpu = self.scenario.workers[k].cpu;
        if let Some(group) = &self.cgroups[k] {
            group.set_busy(cpu, busy)?;
        }
        if let Some(mut old) = self.hogs.get_mut(k).and_then(Option::take) {
            let _ = old.kill();
            let _ = old.wait();
        }
        if busy <= 0.0 {
            return Ok(());
        }
        let cores = if self.cgroups[k].is_some() {
            (busy * cpu).ceil()
        } else {
            busy * cpu
        };
        let log = self.dir.path().join(format!("hog{k}.log"));
        let hog = spawn(
            &self.exe,
            &["hog".to_string(), "--cores".into(), format!("{cores:.3}")],
            &log,
        )?;
        if let Some(group) = &self.cgroups[k] {
            group.add_cotenant(hog.id())?;
        }
        self.hogs[k] = Some(hog);
        self.register();
        Ok(())
    }

    /// Kills worker `k`'s server process (fault injection); nothing if there is no such worker.
    pub fn kill_worker(&mut self, k: usize) {
        self.kill_task(&TaskId {
            job: "worker".into(),
            index: k,
        });
    }

    /// Stops worker `k`'s server process with SIGSTOP (fault injection: a hung task — its
    /// ports still complete TCP handshakes, nothing in it runs, its agent is silent); nothing
    /// if there is no such worker. [`EmulatedCluster::continue_worker`] resumes it.
    pub fn stop_worker(&mut self, k: usize) {
        self.signal_worker(k, libc::SIGSTOP);
    }

    /// Resumes worker `k` after [`EmulatedCluster::stop_worker`] (SIGCONT).
    pub fn continue_worker(&mut self, k: usize) {
        self.signal_worker(k, libc::SIGCONT);
    }

    fn signal_worker(&mut self, k: usize, signal: i32) {
        let task = TaskId {
            job: "worker".into(),
            index: k,
        };
        if let Some(t) = self.tasks.iter().find(|t| t.id == task) {
            if let Ok(pid) = i32::try_from(t.child.id()) {
                // SAFETY: kill(2) on the pid of a child this cluster started and has not reaped.
                unsafe { libc::kill(pid, signal) };
            }
        }
    }

    /// Kills ps `k`'s server process (fault injection): its variables are lost with it, and
    /// with ps 0 the session master; nothing if there is no such ps.
    pub fn kill_ps(&mut self, k: usize) {
        self.kill_task(&TaskId {
            job: "ps".into(),
            index: k,
        });
    }

    /// Kills `task`'s server process and reaps it.
    fn kill_task(&mut self, task: &TaskId) {
        if let Some(t) = self.tasks.iter_mut().find(|t| t.id == *task) {
            let _ = t.child.kill();
            let _ = t.child.wait();
        }
    }

    /// Starts worker `k` again, as `EmulatedCluster::restart_task` (back in its CPU-quota
    /// cgroup).
    ///
    /// # Errors
    /// As `EmulatedCluster::restart_task`.
    pub fn restart_worker(&mut self, k: usize) -> Result<()> {
        self.restart_task(&TaskId {
            job: "worker".into(),
            index: k,
        })
    }

    /// Starts ps `k` again, as `EmulatedCluster::restart_task`.
    ///
    /// # Errors
    /// As `EmulatedCluster::restart_task`.
    pub fn restart_ps(&mut self, k: usize) -> Result<()> {
        self.restart_task(&TaskId {
            job: "ps".into(),
            index: k,
        })
    }

    /// Starts `task` again the way a cluster manager restarts a lost task: the same process
    /// (same arguments, TF_CONFIG view and port; a worker back in its CPU-quota cgroup), with a
    /// fresh TensorFlow server — the variables it held are gone. A task still running is
    /// killed first. Returns once its port answers (at most 60 s); its log is
    /// `JOBINDEX-rN.log` for the N-th restart.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] naming a task that is not part of the cluster, or one whose
    /// server did not come up (with its log); [`Error::Io`] if it cannot be started.
    pub(crate) fn restart_task(&mut self, task: &TaskId) -> Result<()> {
        let Some(i) = self.tasks.iter().position(|t| t.id == *task) else {
            let known: Vec<String> = self
                .tasks
                .iter()
                .map(|t| format!("{}:{}", t.id.job, t.id.index))
                .collect();
            return Err(Error::InvalidArgument {
                what: format!("emulated task {}:{}", task.job, task.index),
                reason: format!("is not part of the cluster (tasks: {})", known.join(", ")),
            });
        };
        self.kill_task(task);
        let t = &mut self.tasks[i];
        t.restarts += 1;
        let log = self
            .dir
            .path()
            .join(format!("{}{}-r{}.log", t.id.job, t.id.index, t.restarts));
        t.child = spawn(&self.exe, &t.args, &log)?;
        t.log = log;
        let pid = t.child.id();
        let port = t.port;
        if task.job == "worker" {
            if let Some(Some(group)) = self.cgroups.get(task.index) {
                group.add_tf(pid)?;
            }
        }
        self.register();
        self.wait_ready(&[(i, port)], Duration::from_secs(60))
    }

    /// Folder with the tasks' logs and TF_CONFIG.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// Pids of every process the cluster started (servers and hogs).
    pub fn process_ids(&self) -> Vec<u32> {
        self.pids()
    }

    /// Folders of the cgroups the cluster created.
    pub fn cgroup_paths(&self) -> Vec<PathBuf> {
        self.cgroups
            .iter()
            .flatten()
            .map(|g| g.path().to_path_buf())
            .collect()
    }
}

impl Drop for EmulatedCluster {
    fn drop(&mut self) {
        for child in self
            .tasks
            .iter_mut()
            .map(|t| &mut t.child)
            .chain(self.hogs.iter_mut().flatten())
        {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.proxies.clear();
        // Cgroups go after their processes (CpuCgroup's own drop removes the folder).
        self.cgroups.clear();
        let key = self.dir.path().to_path_buf();
        ACTIVE
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|(k, _, _)| *k != key);
    }
}

/// Makes SIGINT/SIGTERM tear down every emulated cluster (kill processes, remove cgroups and
/// temporary folders) and exit with status 130. Call it first thing in `main`, before any thread starts: it blocks the
/// signals in the calling thread, so every thread started later inherits the mask.
pub fn cleanup_on_signal() {
    // SAFETY: signal-mask manipulation on a local set before other threads exist.
    let set = unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    };
    std::thread::spawn(move || {
        let mut sig = 0;
        // SAFETY: `set` is a valid signal set; sigwait stores the signal number.
        unsafe { libc::sigwait(&set, &mut sig) };
        // Not eprintln!: a failing stderr (full, closed) must not stop the teardown.
        let _ = writeln!(
            std::io::stderr(),
            "signal {sig}: tearing down emulated clusters"
        );
        let active = std::mem::take(&mut *ACTIVE.lock().unwrap_or_else(|p| p.into_inner()));
        for (dir, pids, groups) in active {
            for &pid in &pids {
                // SAFETY: kill(2) on pids this process started.
                unsafe { libc::kill(pid as i32, libc::SIGKILL) };
            }
            // Reap them: a zombie still counts as a member of its cgroup.
            for &pid in &pids {
                // SAFETY: waitpid(2) on our own child; a null status pointer is allowed.
                unsafe { libc::waitpid(pid as i32, std::ptr::null_mut(), 0) };
            }
            // Killed processes leave their cgroups only once they have exited: retry a while.
            let deadline = Instant::now() + Duration::from_secs(3);
            for g in groups {
                let Some(root) = g.parent() else { continue };
                while g.exists() && Instant::now() < deadline {
                    cgroup::remove(&g, root);
                    if g.exists() {
                        std::thread::sleep(Duration::from_millis(50));
                    }
                }
            }
            // The folder too (TF_CONFIG, task logs): `exit` runs no destructor.
            let _ = std::fs::remove_dir_all(&dir);
        }
        std::process::exit(130);
    });
}

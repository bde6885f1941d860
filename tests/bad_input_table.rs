//! The bad-input table (`tests/fixtures/bad_inputs.tsv`): every command fed broken files, broken
//! flags and absurd numbers. Each case must end on its own, within a deadline, in one clean
//! `error: …` (exit 1, or clap's usage exit 2) that names the culprit — never a panic, a crash
//! (exit ≥ 101 or a signal) or a hang.
//!
//! Table columns (tab-separated; `-` for an empty column; `#` starts a comment line):
//!
//! 1. expected exit code (1 or 2);
//! 2. what stderr must contain, case-insensitively (several pieces joined by ` && `);
//! 3. the command line after `tf-iaware`, words separated by single spaces;
//! 4. input files of the case, `NAME=CONTENT` joined by ` ;; `: the first is `{in}`, the
//!    second `{in2}`. CONTENT is text with `\n \t \s \\ \0 \xNN` escapes (`\s`: a space), or a generator:
//!    `@mlp`, `@mlp.json` (the valid zoo mlp, batch 4, and its sidecar), `@mlp:trunc=N`,
//!    `@mlp:xor=N` (byte N flipped), `@zeros:N`, `@random:N`, `@repeat:N:TEXT`,
//!    `@graph:SPEC` (a GraphDef of NodeDefs `name=Op(input,…)@device[attr=type,…];…`, type
//!    attributes only, e.g. `[T=uint16]`), `@npy:DESCR:SHAPE:VALUES` (a `.npy` array of
//!    `<f4`, `<f8`, `<i4`, `<i8` or `|u1` elements, SHAPE like `8x32`, filled with the
//!    comma-separated VALUES over and over: `@npy:<i8:8:0,1,2,3,10,1,2,3`; a folder of them is
//!    a data set of one array per input), `@funcs:SPEC` (a one-node GraphDef whose function
//!    library is `f>g,*h;g>f;…`: function `f` holds a node calling `g` as its op and a
//!    `PartitionedCall` whose attribute `f` names `h`), `@tfconfig:N` (a TF_CONFIG of N distinct
//!    worker addresses), `@ckpt:FILE` (a file of the valid checkpoint folder this test writes
//!    once, `ckpt-10/…` after 10 updates of `{train}`), `@ckpt:FILE:trunc=N`, `@state:K=V|…`
//!    (that checkpoint's `train_state.json` with dotted keys set to JSON values, `K=-` removing
//!    one); or, instead of a file, `@fifo` (a FIFO, which blocks whoever opens it for reading),
//!    `@symlink:TARGET`, `@dir` (an empty folder) or `@flock` (a file holding this test's pid,
//!    `flock`ed by this test until the case ends). A NAME may hold folders (`ck/ckpt-10/x`,
//!    created); a NAME starting with `~` is created but not checked afterwards (a file the case
//!    legitimately moves);
//! 5. environment, `KEY=VALUE` joined by ` ;; ` (`KEY=` removes KEY).
//!
//! The command line may end in `>/dev/full` (stdout on a full device) or `>&-` (stdout closed);
//! stdout is `/dev/null` otherwise. Every input file must be left as it was (a command must
//! never destroy what it did not create): same type, same bytes. Expected exit code 0 is a
//! legitimate run (no `error` needed on stderr), for inputs a command must survive.
//!
//! Placeholders anywhere: `{dir}` (the case's folder), `{in}`, `{in2}`, `{mlp}` / `{mlp.json}`
//! (the shared valid mlp), `{python}` (the Python MLP fixture), `{fixtures}` (the fixtures
//! folder), `{busy}` (a port held by this test), `{free}` (a port free when the case starts);
//! in the command line, `{train}` (`train` of the Python MLP on one emulated worker, batch 8,
//! before its bound and checkpoint flags).

mod common;

use std::ffi::OsString;
use std::io::Read;
use std::os::unix::ffi::OsStringExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// A case that takes longer than this is a hang.
const DEADLINE: Duration = Duration::from_secs(60);
/// Cases run at once.
const THREADS: usize = 4;

struct Case {
    line: usize,
    rc: i32,
    expect: Vec<String>,
    args: String,
    files: Vec<(String, String)>,
    env: Vec<(String, String)>,
}

fn column(s: &str) -> &str {
    if s == "-" {
        ""
    } else {
        s
    }
}

fn split(s: &str, sep: &str) -> Vec<String> {
    if s.is_empty() {
        Vec::new()
    } else {
        s.split(sep).map(String::from).collect()
    }
}

fn pairs(s: &str) -> Vec<(String, String)> {
    split(s, " ;; ")
        .into_iter()
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p.as_str(), ""));
            (k.to_string(), v.to_string())
        })
        .collect()
}

fn table() -> Vec<Case> {
    let text = include_str!("fixtures/bad_inputs.tsv");
    let mut cases = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() || line.starts_with('#') {
            continue;
        }
        let cols: Vec<&str> = line.split('\t').collect();
        assert!(
            (3..=5).contains(&cols.len()),
            "bad_inputs.tsv:{}: expected 3 to 5 tab-separated columns, got {}",
            i + 1,
            cols.len()
        );
        cases.push(Case {
            line: i + 1,
            rc: cols[0].parse().expect("exit code"),
            expect: split(column(cols[1]), " && "),
            args: column(cols[2]).to_string(),
            files: cols.get(3).map(|c| pairs(column(c))).unwrap_or_default(),
            env: cols.get(4).map(|c| pairs(column(c))).unwrap_or_default(),
        });
    }
    cases
}

/// Text with `\n \t \\ \0 \xNN` escapes as bytes.
fn unescape(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 1 < b.len() {
            match b[i + 1] {
                b'n' => out.push(b'\n'),
                b't' => out.push(b'\t'),
                b'0' => out.push(0),
                b's' => out.push(b' '),
                b'\\' => out.push(b'\\'),
                b'x' if i + 3 < b.len() => {
                    let hex = std::str::from_utf8(&b[i + 2..i + 4]).unwrap();
                    out.push(u8::from_str_radix(hex, 16).expect("\\xNN"));
                    i += 4;
                    continue;
                }
                other => {
                    out.push(b'\\');
                    out.push(other);
                }
            }
            i += 2;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

fn varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn field(tag: u64, bytes: &[u8], out: &mut Vec<u8>) {
    varint(tag << 3 | 2, out);
    varint(bytes.len() as u64, out);
    out.extend_from_slice(bytes);
}

/// `DataType` numbers of the type names `@graph` attributes take.
fn dtype(name: &str) -> u64 {
    match name {
        "float" => 1,
        "double" => 2,
        "int32" => 3,
        "uint8" => 4,
        "int16" => 5,
        "int8" => 6,
        "int64" => 9,
        "bool" => 10,
        "uint16" => 17,
        "half" => 19,
        "uint32" => 22,
        "uint64" => 23,
        other => panic!("unknown dtype {other}"),
    }
}

/// `key` → AttrValue bytes, as a NodeDef `attr` map entry (field 5: key 1, value 2).
fn attr_entry(key: &str, value: &[u8], out: &mut Vec<u8>) {
    let mut e = Vec::new();
    field(1, key.as_bytes(), &mut e);
    field(2, value, &mut e);
    field(5, &e, out);
}

/// `f>g,*h;g>f` as a GraphDef (one NoOp node) whose function library (GraphDef field 2) holds
/// functions `f` (FunctionDef: signature 1 with name 1, node_def 3) calling `g` as a node's op
/// and `h` through a `PartitionedCall`'s `f` attribute (AttrValue.func 10, NameAttrList name 1).
fn funcs(spec: &str) -> Vec<u8> {
    let mut lib = Vec::new();
    for f in spec.split(';').filter(|f| !f.is_empty()) {
        let (name, calls) = f.split_once('>').unwrap_or((f, ""));
        let mut def = Vec::new();
        let mut sig = Vec::new();
        field(1, name.as_bytes(), &mut sig);
        field(1, &sig, &mut def);
        for (i, call) in calls.split(',').filter(|c| !c.is_empty()).enumerate() {
            let mut n = Vec::new();
            field(1, format!("n{i}").as_bytes(), &mut n);
            match call.strip_prefix('*') {
                Some(callee) => {
                    field(2, b"PartitionedCall", &mut n);
                    let mut nal = Vec::new();
                    field(1, callee.as_bytes(), &mut nal);
                    let mut v = Vec::new();
                    field(10, &nal, &mut v);
                    attr_entry("f", &v, &mut n);
                }
                None => field(2, call.as_bytes(), &mut n),
            }
            field(3, &n, &mut def);
        }
        field(1, &def, &mut lib);
    }
    let mut g = graph("a=NoOp");
    field(2, &lib, &mut g);
    g
}

/// `v` as a `T`, for a generator.
fn parsed<T: std::str::FromStr>(v: &str) -> T
where
    T::Err: std::fmt::Display,
{
    v.parse()
        .unwrap_or_else(|e| panic!("`{v}` in a generator: {e}"))
}

/// `DESCR:SHAPE:VALUES` as `.npy` bytes (format 1.0): an array of `DESCR` elements and
/// `SHAPE` (`8x32`) holding VALUES (comma-separated) repeated until it is full.
fn npy(spec: &str) -> Vec<u8> {
    let mut parts = spec.splitn(3, ':');
    let (descr, shape, values) = match (parts.next(), parts.next(), parts.next()) {
        (Some(d), Some(s), Some(v)) => (d, s, v),
        _ => panic!("@npy:DESCR:SHAPE:VALUES, got {spec}"),
    };
    let dims: Vec<usize> = shape
        .split('x')
        .map(|d| d.parse().expect("a dimension"))
        .collect();
    let values: Vec<&str> = values.split(',').collect();
    let mut data = Vec::new();
    for v in values.iter().cycle().take(dims.iter().product()) {
        match descr {
            "<f4" => data.extend(parsed::<f32>(v).to_le_bytes()),
            "<f8" => data.extend(parsed::<f64>(v).to_le_bytes()),
            "<i4" => data.extend(parsed::<i32>(v).to_le_bytes()),
            "<i8" => data.extend(parsed::<i64>(v).to_le_bytes()),
            "|u1" => data.push(parsed::<u8>(v)),
            other => panic!("@npy: unknown descr {other}"),
        }
    }
    let dims: Vec<u64> = dims.iter().map(|&d| d as u64).collect();
    tf_iaware::data::encode_npy(descr, &dims, &data)
}

/// `name=Op(in1,in2)@device[attr=type,…];…` as GraphDef bytes (NodeDef name 1, op 2, input 3,
/// device 4, attr 5 with AttrValue.type 6).
fn graph(spec: &str) -> Vec<u8> {
    let mut g = Vec::new();
    for node in spec.split(';').filter(|n| !n.is_empty()) {
        let (node, attrs) = match node.split_once('[') {
            Some((n, a)) => (n, a.trim_end_matches(']')),
            None => (node, ""),
        };
        let (name, rest) = node.split_once('=').unwrap_or((node, ""));
        let (rest, device) = rest.split_once('@').unwrap_or((rest, ""));
        let (op, inputs) = match rest.split_once('(') {
            Some((op, i)) => (op, i.trim_end_matches(')')),
            None => (rest, ""),
        };
        let mut n = Vec::new();
        field(1, name.as_bytes(), &mut n);
        field(2, op.as_bytes(), &mut n);
        for i in inputs.split(',').filter(|i| !i.is_empty()) {
            field(3, i.as_bytes(), &mut n);
        }
        if !device.is_empty() {
            field(4, device.as_bytes(), &mut n);
        }
        for a in attrs.split(',').filter(|a| !a.is_empty()) {
            let (key, ty) = a.split_once('=').expect("attr=type");
            let mut v = Vec::new();
            varint(6 << 3, &mut v);
            varint(dtype(ty), &mut v);
            attr_entry(key, &v, &mut n);
        }
        field(1, &n, &mut g);
    }
    g
}

struct Fixtures {
    mlp: PathBuf,
    mlp_bytes: Vec<u8>,
    mlp_meta: Vec<u8>,
    python: PathBuf,
    busy: u16,
    /// A valid checkpoint folder of `{train}` after 10 updates.
    ckpt: PathBuf,
}

/// The fixtures folder.
fn fixtures() -> PathBuf {
    PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures"))
}

/// `{train}`: a short run of the Python MLP on one emulated worker (a few seconds).
const TRAIN: &str = "train --graph {fixtures}/tf1_mlp_sparse.pb --data \
    {fixtures}/tf1_mlp_sparse_train.npz --cluster emulated:workers=1 --strategy replica-setter \
    --batch 8";

/// `TRAIN` as words, placeholders filled.
fn train_words() -> Vec<String> {
    TRAIN
        .replace("{fixtures}", fixtures().to_str().unwrap())
        .split_whitespace()
        .map(String::from)
        .collect()
}

/// The checkpoint's state with `edits` (`a.b=JSON|…`, `a.b=-` removes) applied.
fn edited_state(fx: &Fixtures, edits: &str) -> Vec<u8> {
    let text = std::fs::read_to_string(fx.ckpt.join("ckpt-10/train_state.json")).unwrap();
    let mut state: serde_json::Value = serde_json::from_str(&text).unwrap();
    for edit in edits.split('|').filter(|e| !e.is_empty()) {
        let (key, value) = edit.split_once('=').expect("@state:KEY=VALUE");
        let mut at = &mut state;
        let parts: Vec<&str> = key.split('.').collect();
        for p in &parts[..parts.len() - 1] {
            at = at
                .get_mut(*p)
                .unwrap_or_else(|| panic!("no {p} in the state"));
        }
        let last = parts[parts.len() - 1];
        let map = at.as_object_mut().expect("an object");
        if value == "-" {
            map.remove(last);
        } else {
            map.insert(
                last.into(),
                serde_json::from_str(value).expect("a JSON value"),
            );
        }
    }
    serde_json::to_vec_pretty(&state).unwrap()
}

fn content(spec: &str, fx: &Fixtures, subst: &dyn Fn(&str) -> String) -> Vec<u8> {
    let Some(g) = spec.strip_prefix('@') else {
        return unescape(&subst(spec));
    };
    let (name, arg) = g.split_once(':').unwrap_or((g, ""));
    let num = |s: &str| -> usize { s.parse().expect("a number in a generator") };
    match name {
        "mlp" => match arg.split_once('=') {
            None => fx.mlp_bytes.clone(),
            Some(("trunc", n)) => fx.mlp_bytes[..num(n).min(fx.mlp_bytes.len())].to_vec(),
            Some(("xor", n)) => {
                let mut b = fx.mlp_bytes.clone();
                let i = num(n) % b.len();
                b[i] ^= 0xff;
                b
            }
            Some((other, _)) => panic!("unknown @mlp variant {other}"),
        },
        "mlp.json" => fx.mlp_meta.clone(),
        "ckpt" => {
            let (file, cut) = match arg.split_once(":trunc=") {
                Some((f, n)) => (f, Some(num(n))),
                None => (arg, None),
            };
            let mut b = std::fs::read(fx.ckpt.join(file)).expect("a file of the checkpoint");
            b.truncate(cut.unwrap_or(b.len()).min(b.len()));
            b
        }
        "state" => edited_state(fx, arg),
        "zeros" => vec![0; num(arg)],
        "random" => {
            let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
            (0..num(arg))
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect()
        }
        "repeat" => {
            let (n, text) = arg.split_once(':').expect("@repeat:N:TEXT");
            unescape(text).repeat(num(n))
        }
        "graph" => graph(arg),
        "npy" => npy(arg),
        "funcs" => funcs(arg),
        "tfconfig" => {
            let n = num(arg);
            let mut s = String::from(r#"{"cluster": {"worker": ["#);
            for i in 0..n {
                if i > 0 {
                    s.push(',');
                }
                s.push_str(&format!(
                    "\"10.{}.{}.{}:2222\"",
                    i >> 16 & 255,
                    i >> 8 & 255,
                    i & 255
                ));
            }
            s.push_str(r#"]}, "task": {"type": "worker", "index": 0}}"#);
            s.into_bytes()
        }
        other => panic!("unknown generator @{other}"),
    }
}

/// What an input file is, to tell that a case left it as it was.
#[derive(Debug, PartialEq)]
enum FileState {
    Missing,
    File(Vec<u8>),
    Fifo,
    Symlink(PathBuf),
    Other,
}

impl FileState {
    fn of(path: &Path) -> FileState {
        use std::os::unix::fs::FileTypeExt;
        let Ok(m) = std::fs::symlink_metadata(path) else {
            return FileState::Missing;
        };
        let t = m.file_type();
        if t.is_symlink() {
            FileState::Symlink(std::fs::read_link(path).unwrap_or_default())
        } else if t.is_fifo() {
            FileState::Fifo
        } else if t.is_file() {
            FileState::File(std::fs::read(path).unwrap_or_default())
        } else {
            FileState::Other
        }
    }
}

struct Outcome {
    case: usize,
    ok: bool,
    report: String,
    secs: f64,
}

fn run_case(c: &Case, fx: &Fixtures, root: &Path) -> Outcome {
    let dir = root.join(format!("line{}", c.line));
    std::fs::create_dir_all(&dir).unwrap();
    let paths: Vec<PathBuf> = c
        .files
        .iter()
        .map(|(n, _)| dir.join(n.trim_start_matches('~')))
        .collect();
    let free = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap();
    let subst = |s: &str| -> String {
        let mut s = s
            .replace("{dir}", dir.to_str().unwrap())
            .replace("{free}", &free.to_string())
            .replace("{mlp}", fx.mlp.to_str().unwrap())
            .replace(
                "{mlp.json}",
                fx.mlp.with_extension("json").to_str().unwrap(),
            )
            .replace("{python}", fx.python.to_str().unwrap())
            .replace("{fixtures}", fixtures().to_str().unwrap())
            .replace("{busy}", &fx.busy.to_string());
        for (i, p) in paths.iter().enumerate() {
            let key = if i == 0 {
                "{in}".to_string()
            } else {
                format!("{{in{}}}", i + 1)
            };
            s = s.replace(&key, p.to_str().unwrap());
        }
        s
    };
    // Locks this test holds for the case (`@flock`), released when it ends.
    let held = write_inputs(c, &paths, fx, &subst);
    let before: Vec<FileState> = paths.iter().map(|p| FileState::of(p)).collect();
    let mut cmd = command(c, &subst);
    let started = Instant::now();
    let mut child = cmd.spawn().expect("tf-iaware starts");
    let mut stderr = child.stderr.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = stderr.read_to_end(&mut s);
        s
    });
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if started.elapsed() > DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let secs = started.elapsed().as_secs_f64();
    let err = String::from_utf8_lossy(&reader.join().unwrap()).into_owned();
    let lower = err.to_lowercase();
    let mut problems = Vec::new();
    match status {
        None => problems.push(format!("hang: still running after {DEADLINE:?}")),
        Some(s) => {
            if let Some(sig) = s.signal() {
                problems.push(format!("crash: killed by signal {sig}"));
            } else if s.code() != Some(c.rc) {
                problems.push(format!("exit {:?}, expected {}", s.code(), c.rc));
            }
        }
    }
    if lower.contains("panicked") {
        problems.push("panicked".into());
    }
    // clap's usage errors say `error:` too, except the help shown for no subcommand.
    let usage = c.rc == 2 && lower.contains("usage");
    if c.rc != 0 && !(lower.contains("error") || usage) {
        problems.push("no `error` on stderr".into());
    }
    for e in &c.expect {
        let e = subst(e).to_lowercase();
        if !lower.contains(&e) {
            problems.push(format!("stderr lacks `{e}`"));
        }
    }
    drop(held);
    for ((path, was), (name, _)) in paths.iter().zip(&before).zip(&c.files) {
        if name.starts_with('~') {
            continue;
        }
        let now = FileState::of(path);
        if now != *was {
            problems.push(format!(
                "input file {name} was destroyed or changed: {was:?} → {now:?}"
            ));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    Outcome {
        case: c.line,
        ok: problems.is_empty(),
        report: format!(
            "bad_inputs.tsv:{} `tf-iaware {}`: {}\n--- stderr:\n{}",
            c.line,
            c.args,
            problems.join("; "),
            err.trim_end()
        ),
        secs,
    }
}

/// Writes case `c`'s input files at `paths` (a folder, a locked file, a FIFO, a symlink or
/// generated content); returns the files whose locks this test holds.
fn write_inputs(
    c: &Case,
    paths: &[PathBuf],
    fx: &Fixtures,
    subst: &dyn Fn(&str) -> String,
) -> Vec<std::fs::File> {
    let mut held = Vec::new();
    for ((_, spec), path) in c.files.iter().zip(paths) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        if spec == "@dir" {
            std::fs::create_dir(path).unwrap();
        } else if spec == "@flock" {
            use std::os::fd::AsRawFd;
            std::fs::write(path, format!("{}\n", std::process::id())).unwrap();
            let f = std::fs::File::open(path).unwrap();
            // SAFETY: a live descriptor.
            assert_eq!(unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) }, 0);
            held.push(f);
        } else if spec == "@fifo" {
            let p = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
            // SAFETY: a valid NUL-terminated path.
            assert_eq!(unsafe { libc::mkfifo(p.as_ptr(), 0o600) }, 0, "mkfifo");
        } else if let Some(target) = spec.strip_prefix("@symlink:") {
            std::os::unix::fs::symlink(subst(target), path).unwrap();
        } else {
            std::fs::write(path, content(spec, fx, subst)).unwrap();
        }
    }
    held
}

/// The `tf-iaware` command of case `c`: its arguments and environment, stdout as the case
/// redirects it (`>/dev/full`, `>&-`), stderr piped.
fn command(c: &Case, subst: &dyn Fn(&str) -> String) -> Command {
    let args = c.args.replace("{train}", &train_words().join(" "));
    let mut words = split(&args, " ");
    let stdout = match words.last().map(String::as_str) {
        Some(">/dev/full") => {
            words.pop();
            Stdio::from(
                std::fs::OpenOptions::new()
                    .write(true)
                    .open("/dev/full")
                    .unwrap(),
            )
        }
        Some(">&-") => {
            words.pop();
            Stdio::null()
        }
        _ => Stdio::null(),
    };
    let close_stdout = c.args.ends_with(">&-");
    let args: Vec<OsString> = words
        .iter()
        .map(|a| OsString::from_vec(unescape(&subst(a))))
        .collect();
    let mut cmd: Command = common::bin();
    cmd.args(&args)
        .env("RUST_LOG", "warn")
        .env_remove("TF_CONFIG")
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(Stdio::piped());
    if close_stdout {
        // SAFETY: only async-signal-safe calls between fork and exec.
        unsafe {
            cmd.pre_exec(|| {
                libc::close(1);
                Ok(())
            });
        }
    }
    for (k, v) in &c.env {
        if v.is_empty() {
            cmd.env_remove(k);
        } else {
            cmd.env(k, OsString::from_vec(unescape(&subst(v))));
        }
    }
    cmd
}

#[test]
fn every_bad_input_is_a_clean_error() {
    let cases = table();
    assert!(
        cases.len() >= 150,
        "the table has {} cases, fewer than 150",
        cases.len()
    );
    let root = tempfile::tempdir().unwrap();
    let mlp = common::model(root.path(), "mlp", 4);
    let held = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    // The valid checkpoint the `@ckpt` and `@state` generators take their bytes from.
    let ckpt = root.path().join("fixture-ckpt");
    let ck = ckpt.to_str().unwrap();
    let mut words = train_words();
    words.extend(
        [
            "--steps",
            "10",
            "--checkpoint-dir",
            ck,
            "--checkpoint-steps",
            "10",
        ]
        .map(String::from),
    );
    let out = common::bin()
        .args(&words)
        .env("RUST_LOG", "warn")
        .output()
        .unwrap();
    assert!(
        out.status.success() && ckpt.join("ckpt-10/train_state.json").is_file(),
        "the fixture checkpoint: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let fx = Arc::new(Fixtures {
        mlp_bytes: std::fs::read(&mlp).unwrap(),
        mlp_meta: std::fs::read(mlp.with_extension("json")).unwrap(),
        mlp,
        python: PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/tf1_mlp_momentum.pb"
        )),
        busy: held.local_addr().unwrap().port(),
        ckpt,
    });
    // Only the cases this filter names (`BAD_INPUTS_ONLY=12,40`): for debugging one line.
    let only: Option<Vec<usize>> = std::env::var("BAD_INPUTS_ONLY")
        .ok()
        .map(|s| s.split(',').filter_map(|n| n.parse().ok()).collect());
    let cases: Arc<Vec<Case>> = Arc::new(
        cases
            .into_iter()
            .filter(|c| only.as_ref().is_none_or(|o| o.contains(&c.line)))
            .collect(),
    );
    let next = Arc::new(AtomicUsize::new(0));
    let outcomes = Arc::new(Mutex::new(Vec::new()));
    let started = Instant::now();
    let threads: Vec<_> = (0..THREADS)
        .map(|_| {
            let (cases, next, outcomes, fx) =
                (cases.clone(), next.clone(), outcomes.clone(), fx.clone());
            let root = root.path().to_path_buf();
            std::thread::spawn(move || loop {
                let i = next.fetch_add(1, Ordering::SeqCst);
                let Some(c) = cases.get(i) else { break };
                let o = run_case(c, &fx, &root);
                outcomes.lock().unwrap().push(o);
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    drop(held);
    let mut outcomes = std::mem::take(&mut *outcomes.lock().unwrap());
    outcomes.sort_by_key(|o| o.case);
    let failed: Vec<&Outcome> = outcomes.iter().filter(|o| !o.ok).collect();
    let slowest = outcomes
        .iter()
        .max_by(|a, b| a.secs.total_cmp(&b.secs))
        .map_or(0.0, |o| o.secs);
    eprintln!(
        "bad-input table: {} cases, {} clean errors, {} failures, {:.1} s in all, slowest case {:.1} s",
        outcomes.len(),
        outcomes.len() - failed.len(),
        failed.len(),
        started.elapsed().as_secs_f64(),
        slowest
    );
    let report: Vec<&str> = failed.iter().map(|o| o.report.as_str()).collect();
    assert!(failed.is_empty(), "\n{}", report.join("\n\n"));
}

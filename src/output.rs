//! The one path by which the CLI writes to stdout (and [`note`], by which a command writes a
//! line for people to stderr without a failure ending it). Every write is flushed at once and its failure
//! is an error naming stdout — a full disk (`> /dev/full`, ENOSPC), a closed pipe (EPIPE, when
//! SIGPIPE is ignored) — where `println!` would panic. A stdout that was closed when the program
//! started (`>&-`, EBADF) is an error at the first write too: the standard library treats writes
//! to a closed stdout as success, and the JSON a user asked for would be lost with exit 0.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

use anyhow::{bail, Context, Result};

/// Whether fd 1 was closed when the process started.
static STDOUT_CLOSED: AtomicBool = AtomicBool::new(false);

/// Records whether fd 1 is closed, before Rust's runtime starts: the runtime opens `/dev/null`
/// on a closed fd 0, 1 or 2 (so that no file opened later takes their numbers), after which a
/// closed stdout can no longer be told from `> /dev/null`. Run by the dynamic loader, like every
/// `.init_array` entry, before `main`.
extern "C" fn record_closed_stdout() {
    // SAFETY: F_GETFD only asks whether fd 1 is open.
    if unsafe { libc::fcntl(1, libc::F_GETFD) } == -1 {
        STDOUT_CLOSED.store(true, Ordering::SeqCst);
    }
}

#[used]
#[link_section = ".init_array"]
static RECORD_CLOSED_STDOUT: extern "C" fn() = record_closed_stdout;

/// Writes `text` to stdout and flushes it.
///
/// # Errors
/// Naming stdout and the OS error, when stdout is closed, full or a closed pipe.
pub fn write(text: &str) -> Result<()> {
    if STDOUT_CLOSED.load(Ordering::SeqCst) {
        bail!(
            "stdout is closed (EBADF): the output would be lost; run with stdout open \
             (e.g. `> FILE`)"
        );
    }
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .context("writing to stdout")
}

/// `println!` that returns an error instead of panicking (see [`write`]).
#[macro_export]
macro_rules! outln {
    () => {
        $crate::output::write("\n")
    };
    ($($arg:tt)*) => {
        $crate::output::write(&format!("{}\n", format_args!($($arg)*)))
    };
}

/// `print!` that returns an error instead of panicking (see [`write`]).
#[macro_export]
macro_rules! out {
    ($($arg:tt)*) => {
        $crate::output::write(&format!($($arg)*))
    };
}

/// Writes `text` to stderr and returns whether it was written. Stderr carries notes and progress
/// for people: a full or closed one (`2> /dev/full`) loses the text, never the run.
pub fn note(text: &str) -> bool {
    let mut err = std::io::stderr().lock();
    err.write_all(text.as_bytes())
        .and_then(|()| err.flush())
        .is_ok()
}

/// `eprintln!` that drops the line instead of panicking when stderr fails (see [`note`]);
/// evaluates to whether it was written.
#[macro_export]
macro_rules! noteln {
    ($($arg:tt)*) => {
        $crate::output::note(&format!("{}\n", format_args!($($arg)*)))
    };
}

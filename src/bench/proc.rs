//! Process plumbing of the IPC bench: CPU placement, the forked echo process, and the
//! signals that keep a broken measurement from hanging.
//!
//! Each measurement forks an echo process that plays the other side of the ping-pong. The
//! timing process never waits forever: the echo process's death (`SIGCHLD`), Ctrl-C and a
//! per-measurement alarm all interrupt blocking calls (handlers installed without
//! `SA_RESTART`) and set [`ABORT`], which every wait loop checks; on the alarm the handler
//! also kills the echo process, so a peer stuck in a library call sees EOF. The echo process
//! dies with its parent (`PR_SET_PDEATHSIG`).

use std::io::Write as _;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet};
use nix::sys::signal::{kill, sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::{fork, getpid, getppid, pipe2, ForkResult, Pid};

use super::transports::{Endpoint, Pair};

/// Set by any signal that must end the current measurement: pass it as the `stop` flag of
/// library calls that wait (accept, connect, acquire).
pub(crate) static ABORT: AtomicBool = AtomicBool::new(false);
static CHILD_EXITED: AtomicBool = AtomicBool::new(false);
static TIMED_OUT: AtomicBool = AtomicBool::new(false);
static INTERRUPTED: AtomicBool = AtomicBool::new(false);
static CHILD_PID: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_child(_: libc::c_int) {
    CHILD_EXITED.store(true, Ordering::SeqCst);
    ABORT.store(true, Ordering::SeqCst);
}

extern "C" fn on_alarm(_: libc::c_int) {
    TIMED_OUT.store(true, Ordering::SeqCst);
    ABORT.store(true, Ordering::SeqCst);
    let pid = CHILD_PID.load(Ordering::SeqCst);
    if pid > 0 {
        // SAFETY: kill(2) is async-signal-safe; `pid` is the echo process we forked and
        // have not reaped yet (CHILD_PID is cleared before reaping).
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}

extern "C" fn on_interrupt(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
    ABORT.store(true, Ordering::SeqCst);
}

/// The bench's signal handlers, installed for its duration; the previous ones come back on
/// drop.
pub(crate) struct SignalGuard {
    old: Vec<(Signal, SigAction)>,
}

impl SignalGuard {
    /// Installs handlers for SIGCHLD, SIGALRM, SIGINT and SIGTERM, without `SA_RESTART` so
    /// that they interrupt blocking calls.
    pub(crate) fn install() -> Result<SignalGuard> {
        let mut old = vec![];
        let table: [(Signal, extern "C" fn(libc::c_int)); 4] = [
            (Signal::SIGCHLD, on_child),
            (Signal::SIGALRM, on_alarm),
            (Signal::SIGINT, on_interrupt),
            (Signal::SIGTERM, on_interrupt),
        ];
        for (sig, h) in table {
            let act = SigAction::new(SigHandler::Handler(h), SaFlags::SA_NOCLDSTOP, SigSet::empty());
            // SAFETY: every handler only does atomic loads and stores and kill(2), all
            // async-signal-safe.
            let prev = unsafe { sigaction(sig, &act) }.with_context(|| format!("installing a {sig} handler"))?;
            old.push((sig, prev));
        }
        Ok(SignalGuard { old })
    }
}

impl Drop for SignalGuard {
    fn drop(&mut self) {
        for (sig, act) in self.old.drain(..).rev() {
            // SAFETY: restores the handler that was in place before `install`.
            let _ = unsafe { sigaction(sig, &act) };
        }
    }
}

/// Errors if the current measurement must end: Ctrl-C, the alarm, or the echo process gone.
pub(crate) fn abort_check() -> Result<()> {
    if INTERRUPTED.load(Ordering::SeqCst) {
        bail!("interrupted");
    }
    if TIMED_OUT.load(Ordering::SeqCst) {
        bail!("timed out (the echo process was killed)");
    }
    if CHILD_EXITED.load(Ordering::SeqCst) {
        bail!("the echo process exited");
    }
    Ok(())
}

/// Whether Ctrl-C (SIGINT/SIGTERM) arrived: the whole bench stops.
pub(crate) fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// Where the two processes run.
#[derive(Clone, Debug, serde::Serialize)]
pub(crate) struct Placement {
    /// CPUs this process may run on (its affinity mask).
    pub allowed: Vec<usize>,
    /// CPU of the timing process, if pinned.
    pub timing_cpu: Option<usize>,
    /// CPU of the echo process, if pinned.
    pub echo_cpu: Option<usize>,
    /// Whether both share one CPU (spin loops then yield).
    pub single_cpu: bool,
}

impl Placement {
    /// Picks two CPUs: `want` if given (both must be allowed and distinct), else the first
    /// two of the affinity mask. With one CPU both processes run unpinned.
    pub(crate) fn plan(want: Option<[usize; 2]>) -> Result<Placement> {
        let set = sched_getaffinity(Pid::from_raw(0)).context("sched_getaffinity")?;
        let allowed: Vec<usize> = (0..CpuSet::count()).filter(|&c| set.is_set(c).unwrap_or(false)).collect();
        let list = allowed.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(",");
        if let Some([a, b]) = want {
            if a == b {
                bail!("--cpus {a},{b}: the two processes need two different CPUs");
            }
            for c in [a, b] {
                if !allowed.contains(&c) {
                    bail!("--cpus {a},{b}: CPU {c} is not in this process's affinity mask ({list}); pick two of those");
                }
            }
            return Ok(Placement { allowed, timing_cpu: Some(a), echo_cpu: Some(b), single_cpu: false });
        }
        if allowed.len() < 2 {
            return Ok(Placement { allowed, timing_cpu: None, echo_cpu: None, single_cpu: true });
        }
        Ok(Placement { timing_cpu: Some(allowed[0]), echo_cpu: Some(allowed[1]), allowed, single_cpu: false })
    }

    /// One line for the report.
    pub(crate) fn describe(&self) -> String {
        let list = self.allowed.iter().map(|c| c.to_string()).collect::<Vec<_>>().join(",");
        match (self.timing_cpu, self.echo_cpu) {
            (Some(a), Some(b)) => format!(
                "timing process pinned to CPU {a}, echo process to CPU {b} (sched_setaffinity; allowed CPUs: {list})"
            ),
            _ => format!(
                "ONLY ONE CPU available (allowed: {list}): both processes run unpinned on it, spin loops yield, \
                 and the numbers measure context switches, not a transfer between cores"
            ),
        }
    }
}

/// Pins the calling process to `cpu`.
pub(crate) fn pin_self(cpu: usize) -> Result<()> {
    let mut set = CpuSet::new();
    set.set(cpu).map_err(|e| anyhow!("CPU {cpu}: {e}"))?;
    sched_setaffinity(Pid::from_raw(0), &set).with_context(|| format!("sched_setaffinity to CPU {cpu}"))
}

/// Restores this process's affinity mask on drop.
pub(crate) struct AffinityRestore(CpuSet);

impl AffinityRestore {
    /// Remembers the current mask.
    pub(crate) fn save() -> Result<AffinityRestore> {
        Ok(AffinityRestore(sched_getaffinity(Pid::from_raw(0)).context("sched_getaffinity")?))
    }
}

impl Drop for AffinityRestore {
    fn drop(&mut self) {
        let _ = sched_setaffinity(Pid::from_raw(0), &self.0);
    }
}

/// Cancels the alarm on drop.
struct Alarm;

impl Alarm {
    fn set(limit: Duration) -> Alarm {
        TIMED_OUT.store(false, Ordering::SeqCst);
        nix::unistd::alarm::set(limit.as_secs().clamp(1, u32::MAX as u64) as u32);
        Alarm
    }
}

impl Drop for Alarm {
    fn drop(&mut self) {
        nix::unistd::alarm::cancel();
    }
}

/// Forks an echo process that takes `pair`'s child side, pins itself to `echo_cpu` and
/// answers `messages` messages (receive k, then send k); meanwhile runs `body` on the
/// parent side. The whole exchange must end within `limit`. The echo process's own error,
/// if any, is reported first.
pub(crate) fn with_echo<T>(
    pair: Box<dyn Pair>,
    echo_cpu: Option<usize>,
    messages: u64,
    limit: Duration,
    body: impl FnOnce(&mut dyn Endpoint) -> Result<T>,
) -> Result<T> {
    let (release_r, release_w) = pipe2(OFlag::O_CLOEXEC).context("pipe2")?;
    let (err_r, err_w) = pipe2(OFlag::O_CLOEXEC).context("pipe2")?;
    CHILD_EXITED.store(false, Ordering::SeqCst);
    TIMED_OUT.store(false, Ordering::SeqCst);
    ABORT.store(INTERRUPTED.load(Ordering::SeqCst), Ordering::SeqCst);
    let parent = getpid();
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
    // SAFETY: the bench runs on one thread, and even where it does not (a test harness),
    // the child only allocates (glibc's malloc is reset by its fork handlers), makes
    // syscalls and leaves with _exit, never returning into the parent's code.
    match unsafe { fork() }.context("fork")? {
        ForkResult::Child => {
            drop(release_w);
            drop(err_r);
            let code = echo_main(pair, echo_cpu, messages, parent, release_r, err_w);
            // SAFETY: _exit ends the echo process without running the destructors of the
            // parent's objects it inherited (which would unlink the parent's sockets) or
            // flushing the parent's stdio buffers.
            unsafe { libc::_exit(code) }
        }
        ForkResult::Parent { child } => {
            CHILD_PID.store(child.as_raw(), Ordering::SeqCst);
            drop(release_r);
            drop(err_w);
            let alarm = Alarm::set(limit);
            let result = pair.parent().context("setting up").and_then(|mut ep| body(ep.as_mut()));
            drop(release_w); // the echo process waits for this EOF before it exits
            let status = reap(child, result.is_err());
            drop(alarm);
            let mut msg = String::new();
            let mut b = [0u8; 4096];
            while let Ok(n @ 1..) = nix::unistd::read(err_r.as_raw_fd(), &mut b) {
                msg.push_str(&String::from_utf8_lossy(&b[..n]));
            }
            if !msg.is_empty() {
                return Err(match result {
                    Err(e) => anyhow!("echo process: {msg} (timing process: {e:#})"),
                    Ok(_) => anyhow!("echo process: {msg}"),
                });
            }
            let v = result?;
            match status {
                Ok(WaitStatus::Exited(_, 0)) => Ok(v),
                Ok(s) => bail!("echo process ended badly: {s:?}"),
                Err(e) => Err(e),
            }
        }
    }
}

/// Waits for the echo process (killing it first if `kill_now`, or after 5 s).
fn reap(child: Pid, kill_now: bool) -> Result<WaitStatus> {
    if kill_now {
        CHILD_PID.store(0, Ordering::SeqCst);
        let _ = kill(child, Signal::SIGKILL);
    }
    let start = Instant::now();
    loop {
        match waitpid(child, Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) => {
                if start.elapsed() > Duration::from_secs(5) {
                    CHILD_PID.store(0, Ordering::SeqCst);
                    let _ = kill(child, Signal::SIGKILL);
                }
                std::thread::sleep(Duration::from_micros(200));
            }
            Ok(s) => {
                CHILD_PID.store(0, Ordering::SeqCst);
                return Ok(s);
            }
            Err(Errno::EINTR) => {}
            Err(e) => {
                CHILD_PID.store(0, Ordering::SeqCst);
                bail!("waitpid on the echo process: {e}");
            }
        }
    }
}

fn echo_main(
    pair: Box<dyn Pair>,
    cpu: Option<usize>,
    messages: u64,
    parent: Pid,
    release: OwnedFd,
    err: OwnedFd,
) -> i32 {
    let run = || -> Result<()> {
        nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).context("PR_SET_PDEATHSIG")?;
        if getppid() != parent {
            bail!("the timing process exited during set-up");
        }
        if let Some(c) = cpu {
            pin_self(c)?;
        }
        let mut ep = pair.child().context("setting up")?;
        for k in 0..messages {
            ep.recv(k).with_context(|| format!("message {k}"))?;
            ep.send(k).with_context(|| format!("reply {k}"))?;
        }
        // Stay until the timing process is done with its side (EOF on `release`).
        let mut b = [0u8; 1];
        while let Err(Errno::EINTR) = nix::unistd::read(release.as_raw_fd(), &mut b) {}
        drop(ep);
        Ok(())
    };
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(run)) {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => {
            let _ = nix::unistd::write(err.as_fd(), format!("{e:#}").as_bytes());
            1
        }
        Err(_) => {
            let _ = nix::unistd::write(err.as_fd(), b"panicked (see stderr)");
            101
        }
    }
}

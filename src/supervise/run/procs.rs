//! The stage processes of a run: starting one ([`spawn`]), how one ended, and what follows
//! its death ([`plan_restart`]).

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use nix::sys::signal::Signal;

use zcpipe_core::frame::Stage;
use zcpipe_core::id::StageId;

use super::CAMERA_BACKOFF_MAX;
use crate::cli::stage_args::{self, ARGS_FD};

/// The fd number children find their report socket at.
pub(super) const REPORT_FD: i32 = 3;

/// One stage process of a run, and what the supervisor knows of it.
pub(super) struct Proc {
    /// Which stage process it is (`capture@NAME` for one camera of several): its name in
    /// reports and logs.
    pub(super) id: StageId,
    /// A camera of several: restarted however often it dies (its back-off grows to
    /// [`CAMERA_BACKOFF_MAX`]), so a camera that is gone for a while never stops the others.
    pub(super) forever: bool,
    pub(super) child: Child,
    pub(super) status: Option<ExitStatus>,
    /// Its arguments, for a restart.
    pub(super) args: Vec<String>,
    /// When this process said it is set up (its first report), if it did.
    pub(super) up_since: Option<Instant>,
    /// When the stage last died, of the deaths that were restarted within the window.
    pub(super) restarts: Vec<Instant>,
    /// Restarts over the whole run.
    pub(super) restarted: u32,
    /// The wait before the next restart.
    pub(super) backoff: Duration,
    /// A restart due at this time.
    pub(super) restart_at: Option<Instant>,
    /// A planned kill due at this time ([`Proc::restart_on_request_in`]).
    pub(super) kill_at: Option<Instant>,
    /// How the last process ended (`killed by signal 9 (SIGKILL)`, `exit code 1`).
    pub(super) last_death: String,
    /// When this process last reported (its heartbeat).
    pub(super) last_report: Instant,
    /// Why the watchdog killed this process, if it did.
    pub(super) watchdog: Option<String>,
    /// Its death was asked for by a change to the run (new options, a camera restarted):
    /// it is started again at once, the restart not counted against the policy.
    pub(super) planned: bool,
    /// Stopped for good by a change to the run (its camera or stage removed).
    pub(super) retired: bool,
    /// Started by a change to the running pipeline (a camera added): one that cannot start
    /// is retried like a camera that went away, never the end of the run.
    pub(super) added: bool,
}

impl Proc {
    pub(super) fn new(id: StageId, child: Child, args: Vec<String>, forever: bool) -> Proc {
        Proc {
            id,
            forever,
            child,
            status: None,
            args,
            up_since: None,
            restarts: vec![],
            restarted: 0,
            backoff: crate::supervise::BACKOFF_FIRST,
            restart_at: None,
            kill_at: None,
            last_death: String::new(),
            last_report: Instant::now(),
            watchdog: None,
            planned: false,
            retired: false,
            added: false,
        }
    }

    /// Whether this is a capture stage (any camera's).
    pub(super) fn is_capture(&self) -> bool {
        self.id.is(Stage::Capture)
    }

    /// Whether this is a sink (the display, the recorder).
    pub(super) fn is_sink(&self) -> bool {
        self.id.role.is_sink()
    }

    /// Restarts it at once for a change to the run: a live process is killed (its death is
    /// planned: [`Proc::planned`]), a dead one is started now.
    pub(super) fn restart_on_request(&mut self) {
        self.restart_on_request_in(Duration::ZERO);
    }

    /// [`Proc::restart_on_request`] in `delay` (the publish stage's web view answers the
    /// request that restarts it first).
    pub(super) fn restart_on_request_in(&mut self, delay: Duration) {
        self.planned = true;
        match self.status {
            None => {
                self.kill_at = Some(Instant::now() + delay);
                self.kill_if_due();
            }
            Some(_) => self.restart_at = Some(Instant::now() + delay),
        }
    }

    /// Kills it if a planned kill is due.
    pub(super) fn kill_if_due(&mut self) {
        if self.kill_at.is_some_and(|t| Instant::now() >= t) {
            self.kill_at = None;
            if self.status.is_none() {
                let _ = self.child.kill();
            }
        }
    }

    /// Its process id, for signals.
    pub(super) fn pid(&self) -> nix::unistd::Pid {
        nix::unistd::Pid::from_raw(self.child.id() as i32)
    }
}

/// A process's state letter from `/proc/PID/stat` with its meaning (proc(5)): `T (stopped)`.
pub(super) fn process_state(pid: u32) -> String {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let c = stat.rsplit(')').next().and_then(|r| r.trim_start().chars().next()).unwrap_or('?');
    let what = match c {
        'R' => "running",
        'S' => "sleeping",
        'D' => "waiting on the disk or a device",
        'T' | 't' => "stopped",
        'Z' => "a zombie",
        _ => "unknown",
    };
    format!("{c} ({what})")
}

/// How a stage process ended, in words: `exit code 1`, `killed by signal 9 (SIGKILL)`.
fn death(s: &ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match s.signal() {
        Some(sig) => format!("killed by signal {sig} ({})", Signal::try_from(sig).map(|s| s.as_str()).unwrap_or("?")),
        None => format!("exit code {}", s.code().unwrap_or(-1)),
    }
}

/// The exit code of a process that ended with `s` (128 + the signal for a killed one).
pub(super) fn code(s: &ExitStatus) -> i32 {
    use std::os::unix::process::ExitStatusExt;
    s.code().unwrap_or_else(|| 128 + s.signal().unwrap_or(0))
}

/// Whether something listens on the socket at `p`.
pub(super) fn probe(p: &std::path::Path) -> Option<()> {
    use nix::sys::socket::{connect, socket, AddressFamily, SockFlag, SockType, UnixAddr};
    let addr = UnixAddr::new(p).ok()?;
    [SockType::SeqPacket, SockType::Stream].into_iter().find_map(|t| {
        let fd = socket(AddressFamily::Unix, t, SockFlag::SOCK_CLOEXEC, None).ok()?;
        connect(fd.as_raw_fd(), &addr).ok()
    })
}

/// A socket in `dir` that something is listening on, if any.
pub(super) fn live_socket_in(dir: &std::path::Path) -> Option<std::path::PathBuf> {
    std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|x| x == "sock") && probe(p).is_some())
}

/// Starts stage process `id` of `exe` (`zcpipe stage <role> ARGS`) with the secrets `env`
/// in its environment, `report_w` as its report socket at [`REPORT_FD`], and its options
/// `args` out of sight: only those that tell stages apart on its command line, the rest in
/// a sealed memfd at [`ARGS_FD`] ([`crate::cli::stage_args`]).
pub(super) fn spawn(
    exe: &std::path::Path,
    id: &StageId,
    args: Vec<String>,
    env: &[(String, String)],
    report_w: &OwnedFd,
) -> Result<Child> {
    let (visible, hidden) = stage_args::split(id.role.name(), &args);
    let memfd = stage_args::sealed(&hidden).with_context(|| format!("starting the {id} stage"))?;
    let mut cmd = Command::new(exe);
    cmd.envs(env.iter().map(|(k, v)| (k, v)));
    cmd.arg("stage").arg(id.role.name()).args(&visible).arg(format!("--args-fd={ARGS_FD}"));
    cmd.stdin(Stdio::null()).stderr(Stdio::inherit());
    cmd.stdout(if id.is(Stage::Publish) { Stdio::inherit() } else { Stdio::null() });
    if std::env::var_os("RUST_LOG").is_none() {
        let lvl = log::max_level().to_string().to_lowercase();
        cmd.env("RUST_LOG", format!("zcpipe={lvl},warn"));
    }
    let (w, m) = (report_w.as_raw_fd(), memfd.as_raw_fd());
    // SAFETY: the closure runs in the forked child before exec and only makes
    // async-signal-safe system calls (setpgid, prctl, getppid, fcntl, dup2) on fds we own.
    unsafe {
        cmd.pre_exec(move || {
            // Own process group: a terminal's Ctrl-C goes to the supervisor alone.
            libc::setpgid(0, 0);
            // Die with the supervisor: no orphan stages.
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            if libc::getppid() == 1 {
                return Err(std::io::Error::other("supervisor already gone"));
            }
            // Both fds first above the targets (one may sit on the other's number), then
            // onto them without close-on-exec.
            let (w, m) = (libc::fcntl(w, libc::F_DUPFD_CLOEXEC, 10), libc::fcntl(m, libc::F_DUPFD_CLOEXEC, 10));
            if w < 0 || m < 0 || libc::dup2(w, REPORT_FD) < 0 || libc::dup2(m, ARGS_FD) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    // The options on fd 4 in this process's own log, a camera's URL with its password masked.
    let shown = stage_args::shown(&hidden.args);
    log::debug!(
        "starting: {} stage {} {} --args-fd={ARGS_FD} with {} ({id})",
        exe.display(),
        id.role.name(),
        visible.join(" "),
        shown.join(" ")
    );
    let child = cmd.spawn().with_context(|| format!("starting the {id} stage ({})", exe.display()));
    drop(memfd);
    child
}

/// Decides what follows the death (`s`) of `p`, a stage whose run was not stopping: a
/// restart after its back-off (`Ok(the wait)`, scheduled in `p`), or, if it never got set
/// up (a configuration error, said by the stage itself) or died more than `policy` allows,
/// `Err(the line that says why the run stops)`.
pub(super) fn plan_restart(
    p: &mut Proc,
    policy: &crate::supervise::RestartPolicy,
    s: &ExitStatus,
) -> std::result::Result<Duration, String> {
    p.last_death = match &p.watchdog {
        Some(why) => format!("{why}, killed by the watchdog (--watchdog)"),
        None => death(s),
    };
    let name = p.id.clone();
    if p.up_since.is_none() && p.restarted == 0 && !(p.added && p.forever) {
        // A stage that cannot start is not restarted. An exit code comes with the stage's
        // own error line, which says it all; a signal is news.
        use std::os::unix::process::ExitStatusExt;
        return Err(if s.signal().is_some() {
            format!("the {name} stage was {} during set-up; stopped the others", p.last_death)
        } else {
            String::new()
        });
    }
    if policy.max == 0 {
        return Err(format!("the {name} stage was {}; stopped the others (--restart-max 0)", p.last_death)
            .replace("was exit code", "ended with exit code"));
    }
    let now = Instant::now();
    p.restarts.retain(|t| now.duration_since(*t) < policy.window);
    if p.forever {
        // A camera of several: gone for a while (unplugged, its network down), retried with
        // a back-off that grows to CAMERA_BACKOFF_MAX, never given up on.
        let delay = p.backoff;
        p.backoff = (p.backoff * 2).min(CAMERA_BACKOFF_MAX);
        p.restart_at = Some(now + delay);
        return Ok(delay);
    }
    if p.restarts.len() as u32 >= policy.max {
        return Err(format!(
            "the {name} stage died {} times within {} s (last: {}); gave up restarting it (--restart-max {}, --restart-window {}) and stopped the others",
            p.restarts.len() + 1,
            policy.window.as_secs(),
            p.last_death,
            policy.max,
            policy.window.as_secs()
        ));
    }
    p.restarts.push(now);
    let delay = p.backoff;
    p.backoff = (p.backoff * 2).min(crate::supervise::BACKOFF_MAX);
    p.restart_at = Some(now + delay);
    Ok(delay)
}

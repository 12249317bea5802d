//! The run's control socket ([`zcpipe_core::control::SOCKET`] in the run directory): a
//! thread accepts clients (`zcpipe ctl`, the web view's control route), refuses another
//! user's (SO_PEERCRED), reads each one's request with a deadline, and hands it to the
//! supervisor's loop, which applies requests one at a time, in the order they came, between
//! two turns ([`super::supervisor::Supervisor::serve_control`]); the client waits for the
//! answer on its own thread, so a slow or silent client never holds the loop.

use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

use anyhow::{Context, Result};
use nix::poll::PollTimeout;
use nix::unistd::Group;

use zcpipe_core::control::{self, Answer, Channel, Refusal, Reply, Request, VERSION};

/// Clients served at once; more are told the run is busy.
const MAX_CLIENTS: usize = 8;
/// How long a client has to send its request.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);
/// How long a client waits for the loop's answer (a reload plans the whole run again).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(120);

/// A request for the supervisor's loop and where its answer goes.
pub(super) struct Pending {
    pub(super) request: Request,
    /// The client's pid, for the log line.
    pub(super) peer_pid: i32,
    pub(super) answer: mpsc::Sender<Reply>,
}

/// The control socket and its accepting thread; the socket file goes when this is dropped.
pub(super) struct ControlServer {
    rx: mpsc::Receiver<Pending>,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    path: PathBuf,
}

impl ControlServer {
    /// Binds the control socket in `run_dir` (mode 0600; with `group`, that group's members
    /// may change the run too: the socket is 0660 of that group, and the run directory lets
    /// the group through, 0710) and starts accepting.
    pub(super) fn bind(run_dir: &Path, group: Option<Group>) -> Result<ControlServer> {
        let path = run_dir.join(control::SOCKET);
        let fd = control::listen_at(&path, false, 16)?;
        let group = group.filter(|g| match share(run_dir, &path, g.gid) {
            Ok(()) if nix::unistd::geteuid().is_root() => {
                log::warn!("control: the members of group {} may change this run, which runs as root: they may have it read any file as a source and write where --record-dir points; give that group to administrators only, or run zcpipe as its own user (zcpipe.service)", named(g));
                true
            }
            Ok(()) => true,
            Err(e) => {
                log::warn!("control: the run's socket stays its user's only: {e:#}");
                false
            }
        });
        let (tx, rx) = mpsc::channel();
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let thread = std::thread::Builder::new()
            .name("control".into())
            .spawn(move || accept_loop(fd, tx, &s, group))
            .context("starting the control thread")?;
        Ok(ControlServer { rx, stop, thread: Some(thread), path })
    }

    /// The next request waiting, if any.
    pub(super) fn next(&self) -> Option<Pending> {
        self.rx.try_recv().ok()
    }
}

impl Drop for ControlServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Gives group `gid` the control socket at `path` (0660) and a way through `run_dir` (0710).
fn share(run_dir: &Path, path: &Path, gid: nix::unistd::Gid) -> Result<()> {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    for p in [run_dir, path] {
        nix::unistd::chown(p, None, Some(gid)).with_context(|| format!("chgrp {gid} {}", p.display()))?;
    }
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660))
        .with_context(|| format!("chmod 660 {}", path.display()))?;
    let mode = std::fs::metadata(run_dir)?.mode() & 0o7777;
    std::fs::set_permissions(run_dir, std::fs::Permissions::from_mode(mode | 0o010))
        .with_context(|| format!("chmod g+x {}", run_dir.display()))
}

/// Group `g` as a log line names it: `NAME (gid N)`.
fn named(g: &Group) -> String {
    format!("{} (gid {})", g.name, g.gid)
}

/// Accepts clients until `stop`, each served on its own thread (at most [`MAX_CLIENTS`]):
/// this run's user, root, and with `group` that group's members.
fn accept_loop(fd: OwnedFd, tx: mpsc::Sender<Pending>, stop: &AtomicBool, group: Option<Group>) {
    let live = Arc::new(AtomicUsize::new(0));
    let mut refused = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let Some(ch) = control::accept_channel(&fd, PollTimeout::from(200u16), REQUEST_TIMEOUT) else { continue };
        if !ch.peer_allowed() && !group.as_ref().is_some_and(|g| ch.peer_in_group(g.gid.as_raw())) {
            refused += 1;
            if refused <= 20 || refused.is_power_of_two() {
                let who = group.as_ref().map_or(String::new(), |g| format!(", the members of group {}", named(g)));
                log::warn!(
                    "control: refused pid {} of uid {}: only this run's user{who} (or root) may change it ({refused} refused so far)",
                    ch.peer_pid,
                    ch.peer_uid
                );
            }
            continue;
        }
        if live.load(Ordering::Relaxed) >= MAX_CLIENTS {
            answer(&ch, busy(&format!("{MAX_CLIENTS} control clients are being served; try again")));
            continue;
        }
        live.fetch_add(1, Ordering::Relaxed);
        let (tx, live) = (tx.clone(), live.clone());
        let spawned = std::thread::Builder::new().name("control-client".into()).spawn(move || {
            serve(ch, &tx);
            live.fetch_sub(1, Ordering::Relaxed);
        });
        if spawned.is_err() {
            log::warn!("control: cannot start a thread for a client; it was dropped");
        }
    }
}

/// One client: its request read (within [`REQUEST_TIMEOUT`]), handed to the loop, the
/// loop's answer sent back.
fn serve(ch: Channel, tx: &mpsc::Sender<Pending>) {
    let bytes = match ch.recv_bytes() {
        Ok(Some(b)) => b,
        Ok(None) => return,
        Err(e) => {
            log::info!("control: pid {} sent no request ({e:#})", ch.peer_pid);
            return;
        }
    };
    let request = match control::parse_ask(&bytes) {
        Ok(r) => r,
        Err(refusal) => return answer(&ch, refusal),
    };
    let (atx, arx) = mpsc::channel();
    if tx.send(Pending { request, peer_pid: ch.peer_pid, answer: atx }).is_err() {
        return answer(&ch, busy("the run is stopping"));
    }
    let reply = arx.recv_timeout(ANSWER_TIMEOUT).unwrap_or_else(|_| busy("the run did not answer in time"));
    answer(&ch, reply);
}

fn busy(why: &str) -> Reply {
    Reply::Refused { error: Refusal::Busy, message: why.to_string() }
}

fn answer(ch: &Channel, reply: Reply) {
    if let Err(e) = ch.send(&Answer { version: VERSION, reply }) {
        log::info!("control: could not answer pid {}: {e:#}", ch.peer_pid);
    }
}

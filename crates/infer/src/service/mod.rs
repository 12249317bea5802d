//! The inference service: local processes that are not cameras of the pipeline have the
//! loaded model detect objects in their own frames ([`zcpipe_core::service`] is the
//! protocol; its `client` module and `clients/python` are the clients).
//!
//! It lives in the infer process, next to the one loaded model and the one scheduler: a
//! client is one more source of the scheduler ([`crate::sched`], its weight
//! `--serve-weight`), so the NPU's engines take its requests and the cameras' frames by the
//! same rules. The accept thread checks each peer (SO_PEERCRED: our uid, root, or a member
//! of our group) and the number of clients; each client gets a thread that reads its
//! messages ([`conn`]), checks its buffers' fds once (a dma-buf, or a memfd sealed against
//! shrinking that holds the size it claims) and turns its requests into jobs ([`job`]) for
//! the scheduler. A free engine picks a job like a frame: the buffer is read under its
//! guard and letterboxed into the model's input on the CPU (an encoded picture is decoded
//! first, as the capture stage's `image:` source does), the engine runs it, and the answer
//! goes back on the client's socket without waiting: a client that does not read loses the
//! answer (counted), never the service's memory or an engine's time.
//!
//! A client that hangs up (EOF, or an error on its socket) has its waiting jobs and its
//! buffers dropped at once; a job an engine runs keeps the buffer until it is done.

mod conn;
pub(crate) mod job;
mod scratch;

use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::Scope;
use std::time::Duration;

use anyhow::Context;
use nix::sys::socket::{
    bind, getsockopt, listen, socket, sockopt, AddressFamily, Backlog, SockFlag, SockType, UnixAddr,
};
use std::collections::BTreeMap;

use zcpipe_core::service::{ClientStats, DropReason, Reply, ServiceStats, VERSION};

use crate::sched::CameraSched;

pub(crate) use conn::ClientState;
pub(crate) use job::ClientJob;
pub(crate) use scratch::Scratch;

/// The service's settings (`--serve`, `--serve-socket`, `--serve-*`), checked by the command line.
#[derive(Clone, Debug, PartialEq)]
pub struct ServiceConfig {
    /// The socket's path (the run directory's `npu.sock` unless `--serve-socket`).
    pub socket: PathBuf,
    /// Members of our group may connect (the socket is made mode 0660; its directory must
    /// let them reach it). Otherwise the socket is 0600.
    pub group: bool,
    /// Most clients connected at once.
    pub max_clients: usize,
    /// Most buffers one client may register.
    pub max_buffers: usize,
    /// Most `request` requests of one client waiting or running at once.
    pub queue: usize,
    /// Each client's weight in the scheduler.
    pub weight: f64,
    /// What brings a client's buffer to the model's input (`--serve-scaler`).
    pub scaler: ServiceScaler,
}

/// `--serve-scaler`: what converts and letterboxes a client's buffer into the model's input.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ServiceScaler {
    /// RGA when librga loads and reaches the driver, else the CPU.
    #[default]
    Auto,
    /// RGA (librga at run time); the stage does not start without it.
    Rga,
    /// The CPU, as the pipeline's `cpu` scaler.
    Cpu,
}

impl zcpipe_core::config::Choice for ServiceScaler {
    const ALL: &'static [(Self, &'static str, &'static str)] = &[
        (ServiceScaler::Auto, "auto", "RGA when librga loads and reaches /dev/rga, else the CPU"),
        (ServiceScaler::Rga, "rga", "RGA: a client's dma-buf imported once and converted in place into a model input the NPU reads in place; other memory by virtual addresses"),
        (ServiceScaler::Cpu, "cpu", "The CPU letterbox the pipeline's `cpu` scaler uses"),
    ];
}

impl ServiceConfig {
    /// The defaults for a socket at `socket`: owner only, 16 clients, 32 buffers and 4
    /// queued requests each, weight 1.
    pub fn at(socket: PathBuf) -> ServiceConfig {
        ServiceConfig {
            socket,
            group: false,
            max_clients: 16,
            max_buffers: 32,
            queue: 4,
            weight: 1.0,
            scaler: ServiceScaler::Auto,
        }
    }
}

/// The scheduler's side, as the service sees it: the infer stage's frame loop implements it.
pub(crate) trait Sink: Sync {
    /// Opens scheduler source `slot` for a client named `name` with weight `weight`.
    fn open(&self, slot: usize, name: String, weight: f64);
    /// Takes in a job; returns jobs to answer as dropped (the older video job it replaced,
    /// or this one if the stage is closing), to be answered outside any lock.
    fn submit(&self, job: ClientJob) -> Vec<(ClientJob, DropReason)>;
    /// The client of `slot` left: its waiting jobs, taken out.
    fn close(&self, slot: usize) -> Vec<ClientJob>;
    /// Each connected client's line in the scheduler, by name.
    fn client_lines(&self) -> BTreeMap<String, CameraSched>;
}

#[derive(Default)]
pub(crate) struct Totals {
    connections: AtomicU64,
    refused_peers: AtomicU64,
    refused_messages: AtomicU64,
    requests: AtomicU64,
    answered: AtomicU64,
    busy: AtomicU64,
    dropped_rate: AtomicU64,
    pub(crate) dropped_newer: AtomicU64,
    pub(crate) dropped_age: AtomicU64,
    pub(crate) dropped_stopping: AtomicU64,
    answers_lost: AtomicU64,
    /// Requests letterboxed by RGA in place (a dma-buf into the NPU's input), by RGA
    /// through virtual addresses, and on the CPU.
    pub(crate) rga_in_place: AtomicU64,
    pub(crate) rga_by_address: AtomicU64,
    pub(crate) cpu_letterbox: AtomicU64,
}

/// What a welcome tells a client of the model.
#[derive(Clone, Debug)]
pub(crate) struct Model {
    pub(crate) input: [u32; 2],
    pub(crate) detector: String,
    pub(crate) labels: Arc<Vec<String>>,
}

/// The bound service, started by the frame loop ([`Service::serve`]).
pub(crate) struct Service {
    cfg: ServiceConfig,
    listener: OwnedFd,
    model: Model,
    /// Our uid and gid (peers must share one).
    me: (u32, u32),
    /// Each slot's client while connected.
    slots: Mutex<Vec<Option<Arc<ClientState>>>>,
    totals: Arc<Totals>,
    /// Set when the frame loop ends: the threads return.
    shutdown: AtomicBool,
    /// Whether clients' buffers go through RGA (`--serve-scaler`, resolved at bind).
    pub(crate) rga: bool,
}

impl Service {
    /// Binds the socket (before the stage says it is ready, so a client that sees the
    /// pipeline up finds it). A stale socket is replaced; a live one is another service:
    /// an error naming it.
    pub(crate) fn bind(cfg: ServiceConfig, model: Model) -> anyhow::Result<Service> {
        let path = &cfg.socket;
        let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        check_dir(dir)?;
        if path.exists() {
            if zcpipe_core::link::Conn::try_connect(path).ok().flatten().is_some() {
                anyhow::bail!("an inference service already listens at {}: another zcpipe runs there; stop it, or use another --instance or --serve-socket", path.display());
            }
            std::fs::remove_file(path).with_context(|| format!("removing the stale socket {}", path.display()))?;
        }
        let fd =
            socket(AddressFamily::Unix, SockType::SeqPacket, SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK, None)
                .context("socket(AF_UNIX, SOCK_SEQPACKET)")?;
        let addr = UnixAddr::new(path.as_path()).with_context(|| format!("socket path {}", path.display()))?;
        // Created owner-only, then opened to the group if asked: never wider meanwhile.
        let old = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o177));
        let bound = bind(fd.as_raw_fd(), &addr);
        nix::sys::stat::umask(old);
        bound.with_context(|| format!("binding the inference service at {}", path.display()))?;
        if cfg.group {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o660))
                .with_context(|| format!("chmod 660 {}", path.display()))?;
        }
        listen(&fd, Backlog::new(64).unwrap_or(Backlog::MAXCONN)).context("listen on the inference service socket")?;
        let me = (nix::unistd::geteuid().as_raw(), nix::unistd::getegid().as_raw());
        log::info!(
            "inference service at {} ({}; at most {} clients, {} buffers and {} queued requests each)",
            path.display(),
            if cfg.group { format!("uid {} and group {}", me.0, me.1) } else { format!("uid {} only", me.0) },
            cfg.max_clients,
            cfg.max_buffers,
            cfg.queue
        );
        let rga = scratch::resolve(cfg.scaler)?;
        let slots = Mutex::new(vec![None; cfg.max_clients]);
        Ok(Service {
            rga,
            cfg,
            listener: fd,
            model,
            me,
            slots,
            totals: Arc::new(Totals::default()),
            shutdown: AtomicBool::new(false),
        })
    }

    /// Serves clients on threads of `scope` until [`Service::stop`] or `stop`: the accept
    /// thread, and one per client. Jobs go to `sink`; `base` is the first scheduler source
    /// a client gets (client `k` is source `base + k`).
    pub(crate) fn serve<'scope, 'env>(
        &'scope self,
        scope: &'scope Scope<'scope, 'env>,
        sink: &'scope dyn Sink,
        base: usize,
        stop: &'scope AtomicBool,
    ) -> anyhow::Result<()> {
        std::thread::Builder::new()
            .name("npu-service".into())
            .spawn_scoped(scope, move || self.accept_loop(scope, sink, base, stop))
            .context("cannot start the inference service's thread")?;
        Ok(())
    }

    /// Ends the service's threads (within a receive timeout).
    pub(crate) fn stop(&self) {
        self.shutdown.store(true, Ordering::Relaxed);
    }

    fn stopping(&self, stop: &AtomicBool) -> bool {
        self.shutdown.load(Ordering::Relaxed) || stop.load(Ordering::Relaxed)
    }

    fn accept_loop<'scope, 'env>(
        &'scope self,
        scope: &'scope Scope<'scope, 'env>,
        sink: &'scope dyn Sink,
        base: usize,
        stop: &'scope AtomicBool,
    ) {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        use std::os::fd::AsFd;
        // An accept that fails (out of fds) is said once until one succeeds again.
        let mut failing = false;
        // Refused peers, kept open a moment so that their first message arrives and is read
        // before the close: a socket closed with unread data resets its peer, which would
        // then never read why it was refused.
        let mut lingering: Vec<(OwnedFd, std::time::Instant)> = Vec::new();
        while !self.stopping(stop) {
            lingering.retain(|(fd, since)| {
                conn::discard_pending(fd);
                since.elapsed() < LINGER
            });
            let mut fds = [PollFd::new(self.listener.as_fd(), PollFlags::POLLIN)];
            if !matches!(poll(&mut fds, PollTimeout::from(200u16)), Ok(n) if n > 0) {
                continue;
            }
            let fd = match nix::sys::socket::accept4(self.listener.as_raw_fd(), SockFlag::SOCK_CLOEXEC) {
                // SAFETY: accept4 just returned this new fd; nothing else owns it.
                Ok(fd) => unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) },
                Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EINTR | nix::errno::Errno::ECONNABORTED) => continue,
                Err(e) => {
                    // EMFILE and the like: the connection waits in the backlog; try again soon.
                    if !failing {
                        log::warn!("inference service: accept failed ({e}); trying again every 100 ms");
                        failing = true;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                    continue;
                }
            };
            failing = false;
            self.totals.connections.fetch_add(1, Ordering::Relaxed);
            let admitted = match self.admit_peer(fd) {
                Ok(a) => a,
                Err(fd) => {
                    if lingering.len() < MAX_LINGERING {
                        lingering.push((fd, std::time::Instant::now()));
                    }
                    continue;
                }
            };
            if let Some((slot, client)) = admitted {
                let spawned = std::thread::Builder::new()
                    .name(format!("npu-client-{slot}"))
                    .spawn_scoped(scope, move || conn::serve_client(self, &client, slot, base, sink, stop));
                if let Err(e) = spawned {
                    log::warn!("inference service: cannot start a client's thread ({e}); it is refused");
                    self.free(slot);
                }
            }
        }
    }

    /// Checks a new connection's peer and finds it a slot; refuses it (one logged line, a
    /// `refused` message) otherwise, handing its socket back to linger (`Err`).
    fn admit_peer(&self, fd: OwnedFd) -> Result<Option<(usize, Arc<ClientState>)>, OwnedFd> {
        let refuse = |fd: &OwnedFd, why: String| {
            let n = self.totals.refused_peers.fetch_add(1, Ordering::Relaxed) + 1;
            // The 1st, 2nd, 4th, 8th, ... refusal is logged: a peer connecting in a loop
            // cannot flood the log (every one is counted).
            if n.is_power_of_two() {
                log::warn!("inference service: {why} ({n} peers refused so far)");
            }
            conn::send_now(fd, &Reply::Refused { v: VERSION, seq: None, reason: why, fatal: true });
        };
        let cred = match getsockopt(&fd, sockopt::PeerCredentials) {
            Ok(c) => c,
            Err(e) => {
                refuse(&fd, format!("a peer whose credentials cannot be read (SO_PEERCRED: {e}) refused"));
                return Err(fd);
            }
        };
        let (pid, uid, gid) = (cred.pid(), cred.uid(), cred.gid());
        if !peer_allowed((uid, gid), self.me, || peer_groups(&fd)) {
            refuse(
                &fd,
                format!(
                    "refused pid {pid} uid {uid}: only uid {} (or members of group {}) may use the model; add that user to the group, and start zcpipe with --serve-group",
                    self.me.0, self.me.1
                ),
            );
            return Err(fd);
        }
        self.wait_for_departures();
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        let Some(slot) = slots.iter().position(Option::is_none) else {
            drop(slots);
            refuse(
                &fd,
                format!(
                    "refused pid {pid} uid {uid}: {} clients are connected, the most --serve-clients allows; try again later, or raise --serve-clients",
                    self.cfg.max_clients
                ),
            );
            return Err(fd);
        };
        let client = Arc::new(ClientState::new(fd, pid, uid, self.totals.clone()));
        slots[slot] = Some(client.clone());
        Ok(Some((slot, client)))
    }

    /// With every slot taken, waits a moment (at most 200 ms) for clients that have hung
    /// up to be cleared out, so that a client reconnecting right after it closed is not
    /// refused for its own old connection.
    fn wait_for_departures(&self) {
        let t = std::time::Instant::now();
        while t.elapsed() < Duration::from_millis(200) {
            let slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
            if slots.iter().any(Option::is_none) || !slots.iter().flatten().any(|c| c.hung_up()) {
                return;
            }
            drop(slots);
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    fn free(&self, slot: usize) {
        if let Some(s) = self.slots.lock().unwrap_or_else(|p| p.into_inner()).get_mut(slot) {
            *s = None;
        }
    }

    /// The numbers: the totals, and each connected client's, its scheduler line (`lines`,
    /// by name) with the service's counts of it.
    pub(crate) fn stats(&self, lines: &BTreeMap<String, CameraSched>) -> ServiceStats {
        let clients: Vec<Arc<ClientState>> =
            self.slots.lock().unwrap_or_else(|p| p.into_inner()).iter().flatten().cloned().collect();
        let t = &self.totals;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let per_client: BTreeMap<String, ClientStats> = clients
            .iter()
            .filter_map(|c| c.stats())
            .map(|(name, mut c)| {
                if let Some(l) = lines.get(&name) {
                    c.weight = l.weight;
                    c.admitted = l.counts.admitted;
                    c.inferred = l.counts.inferred;
                    c.newer = l.counts.replaced;
                    c.age = l.counts.expired;
                    c.inferred_fps = l.inferred_fps;
                    c.wait_p50_us = l.wait_p50_us;
                    c.wait_p99_us = l.wait_p99_us;
                }
                (name, c)
            })
            .collect();
        ServiceStats {
            socket: self.cfg.socket.display().to_string(),
            clients: clients.len() as u64,
            connections: get(&t.connections),
            refused_peers: get(&t.refused_peers),
            refused_messages: get(&t.refused_messages),
            requests: get(&t.requests),
            answered: get(&t.answered),
            busy: get(&t.busy),
            dropped_rate: get(&t.dropped_rate),
            dropped_newer: get(&t.dropped_newer),
            dropped_age: get(&t.dropped_age),
            dropped_stopping: get(&t.dropped_stopping),
            answers_lost: get(&t.answers_lost),
            buffers: per_client.values().map(|c| c.buffers).sum(),
            scaler: if self.rga { "rga" } else { "cpu" }.into(),
            rga_in_place: get(&t.rga_in_place),
            rga_by_address: get(&t.rga_by_address),
            cpu_letterbox: get(&t.cpu_letterbox),
            per_client,
        }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.cfg.socket);
    }
}

/// Whether a peer of `(uid, gid)` may use the service run by `me` (uid, gid): the same
/// uid, root, or a member of our group (primary, or among `groups()`, its supplementary
/// groups from SO_PEERGROUPS).
fn peer_allowed(peer: (u32, u32), me: (u32, u32), groups: impl FnOnce() -> Vec<u32>) -> bool {
    peer.0 == me.0 || peer.0 == 0 || peer.1 == me.1 || groups().contains(&me.1)
}

/// The peer's supplementary groups (SO_PEERGROUPS, Linux 4.13); empty if unknown.
fn peer_groups(fd: &OwnedFd) -> Vec<u32> {
    let mut groups = vec![0u32; 256];
    let mut len = (groups.len() * 4) as libc::socklen_t;
    // SAFETY: `groups` has `len` writable bytes, the kernel writes at most that many and
    // sets `len` to what it wrote; `fd` is a live socket.
    let r = unsafe {
        libc::getsockopt(fd.as_raw_fd(), libc::SOL_SOCKET, libc::SO_PEERGROUPS, groups.as_mut_ptr().cast(), &mut len)
    };
    if r != 0 {
        return Vec::new();
    }
    groups.truncate(len as usize / 4);
    groups
}

/// How long a refused peer's socket stays open for its first message to be read.
const LINGER: Duration = Duration::from_millis(500);
/// Most refused peers lingering at once (beyond: closed at once).
const MAX_LINGERING: usize = 64;

/// The socket's directory must be ours and not writable by others (who could replace the
/// socket); it is made (0700) if missing.
fn check_dir(dir: &Path) -> anyhow::Result<()> {
    zcpipe_core::config::private_place(
        dir,
        "--serve-socket directory",
        "remove it, or give --serve-socket a path in a directory of your own with mode 0700",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn peers_of_our_uid_root_or_our_group_may_connect() {
        let me = (1000, 1000);
        assert!(peer_allowed((1000, 5), me, Vec::new));
        assert!(peer_allowed((0, 0), me, Vec::new));
        assert!(peer_allowed((1001, 1000), me, Vec::new));
        assert!(peer_allowed((1001, 1001), me, || vec![27, 1000]));
        assert!(!peer_allowed((1001, 1001), me, || vec![27]));
    }
}

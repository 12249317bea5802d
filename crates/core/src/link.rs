//! Control links between adjacent stages: a `SOCK_SEQPACKET` Unix socket per stage.
//!
//! Each stage listens on `<run dir>/<stage>.sock`; its downstream neighbour connects (with
//! back-off until the socket appears, so stages started by systemd in any order meet) and
//! says what it accepts ([`ControlMsg::Hello`]); the upstream answers with an
//! [`ControlMsg::Offer`] carrying, once, every fd the hop needs (ring memfd, two eventfds,
//! pool dma-bufs), or with [`ControlMsg::Refuse`] naming both sides of a mismatch. After
//! that the socket only carries liveness: a peer's death shows as EOF / `POLLHUP`.
//! Peers are identified with `SO_PEERCRED` (unix(7)).

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::socket::{
    accept4, bind, connect, getsockopt, listen, socket, sockopt, AddressFamily, Backlog, SockFlag, SockType, UnixAddr,
};
use serde::{Deserialize, Serialize};

use super::fdpass;
use super::frame::{align_up, Fourcc, FrameLayout, Placement};
use super::ring::{RingGeometry, RingPolicy};

/// How a consumer waits for frames (`--wait`; spellings in [`super::config::Choice`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WaitMode {
    /// Sleep in epoll_wait(2) on an eventfd doorbell (one syscall per wake-up).
    Eventfd,
    /// Busy-poll the ring (lowest latency, burns a core).
    Spin,
}

/// What a downstream stage wants its upstream to produce.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WantedInput {
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// Fourcc (as u32) of the packed format wanted.
    pub fourcc: u32,
    /// Required alignment of bytesperline in bytes (1 = any).
    pub stride_align: u32,
    /// Exact bytesperline required (0 = any aligned value), e.g. an NPU's w_stride x 3.
    pub bytesperline: u32,
    /// Letterbox fill value.
    pub pad: u8,
    /// Where the picture sits in the letterbox (a hello without it, from before placement
    /// was negotiated, means top-left). The channel order is the fourcc (`RGB24`, `BGR24`).
    #[serde(default)]
    pub placement: Placement,
}

/// The kind of items a hop carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Payload {
    /// [`super::frame::FrameDesc`] slots naming buffers of the offered pool.
    Frames,
    /// Detection results (no pool).
    Detections,
}

/// The upstream's answer: the hop's geometry. The fds follow in this order: ring memfd,
/// doorbell eventfd (upstream -> downstream), back eventfd (downstream -> upstream), then
/// each buffer's fds in order.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Offer {
    /// What the ring carries.
    pub payload: Payload,
    /// Ring geometry.
    pub ring: RingGeometry,
    /// Full-ring policy in force.
    pub policy: RingPolicy,
    /// Byte sizes of each fd of each pool buffer (`buffers[i][fd_index]`).
    pub buffers: Vec<Vec<u64>>,
    /// Allocator description (`dma-heap /dev/dma_heap/system`, `memfd`, ...).
    pub memory: String,
    /// Nominal frame layout (for logs and up-front checks; each frame carries its own).
    pub layout: Option<FrameLayout>,
    /// Nominal frames per second of the source.
    pub fps: f64,
    /// Human-readable description of what is produced.
    pub description: String,
    /// Class labels, index = class id (detection hops only).
    #[serde(default)]
    pub labels: Vec<String>,
    /// `--copy-mode`: frames come as bytes over a data socket (the only fd sent) instead of
    /// as descriptors naming shared buffers.
    #[serde(default)]
    pub copy_mode: bool,
    /// Largest frame in bytes (sizes the consumer's own pool in copy mode).
    #[serde(default)]
    pub max_frame_bytes: u64,
}

/// A control message.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ControlMsg {
    /// Downstream -> upstream, first message.
    Hello {
        /// Who asks, as its log lines should name it (`scale`, `infer`, `publish`, or a
        /// tool's name: `bench`): a label the producer prints, never matched (the producer
        /// decides what to serve from `accept` and `want`).
        stage: String,
        /// Fourccs (as u32) it accepts as input; empty = any.
        accept: Vec<u32>,
        /// A specific output it needs (the model input), if any.
        want: Option<WantedInput>,
        /// How it will wait.
        wait: WaitMode,
    },
    /// A tap -> the producer it taps, first message: a secondary consumer's hello
    /// ([`TapHello`]).
    TapHello(TapHello),
    /// Upstream -> downstream: the hop, with fds.
    Offer(Offer),
    /// Upstream -> downstream: cannot serve this consumer; the reason names both sides.
    Refuse {
        /// One line: what mismatched and the fix.
        error: String,
    },
}

/// A tap's hello: a secondary consumer of a pool (the web view, a display) that gets every
/// frame the pool's own consumer gets, on its own drop-oldest ring, without holding that
/// consumer back ([`crate::pool::PoolProducer::add_tap`]). It accepts any fourcc and waits
/// on its eventfd.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TapHello {
    /// The tap's name (`view`, `display`), for logs.
    pub name: String,
    /// Frames it holds at once (a display keeps the frame on screen until the next page flip
    /// completes, so it holds 2); 0 reads as 1, and a producer caps it at
    /// the pool's `TAP_MAX_HELD`, 2.
    pub hold: usize,
}

impl TapHello {
    /// Frames the tap may hold at once: its `hold`, at least 1.
    pub fn hold(&self) -> usize {
        self.hold.max(1)
    }
}

/// Who says hello on a stage's listening socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peer<'a> {
    /// The hop's own consumer, a stage (its name, as its hello says).
    Stage(&'a str),
    /// A tap.
    Tap(&'a TapHello),
}

impl ControlMsg {
    /// Who sent this hello: a stage or a tap; `None` if it is no hello.
    pub fn peer(&self) -> Option<Peer<'_>> {
        match self {
            ControlMsg::Hello { stage, .. } => Some(Peer::Stage(stage)),
            ControlMsg::TapHello(t) => Some(Peer::Tap(t)),
            _ => None,
        }
    }

    /// The tap's hello, if this is one.
    pub fn tap(&self) -> Option<&TapHello> {
        match self {
            ControlMsg::TapHello(t) => Some(t),
            _ => None,
        }
    }

    /// The message as sent on a control socket: compact JSON (serde_json), one datagram.
    ///
    /// Errors only if serde_json fails to serialise it (it holds no map, so it does not).
    pub fn encode(&self) -> serde_json::Result<Vec<u8>> {
        serde_json::to_vec(self)
    }

    /// Reads one datagram a peer sent (`bytes`, as received, untrusted) as a message: JSON
    /// with a `"type"` of `hello`, `tap_hello`, `offer` or `refuse` ([`ControlMsg`]). Fields it does not
    /// know are ignored. Errors (serde_json's, naming line and column) on anything else: not
    /// JSON, an unknown type, a missing field or a value out of its type's range. What the
    /// message asks for is checked where it is used ([`Offer::check`], [`WantedInput::layout`]).
    pub fn decode(bytes: &[u8]) -> serde_json::Result<ControlMsg> {
        serde_json::from_slice(bytes)
    }
}

impl Offer {
    /// How many fds follow this offer outside copy mode: the ring memfd, two doorbells, then
    /// each buffer's fds (copy mode sends the data socket alone). Saturates, never overflows.
    pub(crate) fn fds_needed(&self) -> usize {
        self.buffers.iter().fold(3usize, |n, b| n.saturating_add(b.len()))
    }

    /// Checks an offer of a shared ring and pool received with `n_fds` fds, before any of
    /// them is used: the fd count ([`Offer::fds_needed`]) and the ring geometry
    /// ([`RingGeometry::check`]). Whether each fd is what the offer says (a sealed memfd of
    /// the announced size, an eventfd, a buffer at least as big as its size) is checked when
    /// it is mapped. Errors: one line naming what mismatched (`sent 4 fds, its offer needs 5`).
    pub fn check(&self, n_fds: usize) -> Result<()> {
        let need = self.fds_needed();
        if n_fds != need {
            bail!("sent {n_fds} fds, its offer needs {need}");
        }
        self.ring.check()
    }
}

impl WantedInput {
    /// The packed 3-bytes-per-pixel layout of this request, as the scale stage allocates and
    /// writes it: `fourcc` (`RGB24` or `BGR24`), `width x height` pixels (1..=16384 each),
    /// `bytesperline` as asked, or else `3 x width` rounded up to `stride_align` (rounded
    /// itself up to a power of two, at most 4096; 0 means 1). The request comes from the
    /// downstream peer, so nothing in it is trusted. Errors: one line naming the field out of
    /// range (a format the scalers do not write, a size out of range, a bytesperline below
    /// `3 x width` or a frame over 1 GiB).
    pub fn layout(&self) -> Result<FrameLayout> {
        let fourcc = Fourcc(self.fourcc);
        if fourcc != Fourcc::RGB24 && fourcc != Fourcc::BGR24 {
            bail!("the requested input format {fourcc} is not one the scalers write (RGB24, BGR24)");
        }
        if !(1..=16384).contains(&self.width) || !(1..=16384).contains(&self.height) {
            bail!("the requested input size {}x{} is out of range 1..=16384", self.width, self.height);
        }
        if self.stride_align > 4096 {
            bail!("the requested stride alignment {} is over 4096 bytes", self.stride_align);
        }
        // 3 x 16384 rounded up to 4096 fits a u32 many times over.
        let bpl = if self.bytesperline != 0 {
            self.bytesperline
        } else {
            align_up(self.width * 3, self.stride_align.max(1).next_power_of_two())
        };
        if bpl < self.width * 3 {
            bail!("the requested bytesperline {bpl} is less than 3 x width {}", self.width * 3);
        }
        if bpl as u64 * self.height as u64 > 1 << 30 {
            bail!("the requested input {}x{} with bytesperline {bpl} is over 1 GiB", self.width, self.height);
        }
        Ok(FrameLayout::packed24(fourcc, self.width, self.height, bpl))
    }
}

/// One end of a control link.
#[derive(Debug)]
pub struct Conn {
    fd: OwnedFd,
    /// `pid` of the peer from SO_PEERCRED.
    pub peer_pid: i32,
    /// `uid` of the peer from SO_PEERCRED.
    pub(crate) peer_uid: u32,
}

impl AsFd for Conn {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl Conn {
    pub(crate) fn from_fd(fd: OwnedFd) -> Result<Conn> {
        let cred = getsockopt(&fd, sockopt::PeerCredentials).context("SO_PEERCRED")?;
        let me = nix::unistd::geteuid().as_raw();
        if cred.uid() != me && me != 0 && cred.uid() != 0 {
            bail!(
                "peer pid {} runs as uid {}, we run as uid {me}: refusing to share buffers across users",
                cred.pid(),
                cred.uid()
            );
        }
        Ok(Conn { fd, peer_pid: cred.pid(), peer_uid: cred.uid() })
    }

    /// `pid N uid U`: the peer as SO_PEERCRED names it, for log lines about it (refusals).
    pub fn peer(&self) -> String {
        format!("pid {} uid {}", self.peer_pid, self.peer_uid)
    }

    /// Connects to `path`, retrying with back-off (10 ms doubling to 500 ms) until it
    /// appears, `stop` is set, or `timeout` passes. Logs once while waiting.
    pub fn connect_retry(path: &Path, what: &str, stop: &AtomicBool, timeout: Duration) -> Result<Conn> {
        let addr = UnixAddr::new(path).with_context(|| format!("socket path {}", path.display()))?;
        let start = Instant::now();
        let mut delay = Duration::from_millis(10);
        let mut said = false;
        loop {
            let fd = socket(AddressFamily::Unix, SockType::SeqPacket, SockFlag::SOCK_CLOEXEC, None)
                .context("socket(AF_UNIX, SOCK_SEQPACKET)")?;
            match connect(fd.as_raw_fd(), &addr) {
                Ok(()) => return Conn::from_fd(fd),
                Err(e @ (nix::errno::Errno::ENOENT | nix::errno::Errno::ECONNREFUSED | nix::errno::Errno::EAGAIN)) => {
                    if stop.load(Ordering::Relaxed) {
                        bail!("stopped while waiting for {what} at {}", path.display());
                    }
                    if start.elapsed() > timeout {
                        bail!(
                            "{what} did not appear at {} within {:?} ({e}); start it, or check --run-dir/--instance",
                            path.display(),
                            timeout
                        );
                    }
                    if !said && start.elapsed() > Duration::from_secs(1) {
                        log::info!("waiting for {what} at {}", path.display());
                        said = true;
                    }
                    std::thread::sleep(delay);
                    delay = (delay * 2).min(Duration::from_millis(500));
                }
                Err(e) => bail!("connecting to {what} at {}: {e}", path.display()),
            }
        }
    }

    /// One attempt to connect to `path`, without waiting: `Ok(None)` if nothing listens
    /// there yet (no socket, or a stale one: ENOENT, ECONNREFUSED, EAGAIN), for a stage
    /// that tries again later (a neighbour restarting).
    pub fn try_connect(path: &Path) -> Result<Option<Conn>> {
        let addr = UnixAddr::new(path).with_context(|| format!("socket path {}", path.display()))?;
        let fd = socket(AddressFamily::Unix, SockType::SeqPacket, SockFlag::SOCK_CLOEXEC, None)
            .context("socket(AF_UNIX, SOCK_SEQPACKET)")?;
        match connect(fd.as_raw_fd(), &addr) {
            Ok(()) => Conn::from_fd(fd).map(Some),
            Err(nix::errno::Errno::ENOENT | nix::errno::Errno::ECONNREFUSED | nix::errno::Errno::EAGAIN) => Ok(None),
            Err(e) => bail!("connecting to {}: {e}", path.display()),
        }
    }

    /// Bounds how long [`Conn::recv`] waits (SO_RCVTIMEO, socket(7)); `None` waits for ever.
    /// A receive that times out is an error.
    pub fn set_recv_timeout(&self, timeout: Option<Duration>) -> Result<()> {
        let tv = nix::sys::time::TimeVal::from(libc::timeval {
            tv_sec: timeout.map_or(0, |t| t.as_secs() as libc::time_t),
            tv_usec: timeout.map_or(0, |t| t.subsec_micros() as libc::suseconds_t),
        });
        nix::sys::socket::setsockopt(&self.fd, sockopt::ReceiveTimeout, &tv).context("SO_RCVTIMEO")
    }

    /// Sends a message with fds.
    pub fn send(&self, msg: &ControlMsg, fds: &[BorrowedFd<'_>]) -> Result<()> {
        fdpass::send(self.fd.as_fd(), &msg.encode()?, fds)
    }

    /// Receives a message and its fds: [`crate::Error::PeerGone`] if the peer hung up,
    /// [`crate::Error::TimedOut`] past [`Conn::set_recv_timeout`].
    pub fn recv(&self) -> crate::Result<(ControlMsg, Vec<OwnedFd>)> {
        let (bytes, fds) = fdpass::recv(self.fd.as_fd())?
            .ok_or_else(|| crate::Error::peer_gone(format!("peer pid {} hung up", self.peer_pid)))?;
        let msg = ControlMsg::decode(&bytes)
            .with_context(|| format!("malformed control message from pid {}", self.peer_pid))?;
        Ok((msg, fds))
    }

    /// Whether the peer has hung up (EOF or POLLHUP), without blocking.
    pub fn peer_gone(&self) -> bool {
        let mut p = [PollFd::new(self.fd.as_fd(), PollFlags::POLLIN)];
        match poll(&mut p, PollTimeout::ZERO) {
            Ok(0) => false,
            Ok(_) => {
                let r = p[0].revents().unwrap_or(PollFlags::empty());
                r.intersects(PollFlags::POLLHUP | PollFlags::POLLERR | PollFlags::POLLNVAL)
                    || r.contains(PollFlags::POLLIN)
            }
            Err(_) => false,
        }
    }
}

/// Makes room for a socket at `path`: nothing there is fine; a socket nobody listens on
/// (`live` returns `None`) is removed; a live socket, or anything that is not a socket, is
/// an error (never deleted: it may be somebody's file).
pub fn remove_stale_socket(path: &Path, live: impl Fn(&Path) -> Option<()>) -> Result<()> {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::symlink_metadata(path) {
        Err(_) => Ok(()),
        Ok(m) if !m.file_type().is_socket() => {
            bail!("{} exists and is not a socket: refusing to replace it; move it away", path.display())
        }
        Ok(_) if live(path).is_some() => bail!("{} is in use by a running zcpipe; stop it", path.display()),
        Ok(_) => std::fs::remove_file(path).with_context(|| format!("removing stale socket {}", path.display())),
    }
}

/// Accepts downstream connections until one says hello. Anything else is refused, logged
/// with the peer's pid and uid and counted ([`Listener::refused`]), and the wait goes on: a
/// peer of another user (SO_PEERCRED), one that says no hello within [`HELLO_TIMEOUT`],
/// a malformed or other first message. `who` names the stage expected (`"infer"`);
/// waiting longer than `timeout` (`--connect-timeout`) is an error naming it.
pub fn accept_hello(
    listener: &mut Listener,
    stop: &AtomicBool,
    timeout: Duration,
    who: &str,
) -> Result<(Conn, ControlMsg)> {
    log::info!("waiting for the {who} stage to connect on {}", listener.path().display());
    let deadline = Instant::now() + timeout;
    loop {
        let fd = listener.accept_fd(stop, Some(deadline)).map_err(|e| {
            if Instant::now() >= deadline {
                anyhow!(
                    "no {who} stage connected to {} within {:.0} s (--connect-timeout): start `zcpipe stage {who}` with the same --instance or --run-dir",
                    listener.path().display(),
                    timeout.as_secs_f64()
                )
            } else {
                e
            }
        })?;
        let conn = match Conn::from_fd(fd) {
            Ok(c) => c,
            Err(e) => {
                listener.refuse(&format!("{e:#}"));
                continue;
            }
        };
        // A peer that connects and says nothing must not stall the set-up for ever.
        conn.set_recv_timeout(Some(HELLO_TIMEOUT))?;
        match conn.recv() {
            Ok((msg, _)) if msg.tap().is_some() => {
                // A secondary consumer (a tap) is served only once the stage's own consumer is.
                let _ = conn
                    .send(&ControlMsg::Refuse { error: format!("still waiting for the {who} stage; try again") }, &[]);
                log::debug!("{}: a tap before the {who} stage; told to try again", conn.peer());
            }
            Ok((msg @ ControlMsg::Hello { .. }, _)) => {
                conn.set_recv_timeout(None)?;
                return Ok((conn, msg));
            }
            Ok((other, fds)) => listener.refuse(&format!(
                "{}: sent {} instead of a hello (with {} fds, closed)",
                conn.peer(),
                kind(&other),
                fds.len()
            )),
            Err(crate::Error::TimedOut { .. }) => {
                listener.refuse(&format!("{}: no hello within {HELLO_TIMEOUT:?}", conn.peer()))
            }
            Err(e) => listener.refuse(&format!("{}: {e:#}", conn.peer())),
        }
    }
}

/// The hello of a tap named `name` that holds up to `hold` frames at once ([`TapHello`]).
pub(crate) fn tap_hello_holding(name: &str, hold: usize) -> ControlMsg {
    ControlMsg::TapHello(TapHello { name: name.to_string(), hold })
}

/// How long a connection may take to say hello before it is dropped, at set-up
/// ([`accept_hello`]) and while a stage runs ([`Listener::poll_hello`]).
pub(crate) const HELLO_TIMEOUT: Duration = Duration::from_secs(1);

/// Connections [`Listener::poll_hello`] keeps waiting for a hello at once; more are refused.
const MAX_PENDING: usize = 8;

/// A stage's listening control socket. Unlinks its path on drop.
#[derive(Debug)]
pub struct Listener {
    fd: OwnedFd,
    path: PathBuf,
    /// Connections accepted mid-run that have not said hello yet, with when they came.
    pending: Vec<(Conn, Instant)>,
    /// Connections refused, at set-up ([`accept_hello`]) and mid-run
    /// ([`Listener::poll_hello`]): another user, no hello in time, a second consumer, a
    /// malformed or other first message, too many at once.
    refused: u64,
}

impl Listener {
    /// Binds `path`. A stale socket file (nothing listening) is replaced; a live one means
    /// another instance runs there: an error naming it and the fix.
    pub fn bind(path: &Path) -> Result<Listener> {
        if let Some(dir) = path.parent() {
            super::config::private_dir(dir)?;
        }
        let addr = UnixAddr::new(path).with_context(|| format!("socket path {}", path.display()))?;
        remove_stale_socket(path, |p| {
            let probe = socket(AddressFamily::Unix, SockType::SeqPacket, SockFlag::SOCK_CLOEXEC, None).ok()?;
            connect(probe.as_raw_fd(), &UnixAddr::new(p).ok()?).ok()
        })
        .map_err(|e| anyhow!("{e}, or choose another --instance or --run-dir"))?;
        let fd = socket(AddressFamily::Unix, SockType::SeqPacket, SockFlag::SOCK_CLOEXEC, None)?;
        bind(fd.as_raw_fd(), &addr).with_context(|| format!("binding {}", path.display()))?;
        // Owner only (connect(2) needs write permission on the socket file; unix(7)); the
        // run directory is private too, and accept checks the peer's uid.
        std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o600))
            .with_context(|| format!("chmod 600 {}", path.display()))?;
        listen(&fd, Backlog::new(4).expect("4 is a valid backlog")).context("listen")?;
        Ok(Listener { fd, path: path.to_path_buf(), pending: vec![], refused: 0 })
    }

    /// Connections refused so far, by [`accept_hello`] at set-up and [`Listener::poll_hello`]
    /// while the stage runs; each was logged with the peer's pid and uid and the reason.
    pub fn refused(&self) -> u64 {
        self.refused
    }

    /// Looks, without blocking, for a downstream stage that connected while this stage runs
    /// (a restarted neighbour re-joining) and returns it with its hello. One poll(2) when
    /// nobody connected. A connection is accepted at once and given [`HELLO_TIMEOUT`] to
    /// say hello, so a peer that connects and says nothing cannot stall the frame loop.
    /// While `serving(hello)` (asked when a hello arrives) names the pid of the live consumer this
    /// hop serves, a newcomer is told the hop is taken and dropped (a tap's hello, [`tap_hello_holding`],
    /// is answered `None` by a hop that fans out). Everything refused (another user: SO_PEERCRED, unix(7);
    /// no hello in time; a malformed or other first message; a flood beyond
    /// [`MAX_PENDING`] waiting at once) is logged with the peer's pid and uid and counted
    /// ([`Listener::refused`]); none of it is an error of this stage.
    pub(crate) fn poll_hello(
        &mut self,
        serving: &mut dyn FnMut(&ControlMsg) -> Option<i32>,
    ) -> Option<(Conn, ControlMsg)> {
        // Accept what is waiting (bounded per call, so a flood costs a bounded amount).
        for _ in 0..MAX_PENDING {
            let mut p = [PollFd::new(self.fd.as_fd(), PollFlags::POLLIN)];
            if !matches!(poll(&mut p, PollTimeout::ZERO), Ok(n) if n > 0) {
                break;
            }
            let raw = match accept4(self.fd.as_raw_fd(), SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK) {
                Ok(raw) => raw,
                Err(_) => break,
            };
            // SAFETY: accept4 returned a new descriptor that nothing else owns.
            let fd: OwnedFd = unsafe { std::os::fd::FromRawFd::from_raw_fd(raw) };
            match Conn::from_fd(fd) {
                Err(e) => self.refuse(&format!("{e:#}")),
                Ok(c) if self.pending.len() >= MAX_PENDING => {
                    let who = c.peer();
                    self.refuse(&format!("{who}: {MAX_PENDING} connections already wait to say hello"));
                }
                Ok(c) => self.pending.push((c, Instant::now())),
            }
        }
        let mut found = None;
        let mut keep = Vec::with_capacity(self.pending.len());
        for (c, since) in std::mem::take(&mut self.pending) {
            if found.is_some() {
                keep.push((c, since));
                continue;
            }
            let mut p = [PollFd::new(c.fd.as_fd(), PollFlags::POLLIN)];
            let ready = matches!(poll(&mut p, PollTimeout::ZERO), Ok(n) if n > 0);
            if !ready {
                if since.elapsed() > HELLO_TIMEOUT {
                    self.refuse(&format!("{}: no hello within {:?}", c.peer(), HELLO_TIMEOUT));
                } else {
                    keep.push((c, since));
                }
                continue;
            }
            match c.recv() {
                Ok((msg @ (ControlMsg::Hello { .. } | ControlMsg::TapHello(_)), _)) => match serving(&msg) {
                    Some(pid) => {
                        let why = format!("this hop already serves pid {pid}");
                        let _ = c.send(&ControlMsg::Refuse { error: why.clone() }, &[]);
                        self.refuse(&format!("{}: {why}", c.peer()));
                    }
                    None => {
                        // From here on the connection is a blocking control link, as at set-up.
                        let _ = nix::fcntl::fcntl(
                            c.fd.as_raw_fd(),
                            nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::empty()),
                        );
                        found = Some((c, msg));
                    }
                },
                Ok((other, fds)) => self.refuse(&format!(
                    "{}: sent {} instead of a hello (with {} fds, closed)",
                    c.peer(),
                    kind(&other),
                    fds.len()
                )),
                Err(e) => self.refuse(&format!("{}: {e:#}", c.peer())),
            }
        }
        self.pending = keep;
        found
    }

    /// Counts a refused connection and logs `why` (which names the peer: pid and uid), the
    /// first 20 and then at powers of two.
    pub(crate) fn refuse(&mut self, why: &str) {
        self.refused += 1;
        if self.refused <= 20 || self.refused.is_power_of_two() {
            log::warn!("refused a connection on {} ({} so far): {why}", self.path.display(), self.refused);
        }
    }

    /// The socket path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Waits for a connection, checking `stop` every 200 ms.
    pub fn accept(&self, stop: &AtomicBool) -> Result<Conn> {
        self.accept_until(stop, None)
    }

    /// [`Listener::accept`], giving up at `deadline` (an error).
    pub fn accept_until(&self, stop: &AtomicBool, deadline: Option<Instant>) -> Result<Conn> {
        Conn::from_fd(self.accept_fd(stop, deadline)?)
    }

    /// The next connection, not checked yet (see [`Conn::from_fd`]); as [`Listener::accept_until`].
    fn accept_fd(&self, stop: &AtomicBool, deadline: Option<Instant>) -> Result<OwnedFd> {
        loop {
            if stop.load(Ordering::Relaxed) {
                bail!("stopped while waiting for a downstream stage on {}", self.path.display());
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                bail!("timed out waiting for a downstream stage on {}", self.path.display());
            }
            let mut p = [PollFd::new(self.fd.as_fd(), PollFlags::POLLIN)];
            match poll(&mut p, PollTimeout::from(200u16)) {
                Ok(0) | Err(nix::errno::Errno::EINTR) => continue,
                Ok(_) => {}
                Err(e) => bail!("poll on {}: {e}", self.path.display()),
            }
            match accept4(self.fd.as_raw_fd(), SockFlag::SOCK_CLOEXEC) {
                // SAFETY: accept4 returned a new descriptor that nothing else owns.
                Ok(raw) => return Ok(unsafe { std::os::fd::FromRawFd::from_raw_fd(raw) }),
                Err(nix::errno::Errno::EINTR | nix::errno::Errno::EAGAIN | nix::errno::Errno::ECONNABORTED) => continue,
                Err(e) => bail!("accept on {}: {e}", self.path.display()),
            }
        }
    }
}

/// A control message's kind, for logs (never its contents, which a hostile peer chose).
pub(crate) fn kind(m: &ControlMsg) -> &'static str {
    match m {
        ControlMsg::Hello { .. } => "a hello",
        ControlMsg::TapHello(_) => "a tap's hello",
        ControlMsg::Offer(_) => "an offer",
        ControlMsg::Refuse { .. } => "a refusal",
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wanted_input_carries_the_placement_and_an_old_hello_means_top_left() {
        let w = WantedInput {
            width: 640,
            height: 384,
            fourcc: super::super::frame::Fourcc::RGB24.0,
            stride_align: 1,
            bytesperline: 0,
            pad: 114,
            placement: Placement::Center,
        };
        let json = serde_json::to_string(&w).unwrap();
        assert!(json.contains(r#""placement":"center""#), "{json}");
        assert_eq!(serde_json::from_str::<WantedInput>(&json).unwrap(), w);
        let old = r#"{"width":416,"height":416,"fourcc":861030210,"stride_align":1,"bytesperline":0,"pad":114}"#;
        assert_eq!(serde_json::from_str::<WantedInput>(old).unwrap().placement, Placement::TopLeft);
    }

    #[test]
    fn a_wanted_input_is_checked_before_the_scale_stage_allocates_it() {
        let w = WantedInput {
            width: 416,
            height: 416,
            fourcc: Fourcc::BGR24.0,
            stride_align: 1,
            bytesperline: 0,
            pad: 114,
            placement: Placement::TopLeft,
        };
        let l = w.layout().unwrap();
        assert_eq!(
            (l.fourcc, l.width, l.height, l.num_planes, l.planes[0].bytesperline, l.bytes_needed()),
            (Fourcc::BGR24, 416, 416, 1, 1248, 1248 * 416)
        );
        // 3 x width rounded up to the alignment (itself rounded up to a power of two: 48 -> 64),
        // or exactly the bytesperline asked for.
        assert_eq!(
            WantedInput { width: 450, stride_align: 48, ..w.clone() }.layout().unwrap().planes[0].bytesperline,
            1408
        );
        assert_eq!(WantedInput { bytesperline: 1280, ..w.clone() }.layout().unwrap().planes[0].bytesperline, 1280);
        assert_eq!(
            WantedInput { width: 16384, height: 16384, bytesperline: 65536, ..w.clone() }
                .layout()
                .unwrap()
                .bytes_needed(),
            1 << 30
        );
        let refused = |w: WantedInput| w.layout().unwrap_err().to_string();
        assert_eq!(
            refused(WantedInput { fourcc: Fourcc::NV12.0, ..w.clone() }),
            "the requested input format NV12 is not one the scalers write (RGB24, BGR24)"
        );
        assert_eq!(
            refused(WantedInput { width: 0, ..w.clone() }),
            "the requested input size 0x416 is out of range 1..=16384"
        );
        // 3 x width overflowed a u32 here before the request was checked.
        assert_eq!(
            refused(WantedInput { width: 1 << 31, ..w.clone() }),
            "the requested input size 2147483648x416 is out of range 1..=16384"
        );
        // next_power_of_two() of this overflowed.
        assert_eq!(
            refused(WantedInput { stride_align: u32::MAX, ..w.clone() }),
            "the requested stride alignment 4294967295 is over 4096 bytes"
        );
        assert_eq!(
            refused(WantedInput { bytesperline: 100, ..w.clone() }),
            "the requested bytesperline 100 is less than 3 x width 1248"
        );
        assert_eq!(
            refused(WantedInput { width: 16384, height: 16384, bytesperline: 65537, ..w }),
            "the requested input 16384x16384 with bytesperline 65537 is over 1 GiB"
        );
    }

    fn offer() -> Offer {
        Offer {
            payload: Payload::Frames,
            ring: RingGeometry { capacity: 4, slot_bytes: 192, ret_capacity: 4 },
            policy: RingPolicy::DropOldest,
            buffers: vec![vec![460800], vec![921600, 460800]],
            memory: "memfd".into(),
            layout: None,
            fps: 30.0,
            description: "test".into(),
            labels: vec![],
            copy_mode: false,
            max_frame_bytes: 0,
        }
    }

    #[test]
    fn an_offer_must_come_with_its_fds_and_a_ring_in_range() {
        let o = offer();
        assert_eq!(o.fds_needed(), 6, "ring memfd, two doorbells, 1 + 2 buffer fds");
        o.check(6).unwrap();
        assert_eq!(o.check(5).unwrap_err().to_string(), "sent 5 fds, its offer needs 6");
        let bad = Offer { ring: RingGeometry { capacity: 0, ..o.ring }, ..o.clone() };
        assert_eq!(
            bad.check(6).unwrap_err().to_string(),
            "ring geometry out of range: RingGeometry { capacity: 0, slot_bytes: 192, ret_capacity: 4 }"
        );
        let bad = Offer { ring: RingGeometry { slot_bytes: 183, ..o.ring }, ..o };
        assert_eq!(bad.check(6).unwrap_err().to_string(), "ring slot size 183 is not a multiple of 8 in 8..=1MiB");
    }

    /// Regression (fuzz/ control_msg): serde_json's default float parser is sometimes one ulp
    /// off, so `fps` did not read back as sent (3.0999999999999996e39 came back 3.1e39).
    #[test]
    fn control_messages_carry_floats_exactly() {
        for fps in [3.0999999999999996e39, 1.0715660391465826e-75, 29.97, 30.0] {
            let bytes = ControlMsg::Offer(Offer { fps, ..offer() }).encode().unwrap();
            let ControlMsg::Offer(back) = ControlMsg::decode(&bytes).unwrap() else {
                panic!("an offer decodes as an offer")
            };
            assert_eq!(back.fps.to_bits(), fps.to_bits(), "{}", String::from_utf8_lossy(&bytes));
        }
        assert!(ControlMsg::decode(b"{\"type\":\"offer\"}").unwrap_err().to_string().contains("missing field"));
    }
}

//! One client of the inference service: its connection, its buffers, its counters, and the
//! thread that reads its messages.

use std::collections::HashSet;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use zcpipe_core::dmabuf::DmaBuf;
use zcpipe_core::frame::monotonic_ns;
use zcpipe_core::rate::RateGate;
use zcpipe_core::service::{decode, BufferSpec, ClientStats, DropReason, Kind, Reply, Request, Welcome, VERSION};

use super::job::ClientJob;
use super::{Service, Sink, Totals};

/// How long a new connection may take to say hello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);
/// How often a client's thread looks at the stop flags while its client says nothing.
const POLL: Duration = Duration::from_millis(250);

/// A registered buffer: the checked fd and what it holds.
pub(crate) struct ClientBuf {
    pub(crate) buf: DmaBuf,
    pub(crate) spec: BufferSpec,
    /// The raw layout (`None`: an encoded picture).
    pub(crate) layout: Option<zcpipe_core::frame::FrameLayout>,
}

/// A connected client, shared by its thread and the jobs it has in the scheduler (a job
/// keeps it, and the buffer it names, until its answer is sent).
pub(crate) struct ClientState {
    sock: OwnedFd,
    /// The service's counters.
    totals: Arc<Totals>,
    pub(crate) pid: i32,
    pub(crate) uid: u32,
    /// `NAME pid N`, set at hello.
    name: Mutex<Option<String>>,
    buffers: Mutex<Vec<Arc<ClientBuf>>>,
    /// `request` jobs waiting or running.
    pub(crate) requests: AtomicUsize,
    pub(crate) gone: AtomicBool,
    busy: AtomicU64,
    dropped_rate: AtomicU64,
    answers_lost: AtomicU64,
    refused: AtomicU64,
    /// Kinds of refusal already logged (each is logged once per client, then counted).
    logged: Mutex<HashSet<&'static str>>,
}

impl ClientState {
    pub(crate) fn new(sock: OwnedFd, pid: i32, uid: u32, totals: Arc<Totals>) -> ClientState {
        ClientState {
            sock,
            totals,
            pid,
            uid,
            name: Mutex::new(None),
            buffers: Mutex::new(Vec::new()),
            requests: AtomicUsize::new(0),
            gone: AtomicBool::new(false),
            busy: AtomicU64::new(0),
            dropped_rate: AtomicU64::new(0),
            answers_lost: AtomicU64::new(0),
            refused: AtomicU64::new(0),
            logged: Mutex::new(HashSet::new()),
        }
    }

    /// `NAME pid N uid U` for log lines.
    pub(crate) fn who(&self) -> String {
        let name = self.name.lock().unwrap_or_else(|p| p.into_inner()).clone();
        format!("client {} uid {}", name.unwrap_or_else(|| format!("pid {}", self.pid)), self.uid)
    }

    /// The name the scheduler and the answers know it by (after hello).
    pub(crate) fn name(&self) -> String {
        self.name.lock().unwrap_or_else(|p| p.into_inner()).clone().unwrap_or_default()
    }

    /// Sends `r` without waiting; an answer its client does not take (its socket's buffer
    /// full) is lost and counted. Returns whether it went.
    pub(crate) fn reply(&self, r: &Reply) -> bool {
        if self.gone.load(Ordering::Relaxed) {
            return false;
        }
        match send_raw(&self.sock, r) {
            Ok(()) => true,
            Err(nix::errno::Errno::EAGAIN) => {
                self.answers_lost.fetch_add(1, Ordering::Relaxed);
                self.totals.answers_lost.fetch_add(1, Ordering::Relaxed);
                self.log_once("slow", "does not read its answers: they are dropped (counted) until it does");
                false
            }
            Err(_) => {
                self.gone.store(true, Ordering::Relaxed);
                false
            }
        }
    }

    fn log_once(&self, kind: &'static str, what: &str) {
        if self.logged.lock().unwrap_or_else(|p| p.into_inner()).insert(kind) {
            log::warn!("inference service: {} {what}", self.who());
        }
    }

    fn refuse(&self, kind: &'static str, seq: Option<u64>, reason: String, fatal: bool) {
        self.refused.fetch_add(1, Ordering::Relaxed);
        self.totals.refused_messages.fetch_add(1, Ordering::Relaxed);
        self.log_once(kind, &format!("refused: {reason}"));
        self.reply(&Reply::Refused { v: VERSION, seq, reason, fatal });
    }

    /// Whether its peer hung up (its thread is about to clear it out).
    pub(crate) fn hung_up(&self) -> bool {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        if self.gone.load(Ordering::Relaxed) {
            return true;
        }
        // A closed peer sets POLLHUP (unix(7): both directions shut), whatever is asked.
        let mut fds = [PollFd::new(self.sock.as_fd(), PollFlags::empty())];
        matches!(poll(&mut fds, PollTimeout::ZERO), Ok(1))
            && fds[0].revents().is_some_and(|r| r.contains(PollFlags::POLLHUP))
    }

    /// The service's counters, for a job's answer.
    pub(crate) fn totals(&self) -> &Totals {
        &self.totals
    }

    /// Its counts (`None` before hello); the scheduler's part is the caller's.
    pub(crate) fn stats(&self) -> Option<(String, ClientStats)> {
        let name = self.name.lock().unwrap_or_else(|p| p.into_inner()).clone()?;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let line = ClientStats {
            buffers: self.buffers.lock().unwrap_or_else(|p| p.into_inner()).len() as u64,
            rate: get(&self.dropped_rate),
            busy: get(&self.busy),
            answers_lost: get(&self.answers_lost),
            refused: get(&self.refused),
            ..Default::default()
        };
        Some((name, line))
    }
}

fn send_raw(sock: &OwnedFd, r: &Reply) -> Result<(), nix::errno::Errno> {
    let bytes = r.to_bytes();
    let flags = nix::sys::socket::MsgFlags::MSG_DONTWAIT | nix::sys::socket::MsgFlags::MSG_NOSIGNAL;
    loop {
        match nix::sys::socket::send(sock.as_raw_fd(), &bytes, flags) {
            Err(nix::errno::Errno::EINTR) => continue,
            r => return r.map(drop),
        }
    }
}

/// Reads and drops what a peer sent and nobody will read (at most 64 packets), without
/// waiting, so that closing its socket does not reset it before it reads our last word.
pub(crate) fn discard_pending(sock: &OwnedFd) {
    let mut buf = [0u8; 512];
    for _ in 0..64 {
        let flags = nix::sys::socket::MsgFlags::MSG_DONTWAIT | nix::sys::socket::MsgFlags::MSG_TRUNC;
        // Without a control buffer any fds a packet carried are closed by the kernel.
        match nix::sys::socket::recv(sock.as_raw_fd(), &mut buf, flags) {
            Err(nix::errno::Errno::EINTR) => {}
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
    }
}

/// Sends `r` to a peer that is not a client yet (a refusal), without waiting.
pub(crate) fn send_now(sock: &OwnedFd, r: &Reply) {
    let _ = send_raw(sock, r);
}

/// A client's thread: reads its messages until it hangs up, breaks the protocol or the
/// service stops; then takes its waiting jobs and buffers back and frees its slot.
pub(crate) fn serve_client(
    service: &Service,
    client: &Arc<ClientState>,
    slot: usize,
    base: usize,
    sink: &dyn Sink,
    stop: &AtomicBool,
) {
    let tv = nix::sys::time::TimeVal::new(0, POLL.as_micros() as i64);
    let _ = nix::sys::socket::setsockopt(&client.sock, nix::sys::socket::sockopt::ReceiveTimeout, &tv);
    let mut reader = Reader { service, client, source: base + slot, sink, gate: None, said_hello: false, requests: 0 };
    let started = std::time::Instant::now();
    let why = loop {
        if service.stopping(stop) {
            break "the service stopped";
        }
        if !reader.said_hello && started.elapsed() > HELLO_TIMEOUT {
            client.refuse("hello", None, format!("no hello within {HELLO_TIMEOUT:?}"), true);
            break "no hello";
        }
        if client.gone.load(Ordering::Relaxed) {
            break "its socket failed";
        }
        match zcpipe_core::fdpass::recv(client.sock.as_fd()) {
            Ok(None) => break "it hung up",
            Err(zcpipe_core::Error::TimedOut { .. }) => continue,
            Err(e) => {
                client.refuse("packet", None, format!("{e:#}"), true);
                break "a packet it sent could not be read";
            }
            Ok(Some((payload, fds))) => {
                if !reader.handle(&payload, fds) {
                    break "it broke the protocol";
                }
            }
        }
    };
    client.gone.store(true, Ordering::Relaxed);
    discard_pending(&client.sock);
    let waiting = sink.close(reader.source);
    let n = waiting.len();
    for j in waiting {
        j.drop_with(DropReason::Stopping);
    }
    let buffers = std::mem::take(&mut *client.buffers.lock().unwrap_or_else(|p| p.into_inner()));
    // A client that leaves with nothing waiting (a `zcpipe detect`, a /metrics scrape) leaves
    // quietly; one that left requests behind is said.
    if reader.said_hello && n > 0 {
        log::info!(
            "inference service: {} left ({why}) after {} requests: {n} waiting dropped, {} buffers released",
            client.who(),
            reader.requests,
            buffers.len()
        );
    } else if reader.said_hello {
        log::debug!("inference service: {} left ({why}) after {} requests", client.who(), reader.requests);
    }
    drop(buffers);
    service.free(slot);
}

/// The state of one client's thread.
struct Reader<'a> {
    service: &'a Service,
    client: &'a Arc<ClientState>,
    /// Its scheduler source.
    source: usize,
    sink: &'a dyn Sink,
    gate: Option<RateGate>,
    said_hello: bool,
    /// Detect requests it sent.
    requests: u64,
}

impl Reader<'_> {
    /// Handles one packet; `false`: the client is refused for good (the caller hangs up).
    fn handle(&mut self, payload: &[u8], fds: Vec<OwnedFd>) -> bool {
        let client = self.client;
        let req = match decode(payload, fds.len()) {
            Ok(r) => r,
            Err(e) => {
                // A message it cannot read may be one it meant differently: nothing after
                // it can be trusted to mean what it says.
                client.refuse("message", None, e.to_string(), true);
                return false;
            }
        };
        match req {
            Request::Hello { name, detect_fps, .. } => self.hello(name, detect_fps),
            _ if !self.said_hello => {
                client.refuse("hello", None, "say hello first".into(), true);
                false
            }
            Request::Register { buffers, .. } => {
                self.register(buffers, fds);
                true
            }
            Request::Detect { kind, buffer, seq, .. } => {
                self.detect(kind, buffer, seq);
                true
            }
            Request::Stats { .. } => {
                let mut stats = self.service.stats(&self.sink.client_lines());
                if stats.per_client.remove(&client.name()).is_some() {
                    stats.clients = stats.clients.saturating_sub(1);
                }
                client.reply(&Reply::Stats { v: VERSION, stats });
                true
            }
        }
    }

    fn hello(&mut self, name: String, detect_fps: f64) -> bool {
        let (service, client) = (self.service, self.client);
        if self.said_hello {
            client.refuse("hello", None, "a second hello".into(), false);
            return true;
        }
        let name = format!("{} pid {}", if name.is_empty() { "client" } else { &name }, client.pid);
        *client.name.lock().unwrap_or_else(|p| p.into_inner()) = Some(name.clone());
        self.gate = RateGate::new(detect_fps);
        self.said_hello = true;
        self.sink.open(self.source, name.clone(), service.cfg.weight);
        let m = &service.model;
        let welcome = Welcome {
            v: VERSION,
            client: name,
            input: m.input,
            detector: m.detector.clone(),
            max_buffers: service.cfg.max_buffers as u32,
            queue: service.cfg.queue as u32,
        };
        log::debug!("inference service: {} connected", client.who());
        client.reply(&Reply::Welcome(welcome));
        true
    }

    /// Registers every buffer of the message or none: each fd checked (a dma-buf, or a
    /// memfd sealed against shrinking holding at least the size claimed).
    fn register(&mut self, specs: Vec<BufferSpec>, fds: Vec<OwnedFd>) {
        let (service, client) = (self.service, self.client);
        let have = client.buffers.lock().unwrap_or_else(|p| p.into_inner()).len();
        if have + specs.len() > service.cfg.max_buffers {
            let why = format!(
                "{have} buffers registered and {} more asked: the service keeps at most {} per client (--serve-buffers)",
                specs.len(),
                service.cfg.max_buffers
            );
            return client.refuse("buffers", None, why, false);
        }
        let mut new = Vec::with_capacity(specs.len());
        for (i, (spec, fd)) in specs.into_iter().zip(fds).enumerate() {
            let layout = match spec.layout() {
                Ok(l) => l,
                Err(why) => return client.refuse("layout", None, format!("buffer {i}: {why}"), false),
            };
            match DmaBuf::from_peer(fd, spec.size) {
                Ok(buf) => new.push(Arc::new(ClientBuf { buf, spec, layout })),
                Err(e) => return client.refuse("fd", None, format!("buffer {i}: {e:#}"), false),
            }
        }
        let mut bufs = client.buffers.lock().unwrap_or_else(|p| p.into_inner());
        let first = bufs.len() as u32;
        let count = new.len() as u32;
        bufs.extend(new);
        drop(bufs);
        client.reply(&Reply::Registered { v: VERSION, first, count });
    }

    fn detect(&mut self, kind: Kind, index: u32, seq: u64) {
        let (service, client) = (self.service, self.client);
        self.requests += 1;
        let (buf, n) = {
            let bufs = client.buffers.lock().unwrap_or_else(|p| p.into_inner());
            (bufs.get(index as usize).cloned(), bufs.len())
        };
        let Some(buffer) = buf else {
            let why = format!("buffer {index} was never registered (this client has {n})");
            return client.refuse("index", Some(seq), why, false);
        };
        let now = monotonic_ns();
        service.totals.requests.fetch_add(1, Ordering::Relaxed);
        if kind == Kind::Video && self.gate.as_mut().is_some_and(|g| !g.admit(now)) {
            client.dropped_rate.fetch_add(1, Ordering::Relaxed);
            service.totals.dropped_rate.fetch_add(1, Ordering::Relaxed);
            let r = Reply::Dropped { v: VERSION, buffer: index, seq, reason: DropReason::Rate };
            client.reply(&r);
            return;
        }
        if kind == Kind::Request && client.requests.load(Ordering::Relaxed) >= service.cfg.queue {
            client.busy.fetch_add(1, Ordering::Relaxed);
            service.totals.busy.fetch_add(1, Ordering::Relaxed);
            client.reply(&Reply::Busy { v: VERSION, buffer: index, seq });
            return;
        }
        let job = ClientJob::new(client.clone(), buffer, index, seq, kind, now, self.source);
        for (old, reason) in self.sink.submit(job) {
            old.drop_with(reason);
        }
    }
}

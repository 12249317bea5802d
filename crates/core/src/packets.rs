//! A camera's encoded stream, from its capture stage to the recorder (`zcpipe stage
//! record`): the contract between the two processes.
//!
//! The recorder listens on `<run dir>/record.sock` (a stream socket, owner only, peers
//! checked with SO_PEERCRED); a capture stage whose camera is recorded connects and sends
//! a [`StreamHello`], the stream's program tables, then one message per access unit: the
//! unit's TS packets as ffmpeg wrote them (`-c:v copy -f mpegts`), its PTS, whether it is a
//! keyframe, and when it arrived (CLOCK_MONOTONIC ns, the clock of the frames' timestamps
//! and so of the tracker's events). A hello again means a new stream (a reconnect: new
//! tables, timestamps that start over).
//!
//! Each message is a 28-byte [`Header`] (magic `ZCPK`, kind, flags, length, arrival time,
//! PTS, little-endian) and its body; a reader checks the magic and the length against
//! [`MAX_BODY`] before it allocates, and a hello's JSON against its version.
//!
//! The capture side ([`Sender`]) never waits for the recorder: the units wait in a queue
//! bounded in bytes ([`Sender::new`]) that drops its oldest (counted, and the next unit
//! sent says so: [`FLAG_GAP`]) while the recorder is slow or away; its own thread connects
//! (again after the recorder restarts) and writes.

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::ts::{Codec, MAX_ACCESS_UNIT};

/// The version of [`StreamHello`] (and of the framing) this build speaks.
pub const VERSION: u32 = 1;
/// The recorder's socket in a run directory.
pub const SOCKET: &str = "record.sock";
/// The largest body a reader takes: an access unit, or a hello's JSON.
pub const MAX_BODY: usize = MAX_ACCESS_UNIT;
/// The largest hello, bytes.
const MAX_HELLO: usize = 4096;
/// The header's size.
pub const HEADER: usize = 28;
const MAGIC: &[u8; 4] = b"ZCPK";

/// Flag: a keyframe.
pub const FLAG_KEY: u8 = 1;
/// Flag: the PTS field holds one.
pub const FLAG_PTS: u8 = 2;
/// Flag: units before this one were dropped (the queue was full, or the camera's stream
/// was cut): what follows does not continue what came before.
pub const FLAG_GAP: u8 = 4;

/// `<run_dir>/record.sock`.
pub fn socket_path(run_dir: &Path) -> PathBuf {
    run_dir.join(SOCKET)
}

/// What a capture stage says first on the recorder's socket, and again at a new stream.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamHello {
    /// [`VERSION`].
    pub version: u32,
    /// The camera's name (`cam0` for a single unnamed camera).
    pub camera: String,
    /// The video codec.
    pub codec: Codec,
    /// The coded picture size, pixels.
    pub width: u32,
    /// The coded picture size, pixels.
    pub height: u32,
}

/// One message on the socket.
#[derive(Clone, Debug, PartialEq)]
pub enum Message {
    /// A (new) stream.
    Hello(StreamHello),
    /// The stream's PAT and PMT packets (a clip begins with them).
    Tables(Vec<u8>),
    /// An access unit.
    Unit(Unit),
}

/// An access unit as the recorder gets it.
#[derive(Clone, Debug, PartialEq)]
pub struct Unit {
    /// Its TS packets.
    pub bytes: Vec<u8>,
    /// When it arrived at the capture stage, CLOCK_MONOTONIC ns.
    pub mono_ns: u64,
    /// Its PTS, 90 kHz.
    pub pts: Option<u64>,
    /// A keyframe.
    pub key: bool,
    /// Units before it were dropped.
    pub gap: bool,
}

/// Errors reading the socket: the peer's fault (the connection is dropped), or its end.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The peer closed the connection between messages.
    #[error("the capture stage closed the stream")]
    Closed,
    /// An I/O error, or a connection cut mid-message.
    #[error("reading the stream: {0}")]
    Io(#[from] std::io::Error),
    /// Bytes that are not this protocol (bad magic, kind, length, hello).
    #[error("not a zcpipe packet stream: {0}")]
    Malformed(String),
    /// A hello of another version.
    #[error(
        "the capture stage speaks version {0} of the packet stream, this recorder {VERSION}: run one zcpipe build"
    )]
    Version(u32),
}

const KIND_HELLO: u8 = 1;
const KIND_TABLES: u8 = 2;
const KIND_UNIT: u8 = 3;

fn header(kind: u8, flags: u8, len: usize, mono_ns: u64, pts: u64) -> [u8; HEADER] {
    let mut h = [0u8; HEADER];
    h[..4].copy_from_slice(MAGIC);
    h[4] = kind;
    h[5] = flags;
    h[8..12].copy_from_slice(&(len as u32).to_le_bytes());
    h[12..20].copy_from_slice(&mono_ns.to_le_bytes());
    h[20..28].copy_from_slice(&pts.to_le_bytes());
    h
}

impl Message {
    /// The message as bytes on the socket.
    pub fn encode(&self) -> Vec<u8> {
        let (h, body): ([u8; HEADER], &[u8]) = match self {
            Message::Hello(h) => {
                let json = serde_json::to_vec(h).unwrap_or_default();
                let mut v = header(KIND_HELLO, 0, json.len(), 0, 0).to_vec();
                v.extend_from_slice(&json);
                return v;
            }
            Message::Tables(t) => (header(KIND_TABLES, 0, t.len(), 0, 0), t),
            Message::Unit(u) => {
                let flag = |on: bool, f: u8| if on { f } else { 0 };
                let flags = flag(u.key, FLAG_KEY) | flag(u.pts.is_some(), FLAG_PTS) | flag(u.gap, FLAG_GAP);
                (header(KIND_UNIT, flags, u.bytes.len(), u.mono_ns, u.pts.unwrap_or(0)), &u.bytes)
            }
        };
        let mut v = Vec::with_capacity(HEADER + body.len());
        v.extend_from_slice(&h);
        v.extend_from_slice(body);
        v
    }

    /// Reads one message from `r`. Errors: [`ReadError`]; the length is checked before
    /// anything is allocated.
    pub fn read(r: &mut impl Read) -> Result<Message, ReadError> {
        let mut h = [0u8; HEADER];
        let mut got = 0;
        while got < HEADER {
            match r.read(&mut h[got..]) {
                Ok(0) if got == 0 => return Err(ReadError::Closed),
                Ok(0) => return Err(ReadError::Io(std::io::ErrorKind::UnexpectedEof.into())),
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e.into()),
            }
        }
        if &h[..4] != MAGIC {
            return Err(ReadError::Malformed("bad magic".into()));
        }
        let (kind, flags) = (h[4], h[5]);
        let len = u32::from_le_bytes([h[8], h[9], h[10], h[11]]) as usize;
        let limit = if kind == KIND_HELLO { MAX_HELLO } else { MAX_BODY };
        if len > limit {
            return Err(ReadError::Malformed(format!("a message of {len} bytes (at most {limit})")));
        }
        let mono_ns = u64::from_le_bytes(h[12..20].try_into().unwrap_or_default());
        let pts = u64::from_le_bytes(h[20..28].try_into().unwrap_or_default());
        let mut body = vec![0u8; len];
        r.read_exact(&mut body)?;
        match kind {
            KIND_HELLO => {
                #[derive(Deserialize)]
                struct Version {
                    version: u32,
                }
                let v: Version =
                    serde_json::from_slice(&body).map_err(|e| ReadError::Malformed(format!("hello: {e}")))?;
                if v.version != VERSION {
                    return Err(ReadError::Version(v.version));
                }
                serde_json::from_slice(&body)
                    .map(Message::Hello)
                    .map_err(|e| ReadError::Malformed(format!("hello: {e}")))
            }
            KIND_TABLES => Ok(Message::Tables(body)),
            KIND_UNIT => Ok(Message::Unit(Unit {
                bytes: body,
                mono_ns,
                pts: (flags & FLAG_PTS != 0).then_some(pts),
                key: flags & FLAG_KEY != 0,
                gap: flags & FLAG_GAP != 0,
            })),
            k => Err(ReadError::Malformed(format!("message kind {k}"))),
        }
    }
}

/// The sender's counters (the capture stage's report).
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SenderCounters {
    /// Access units written to the recorder.
    pub units_sent: u64,
    /// Their bytes.
    pub bytes_sent: u64,
    /// Units dropped: the queue was full (the recorder slow or away).
    pub units_dropped: u64,
    /// Connections made to the recorder.
    pub connections: u64,
}

struct Queue {
    /// Encoded messages waiting; `true`: a unit (dropped first when full).
    items: VecDeque<(Vec<u8>, bool)>,
    bytes: usize,
    /// The hello and tables of the stream now, sent first on every connection.
    preamble: Vec<Vec<u8>>,
    /// A unit was dropped since the last one queued: the next one says so.
    gap: bool,
    counters: SenderCounters,
}

struct Shared {
    q: Mutex<Queue>,
    wake: Condvar,
    stop: AtomicBool,
    connected: AtomicBool,
    limit: usize,
    reconnects: AtomicU64,
}

/// The capture side: queues a stream's messages and writes them to the recorder from a
/// thread of its own (see the module's documentation). Dropping it stops the thread.
pub struct Sender {
    shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Sender {
    /// Starts the sender's thread for the recorder at `socket`, queueing at most `limit`
    /// bytes.
    pub fn new(socket: PathBuf, limit: usize) -> std::io::Result<Sender> {
        let shared = Arc::new(Shared {
            q: Mutex::new(Queue {
                items: VecDeque::new(),
                bytes: 0,
                preamble: vec![],
                gap: false,
                counters: SenderCounters::default(),
            }),
            wake: Condvar::new(),
            stop: AtomicBool::new(false),
            connected: AtomicBool::new(false),
            limit,
            reconnects: AtomicU64::new(0),
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new().name("record-send".into()).spawn(move || writer(&s, &socket))?;
        Ok(Sender { shared, thread: Some(thread) })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.shared.q.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new stream: its hello and tables go first now and on every later connection;
    /// what was queued of the stream before is dropped (counted).
    pub fn stream(&self, hello: StreamHello, tables: Vec<u8>) {
        let mut q = self.lock();
        let dropped = q.items.iter().filter(|(_, unit)| *unit).count() as u64;
        q.counters.units_dropped += dropped;
        q.items.clear();
        q.bytes = 0;
        q.gap = false;
        q.preamble = vec![Message::Hello(hello).encode(), Message::Tables(tables).encode()];
        let pre = q.preamble.clone();
        for m in pre {
            q.bytes += m.len();
            q.items.push_back((m, false));
        }
        drop(q);
        self.shared.wake.notify_one();
    }

    /// Queues an access unit (never waits): the oldest units go when the queue is over
    /// its bound (also while the recorder is away: the queue then holds the stream's newest
    /// units); a unit before any stream was announced is dropped.
    pub fn unit(&self, mut u: Unit) {
        let mut q = self.lock();
        if !self.shared.connected.load(Ordering::Relaxed) && q.preamble.is_empty() {
            q.counters.units_dropped += 1;
            return;
        }
        u.gap |= std::mem::take(&mut q.gap);
        let m = Message::Unit(u).encode();
        q.bytes += m.len();
        q.items.push_back((m, true));
        while q.bytes > self.shared.limit {
            let Some(i) = q.items.iter().position(|(_, unit)| *unit) else { break };
            if let Some((m, _)) = q.items.remove(i) {
                q.bytes -= m.len();
                q.counters.units_dropped += 1;
                mark_gap(&mut q);
            }
        }
        drop(q);
        self.shared.wake.notify_one();
    }

    /// The counters so far.
    pub fn counters(&self) -> SenderCounters {
        self.lock().counters
    }

    /// Whether the recorder is connected now.
    pub fn connected(&self) -> bool {
        self.shared.connected.load(Ordering::Relaxed)
    }
}

/// How long a sender being dropped keeps writing what is queued (the stream's last units)
/// to a connected recorder.
const DRAIN: Duration = Duration::from_secs(2);

impl Drop for Sender {
    fn drop(&mut self) {
        let t = std::time::Instant::now();
        while t.elapsed() < DRAIN && self.connected() && !self.lock().items.is_empty() {
            std::thread::sleep(Duration::from_millis(10));
        }
        self.shared.stop.store(true, Ordering::Relaxed);
        self.shared.wake.notify_all();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A unit was lost: the oldest unit still queued says so (its header's flags), else the
/// next one queued will.
fn mark_gap(q: &mut Queue) {
    match q.items.iter_mut().find(|(_, unit)| *unit) {
        Some((m, _)) => m[5] |= FLAG_GAP,
        None => q.gap = true,
    }
}

/// How often a write the recorder does not take checks whether the sender is stopping.
const WRITE_POLL: Duration = Duration::from_millis(200);

/// A recorder that takes no byte for this long is hung: the connection is dropped (and made
/// again). A slow one only makes the queue drop its oldest units, never a unit half sent.
const HUNG: Duration = Duration::from_secs(30);

/// Writes message `m` whole, however slowly the recorder reads; errors: the connection
/// failed, the recorder took nothing for [`HUNG`], or the sender is stopping.
fn write_message(conn: &mut std::os::unix::net::UnixStream, m: &[u8], stop: &AtomicBool) -> std::io::Result<()> {
    use std::io::ErrorKind;
    let (mut off, mut progress) = (0, std::time::Instant::now());
    while off < m.len() {
        match conn.write(&m[off..]) {
            Ok(0) => return Err(ErrorKind::WriteZero.into()),
            Ok(n) => {
                off += n;
                progress = std::time::Instant::now();
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted) => {
                if stop.load(Ordering::Relaxed) || progress.elapsed() > HUNG {
                    return Err(e);
                }
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The sender's thread: connects (every 500 ms while the recorder is away), sends the
/// preamble, then whatever is queued; a write error drops the connection and starts over.
fn writer(s: &Shared, socket: &Path) {
    let (first, max) = (Duration::from_millis(100), Duration::from_millis(500));
    while !s.stop.load(Ordering::Relaxed) {
        let Some(mut conn) = crate::schema::connect_retrying(socket, None, first, max, &s.stop) else { return };
        let _ = conn.set_write_timeout(Some(WRITE_POLL));
        s.reconnects.fetch_add(1, Ordering::Relaxed);
        {
            let mut q = s.q.lock().unwrap_or_else(|p| p.into_inner());
            q.counters.connections += 1;
            // A new connection starts with the stream's preamble; units queued before it
            // continue it.
            let pre = q.preamble.clone();
            q.items.retain(|(_, unit)| *unit);
            q.bytes = q.items.iter().map(|(m, _)| m.len()).sum();
            for m in pre.into_iter().rev() {
                q.bytes += m.len();
                q.items.push_front((m, false));
            }
        }
        s.connected.store(true, Ordering::Relaxed);
        loop {
            let next = {
                let mut q = s.q.lock().unwrap_or_else(|p| p.into_inner());
                while q.items.is_empty() && !s.stop.load(Ordering::Relaxed) {
                    q = s
                        .wake
                        .wait_timeout(q, Duration::from_millis(200))
                        .map(|r| r.0)
                        .unwrap_or_else(|p| p.into_inner().0);
                }
                let item = q.items.pop_front();
                if let Some((m, _)) = &item {
                    q.bytes -= m.len();
                }
                item
            };
            let Some((m, unit)) = next else { break };
            // At the end the sender stops, whatever is left (a slow recorder must not hold
            // the capture stage's exit).
            if s.stop.load(Ordering::Relaxed) {
                return;
            }
            if write_message(&mut conn, &m, &s.stop).is_err() {
                if unit {
                    let mut q = s.q.lock().unwrap_or_else(|p| p.into_inner());
                    q.counters.units_dropped += 1;
                    mark_gap(&mut q);
                }
                break;
            }
            if unit {
                let mut q = s.q.lock().unwrap_or_else(|p| p.into_inner());
                q.counters.units_sent += 1;
                q.counters.bytes_sent += (m.len() - HEADER) as u64;
            }
        }
        s.connected.store(false, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hello() -> StreamHello {
        StreamHello { version: VERSION, camera: "cam0".into(), codec: Codec::H264, width: 768, height: 432 }
    }

    #[test]
    fn messages_read_back_as_written_and_bad_ones_are_refused_before_allocating() {
        let msgs = [
            Message::Hello(hello()),
            Message::Tables(vec![0x47; 376]),
            Message::Unit(Unit { bytes: vec![1; 188], mono_ns: 42, pts: Some(90_000), key: true, gap: false }),
            Message::Unit(Unit { bytes: vec![2; 376], mono_ns: 43, pts: None, key: false, gap: true }),
        ];
        let bytes: Vec<u8> = msgs.iter().flat_map(Message::encode).collect();
        let mut r = &bytes[..];
        for m in &msgs {
            assert_eq!(&Message::read(&mut r).unwrap(), m);
        }
        assert!(matches!(Message::read(&mut r), Err(ReadError::Closed)));
        // A length over the bound: refused from the header alone.
        let mut huge = header(KIND_UNIT, 0, 0, 0, 0);
        huge[8..12].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(matches!(Message::read(&mut &huge[..]), Err(ReadError::Malformed(m)) if m.contains("4294967295")));
        let mut big_hello = header(KIND_HELLO, 0, 0, 0, 0);
        big_hello[8..12].copy_from_slice(&5000u32.to_le_bytes());
        assert!(matches!(Message::read(&mut &big_hello[..]), Err(ReadError::Malformed(_))));
        assert!(matches!(Message::read(&mut &b"GET / HTTP/1.1\r\n\r\nxxxxxxxxxxxx"[..]), Err(ReadError::Malformed(_))));
        // Another version's hello is named.
        let other = serde_json::to_vec(&serde_json::json!({"version": 9, "camera": "x"})).unwrap();
        let mut m = header(KIND_HELLO, 0, other.len(), 0, 0).to_vec();
        m.extend(other);
        assert!(matches!(Message::read(&mut &m[..]), Err(ReadError::Version(9))));
        // Cut mid-message.
        let cut = &bytes[..HEADER + 10];
        assert!(matches!(Message::read(&mut &cut[HEADER + 10..]), Err(ReadError::Closed)));
        assert!(matches!(Message::read(&mut &bytes[..HEADER + 3]), Err(ReadError::Io(_))));
    }

    #[test]
    fn the_sender_drops_its_oldest_while_the_recorder_is_slow_and_starts_each_connection_with_the_stream() {
        let dir = tempfile::tempdir().unwrap();
        let sock = dir.path().join("record.sock");
        let unit =
            |k: u64| Unit { bytes: vec![k as u8; 188], mono_ns: k, pts: Some(k), key: k.is_multiple_of(3), gap: false };
        // Nobody listens: the queue holds the stream and keeps its newest units.
        let preamble = Message::Hello(hello()).encode().len() + HEADER + 188;
        let s = Sender::new(sock.clone(), preamble + 10 * (HEADER + 188)).unwrap();
        s.stream(hello(), vec![0x47; 188]);
        for k in 0..20 {
            s.unit(unit(k));
        }
        assert_eq!(s.counters().units_dropped, 10);
        let l = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        let (mut c, _) = l.accept().unwrap();
        c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        assert!(matches!(Message::read(&mut c).unwrap(), Message::Hello(h) if h == hello()));
        assert!(matches!(Message::read(&mut c).unwrap(), Message::Tables(t) if t.len() == 188));
        let Message::Unit(first) = Message::read(&mut c).unwrap() else { panic!() };
        assert_eq!((first.mono_ns, first.gap), (10, true), "the oldest went, and the first kept says so");
        for k in 11..20 {
            assert!(matches!(Message::read(&mut c).unwrap(), Message::Unit(u) if u.mono_ns == k && !u.gap));
        }
        // The recorder restarts: a new connection gets the hello and tables again, then
        // the units that follow.
        drop(c);
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let mut c2 = loop {
            s.unit(unit(100));
            if let Ok((c, _)) = {
                l.set_nonblocking(true).unwrap();
                l.accept()
            } {
                break c;
            }
            assert!(std::time::Instant::now() < deadline, "no reconnection");
            std::thread::sleep(Duration::from_millis(20));
        };
        c2.set_nonblocking(false).unwrap();
        // A guard against a hang, not a timed assertion.
        c2.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        // The units pushed while it reconnected may have gone to the old connection: one
        // more after it.
        s.unit(unit(101));
        assert!(matches!(Message::read(&mut c2).unwrap(), Message::Hello(_)));
        assert!(matches!(Message::read(&mut c2).unwrap(), Message::Tables(_)));
        assert!(matches!(Message::read(&mut c2).unwrap(), Message::Unit(u) if u.mono_ns >= 100));
        assert!(s.counters().connections >= 2);
    }
}

//! What the record stage's loop reads, from threads of their own: each capture stage's
//! packet stream (a listener on `<run dir>/record.sock` and a reader per connection) and
//! the publish stage's detections socket (the tracker's events). Everything comes to the
//! loop through one bounded channel: a reader that finds it full waits, so its socket
//! fills and the capture stage's own queue drops its oldest (counted there), never the
//! loop's memory.

use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::SyncSender;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use zcpipe_core::packets::{Message, ReadError};
use zcpipe_core::schema::{follow_lines, EventJson, SocketLine};

/// Capture stages connected at once, at most (each a camera).
pub const MAX_STREAMS: usize = 64;

/// Messages waiting for the loop, at most.
pub const CHANNEL: usize = 4096;

/// Bytes of packet messages waiting for the loop, at most: a reader past it waits (and so
/// its camera's socket fills, and the capture stage drops its oldest).
pub const CHANNEL_BYTES: usize = 64 << 20;

/// The bytes of packet messages on their way to the loop: readers add, the loop takes off
/// ([`InFlight::done`]).
#[derive(Clone, Debug, Default)]
pub struct InFlight(Arc<AtomicUsize>);

impl InFlight {
    /// The loop took a message of `bytes`.
    pub fn done(&self, bytes: usize) {
        self.0.fetch_sub(bytes, Ordering::Relaxed);
    }
}

/// The bytes a packet message holds.
pub fn size(m: &Message) -> usize {
    match m {
        Message::Hello(_) => 0,
        Message::Tables(t) => t.len(),
        Message::Unit(u) => u.bytes.len(),
    }
}

/// One input of the loop.
#[derive(Debug)]
pub enum Input {
    /// Connection `conn` sent `msg`.
    Packet(u64, Message),
    /// Connection `conn` ended (`why`).
    Gone(u64, String),
    /// A tracker event.
    Event(EventJson),
    /// The detections socket's end line: the run's stream ended.
    End,
    /// A clip's ffmpeg finished (on a closer thread).
    Closed(Box<crate::clip::Done>),
}

/// Binds the recorder's socket at `path` (in the private run directory, owner only; a stale
/// socket replaced) and accepts capture stages on a thread until `stop`.
pub fn listen(
    path: &Path,
    tx: SyncSender<Input>,
    stop: Arc<AtomicBool>,
    inflight: InFlight,
) -> anyhow::Result<std::thread::JoinHandle<()>> {
    if let Some(dir) = path.parent() {
        zcpipe_core::config::private_dir(dir)?;
    }
    if UnixStream::connect(path).is_ok() {
        anyhow::bail!(
            "{}: another recorder listens there; stop it, or choose another --instance or --run-dir",
            path.display()
        );
    }
    let _ = std::fs::remove_file(path);
    let l = UnixListener::bind(path).with_context(|| format!("binding {}", path.display()))?;
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .with_context(|| format!("chmod 600 {}", path.display()))?;
    l.set_nonblocking(true)?;
    let path = path.to_path_buf();
    Ok(std::thread::Builder::new()
        .name("record-accept".into())
        .spawn(move || accept_loop(&l, &path, &tx, &stop, &inflight))?)
}

fn accept_loop(l: &UnixListener, path: &PathBuf, tx: &SyncSender<Input>, stop: &Arc<AtomicBool>, inflight: &InFlight) {
    let live = Arc::new(AtomicUsize::new(0));
    let mut next = 0u64;
    let mut refused = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let s = match l.accept() {
            Ok((s, _)) => s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
            Err(e) => {
                log::warn!("record: accepting on {}: {e}", path.display());
                std::thread::sleep(Duration::from_millis(200));
                continue;
            }
        };
        let why = check_peer(&s).err().or_else(|| {
            (live.load(Ordering::Relaxed) >= MAX_STREAMS).then(|| format!("{MAX_STREAMS} cameras already send"))
        });
        if let Some(why) = why {
            // A refused sender retries every half second: said the first time, then every 100th.
            refused += 1;
            if refused == 1 || refused.is_multiple_of(100) {
                log::warn!("record: refused a connection on {} ({refused} so far): {why}", path.display());
            }
            continue;
        }
        next += 1;
        let (conn, tx, stop, live, inflight) = (next, tx.clone(), stop.clone(), live.clone(), inflight.clone());
        live.fetch_add(1, Ordering::Relaxed);
        let l2 = live.clone();
        let spawned = std::thread::Builder::new().name("record-read".into()).spawn(move || {
            let why = read_stream(s, conn, &tx, &stop, &inflight);
            let _ = tx.send(Input::Gone(conn, why));
            live.fetch_sub(1, Ordering::Relaxed);
        });
        if spawned.is_err() {
            l2.fetch_sub(1, Ordering::Relaxed);
            log::warn!("record: no thread for a camera's stream; it is not recorded");
        }
    }
    let _ = std::fs::remove_file(path);
}

/// Only this user (or root) may send a camera's stream: SO_PEERCRED, unix(7).
fn check_peer(s: &UnixStream) -> Result<(), String> {
    let cred = nix::sys::socket::getsockopt(s, nix::sys::socket::sockopt::PeerCredentials)
        .map_err(|e| format!("SO_PEERCRED: {e}"))?;
    let me = nix::unistd::geteuid().as_raw();
    if cred.uid() != me && cred.uid() != 0 {
        return Err(format!("pid {} runs as uid {}, the recorder as uid {me}", cred.pid(), cred.uid()));
    }
    s.set_nonblocking(false).map_err(|e| e.to_string())?;
    Ok(())
}

/// Reads one capture stage's messages to its end (blocking: a camera may be quiet for a
/// while, reconnecting); returns why it ended.
fn read_stream(s: UnixStream, conn: u64, tx: &SyncSender<Input>, stop: &AtomicBool, inflight: &InFlight) -> String {
    let mut r = std::io::BufReader::with_capacity(256 << 10, s);
    while !stop.load(Ordering::Relaxed) {
        match Message::read(&mut r) {
            Ok(m) => {
                // At most CHANNEL_BYTES wait for the loop: this reader waits, not the memory.
                while inflight.0.load(Ordering::Relaxed) > CHANNEL_BYTES && !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(Duration::from_millis(5));
                }
                inflight.0.fetch_add(size(&m), Ordering::Relaxed);
                if tx.send(Input::Packet(conn, m)).is_err() {
                    return "the recorder is stopping".into();
                }
            }
            Err(ReadError::Closed) => return "the capture stage closed the stream".into(),
            Err(e) => return format!("{e}"),
        }
    }
    "the recorder is stopping".into()
}

/// Reads the tracker's events from the detections socket at `socket` on a thread: joins
/// again when the publish stage restarts; ends at the end line or `stop`.
pub fn events(
    socket: PathBuf,
    tx: SyncSender<Input>,
    stop: Arc<AtomicBool>,
) -> std::io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new().name("record-events".into()).spawn(move || {
        let started = std::time::Instant::now();
        let mut known: std::collections::HashSet<(String, u64)> = Default::default();
        follow_lines(&socket, &stop, |line| {
            let input = match SocketLine::parse(line) {
                Ok(SocketLine::Event(e)) => {
                    // Only the first seconds need to know which tracks events named: the
                    // set is let go after them, so it never grows with a long run.
                    if started.elapsed() < RESUME {
                        known.insert((e.camera.clone(), e.track_id));
                    } else if known.capacity() > 0 {
                        known = Default::default();
                    }
                    Input::Event(e)
                }
                Ok(SocketLine::End(_)) => Input::End,
                // A recorder that (re)started mid-run missed the `new` of the tracks alive:
                // the first frame lines' tracked objects are taken as new ones, so a clip
                // of them goes on in a new file.
                Ok(SocketLine::Frame(f)) if started.elapsed() < RESUME => {
                    for e in resumed(&f, &mut known) {
                        if tx.send(Input::Event(e)).is_err() {
                            return false;
                        }
                    }
                    return true;
                }
                _ => return true,
            };
            let end = matches!(input, Input::End);
            tx.send(input).is_ok() && !end
        })
    })
}

/// How long after the recorder starts the tracked objects of frame lines count as new (see
/// [`events`]).
pub const RESUME: std::time::Duration = std::time::Duration::from_secs(3);

/// `new` events for the tracked objects of frame `f` no event named yet (added to `known`).
fn resumed(f: &zcpipe_core::schema::FrameJson, known: &mut std::collections::HashSet<(String, u64)>) -> Vec<EventJson> {
    f.detections
        .iter()
        .filter_map(|d| {
            let id = d.track_id?;
            known.insert((f.camera.clone(), id)).then(|| EventJson {
                event: "new".into(),
                camera: f.camera.clone(),
                track_id: id,
                label: d.label.clone(),
                class_id: d.class_id,
                score: d.score,
                zone: None,
                first_seen_ns: f.timestamp_ns,
                last_seen_ns: f.timestamp_ns,
                timestamp_ns: f.timestamp_ns,
                seq: Some(f.seq),
                bbox: d.bbox,
                ..Default::default()
            })
        })
        .collect()
}

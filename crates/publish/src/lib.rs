//! Publish stage: detections to any number of local clients as JSON lines on a Unix socket.
//!
//! Owns the detections socket and its clients. Sends never block the pipeline: a line that
//! does not fit in a client's socket buffer is skipped for that client and counted (a line
//! already half-sent is finished first, so the stream stays line-aligned), and a client
//! that has taken nothing for 5 s is disconnected. At the end every client gets a final
//! `{"type": "end", "end": true, ...}` line, then EOF.
//!
//! One line per frame (`{"type": "frame", ...}`); [`schema`] defines every kind of line.

pub mod fleet;
pub mod http;
pub mod mqtt;
pub mod output;
pub mod report;
/// The detections socket's lines (defined in `core`: the display reads them too).
pub use zcpipe_core::schema;
pub mod snapshot;
pub mod stage;
pub mod tracking;
pub use zcpipe_track as track;
pub mod pixels;
pub mod recorded;
pub mod view;
pub mod watch;

/// What the publish stage is asked to do (built by the command line).
#[derive(Clone, Debug, PartialEq)]
pub struct PublishConfig {
    /// The detections socket to bind (`--publish`, else the instance's default:
    /// [`zcpipe_core::config::default_detections_socket`]).
    pub socket: PathBuf,
    /// What to print on stdout per frame.
    pub print: PrintMode,
    /// `--socket-group`: the group whose members may connect to the detections socket
    /// (`None`: the `zcpipe` group when it exists, else the owner only).
    pub socket_group: Option<String>,
    /// The cameras' names in the run's order (a frame's camera index is its position):
    /// each JSON line's `camera`. One name for a single camera (`cam0` unless named).
    pub cameras: Vec<String>,
    /// The tracker and each camera's zones.
    pub track: TrackConfig,
    /// The web view (`--http`; `None`: none).
    pub http: Option<http::HttpConfig>,
    /// Snapshots (`--snapshot-dir`; `None`: none).
    pub snapshots: Option<snapshot::SnapshotConfig>,
    /// The MQTT bridge (`--mqtt`), if asked for ([`mqtt`]).
    pub mqtt: Option<mqtt::MqttConfig>,
    /// The recorder's folder (`--clips`): its clips are announced as they close
    /// ([`recorded`]) and, with the web view, listed and played there.
    pub clips: Option<PathBuf>,
}

/// The outputs `cfg` asks for besides the detections socket (MQTT, the web view,
/// snapshots, which MQTT also sends as Home Assistant images; `data`: where the capture stages the web view taps listen), each started (its threads running) and ready for lines. Errors: an output
/// that cannot start at all (a bad address); a broker or disk that is away is not an error
/// (the output says so and keeps trying).
pub(crate) fn open_outputs(cfg: &PublishConfig, data: &zcpipe_core::config::DataPath) -> Result<output::Outputs> {
    let mut outputs = output::Outputs::default();
    let mut pictures = None;
    if let Some(m) = &cfg.mqtt {
        let tracks = cfg.track.params.kind != track::TrackerKind::None;
        let bridge = mqtt::bridge::MqttOutput::start(m.clone(), tracks)?;
        // The snapshots, when taken, are also each camera's image entity.
        pictures = cfg.snapshots.is_some().then(|| bridge.picture_sink());
        outputs.0.push(Box::new(bridge));
    }
    // One tap per camera serves the web view and the snapshots alike.
    let pixels = (cfg.http.is_some() || cfg.snapshots.is_some())
        .then(|| view::pixels(cfg, data, cfg.http.as_ref().map_or(view::SNAPSHOT_FPS, |h| h.view_fps)));
    if let (Some(h), Some(p)) = (&cfg.http, &pixels) {
        outputs.0.push(Box::new(http::HttpOutput::start(
            cfg,
            h,
            Box::new(view::TapPixels::new(p.clone())),
            &data.run_dir,
        )?));
    }
    if let (Some(s), Some(p)) = (&cfg.snapshots, &pixels) {
        let shapes = std::sync::Arc::new(std::sync::RwLock::new(http::draw::Shapes::per_camera(&cfg.track)));
        outputs.0.push(Box::new(snapshot::Snapshots::start(s, &cfg.cameras, shapes, p.clone(), pictures)?));
    }
    Ok(outputs)
}

/// What the publish stage's tracker does ([`track`]); every list is per camera, in the
/// order of [`PublishConfig::cameras`] (a shorter list: nothing for the cameras after).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TrackConfig {
    /// The tracker and its parameters.
    pub params: track::TrackParams,
    /// Each camera's zones.
    pub zones: Vec<Vec<track::Zone>>,
    /// Each camera's loitering time per zone, ns (in the order of its zones).
    pub loiter_ns: Vec<Vec<Option<u64>>>,
    /// Each camera's lines.
    pub lines: Vec<Vec<track::Line>>,
    /// Each camera's masks and label filters (applied with or without a tracker).
    pub gates: Vec<track::filter::Gate>,
    /// Each camera's ground calibration, for speeds.
    pub calibrations: Vec<Option<track::speed::CalibrationSpec>>,
}

/// The group `--socket-group` names (`name`), else the `zcpipe` group when it exists
/// (getgrnam(3)) and this process may use it (root or a member); `None`: the owner only. Error: a named group that does not exist.
pub fn socket_group(name: Option<&str>) -> Result<Option<nix::unistd::Group>> {
    match name {
        Some(n) => match nix::unistd::Group::from_name(n) {
            Ok(Some(g)) => Ok(Some(g)),
            Ok(None) => bail!("--socket-group {n}: no such group; create it (groupadd {n}) and add the clients' users to it, or leave the flag out"),
            Err(e) => bail!("--socket-group {n}: looking the group up: {e}"),
        },
        // The default only where this process may give the socket to it (chown(2): root, or
        // a member), so a stage run by another user still starts (owner only then).
        None => Ok(nix::unistd::Group::from_name("zcpipe").ok().flatten().filter(|g| may_use_group(g.gid))),
    }
}

/// Whether this process may chown a file to group `gid` (chown(2)): root, or `gid` is its
/// effective or a supplementary group.
fn may_use_group(gid: nix::unistd::Gid) -> bool {
    nix::unistd::geteuid().is_root()
        || nix::unistd::getegid() == gid
        || nix::unistd::getgroups().is_ok_and(|gs| gs.contains(&gid))
}

/// How publish prints frames on its stdout (`--print`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrintMode {
    /// Nothing on stdout.
    None,
    /// One readable line per frame.
    Human,
    /// The JSON lines clients get.
    Json,
}

impl zcpipe_core::config::Choice for PrintMode {
    const ALL: &'static [(Self, &'static str, &'static str)] = &[
        (PrintMode::None, "none", "Nothing on stdout"),
        (PrintMode::Human, "human", "One readable line per frame"),
        (PrintMode::Json, "json", "The JSON lines clients get"),
    ];
}

use std::io::{ErrorKind, Read as _, Write as _};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

use schema::{EndJson, SocketLine};

struct Client {
    stream: UnixStream,
    pending: Vec<u8>,
    last_progress: Instant,
    starved_since: Option<Instant>,
    sent: u64,
    skipped: u64,
    /// Bytes the client wrote, read and thrown away (clients have nothing to say).
    discarded: u64,
}

/// The most [`DetectionServer::service`] reads and discards from one client per call
/// (bytes): a client that writes without end cannot hold the stage in its read loop. What
/// is left waits for the next call, and a client whose writes fill the socket only blocks
/// itself.
pub(crate) const DISCARD_PER_SERVICE: usize = 64 * 1024;

/// Counters of the detections server.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
pub struct ServerStats {
    /// Clients connected now.
    pub clients: usize,
    /// Clients accepted so far.
    pub accepted: u64,
    /// Clients disconnected for taking nothing for the timeout.
    pub(crate) disconnected_slow: u64,
    /// Lines skipped because a client's socket buffer was full (all clients).
    pub skipped: u64,
    /// Lines fully handed to clients (all clients).
    pub sent: u64,
}

impl ServerStats {
    /// Its line of the end-of-run summary.
    pub fn summary_line(&self) -> String {
        format!(
            "  clients: {} accepted, {} lines sent, {} skipped (a client's socket buffer was full), {} disconnected (took nothing for 5 s)",
            self.accepted, self.sent, self.skipped, self.disconnected_slow
        )
    }
}

/// The detections socket and its clients.
pub(crate) struct DetectionServer {
    listener: UnixListener,
    path: PathBuf,
    clients: Vec<Client>,
    stats: ServerStats,
    slow_timeout: Duration,
    /// When [`DetectionServer::service`] last ran.
    serviced: Option<Instant>,
}

/// How often, at most, the publish stage's frame loop looks for new clients and hang-ups
/// ([`DetectionServer::service_due`]): a client waits at most this long to be accepted, and
/// a stage publishing thousands of frames a second makes one `accept4` per interval, not
/// one per frame. Broadcasting to a client that hung up fails at once (EPIPE) anyway.
pub(crate) const SERVICE_EVERY: Duration = Duration::from_millis(50);

/// The most [`DetectionServer::close_all`] spends telling clients the stream ended, over
/// all of them (clients that do not read cannot hold the stage's exit up).
pub(crate) const CLOSE_BUDGET: Duration = Duration::from_millis(500);

/// After a bind: `dir` is still the directory `held` was opened as (no rename swapped it),
/// and `path` is a socket of ours.
fn same_place(held: &std::fs::File, dir: &Path, path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};
    let (was, now) = (held.metadata()?, std::fs::metadata(dir)?);
    let sock = std::fs::symlink_metadata(path)?;
    let me = nix::unistd::Uid::effective().as_raw();
    if (was.dev(), was.ino()) != (now.dev(), now.ino()) {
        return Err(std::io::Error::other(format!("{} is another directory than the one checked", dir.display())));
    }
    if !sock.file_type().is_socket() || sock.uid() != me {
        return Err(std::io::Error::other(format!("{} is not our socket (uid {})", path.display(), sock.uid())));
    }
    Ok(())
}

impl DetectionServer {
    /// Binds `path` (SOCK_STREAM). A stale socket file is replaced; a live one is an error.
    /// Its directory must be one no other user can change
    /// ([`zcpipe_core::config::trusted_dir`]), checked before and after the bind.
    pub fn bind(path: &Path) -> Result<DetectionServer> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            // Only zcpipe's own runtime directory is created; elsewhere a missing folder is
            // the user's typo, not something to create.
            if dir.starts_with(zcpipe_core::config::runtime_base()) {
                zcpipe_core::config::private_dir(dir)?;
            } else if !dir.is_dir() {
                bail!("--publish {}: folder {} does not exist", path.display(), dir.display());
            }
        }
        let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let what = format!("--publish {}", path.display());
        // The directory held open across the bind: the one checked is the one bound in.
        let held = std::fs::File::open(dir).with_context(|| format!("{what}: opening {}", dir.display()))?;
        zcpipe_core::config::trusted_dir(dir, &what)?;
        zcpipe_core::link::remove_stale_socket(path, |p| UnixStream::connect(p).ok().map(|_| ()))
            .map_err(|e| anyhow::anyhow!("{e}, or pass another --publish path"))?;
        let listener =
            UnixListener::bind(path).with_context(|| format!("binding detections socket {}", path.display()))?;
        same_place(&held, dir, path).map_err(|e| {
            let _ = std::fs::remove_file(path);
            anyhow::anyhow!(
                "{what}: {e}; the directory changed while the socket was made: keep it where only you can write"
            )
        })?;
        listener.set_nonblocking(true)?;
        Ok(DetectionServer {
            listener,
            path: path.to_path_buf(),
            clients: vec![],
            stats: ServerStats::default(),
            slow_timeout: Duration::from_secs(5),
            serviced: None,
        })
    }

    /// Who may connect: the owner, and the members of `group` when given (socket mode 0660,
    /// group `group`; without a group 0600). connect(2) on a Unix socket needs write
    /// permission on its file (unix(7)). When the socket sits in zcpipe's runtime directory
    /// (private, 0700), the directory is given to the group too, search only (0710), so
    /// members can reach the socket and still cannot add or replace files in it.
    pub(crate) fn share_with(&self, group: Option<&nix::unistd::Group>) -> Result<()> {
        use std::os::unix::fs::PermissionsExt;
        let set = |p: &Path, mode: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode))
                .with_context(|| format!("chmod {mode:o} {}", p.display()))
        };
        let Some(g) = group else { return set(&self.path, 0o600) };
        let chgrp = |p: &Path| {
            std::os::unix::fs::chown(p, None, Some(g.gid.as_raw()))
                .with_context(|| format!("giving {} to group {} (--socket-group)", p.display(), g.name))
        };
        chgrp(&self.path)?;
        set(&self.path, 0o660)?;
        if let Some(dir) = self.path.parent().filter(|d| *d == zcpipe_core::config::runtime_base()) {
            chgrp(dir)?;
            set(dir, 0o710)?;
        }
        log::info!("detections socket {}: owner and group {} may connect (mode 660)", self.path.display(), g.name);
        Ok(())
    }

    /// Changes the slow-client timeout (5 s by default).
    #[cfg(test)]
    pub(crate) fn set_slow_timeout(&mut self, t: Duration) {
        self.slow_timeout = t;
    }

    /// The socket path.
    #[cfg(test)]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// [`DetectionServer::service`] if it has not run for [`SERVICE_EVERY`] (or ever).
    pub(crate) fn service_due(&mut self) {
        if self.serviced.is_none_or(|t| t.elapsed() >= SERVICE_EVERY) {
            self.service();
        }
    }

    /// Accepts waiting clients and drops ones that hung up.
    pub fn service(&mut self) {
        self.serviced = Some(Instant::now());
        loop {
            match self.listener.accept() {
                Ok((s, _)) => {
                    if s.set_nonblocking(true).is_ok() {
                        log::info!("client {} connected", self.stats.accepted);
                        self.stats.accepted += 1;
                        self.clients.push(Client {
                            stream: s,
                            pending: vec![],
                            last_progress: Instant::now(),
                            starved_since: None,
                            sent: 0,
                            skipped: 0,
                            discarded: 0,
                        });
                    }
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(e) => {
                    log::warn!("accept on {}: {e}", self.path.display());
                    break;
                }
            }
        }
        let mut buf = [0u8; 4096];
        self.clients.retain_mut(|c| {
            let mut read = 0;
            while read < DISCARD_PER_SERVICE {
                match c.stream.read(&mut buf[..(DISCARD_PER_SERVICE - read).min(4096)]) {
                    Ok(0) => return false,
                    // Clients have nothing to say: discard, up to the bound.
                    Ok(n) => read += n,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                    Err(_) => return false,
                }
            }
            c.discarded += read as u64;
            true
        });
        self.stats.clients = self.clients.len();
    }

    /// Sends one line (must end in `\n`) to every client without blocking.
    pub(crate) fn broadcast(&mut self, line: &[u8]) {
        let now = Instant::now();
        let timeout = self.slow_timeout;
        let stats = &mut self.stats;
        self.clients.retain_mut(|c| {
            // Finish a half-sent line first so the stream stays line-aligned.
            if !c.pending.is_empty() {
                match c.stream.write(&c.pending) {
                    Ok(n) => {
                        c.pending.drain(..n);
                        if n > 0 {
                            c.last_progress = now;
                        }
                        if c.pending.is_empty() {
                            c.sent += 1;
                            stats.sent += 1;
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                    Err(_) => return false,
                }
            }
            if c.pending.is_empty() {
                match c.stream.write(line) {
                    Ok(n) if n == line.len() => {
                        c.sent += 1;
                        stats.sent += 1;
                        c.last_progress = now;
                        c.starved_since = None;
                        return true;
                    }
                    Ok(n) => {
                        c.pending.extend_from_slice(&line[n..]);
                        c.last_progress = now;
                        return true;
                    }
                    Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                    Err(_) => return false,
                }
            }
            c.skipped += 1;
            stats.skipped += 1;
            let since = *c.starved_since.get_or_insert(c.last_progress);
            if now.duration_since(since) > timeout && now.duration_since(c.last_progress) > timeout {
                log::warn!("client took nothing for {:?} ({} lines skipped): disconnecting it", timeout, c.skipped);
                stats.disconnected_slow += 1;
                return false;
            }
            true
        });
        self.stats.clients = self.clients.len();
    }

    /// Tells every client the stream ended (one final line) and closes them. A client
    /// that does not read gets what fits in its socket buffer: the whole goodbye takes at
    /// most [`CLOSE_BUDGET`], however many such clients there are.
    pub(crate) fn close_all(&mut self, reason: &str, frames: u64) {
        let end = SocketLine::End(EndJson { end: true, frames, reason: reason.to_string() });
        let line = end.to_line().unwrap_or_default();
        let deadline = Instant::now() + CLOSE_BUDGET;
        for c in &mut self.clients {
            // Blocking with the budget left (at least 1 ms: a zero timeout means none).
            let left = deadline.saturating_duration_since(Instant::now()).max(Duration::from_millis(1));
            let _ = c.stream.set_nonblocking(false);
            let _ = c.stream.set_write_timeout(Some(left));
            if !c.pending.is_empty() {
                let _ = c.stream.write_all(&c.pending);
            }
            let _ = c.stream.write_all(line.as_bytes());
            let _ = c.stream.shutdown(std::net::Shutdown::Both);
        }
        self.clients.clear();
        self.stats.clients = 0;
    }

    /// Counters.
    pub fn stats(&self) -> ServerStats {
        self.stats
    }
}

impl Drop for DetectionServer {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::BufRead;

    #[test]
    fn what_a_client_writes_is_discarded_within_a_bound_per_call() {
        let dir = tempfile::tempdir().unwrap();
        let mut srv = DetectionServer::bind(&dir.path().join("d.sock")).unwrap();
        let mut chatty = UnixStream::connect(srv.path()).unwrap();
        srv.service();
        // More than one call's worth (the socket holds it: a few hundred KiB on Linux).
        chatty.set_nonblocking(true).unwrap();
        let mut wrote = 0usize;
        while wrote < 3 * DISCARD_PER_SERVICE {
            match chatty.write(&[b'x'; 4096]) {
                Ok(n) => wrote += n,
                Err(_) => break,
            }
        }
        assert!(wrote > DISCARD_PER_SERVICE, "the socket took only {wrote} bytes");
        srv.service();
        assert_eq!(srv.clients[0].discarded, DISCARD_PER_SERVICE as u64);
        for _ in 0..wrote / DISCARD_PER_SERVICE + 1 {
            srv.service();
        }
        assert_eq!(srv.clients[0].discarded, wrote as u64, "the rest is read on later calls");
        // And the client still gets its lines.
        srv.broadcast(b"{}\n");
        chatty.set_nonblocking(false).unwrap();
        let mut line = String::new();
        std::io::BufReader::new(&chatty).read_line(&mut line).unwrap();
        assert_eq!(line, "{}\n");
    }

    #[test]
    fn slow_client_is_skipped_then_disconnected_fast_one_gets_all() {
        let dir = tempfile::tempdir().unwrap();
        let mut srv = DetectionServer::bind(&dir.path().join("d.sock")).unwrap();
        srv.set_slow_timeout(Duration::from_millis(300));
        let fast = UnixStream::connect(srv.path()).unwrap();
        let slow = UnixStream::connect(srv.path()).unwrap();
        srv.service();
        assert_eq!(srv.stats().clients, 2);
        let reader = std::thread::spawn(move || std::io::BufReader::new(fast).lines().map_while(|l| l.ok()).count());
        let line = format!("{}\n", "x".repeat(4000)); // the slow client fills its ~200 KB buffer in ~250 ms
        let start = Instant::now();
        let mut n = 0u64;
        while start.elapsed() < Duration::from_millis(1200) {
            srv.broadcast(line.as_bytes());
            n += 1;
            std::thread::sleep(Duration::from_millis(5));
        }
        let st = srv.stats();
        assert_eq!(st.disconnected_slow, 1, "{st:?}");
        assert!(st.skipped > 0);
        srv.close_all("test", n);
        let got = reader.join().unwrap() as u64;
        assert_eq!(got, n + 1, "the reading client got every line and the end line");
        drop(slow);
    }
}

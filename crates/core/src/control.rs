//! The control API of a running pipeline, typed: what `zcpipe ctl` (and the web view's
//! `/api/control` with a token) asks `zcpipe run`, and what it answers; and what `zcpipe run`
//! tells the publish stage of a change it applies live.
//!
//! `zcpipe run` listens on [`SOCKET`] in its run directory (a `SOCK_SEQPACKET` socket, mode
//! 0600 in the 0700 run directory; a peer of another uid, root aside, is refused by
//! `SO_PEERCRED`). A client sends one [`Ask`] and gets one [`Answer`], each a JSON message of
//! at most [`MAX_MESSAGE`] bytes; then the connection closes. The scale, infer and publish
//! stages each listen on their own socket ([`stage_socket`]) for the [`StageAsk`]s of their
//! supervisor alone: the changes they take without a restart.
//!
//! Every change is checked as the command line checks it (one line naming what is wrong,
//! nothing applied), applied whole, and announced to the detections socket's clients as a
//! `config_changed` notice.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::Path;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::socket::{
    accept4, bind, connect, getsockopt, listen, socket, sockopt, AddressFamily, Backlog, SockFlag, SockType, UnixAddr,
};
use serde::{Deserialize, Serialize};

use super::fdpass;

mod stage;
pub use stage::{reply, stage_socket, tell_stage, LiveCamera, StageAnswer, StageAsk, StageControl, StageRequest};

/// The version of [`Ask`], [`Answer`] and [`StageAsk`] this build speaks.
pub const VERSION: u32 = 1;
/// The run's control socket, in its run directory.
pub const SOCKET: &str = "control.sock";
/// How long a client waits for the run's answer (`zcpipe ctl`, the web view's control
/// route): longer than the run takes to give up on a request (it answers `busy` after 120 s;
/// a reload plans the whole run again).
pub const ANSWER_WAIT: Duration = Duration::from_secs(150);
/// The largest message either way, in bytes (a zone of 1,000 points is about 14 KB).
pub const MAX_MESSAGE: usize = 60 * 1024;

/// A request with the version of the contract it was written for.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Ask {
    /// [`VERSION`].
    pub version: u32,
    /// What is asked.
    pub request: Request,
}

/// What a client may ask a running pipeline.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// The cameras and their state.
    Cameras,
    /// Adds camera `camera` reading `source`, with its own per-camera options (`--fps=10`,
    /// `--size=1280x720`, `--detect-fps=5`, `--record-dir=/var/clips`, ...).
    AddCamera {
        /// Its name (as `--source NAME=SOURCE` gives it).
        camera: String,
        /// Its source, as `--source` takes it.
        source: String,
        /// Its own options, each `--key=value`.
        #[serde(default)]
        options: Vec<String>,
    },
    /// Stops camera `camera` for good: its tracks end, its capture stage stops.
    RemoveCamera {
        /// The camera.
        camera: String,
    },
    /// Restarts camera `camera`'s capture stage (the others go on).
    RestartCamera {
        /// The camera.
        camera: String,
    },
    /// Each camera's zones, lines and loitering times (`camera`: that one only).
    Scene {
        /// One camera, or every camera.
        #[serde(default)]
        camera: Option<String>,
    },
    /// Adds a zone, line or loitering time to camera `camera`, or replaces the one of its
    /// name.
    SetShape {
        /// The camera.
        camera: String,
        /// Zone, line or loitering time.
        kind: ShapeKind,
        /// As the flag takes it, without a camera: `door=100,100,400,100,400,300` for a
        /// zone, `exit=0,300,640,300` for a line, `door=10` for a loitering time.
        spec: String,
    },
    /// Removes a zone (and its loitering time), line or loitering time of camera `camera`.
    RemoveShape {
        /// The camera.
        camera: String,
        /// Zone, line or loitering time.
        kind: ShapeKind,
        /// Its name.
        name: String,
    },
    /// Changes a setting, of camera `camera` where the setting is per camera.
    Set {
        /// The camera (`None`: the run's, every camera's).
        #[serde(default)]
        camera: Option<String>,
        /// The setting and its value.
        setting: Setting,
    },
    /// Reads the configuration file again (with the run's command line over it) and
    /// applies the difference.
    Reload,
}

/// What [`Request::SetShape`] and [`Request::RemoveShape`] act on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ShapeKind {
    /// `--zone`.
    Zone,
    /// `--line`.
    Line,
    /// `--loiter`.
    Loiter,
}

impl ShapeKind {
    /// The flag it is, as on the command line.
    pub fn flag(self) -> &'static str {
        match self {
            ShapeKind::Zone => "--zone",
            ShapeKind::Line => "--line",
            ShapeKind::Loiter => "--loiter",
        }
    }
}

/// A setting [`Request::Set`] changes, with its new value.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "name", content = "value", rename_all = "kebab-case")]
pub enum Setting {
    /// `--score-threshold` (the run's).
    ScoreThreshold(f32),
    /// `--nms-iou` (the run's).
    NmsIou(f32),
    /// `--detect-fps` (per camera, or every camera's).
    DetectFps(f64),
    /// `--track-high` (the run's).
    TrackHigh(f32),
    /// `--track-keepalive` in seconds (the run's).
    TrackKeepalive(f64),
    /// MQTT on or off (the run's `--mqtt` broker is kept while off).
    Mqtt(bool),
    /// `--snapshot-every` in seconds (the run's; `0`: at events only).
    SnapshotEvery(f64),
}

impl Setting {
    /// Its flag, as on the command line.
    pub fn flag(&self) -> &'static str {
        match self {
            Setting::ScoreThreshold(_) => "--score-threshold",
            Setting::NmsIou(_) => "--nms-iou",
            Setting::DetectFps(_) => "--detect-fps",
            Setting::TrackHigh(_) => "--track-high",
            Setting::TrackKeepalive(_) => "--track-keepalive",
            Setting::Mqtt(_) => "--mqtt",
            Setting::SnapshotEvery(_) => "--snapshot-every",
        }
    }
}

/// An answer with the version of the contract it was written in.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Answer {
    /// [`VERSION`].
    pub version: u32,
    /// What came of the request.
    pub reply: Reply,
}

/// What came of a [`Request`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "snake_case", deny_unknown_fields)]
pub enum Reply {
    /// The change was applied.
    Done {
        /// What changed, in words (`zones of door: door replaced`).
        change: String,
        /// The stages restarted for it (`capture@back`, `infer`); empty: applied live.
        restarted: Vec<String>,
        /// The stages started or stopped for it.
        #[serde(default)]
        started: Vec<String>,
        /// The stages stopped for good.
        #[serde(default)]
        stopped: Vec<String>,
    },
    /// Nothing to change: the request asks for what is already so.
    Unchanged,
    /// The cameras.
    Cameras {
        /// In the run's order.
        cameras: Vec<CameraState>,
    },
    /// The cameras' zones, lines and loitering times.
    Scene {
        /// In the run's order.
        cameras: Vec<CameraScene>,
    },
    /// Refused: nothing was applied.
    Refused {
        /// Why, for a program.
        error: Refusal,
        /// Why, in one line naming the thing and the fix.
        message: String,
    },
}

/// Why a request was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Refusal {
    /// A message of another version of the contract.
    Version,
    /// Not a request (bad JSON, an unknown operation or field).
    Malformed,
    /// A camera the run does not have.
    UnknownCamera,
    /// A zone, line or loitering time the camera does not have.
    UnknownName,
    /// A camera name already taken.
    Duplicate,
    /// A value the command line would refuse (an invalid polygon, a value out of range, a
    /// source already in use...).
    Invalid,
    /// The run is stopping, or another change is being applied.
    Busy,
    /// Checked, but a stage could not take it (the message says which); nothing was applied.
    Failed,
}

/// A camera and its state.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CameraState {
    /// Its name.
    pub name: String,
    /// Its source, a password masked.
    pub source: String,
    /// Its capture stage's state.
    pub state: CameraRun,
    /// Its capture stage's pid (while it runs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<i32>,
    /// How often its capture stage was restarted.
    pub restarts: u32,
    /// Frames its capture stage made (its latest report).
    pub frames: u64,
}

/// A camera's capture stage's state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CameraRun {
    /// Running and reporting.
    Streaming,
    /// Started, not set up yet (a network camera being reached).
    Starting,
    /// Died; to be started again.
    Reconnecting,
    /// Ended (its stream ended, or it was removed).
    Stopped,
}

/// A camera's zones, lines and loitering times, each as its flag takes it without the camera.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct CameraScene {
    /// The camera.
    pub camera: String,
    /// `NAME=x1,y1,...`.
    pub zones: Vec<String>,
    /// `NAME=x1,y1,x2,y2[,...][,point=...][,band=...]`.
    pub lines: Vec<String>,
    /// `ZONE=SECONDS`.
    pub loiter: Vec<String>,
}

/// A connected control socket: one message each way.
#[derive(Debug)]
pub struct Channel {
    fd: OwnedFd,
    /// The peer's uid and pid (SO_PEERCRED).
    pub peer_uid: u32,
    /// The peer's pid.
    pub peer_pid: i32,
    /// The peer's effective gid.
    pub peer_gid: u32,
}

impl Channel {
    /// Connects to the socket at `path`; every receive then waits at most `timeout`.
    pub fn connect(path: &Path, timeout: Duration) -> Result<Channel> {
        let addr = UnixAddr::new(path).with_context(|| format!("socket path {}", path.display()))?;
        let fd = socket(AddressFamily::Unix, SockType::SeqPacket, SockFlag::SOCK_CLOEXEC, None)
            .context("socket(AF_UNIX, SOCK_SEQPACKET)")?;
        connect(fd.as_raw_fd(), &addr).map_err(|e| anyhow!("{}: {}", path.display(), e.desc()))?;
        Channel::from_fd(fd, timeout)
    }

    /// A channel on accepted or connected socket `fd`, its receives bounded by `timeout`.
    pub fn from_fd(fd: OwnedFd, timeout: Duration) -> Result<Channel> {
        let cred = getsockopt(&fd, sockopt::PeerCredentials).context("SO_PEERCRED")?;
        let tv = nix::sys::time::TimeVal::from(libc::timeval {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_usec: timeout.subsec_micros() as libc::suseconds_t,
        });
        nix::sys::socket::setsockopt(&fd, sockopt::ReceiveTimeout, &tv).context("SO_RCVTIMEO")?;
        nix::sys::socket::setsockopt(&fd, sockopt::SendTimeout, &tv).context("SO_SNDTIMEO")?;
        Ok(Channel { fd, peer_uid: cred.uid(), peer_pid: cred.pid(), peer_gid: cred.gid() })
    }

    /// Whether the peer may control this run: our uid, or root.
    pub fn peer_allowed(&self) -> bool {
        let me = nix::unistd::geteuid().as_raw();
        self.peer_uid == me || self.peer_uid == 0
    }

    /// Whether the peer is in group `gid`: its effective group, or one of its supplementary
    /// groups (`Groups:` of `/proc/PID/status`, read while it is connected).
    pub fn peer_in_group(&self, gid: u32) -> bool {
        if self.peer_gid == gid {
            return true;
        }
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.peer_pid)).unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("Groups:"))
            .is_some_and(|g| g.split_whitespace().any(|x| x.parse() == Ok(gid)))
    }

    /// Sends `msg` as one JSON message (at most [`MAX_MESSAGE`] bytes).
    pub fn send<T: Serialize>(&self, msg: &T) -> Result<()> {
        let bytes = serde_json::to_vec(msg).context("encoding a control message")?;
        if bytes.len() > MAX_MESSAGE {
            bail!("a control message of {} bytes is over the {MAX_MESSAGE}-byte limit", bytes.len());
        }
        fdpass::send(self.fd.as_fd(), &bytes, &[])
    }

    /// Receives one message's bytes (any fds sent with it are closed): `None` if the peer
    /// hung up; an error past the timeout.
    pub fn recv_bytes(&self) -> Result<Option<Vec<u8>>> {
        match fdpass::recv(self.fd.as_fd()) {
            Ok(Some((bytes, _fds))) => Ok(Some(bytes)),
            Ok(None) => Ok(None),
            Err(e) => Err(anyhow!("{e:#}")),
        }
    }
}

/// A control socket listening at `path` (`SOCK_SEQPACKET`, mode 0600, `backlog` deep;
/// `nonblocking` for a listener polled without waiting). The path is in the run's own
/// private directory, so a file left there is a killed process's and is replaced.
pub fn listen_at(path: &Path, nonblocking: bool, backlog: i32) -> Result<OwnedFd> {
    let addr = UnixAddr::new(path).with_context(|| format!("socket path {}", path.display()))?;
    let _ = std::fs::remove_file(path);
    let flags = if nonblocking { SockFlag::SOCK_CLOEXEC | SockFlag::SOCK_NONBLOCK } else { SockFlag::SOCK_CLOEXEC };
    let fd =
        socket(AddressFamily::Unix, SockType::SeqPacket, flags, None).context("socket(AF_UNIX, SOCK_SEQPACKET)")?;
    bind(fd.as_raw_fd(), &addr).with_context(|| format!("binding {}", path.display()))?;
    std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o600))
        .with_context(|| format!("chmod 600 {}", path.display()))?;
    listen(&fd, Backlog::new(backlog).map_err(|e| anyhow!("backlog {backlog}: {e}"))?).context("listen")?;
    Ok(fd)
}

/// The next client of control socket `listener` within `wait`, its receives bounded by
/// `timeout`; `None` when none came (or it left before it could be read).
pub fn accept_channel(listener: &OwnedFd, wait: PollTimeout, timeout: Duration) -> Option<Channel> {
    let mut p = [PollFd::new(listener.as_fd(), PollFlags::POLLIN)];
    if !matches!(poll(&mut p, wait), Ok(n) if n > 0) {
        return None;
    }
    let raw = accept4(listener.as_raw_fd(), SockFlag::SOCK_CLOEXEC).ok()?;
    // SAFETY: accept4 returned a new descriptor that nothing else owns.
    let conn: OwnedFd = unsafe { std::os::fd::FromRawFd::from_raw_fd(raw) };
    Channel::from_fd(conn, timeout).ok()
}

/// Reads a request's bytes: its [`Ask`], or the refusal to answer with (nothing is quoted
/// back: a request may hold a camera's password).
pub fn parse_ask(bytes: &[u8]) -> std::result::Result<Request, Reply> {
    let v: serde_json::Value = serde_json::from_slice(bytes).map_err(|e| refused_malformed(&e))?;
    match v.get("version").and_then(|v| v.as_u64()) {
        Some(n) if n == u64::from(VERSION) => {}
        Some(n) => {
            return Err(Reply::Refused {
                error: Refusal::Version,
                message: format!(
                    "a request of version {n}; this zcpipe speaks version {VERSION}: use its own zcpipe ctl"
                ),
            })
        }
        None => {
            return Err(Reply::Refused {
                error: Refusal::Malformed,
                message: "not a control request: it needs a version and a request".into(),
            })
        }
    }
    serde_json::from_value::<Ask>(v).map(|a| a.request).map_err(|e| refused_malformed(&e))
}

fn refused_malformed(e: &serde_json::Error) -> Reply {
    // serde's message quotes what it did not take (`unknown variant \`rtsp://u:pw@...\``,
    // `invalid type: string "..."`), unescaped: only its kind is kept, and what was
    // expected (the contract's own words, after serde's last ", expected ").
    let text = e.to_string();
    let text = text.split(" at line ").next().unwrap_or("");
    // The words before the first quote or colon: `unknown variant`, `invalid type`.
    let kind = |s: &str| -> String {
        let head = s.split(['`', '"', ':', '(']).next().unwrap_or("");
        head.split_whitespace().take(4).collect::<Vec<_>>().join(" ")
    };
    let what = match text.rsplit_once(", expected ") {
        Some((given, expected)) => format!("{}, expected {expected}", kind(given)),
        // Names of the contract's own fields.
        None if text.starts_with("missing field") || text.starts_with("duplicate field") => text.to_string(),
        None => kind(text),
    };
    let what: String = what.chars().take(250).collect();
    Reply::Refused { error: Refusal::Malformed, message: format!("not a control request: {what}") }
}

/// Asks the run listening at `path` and waits up to `timeout` for its answer.
pub fn call(path: &Path, request: Request, timeout: Duration) -> Result<Reply> {
    let ch = Channel::connect(path, timeout)?;
    // A run too busy to take the request answers before reading it and hangs up: the
    // send may fail, and the answer is still there to read.
    let sent = ch.send(&Ask { version: VERSION, request });
    let bytes = match ch.recv_bytes() {
        Ok(Some(b)) => b,
        _ => {
            sent?;
            bail!("{} hung up without an answer", path.display())
        }
    };
    let a: Answer = serde_json::from_slice(&bytes).context("reading the run's answer")?;
    if a.version != VERSION {
        bail!("the run answered in version {} of the control contract; this zcpipe reads {VERSION}", a.version);
    }
    Ok(a.reply)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_read_back_and_bad_ones_are_named_without_their_values() {
        let ask = Ask {
            version: VERSION,
            request: Request::SetShape { camera: "door".into(), kind: ShapeKind::Zone, spec: "in=1,1,9,1,9,9".into() },
        };
        let text = serde_json::to_string(&ask).unwrap();
        assert_eq!(
            text,
            r#"{"version":1,"request":{"op":"set_shape","camera":"door","kind":"zone","spec":"in=1,1,9,1,9,9"}}"#
        );
        assert_eq!(parse_ask(text.as_bytes()), Ok(ask.request));
        let set =
            r#"{"version":1,"request":{"op":"set","camera":null,"setting":{"name":"score-threshold","value":0.5}}}"#;
        assert_eq!(parse_ask(set.as_bytes()), Ok(Request::Set { camera: None, setting: Setting::ScoreThreshold(0.5) }));
        let Err(Reply::Refused { error, message }) = parse_ask(br#"{"version":2,"request":{"op":"cameras"}}"#) else {
            panic!("version 2 read")
        };
        assert_eq!(
            (error, message.as_str()),
            (Refusal::Version, "a request of version 2; this zcpipe speaks version 1: use its own zcpipe ctl")
        );
        let Err(Reply::Refused { error, message }) =
            parse_ask(br#"{"version":1,"request":{"op":"drop_tables","secret":"hunter2"}}"#)
        else {
            panic!("an unknown op read")
        };
        assert_eq!(error, Refusal::Malformed);
        assert!(message.starts_with("not a control request: unknown variant, expected one of `cameras`"), "{message}");
        let Err(Reply::Refused { message, .. }) =
            parse_ask(br#"{"version":1,"request":{"op":"rtsp://u:hunter2@h/x"}}"#)
        else {
            panic!("a URL read as an op")
        };
        assert!(!message.contains("hunter2"), "{message}");
        let Err(Reply::Refused { message, .. }) =
            parse_ask(br#"{"version":1,"request":{"op":"restart_camera","camera":"a","x":"rtsp://u:hunter2@h/x"}}"#)
        else {
            panic!("an unknown field read")
        };
        assert!(!message.contains("hunter2") && message.contains("unknown field"), "{message}");
        assert!(matches!(parse_ask(b"\xff"), Err(Reply::Refused { error: Refusal::Malformed, .. })));
    }
}

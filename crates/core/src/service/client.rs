//! A Rust client of the inference service ([`super`] has the protocol).
//!
//! ```no_run
//! use zcpipe_core::service::client::{Client, image_buffer};
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let mut client = Client::connect(std::path::Path::new("/run/user/1000/zcpipe/default/npu.sock"), "doorbell")?;
//! let (fd, spec) = image_buffer(&std::fs::read("door.jpg")?)?;
//! let index = client.register(&[(&fd, spec)])?;
//! let frame = client.detect(index)?; // waits for the answer
//! for d in &frame.detections {
//!     println!("{} {:.2} {:?}", d.label, d.score, d.bbox);
//! }
//! # Ok(()) }
//! ```
//!
//! The client sends on one connection and reads its answers there; several threads
//! need several clients. For video, [`Client::submit`] with [`Kind::Video`] and read the
//! answers with [`Client::recv`]: a buffer is free again once its answer came.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::socket::{connect, socket, AddressFamily, SockFlag, SockType, UnixAddr};

use super::{decode_reply, BufferSpec, Kind, PixelFormat, Reply, Request, ServiceStats, Welcome, VERSION};
use crate::schema::FrameJson;

/// What can go wrong for a client; the Display text is one line naming the thing and the fix.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// Nothing listens at the socket (no pipeline of that instance, or the service is off).
    #[error("no inference service at {path}: {why}; start `zcpipe run` (for another instance: --instance NAME; with --run-dir DIR: --run-dir DIR here too)")]
    Connect {
        /// The socket.
        path: PathBuf,
        /// The system's reason.
        why: String,
    },
    /// The service refused a message.
    #[error("the inference service refused: {0}")]
    Refused(String),
    /// A `request` found the client's queue full.
    #[error("the inference service is busy (this client's queue is full); try again")]
    Busy,
    /// The request was dropped (a newer one, its age, the client's rate, a stop).
    #[error("the inference service dropped the request ({0})")]
    Dropped(String),
    /// The service hung up.
    #[error("the inference service hung up (the pipeline stopped or restarted)")]
    Gone,
    /// No answer within the timeout.
    #[error("no answer from the inference service within {0:?}")]
    TimedOut(Duration),
    /// A system call failed, or the service sent something this client cannot read.
    #[error("{0}")]
    Other(String),
}

/// A connection to the inference service.
pub struct Client {
    sock: OwnedFd,
    welcome: Welcome,
    next_seq: u64,
    timeout: Duration,
}

/// Why nothing answered at `path`, in the user's terms: a pipeline that runs without its
/// service, an infer stage restarting, or no pipeline.
fn connect_failure(path: &Path, e: nix::errno::Errno) -> String {
    let infer = path.parent().map(|d| d.join("infer.sock"));
    match e {
        nix::errno::Errno::ENOENT if infer.as_ref().is_some_and(|p| p.exists()) => {
            "the pipeline there runs without its inference service (--no-serve)".into()
        }
        nix::errno::Errno::ECONNREFUSED => {
            "nothing listens there now (the infer stage may be restarting: try again in a second)".into()
        }
        e => e.desc().to_string(),
    }
}

/// A sealed memfd holding `bytes` (sealed against shrinking, growing and further seals, so
/// the service can map it safely).
pub fn memfd_with(bytes: &[u8]) -> Result<OwnedFd, ClientError> {
    let fd = crate::dmabuf::sealed_memfd("zcpipe-client", bytes.len() as u64, true)
        .map_err(|e| ClientError::Other(format!("{e:#}")))?;
    let mut f = std::fs::File::from(fd);
    // The size is sealed; writing inside it is allowed.
    std::io::Write::write_all(&mut f, bytes).map_err(|e| ClientError::Other(format!("writing the memfd: {e}")))?;
    Ok(OwnedFd::from(f))
}

/// A JPEG or PNG file's bytes as a buffer to register: a sealed memfd and its
/// [`BufferSpec`] (the format from the file's first bytes).
pub fn image_buffer(bytes: &[u8]) -> Result<(OwnedFd, BufferSpec), ClientError> {
    let format = if bytes.starts_with(&[0xff, 0xd8, 0xff]) {
        PixelFormat::Jpeg
    } else if bytes.starts_with(b"\x89PNG\r\n\x1a\n") {
        PixelFormat::Png
    } else {
        return Err(ClientError::Other("not a JPEG or PNG file (its first bytes say neither)".into()));
    };
    Ok((memfd_with(bytes)?, BufferSpec::encoded(format, bytes.len() as u64)))
}

impl Client {
    /// Connects to the service at `path` and says hello as `name` (letters, digits, `-`,
    /// `_`, `.`; may be empty).
    pub fn connect(path: &Path, name: &str) -> Result<Client, ClientError> {
        Client::connect_with(path, name, 0.0)
    }

    /// [`Client::connect`] asking for at most `detect_fps` video requests run per second
    /// (0: every one).
    pub fn connect_with(path: &Path, name: &str, detect_fps: f64) -> Result<Client, ClientError> {
        Client::connect_within(path, name, detect_fps, Duration::from_secs(30))
    }

    /// [`Client::connect_with`], waiting at most `timeout` for the welcome (and, later, for
    /// each answer [`Client::register`], [`Client::detect`] and [`Client::stats`] wait for).
    pub fn connect_within(path: &Path, name: &str, detect_fps: f64, timeout: Duration) -> Result<Client, ClientError> {
        let err = |why: String| ClientError::Connect { path: path.to_path_buf(), why };
        let addr = UnixAddr::new(path).map_err(|e| err(e.to_string()))?;
        let sock = socket(AddressFamily::Unix, SockType::SeqPacket, SockFlag::SOCK_CLOEXEC, None)
            .map_err(|e| err(format!("socket: {e}")))?;
        connect(sock.as_raw_fd(), &addr).map_err(|e| err(connect_failure(path, e)))?;
        let mut c = Client {
            sock,
            welcome: Welcome {
                v: VERSION,
                client: String::new(),
                input: [0, 0],
                detector: String::new(),
                max_buffers: 0,
                queue: 0,
            },
            next_seq: 0,
            timeout,
        };
        c.send(&Request::Hello { v: VERSION, name: name.into(), detect_fps }, &[])?;
        match c.recv(Some(timeout))? {
            Reply::Welcome(w) => c.welcome = w,
            Reply::Refused { reason, .. } => return Err(ClientError::Refused(reason)),
            other => return Err(ClientError::Other(format!("expected a welcome, got {other:?}"))),
        }
        Ok(c)
    }

    /// What the service said at hello: the model's input, the limits, this client's name.
    pub fn welcome(&self) -> &Welcome {
        &self.welcome
    }

    /// How long [`Client::register`] and [`Client::detect`] wait for their answer (30 s
    /// unless set).
    pub fn set_timeout(&mut self, timeout: Duration) {
        self.timeout = timeout;
    }

    /// Registers buffers (each fd with what it holds); returns the first one's index (the
    /// others follow in order). Waits for the answer.
    pub fn register(&mut self, bufs: &[(&OwnedFd, BufferSpec)]) -> Result<u32, ClientError> {
        let fds: Vec<_> = bufs.iter().map(|(f, _)| f.as_fd()).collect();
        let buffers = bufs.iter().map(|(_, s)| s.clone()).collect();
        self.send(&Request::Register { v: VERSION, buffers }, &fds)?;
        match self.recv(Some(self.timeout))? {
            Reply::Registered { first, .. } => Ok(first),
            Reply::Refused { reason, .. } => Err(ClientError::Refused(reason)),
            other => Err(ClientError::Other(format!("expected registered, got {other:?}"))),
        }
    }

    /// Sends a request on buffer `buffer` without waiting; returns its sequence number
    /// (its answer, from [`Client::recv`], carries it).
    pub fn submit(&mut self, kind: Kind, buffer: u32) -> Result<u64, ClientError> {
        let seq = self.next_seq;
        self.next_seq += 1;
        self.send(&Request::Detect { v: VERSION, kind, buffer, seq }, &[])?;
        Ok(seq)
    }

    /// Runs a `request` on buffer `buffer` and waits for its detections.
    pub fn detect(&mut self, buffer: u32) -> Result<FrameJson, ClientError> {
        let seq = self.submit(Kind::Request, buffer)?;
        loop {
            match self.recv(Some(self.timeout))? {
                Reply::Frame { frame, .. } if frame.seq == seq => return Ok(frame),
                Reply::Busy { seq: s, .. } if s == seq => return Err(ClientError::Busy),
                Reply::Dropped { seq: s, reason, .. } if s == seq => {
                    return Err(ClientError::Dropped(format!("{reason:?}").to_lowercase()))
                }
                Reply::Refused { reason, seq: s, fatal, .. } if fatal || s == Some(seq) => {
                    return Err(ClientError::Refused(reason))
                }
                _ => continue, // an earlier request's answer
            }
        }
    }

    /// The service's numbers (this client left out).
    pub fn stats(&mut self) -> Result<ServiceStats, ClientError> {
        self.send(&Request::Stats { v: VERSION }, &[])?;
        loop {
            match self.recv(Some(self.timeout))? {
                Reply::Stats { stats, .. } => return Ok(stats),
                Reply::Refused { reason, .. } => return Err(ClientError::Refused(reason)),
                _ => continue, // an earlier request's answer
            }
        }
    }

    /// The next message of the service (`timeout` `None`: wait for ever).
    pub fn recv(&mut self, timeout: Option<Duration>) -> Result<Reply, ClientError> {
        let tv = nix::sys::time::TimeVal::new(
            timeout.map_or(0, |t| t.as_secs() as i64),
            timeout.map_or(0, |t| t.subsec_micros().max(if t.is_zero() { 1 } else { 0 }) as i64),
        );
        nix::sys::socket::setsockopt(&self.sock, nix::sys::socket::sockopt::ReceiveTimeout, &tv)
            .map_err(|e| ClientError::Other(format!("SO_RCVTIMEO: {e}")))?;
        match crate::fdpass::recv(self.sock.as_fd()) {
            Ok(Some((payload, _fds))) => decode_reply(&payload).map_err(ClientError::Other),
            Ok(None) => Err(ClientError::Gone),
            Err(crate::Error::TimedOut { .. }) => Err(ClientError::TimedOut(timeout.unwrap_or_default())),
            Err(e) => Err(ClientError::Other(format!("{e:#}"))),
        }
    }

    fn send(&mut self, req: &Request, fds: &[std::os::fd::BorrowedFd<'_>]) -> Result<(), ClientError> {
        let payload = serde_json::to_vec(req).map_err(|e| ClientError::Other(e.to_string()))?;
        match crate::fdpass::send(self.sock.as_fd(), &payload, fds) {
            Ok(()) => Ok(()),
            // The service may have hung up: its last word (a refusal) may still wait to be read.
            Err(e) => match self.recv(Some(Duration::from_millis(100))) {
                Ok(Reply::Refused { reason, .. }) => Err(ClientError::Refused(reason)),
                Err(ClientError::Gone) => Err(ClientError::Gone),
                _ => Err(ClientError::Other(format!("{e:#}"))),
            },
        }
    }
}

//! The inference service's protocol: how a local process that is not part of the pipeline
//! has the loaded model detect objects in its own frames.
//!
//! The service listens on a Unix `SOCK_SEQPACKET` socket ([`SOCKET_NAME`] in the run
//! directory, or where `--serve-socket` puts it). Every message is one packet holding one
//! JSON object with a `"type"` and the protocol version `"v"` ([`VERSION`]); file
//! descriptors travel in the packet's `SCM_RIGHTS` (at most [`MAX_REGISTER`] per packet),
//! and a packet is at most 64 KiB. A client:
//! 1. says [`Request::Hello`] and gets [`Reply::Welcome`] (the model's input, the limits);
//! 2. registers its buffers once, [`Request::Register`] with one fd per buffer (a memfd
//!    sealed against shrinking, or a dma-buf), each with its format, size and planes
//!    ([`BufferSpec`]), and gets [`Reply::Registered`] (their indices) or
//!    [`Reply::Refused`];
//! 3. from then on sends only [`Request::Detect`]: a buffer index, its own sequence number
//!    and a [`Kind`]. Each request gets exactly one answer: [`Reply::Frame`] (the
//!    detections, the same object as a detections-socket frame line, boxes in the buffer's
//!    pixels), [`Reply::Dropped`] (a newer video frame replaced it, it grew older than the
//!    service's `--max-age`, or it came faster than the client's `detect_fps`), [`Reply::Busy`]
//!    (a `request` found the client's queue full) or [`Reply::Refused`]. A buffer is the
//!    service's from its request until that answer: the client writes it again only after.
//!
//! A client that hangs up loses its queued requests and its buffers; one that does not read
//! its answers loses them (counted), never the service's memory. What the service checks
//! and refuses is in [`decode`] (the messages) and in the infer stage's service (the fds).

pub mod client;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::frame::{Fourcc, FrameLayout, PlaneDesc, MAX_PLANES};
use crate::schema::FrameJson;

/// The protocol version this side speaks; a message with another `"v"` is refused.
pub const VERSION: u32 = 1;

/// The service's socket in an instance's run directory.
pub const SOCKET_NAME: &str = "npu.sock";

/// Most buffers one message registers (fds in one packet).
pub const MAX_REGISTER: usize = 16;

/// Most bytes one client buffer may hold (a 4096x4096 RGB picture is 48 MiB).
pub const MAX_BUFFER_BYTES: u64 = 64 << 20;

/// Longest client name, bytes.
pub const MAX_NAME: usize = 64;

/// The service's socket for the run directory `run_dir`.
pub fn socket_path(run_dir: &Path) -> PathBuf {
    run_dir.join(SOCKET_NAME)
}

/// A client buffer's pixel format: raw planes, or an encoded still picture the service
/// decodes as the capture stage's `image:` source does (to NV12, then the letterbox).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum PixelFormat {
    /// Y plane then interleaved CbCr, 4:2:0 (two planes).
    Nv12,
    /// Y plane then interleaved CbCr, 4:2:2 (two planes).
    Nv16,
    /// Packed Y0 Cb Y1 Cr (one plane).
    Yuyv,
    /// Packed R, G, B bytes (one plane).
    Rgb24,
    /// Packed B, G, R bytes (one plane).
    Bgr24,
    /// Packed B, G, R, X bytes (one plane).
    Xr24,
    /// A JPEG file's bytes (`size` of them).
    Jpeg,
    /// A PNG file's bytes (`size` of them).
    Png,
}

impl PixelFormat {
    /// The raw format's fourcc (`None`: an encoded picture).
    pub fn fourcc(self) -> Option<Fourcc> {
        match self {
            PixelFormat::Nv12 => Some(Fourcc::NV12),
            PixelFormat::Nv16 => Some(Fourcc::NV16),
            PixelFormat::Yuyv => Some(Fourcc::YUYV),
            PixelFormat::Rgb24 => Some(Fourcc::RGB24),
            PixelFormat::Bgr24 => Some(Fourcc::BGR24),
            PixelFormat::Xr24 => Some(Fourcc::XR24),
            PixelFormat::Jpeg | PixelFormat::Png => None,
        }
    }
}

/// One plane of a raw buffer: where its first row starts and its row stride.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlaneSpec {
    /// Byte offset of the plane's first row in the buffer.
    pub offset: u32,
    /// Bytes from one row to the next.
    pub bytesperline: u32,
}

/// What a registered buffer holds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BufferSpec {
    /// The pixel format.
    pub format: PixelFormat,
    /// Width, pixels (raw formats; 0 for an encoded picture).
    #[serde(default)]
    pub width: u32,
    /// Height, pixels (raw formats; 0 for an encoded picture).
    #[serde(default)]
    pub height: u32,
    /// The planes (raw formats: 2 for NV12 and NV16, else 1; none for an encoded picture).
    #[serde(default)]
    pub planes: Vec<PlaneSpec>,
    /// Bytes of the buffer in use (the fd must hold at least this many); for an encoded
    /// picture, its length.
    pub size: u64,
}

impl BufferSpec {
    /// A tightly packed NV12 buffer of `width` x `height` (bytesperline = even width).
    pub fn nv12(width: u32, height: u32) -> BufferSpec {
        let l = FrameLayout::nv12(width, height, 2);
        let planes = l.planes().iter().map(|p| PlaneSpec { offset: p.offset, bytesperline: p.bytesperline }).collect();
        BufferSpec { format: PixelFormat::Nv12, width, height, planes, size: l.bytes_needed() }
    }

    /// An encoded picture of `size` bytes.
    pub fn encoded(format: PixelFormat, size: u64) -> BufferSpec {
        BufferSpec { format, width: 0, height: 0, planes: Vec::new(), size }
    }

    /// The raw buffer's frame layout, checked against `size` as a pool buffer's is
    /// ([`FrameLayout::validate`]); `Ok(None)` for an encoded picture. Errors name the
    /// field that does not fit.
    pub fn layout(&self) -> Result<Option<FrameLayout>, String> {
        if self.size == 0 || self.size > MAX_BUFFER_BYTES {
            return Err(format!("size {} out of range 1..={MAX_BUFFER_BYTES}", self.size));
        }
        let Some(fourcc) = self.format.fourcc() else {
            if self.width != 0 || self.height != 0 || !self.planes.is_empty() {
                return Err("an encoded picture has no width, height or planes: its file says them".into());
            }
            return Ok(None);
        };
        if self.planes.is_empty() || self.planes.len() > MAX_PLANES {
            return Err(format!(
                "{} planes; {:?} needs {}",
                self.planes.len(),
                self.format,
                fourcc.num_planes().unwrap_or(1)
            ));
        }
        let mut l = FrameLayout {
            fourcc,
            width: self.width,
            height: self.height,
            num_planes: self.planes.len() as u32,
            ..Default::default()
        };
        for (i, p) in self.planes.iter().enumerate() {
            let (_, rows) = l.plane_row_bytes_and_rows(i);
            let length = (p.bytesperline as u64 * rows).min(u32::MAX as u64) as u32;
            l.planes[i] = PlaneDesc { offset: p.offset, bytesperline: p.bytesperline, length, fd_index: 0 };
        }
        l.validate(&[self.size])?;
        Ok(Some(l))
    }
}

/// How a request waits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// A video frame: the newest wins. One still waiting when a newer one of the same
    /// client comes is answered [`Reply::Dropped`] (`newer`); one older than the service's
    /// `--max-age` when an engine is free is dropped (`age`).
    Video,
    /// A command: waits its turn in the client's bounded queue, whatever its age; a full
    /// queue answers [`Reply::Busy`] at once.
    Request,
}

/// A client's message.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Request {
    /// The first message: who the client is (a name for logs and reports, the peer's pid is
    /// added) and the most frames per second it wants inferred (0: every one).
    Hello {
        /// The protocol version.
        v: u32,
        /// A name for logs and reports (letters, digits, `-`, `_`, `.`).
        #[serde(default)]
        name: String,
        /// Video requests beyond this rate are answered `dropped` (`rate`); 0: no limit.
        #[serde(default)]
        detect_fps: f64,
    },
    /// Buffers to register, one fd each in the packet, in order.
    Register {
        /// The protocol version.
        v: u32,
        /// One per fd.
        buffers: Vec<BufferSpec>,
    },
    /// Detect in a registered buffer.
    Detect {
        /// The protocol version.
        v: u32,
        /// How the request waits.
        kind: Kind,
        /// The buffer's index (from [`Reply::Registered`]).
        buffer: u32,
        /// The client's number for this request, echoed in its answer.
        seq: u64,
    },
    /// The service's numbers ([`Reply::Stats`]: `/metrics` asks for them).
    Stats {
        /// The protocol version.
        v: u32,
    },
}

/// What the service says about the model and its limits.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Welcome {
    /// The protocol version.
    pub v: u32,
    /// The client as the service names it in logs and reports (`NAME pid N`).
    pub client: String,
    /// The model's input, pixels.
    pub input: [u32; 2],
    /// The detector (`rknn`, `onnx`, ...).
    pub detector: String,
    /// Most buffers the client may register.
    pub max_buffers: u32,
    /// Most `request` requests of the client waiting at once.
    pub queue: u32,
}

/// Why a request was not run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DropReason {
    /// A newer video request of the client came while it waited.
    Newer,
    /// It was older than the service's `--max-age` when an engine was free.
    Age,
    /// It came faster than the client's `detect_fps`.
    Rate,
    /// The service is stopping.
    Stopping,
}

/// A message of the service.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Reply {
    /// The answer to [`Request::Hello`].
    Welcome(Welcome),
    /// Buffers registered as indices `first..first + count`.
    Registered {
        /// The protocol version.
        v: u32,
        /// The first new buffer's index.
        first: u32,
        /// How many.
        count: u32,
    },
    /// A request's detections: the frame line (its `seq` the client's, its `camera` the
    /// client's name, `timestamp_ns` when the request came, `width` and `height` the
    /// picture's, boxes in its pixels).
    Frame {
        /// The protocol version.
        v: u32,
        /// The buffer the request named.
        buffer: u32,
        /// The detections.
        #[serde(flatten)]
        frame: FrameJson,
    },
    /// A request not run.
    Dropped {
        /// The protocol version.
        v: u32,
        /// The buffer the request named (free again).
        buffer: u32,
        /// The request's number.
        seq: u64,
        /// Why.
        reason: DropReason,
    },
    /// A `request` refused at once: the client's queue is full.
    Busy {
        /// The protocol version.
        v: u32,
        /// The buffer the request named (free again).
        buffer: u32,
        /// The request's number.
        seq: u64,
    },
    /// The service's numbers (the asking client left out of them).
    Stats {
        /// The protocol version.
        v: u32,
        /// The numbers.
        stats: ServiceStats,
    },
    /// A message refused, with one line saying what and the fix. With `fatal` the service
    /// hangs up after it (a message it cannot read, a broken protocol).
    Refused {
        /// The protocol version.
        v: u32,
        /// The request's number, when a request was refused.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        seq: Option<u64>,
        /// What was wrong.
        reason: String,
        /// Whether the service hangs up.
        fatal: bool,
    },
}

impl Reply {
    /// The packet's bytes (compact JSON).
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).unwrap_or_else(|e| {
            format!("{{\"type\":\"refused\",\"v\":{VERSION},\"reason\":\"{e}\",\"fatal\":true}}").into_bytes()
        })
    }
}

/// The service's numbers: totals since it started, and each client connected now. The
/// infer stage's report and `/metrics` show them.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct ServiceStats {
    /// The socket.
    pub socket: String,
    /// Clients connected now.
    pub clients: u64,
    /// Connections accepted.
    pub connections: u64,
    /// Peers refused (another user, too many clients).
    pub refused_peers: u64,
    /// Messages refused (malformed, a bad buffer or index, ...).
    pub refused_messages: u64,
    /// Requests taken in.
    pub requests: u64,
    /// Requests answered with detections.
    pub answered: u64,
    /// Requests answered `busy`.
    pub busy: u64,
    /// Video requests dropped for their client's rate.
    pub dropped_rate: u64,
    /// Video requests replaced by a newer one of their client.
    pub dropped_newer: u64,
    /// Video requests older than `--max-age` when an engine was free.
    pub dropped_age: u64,
    /// Requests not run because the service stopped or their client left.
    pub dropped_stopping: u64,
    /// Answers lost because their client did not read them.
    pub answers_lost: u64,
    /// Buffers registered now, every client's.
    pub buffers: u64,
    /// What letterboxes clients' buffers: `rga` or `cpu` (`--serve-scaler`).
    pub scaler: String,
    /// Requests RGA letterboxed in place: a client's dma-buf, imported once, into a model
    /// input the NPU reads in place.
    pub rga_in_place: u64,
    /// Requests RGA letterboxed through virtual addresses (a memfd, a decoded picture).
    pub rga_by_address: u64,
    /// Requests letterboxed on the CPU.
    pub cpu_letterbox: u64,
    /// Each client connected now that said hello, by its name (`NAME pid N`).
    pub per_client: BTreeMap<String, ClientStats>,
}

/// One client's numbers: its requests' fate in the NPU's scheduler, as a camera's, and the
/// service's counts of it.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(default)]
pub struct ClientStats {
    /// Its weight in the scheduler.
    pub weight: f64,
    /// Requests that went into the scheduler.
    pub admitted: u64,
    /// Requests run.
    pub inferred: u64,
    /// Video requests replaced by a newer one.
    pub newer: u64,
    /// Video requests older than `--max-age` when an engine was free.
    pub age: u64,
    /// Video requests over its `detect_fps`.
    pub rate: u64,
    /// Requests answered `busy`.
    pub busy: u64,
    /// Answers lost because it did not read them.
    pub answers_lost: u64,
    /// Messages refused.
    pub refused: u64,
    /// Buffers registered.
    pub buffers: u64,
    /// Requests run per second, first to last (`None`: fewer than 2).
    pub inferred_fps: Option<f64>,
    /// Wait for an engine, µs: median.
    pub wait_p50_us: Option<f64>,
    /// Wait for an engine, µs: 99th percentile.
    pub wait_p99_us: Option<f64>,
}

/// Reads one service packet (a client's side of [`Reply`]); errors say what was wrong.
pub fn decode_reply(payload: &[u8]) -> Result<Reply, String> {
    serde_json::from_slice(payload)
        .map_err(|e| format!("an answer of the inference service this client cannot read: {e}"))
}

/// Why a client's message was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ProtoError {
    /// Not a message of this protocol (not JSON, an unknown type, a missing field).
    #[error("not a message of the zcpipe inference service protocol: {0}")]
    Malformed(String),
    /// Another protocol version.
    #[error("protocol version {got}; this service speaks version {VERSION}")]
    Version {
        /// The version the message carries.
        got: u32,
    },
    /// The packet carried another number of fds than the message names.
    #[error("the message carries {got} fds; it names {expected}")]
    Fds {
        /// Fds the message needs.
        expected: usize,
        /// Fds that came.
        got: usize,
    },
    /// More buffers in one message than [`MAX_REGISTER`], or none.
    #[error("{0} buffers in one register message; send 1 to {MAX_REGISTER} at a time")]
    RegisterCount(usize),
    /// A buffer's description does not hold together.
    #[error("buffer {index} of the message: {why}")]
    Layout {
        /// Its position in the message.
        index: usize,
        /// What does not fit.
        why: String,
    },
    /// A name too long or with characters outside letters, digits, `-`, `_`, `.`.
    #[error("client name {0:?}: use at most {MAX_NAME} letters, digits, '-', '_' or '.'")]
    Name(String),
    /// A rate that is not a finite number of frames per second in 0..=1000.
    #[error("detect_fps {0}: use 0 (every frame) up to 1000")]
    Rate(f64),
}

/// Reads one client packet: `payload` and the number of fds it carried. Checks everything
/// the message alone can say: the version, the fds against the buffers named, each
/// buffer's layout against its size, the name and the rate. What needs the client's state
/// (a buffer index, the fds themselves) the service checks after.
pub fn decode(payload: &[u8], fds: usize) -> Result<Request, ProtoError> {
    let req: Request = serde_json::from_slice(payload).map_err(|e| ProtoError::Malformed(e.to_string()))?;
    let (v, expected) = match &req {
        Request::Hello { v, name, detect_fps } => {
            let ok = |c: char| c.is_ascii_alphanumeric() || "-_.".contains(c);
            if name.len() > MAX_NAME || !name.chars().all(ok) {
                return Err(ProtoError::Name(name.chars().take(MAX_NAME).collect()));
            }
            if !detect_fps.is_finite() || !(0.0..=1000.0).contains(detect_fps) {
                return Err(ProtoError::Rate(*detect_fps));
            }
            (*v, 0)
        }
        Request::Register { v, buffers } => (*v, buffers.len()),
        Request::Detect { v, .. } | Request::Stats { v } => (*v, 0),
    };
    if v != VERSION {
        return Err(ProtoError::Version { got: v });
    }
    if let Request::Register { buffers, .. } = &req {
        if buffers.is_empty() || buffers.len() > MAX_REGISTER {
            return Err(ProtoError::RegisterCount(buffers.len()));
        }
        for (index, b) in buffers.iter().enumerate() {
            b.layout().map_err(|why| ProtoError::Layout { index, why })?;
        }
    }
    if fds != expected {
        return Err(ProtoError::Fds { expected, got: fds });
    }
    Ok(req)
}

#[cfg(test)]
mod tests;

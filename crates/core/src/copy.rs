//! `--copy-mode`: the same hops, done the way a plain implementation would, so the cost of
//! copying is measured rather than claimed.
//!
//! Per frame and hop the producer maps its buffer (sync guard) and copies the frame into a
//! private buffer (copy 1), then writes header and bytes to a `SOCK_STREAM` Unix data socket
//! (the kernel copies them, counted separately as socket bytes); the consumer reads them
//! into its own private buffer (kernel copy) and copies them into a buffer of its own pool
//! for its backend (copy 2). So zcpipe itself copies `2 x frame bytes` per frame per hop,
//! and `2 x frame bytes` more cross the socket calls. A stream socket has no drop policy:
//! a slow consumer blocks the producer, as in a plain pipeline.
//!
//! The data socket is one end of a socketpair(2) passed once with SCM_RIGHTS in the offer;
//! EOF on it is the end of the stream.

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use bytemuck::{Pod, Zeroable};
use serde::{Deserialize, Serialize};

use super::dmabuf::{CpuAccess, Read as R};
use super::frame::{FrameDesc, MAX_PLANES};

const MAGIC: u64 = u64::from_le_bytes(*b"zcpipeCP");
/// `payload` value of the end-of-stream header.
const EOS: u64 = u64::MAX;

/// What precedes each frame's bytes on a data socket (200 bytes).
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
#[repr(C)]
pub(crate) struct CopyHeader {
    magic: u64,
    /// Bytes of pixel data that follow.
    pub payload: u64,
    /// The frame, with planes re-based onto one contiguous payload (`fd_index` 0).
    pub desc: FrameDesc,
}

/// Copy counters of one side of one hop.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct CopyCounters {
    /// Frames that went through this side.
    pub frames: u64,
    /// Bytes zcpipe itself copied with the CPU (memcpy into or out of private buffers).
    pub copied_bytes: u64,
    /// Bytes handed to or taken from the kernel's socket calls.
    pub socket_bytes: u64,
}

impl CopyCounters {
    /// These counts and `other`'s together (several cameras' hops, summed).
    pub fn plus(self, other: CopyCounters) -> CopyCounters {
        CopyCounters {
            frames: self.frames + other.frames,
            copied_bytes: self.copied_bytes + other.copied_bytes,
            socket_bytes: self.socket_bytes + other.socket_bytes,
        }
    }
}

/// Copies the planes of `desc` out of `bufs` into `out` (cleared first), contiguously, and
/// returns the descriptor re-based onto that payload. Errors if a plane lies outside its
/// buffer.
pub fn gather(desc: &FrameDesc, bufs: &[CpuAccess<'_, R>], out: &mut Vec<u8>) -> Result<FrameDesc> {
    out.clear();
    let mut d = *desc;
    let n = d.layout.num_planes as usize;
    for i in 0..n.min(MAX_PLANES) {
        let p = d.layout.planes[i];
        let src = bufs.get(p.fd_index as usize).context("plane names a missing fd")?;
        let (a, b) = (p.offset as usize, p.offset as usize + p.length as usize);
        if b > src.len() {
            bail!("plane {i} ({a}..{b}) outside its {}-byte buffer", src.len());
        }
        d.layout.planes[i].offset = out.len() as u32;
        d.layout.planes[i].fd_index = 0;
        out.extend_from_slice(&src[a..b]);
    }
    Ok(d)
}

/// The producer's end of a copy-mode hop.
pub(crate) struct CopySender {
    sock: UnixStream,
    scratch: Vec<u8>,
    /// Counters.
    pub counters: CopyCounters,
}

impl CopySender {
    /// Wraps the producer's end of the data socket (blocking).
    pub fn new(sock: UnixStream) -> CopySender {
        CopySender { sock, scratch: Vec::new(), counters: CopyCounters::default() }
    }

    /// Copies the frame out of its buffer and writes it to the socket. Blocks while the
    /// consumer's socket buffer is full. Errors if the consumer went away.
    pub fn send(&mut self, desc: &FrameDesc, bufs: &[CpuAccess<'_, R>]) -> crate::Result<()> {
        let d = gather(desc, bufs, &mut self.scratch)?;
        self.counters.copied_bytes += self.scratch.len() as u64;
        let hdr = CopyHeader { magic: MAGIC, payload: self.scratch.len() as u64, desc: d };
        // EPIPE/ECONNRESET: the consumer went away (a hang-up, reported quietly); anything
        // else is this stage's own error.
        let io = |e: std::io::Error| match e.kind() {
            std::io::ErrorKind::BrokenPipe | std::io::ErrorKind::ConnectionReset => {
                crate::Error::peer_gone(format!("data socket: downstream hung up ({e})"))
            }
            _ => crate::Error::other(format!("data socket: {e}")),
        };
        self.sock.write_all(bytemuck::bytes_of(&hdr)).map_err(io)?;
        self.sock.write_all(&self.scratch).map_err(io)?;
        self.counters.socket_bytes += (std::mem::size_of::<CopyHeader>() + self.scratch.len()) as u64;
        self.counters.frames += 1;
        Ok(())
    }

    /// Bounds each write to the socket (SO_SNDTIMEO, socket(7)): a consumer that stops
    /// reading makes [`CopySender::send`] fail after `timeout` instead of blocking for ever.
    pub fn set_write_timeout(&self, timeout: Option<Duration>) -> std::io::Result<()> {
        self.sock.set_write_timeout(timeout)
    }

    /// Whether the socket has room for a write now (poll(2) POLLOUT, zero timeout): a tap's
    /// frame is sent only then, so a consumer that is behind misses frames instead of
    /// slowing the producer.
    pub fn writable(&self) -> bool {
        use std::os::fd::AsFd;
        let mut p = [nix::poll::PollFd::new(self.sock.as_fd(), nix::poll::PollFlags::POLLOUT)];
        matches!(nix::poll::poll(&mut p, nix::poll::PollTimeout::ZERO), Ok(n) if n > 0)
            && p[0].revents().is_some_and(|r| r.contains(nix::poll::PollFlags::POLLOUT))
    }

    /// Ends the stream: an end-of-stream header, then EOF. (EOF alone means the producer
    /// died.)
    pub fn finish(&mut self) {
        let hdr = CopyHeader { magic: MAGIC, payload: EOS, desc: FrameDesc::default() };
        let _ = self.sock.write_all(bytemuck::bytes_of(&hdr));
        let _ = self.sock.shutdown(std::net::Shutdown::Write);
    }
}

/// What a copy-mode receive found.
pub(crate) enum CopyRecv {
    /// A frame's descriptor and bytes (in the receiver's scratch buffer).
    Frame(FrameDesc),
    /// End of stream.
    Eos,
    /// The producer closed the socket without ending the stream (it died).
    Hangup,
    /// Nothing within the timeout.
    Idle,
}

/// The consumer's end of a copy-mode hop.
pub(crate) struct CopyReceiver {
    sock: UnixStream,
    /// The last frame's bytes (private buffer, filled by the kernel's copy).
    pub scratch: Vec<u8>,
    max_payload: u64,
    /// Counters (the copy into the pool is counted by the caller via [`CopyReceiver::count_copy`]).
    pub counters: CopyCounters,
}

impl CopyReceiver {
    /// Wraps the consumer's end; frames larger than `max_payload` bytes are refused.
    pub fn new(sock: UnixStream, max_payload: u64) -> CopyReceiver {
        CopyReceiver { sock, scratch: Vec::new(), max_payload, counters: CopyCounters::default() }
    }

    /// The data socket, which polls readable (`POLLIN`) when a frame or the hang-up is there.
    pub(crate) fn socket_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.sock.as_fd()
    }

    /// Waits up to `timeout` for the next frame and reads it whole into `scratch`.
    pub fn recv(&mut self, timeout: Duration) -> crate::Result<CopyRecv> {
        use std::os::fd::AsFd;
        let mut p = [nix::poll::PollFd::new(self.sock.as_fd(), nix::poll::PollFlags::POLLIN)];
        let ms = timeout.as_millis().min(u16::MAX as u128) as u16;
        match nix::poll::poll(&mut p, nix::poll::PollTimeout::from(ms)) {
            Ok(0) => return Ok(CopyRecv::Idle),
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => return Ok(CopyRecv::Idle),
            Err(e) => return Err(crate::Error::other(format!("poll on data socket: {e}"))),
        }
        let mut hdr = CopyHeader::zeroed();
        let hb = bytemuck::bytes_of_mut(&mut hdr);
        let mut got = 0;
        while got < hb.len() {
            match self.sock.read(&mut hb[got..]) {
                Ok(0) if got == 0 => return Ok(CopyRecv::Hangup),
                Ok(0) => {
                    return Err(crate::Error::peer_gone("upstream hung up inside a frame header (data socket closed)"))
                }
                Ok(n) => got += n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(crate::Error::other(format!("data socket: {e}"))),
            }
        }
        if hdr.magic == MAGIC && hdr.payload == EOS {
            return Ok(CopyRecv::Eos);
        }
        if hdr.magic != MAGIC || hdr.payload > self.max_payload {
            return Err(crate::Error::other(format!(
                "corrupt copy-mode header (magic {:#x}, payload {} > {})",
                hdr.magic, hdr.payload, self.max_payload
            )));
        }
        self.scratch.resize(hdr.payload as usize, 0);
        if let Err(e) = self.sock.read_exact(&mut self.scratch) {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                return Err(crate::Error::peer_gone("upstream hung up inside a frame (data socket closed)"));
            }
            return Err(anyhow::Error::new(e).context("reading a copy-mode frame from the data socket").into());
        }
        hdr.desc.layout.validate(&[hdr.payload]).map_err(|e| anyhow::anyhow!("copy-mode frame: {e}"))?;
        self.counters.socket_bytes += std::mem::size_of::<CopyHeader>() as u64 + hdr.payload;
        self.counters.frames += 1;
        Ok(CopyRecv::Frame(hdr.desc))
    }

    /// Records a CPU copy of `n` bytes made by the caller (scratch -> pool buffer).
    pub(crate) fn count_copy(&mut self, n: usize) {
        self.counters.copied_bytes += n as u64;
    }
}

//! V4L2 capture backend (`--source v4l2[:DEVICE]`): a camera node's buffers are the pool.
//!
//! [`V4l2Capture::open`] checks the node (it must capture and stream, single- or
//! multi-planar), negotiates the format (`--format`, `--size`, `--fps` with
//! `VIDIOC_S_PARM`) and logs what the driver granted. [`V4l2Capture::allocate`] makes the
//! pool in one of two I/O modes ([`CaptureIo`]): `mmap` (REQBUFS MMAP, then `VIDIOC_EXPBUF`
//! per plane: the exported dma-buf fds are the pool) or `dmabuf` (buffers from a dma-buf
//! heap or udmabuf, imported with REQBUFS DMABUF). Frame layouts come from the driver's
//! `bytesperline` and `sizeimage`, never from the width.
//!
//! [`V4l2Capture::next_frame`] is one turn of the capture loop: queue (QBUF) every buffer
//! that every downstream holder has dropped ([`PoolProducer::lend_free_to_device`]: each
//! queued buffer's [`DeviceLoan`] sits in its driver slot), `poll()` with a timeout, DQBUF
//! (the loan is claimed back as a write loan), and publish the frame with the driver's timestamp and sequence number.
//! Sequence gaps are counted as driver drops; `V4L2_BUF_FLAG_ERROR` frames are requeued and
//! counted; `ENODEV` (the camera was unplugged) ends the stream. The caller ends with
//! [`V4l2Capture::stream_off`], which takes back every buffer the driver held.
//!
//! Never: write to a buffer the driver or a consumer holds, or size anything from `width`.
//!
//! The module is split along those seams: `negotiate` (open, format, size and frame rate:
//! [`Granted`], [`V4l2Config`], [`parse_format`], [`parse_size`]), `buffers` (REQBUFS, QBUF,
//! DQBUF and the [`DeviceLoan`] of each queued buffer), `stats` ([`V4l2Stats`],
//! [`SequenceCounter`]); this file holds the device and the streaming loop.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use anyhow::{anyhow, Result};

use zcpipe_core::config::Choice;
use zcpipe_core::frame::{monotonic_ns, FrameDesc, FrameLayout, Stage};
use zcpipe_core::pool::{DeviceLoan, PoolProducer};
use zcpipe_sys::v4l2 as sys;
pub use zcpipe_sys::v4l2::format_name;
use zcpipe_sys::v4l2::node::NodeInfo;

mod buffers;
pub mod mjpg;
mod negotiate;
mod stats;
#[cfg(test)]
mod tests;

pub(crate) use buffers::Dequeued;
pub use negotiate::{parse_format, parse_size, Granted, V4l2Config, PREFERRED};
pub(crate) use stats::SequenceCounter;
pub use stats::V4l2Stats;

/// How capture buffers are made (`--capture-io`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CaptureIo {
    /// The driver allocates (REQBUFS MMAP); each plane is exported with VIDIOC_EXPBUF.
    #[default]
    Mmap,
    /// zcpipe allocates from the dma-buf heap or udmabuf (`--heap`) and the driver imports
    /// them (REQBUFS DMABUF): how capture buffers land in a dma32 or CMA heap.
    Dmabuf,
}

impl zcpipe_core::config::Choice for CaptureIo {
    const ALL: &'static [(Self, &'static str, &'static str)] = &[
        (CaptureIo::Mmap, "mmap", "The driver allocates (REQBUFS MMAP); each plane is exported with VIDIOC_EXPBUF"),
        (
            CaptureIo::Dmabuf,
            "dmabuf",
            "zcpipe allocates from the dma-buf heap or udmabuf (`--heap`) and the driver imports them (REQBUFS DMABUF): how capture buffers land in a dma32 or CMA heap",
        ),
    ];
}

// ---------------------------------------------------------------------------------------------
// The capture device
// ---------------------------------------------------------------------------------------------

/// What one turn of the capture loop found.
// One per frame, on the stack: boxing the large variant would allocate per frame.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Next {
    /// A frame was published: its descriptor, and the buffer as the driver returned it
    /// (its own timestamp and sequence number).
    Frame(FrameDesc, Dequeued),
    /// Nothing yet (timeout, a flagged buffer requeued, or every buffer downstream).
    Idle,
    /// The device is gone (ENODEV): end the stream.
    Unplugged,
}

/// A failed queue or dequeue of a camera's buffer: the device is gone (ENODEV, matched by
/// the capture loop, which ends the stream), or any other failure.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CamError {
    /// The device reported ENODEV.
    #[error("camera unplugged (ENODEV)")]
    Unplugged,
    /// Anything else, with its context.
    #[error(transparent)]
    Failed(#[from] anyhow::Error),
}

fn is_enodev(e: &io::Error) -> bool {
    e.raw_os_error() == Some(libc::ENODEV)
}

/// An open V4L2 capture node with its negotiated format.
#[derive(Debug)]
pub struct V4l2Capture {
    file: File,
    node: NodeInfo,
    buf_type: u32,
    io: CaptureIo,
    memory: u32,
    granted: Granted,
    layout: FrameLayout,
    /// Buffers allocated by REQBUFS (0 until [`V4l2Capture::allocate`]).
    count: u32,
    /// The loans of the buffers the driver holds (queued, not yet dequeued), by index.
    at_driver: Vec<Option<DeviceLoan>>,
    /// Loans of buffers whose QBUF failed: never with the driver, given back at STREAMOFF.
    not_queued: Vec<DeviceLoan>,
    streaming: bool,
    min_device: usize,
    stats: V4l2Stats,
    last_ts: u64,
    sequence: SequenceCounter,
    warned_clock: bool,
}

impl V4l2Capture {
    fn fd(&self) -> BorrowedFd<'_> {
        self.file.as_fd()
    }

    fn mplane(&self) -> bool {
        sys::is_multiplanar(self.buf_type)
    }

    fn busy_error(&self, what: &str) -> anyhow::Error {
        anyhow!(
            "v4l2: {} is in use by another process ({what}: EBUSY); stop the other user (`fuser {}` names it) or pick another node",
            self.node.label(),
            self.node.path.display()
        )
    }

    /// The node.
    pub fn node(&self) -> &NodeInfo {
        &self.node
    }

    /// What the driver granted.
    pub fn granted(&self) -> &Granted {
        &self.granted
    }

    /// The layout of every frame (from bytesperline and sizeimage).
    pub fn layout(&self) -> FrameLayout {
        self.layout
    }

    /// The I/O mode.
    pub fn io(&self) -> CaptureIo {
        self.io
    }

    /// Counters so far.
    pub fn stats(&self) -> V4l2Stats {
        self.stats
    }

    /// Buffers the driver holds now.
    pub(super) fn at_driver(&self) -> usize {
        self.at_driver.iter().filter(|q| q.is_some()).count()
    }

    /// `v4l2:/dev/video0 (vivid: vivid-000-vid-cap) NV12 640x480 ... mmap`.
    pub fn describe(&self) -> String {
        format!("v4l2:{} {}, {} I/O", self.node.label(), self.granted.describe(), self.io.name())
    }

    /// One turn of the capture loop: queue what came back, wait up to `timeout` for a
    /// frame, dequeue it and publish it into `prod`. A flagged (`V4L2_BUF_FLAG_ERROR`)
    /// buffer is requeued and counted instead.
    pub fn next_frame(&mut self, prod: &mut PoolProducer, stop: &AtomicBool, timeout: Duration) -> Result<Next> {
        match self.refill(prod) {
            Ok(()) => {}
            Err(CamError::Unplugged) => return Ok(Next::Unplugged),
            Err(CamError::Failed(e)) => return Err(e),
        }
        if self.at_driver() == 0 {
            // Every buffer is downstream (block policy, or a consumer holding them all):
            // nothing to poll for until one comes back.
            std::thread::sleep(Duration::from_millis(2));
            return Ok(Next::Idle);
        }
        if !self.wait(timeout)? {
            return Ok(Next::Idle);
        }
        let (loan, d) = match self.dequeue() {
            Ok(Some(x)) => x,
            Ok(None) => return Ok(Next::Idle),
            Err(CamError::Unplugged) => return Ok(Next::Unplugged),
            Err(CamError::Failed(e)) => return Err(e),
        };
        let loan = prod.claim(loan)?;
        let seq = self.sequence.see(d.sequence);
        self.stats.driver_drops = self.sequence.drops;
        self.stats.sequence_repeats = self.sequence.repeats;
        if self.at_driver() == 0 {
            self.stats.driver_starved += 1;
        }
        self.stats.first_sequence = self.sequence.first;
        self.stats.last_sequence = self.sequence.last;
        if d.error {
            self.stats.error_frames += 1;
            if self.stats.error_frames <= 5 {
                log::warn!(
                    "v4l2: {} flagged frame {} as corrupt (V4L2_BUF_FLAG_ERROR); requeued",
                    self.node.label(),
                    d.sequence
                );
            }
            drop(loan); // back to the pool unpublished: requeued by the next refill
            return Ok(Next::Idle);
        }
        // The driver's timestamp, CLOCK_MONOTONIC. Some drivers stamp a frame's nominal end
        // and deliver it earlier (vivid: up to a frame period ahead of the DQBUF); such a
        // stamp is clamped to the dequeue time, so stage latencies never come out negative.
        let now = monotonic_ns();
        let mut ts = d.timestamp_ns;
        if !d.monotonic || ts == 0 {
            self.stats.bad_timestamps += 1;
            if !self.warned_clock {
                self.warned_clock = true;
                log::warn!(
                    "v4l2: {} does not stamp buffers with CLOCK_MONOTONIC; using the dequeue time",
                    self.node.label()
                );
            }
            ts = now;
        } else if ts > now {
            self.stats.timestamps_ahead += 1;
            self.stats.max_ahead_us = self.stats.max_ahead_us.max((ts - now) / 1000);
            if self.stats.timestamps_ahead == 1 {
                log::info!(
                    "v4l2: {} stamps frames ahead of their delivery ({} µs for frame {}); such stamps are clamped to the dequeue time",
                    self.node.label(),
                    (ts - now) / 1000,
                    d.sequence
                );
            }
            ts = now;
        }
        if ts < self.last_ts {
            self.stats.bad_timestamps += 1;
            log::warn!("v4l2: timestamp of frame {} went backwards by {} µs", d.sequence, (self.last_ts - ts) / 1000);
        }
        self.last_ts = ts;
        let mut desc =
            FrameDesc { seq, timestamp_ns: ts, buffer_index: d.index, layout: self.layout, ..Default::default() };
        desc.stamps[2 * Stage::Capture as usize] = ts;
        desc.stamp_out(Stage::Capture);
        loan.publish(desc, stop)?;
        self.stats.published += 1;
        Ok(Next::Frame(desc, d))
    }

    /// Stops streaming (VIDIOC_STREAMOFF), which returns every buffer the driver held, and
    /// marks them free in `prod`. Returns how many the driver held. ENODEV (unplugged) is
    /// not an error here: the buffers are ours again either way.
    pub fn stream_off(&mut self, prod: &mut PoolProducer) -> Result<usize> {
        let held = self.at_driver();
        if self.streaming {
            self.streaming = false;
            match sys::streamoff(self.fd(), self.buf_type) {
                Ok(()) => {}
                Err(e) if is_enodev(&e) => {}
                Err(e) => log::warn!("v4l2: VIDIOC_STREAMOFF on {}: {e}", self.node.label()),
            }
        }
        prod.device_returned(self.at_driver.iter_mut().filter_map(Option::take).chain(self.not_queued.drain(..)));
        Ok(held)
    }
}

impl Drop for V4l2Capture {
    fn drop(&mut self) {
        if self.streaming {
            let _ = sys::streamoff(self.file.as_fd(), self.buf_type);
        }
    }
}

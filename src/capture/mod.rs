//! Capture stage: produces frames into the capture pool.
//!
//! Host backends sit behind [`FrameSource`]: still images (`image:PATH`), any file ffmpeg
//! decodes (`video:PATH`) and a moving test pattern (`testsrc[:WxH[@FPS]]`). A source writes
//! each frame in place into a mapped pool buffer and returns its [`FrameLayout`]; it never
//! allocates per frame. Pacing (`--fps`) and `--frames N` are the stage loop's job.
//!
//! A camera (`v4l2[:DEVICE]`, [`v4l2`]) is different: the driver fills the pool's buffers
//! itself (its own, exported with VIDIOC_EXPBUF, or imported dma-bufs), each queued with a
//! `DeviceLoan` of the pool, and paces the stream.
//!
//! The stage process is [`stage`]; its configuration is [`CaptureConfig`]. This folder
//! never imports another stage or the command line.

pub mod auto;
pub mod image;
pub mod stage;
pub mod spec;
pub mod testsrc;
pub mod v4l2;
pub mod video;

use crate::core::frame::FrameLayout;

/// What the capture stage is asked to do, checked by whoever built it (the command line):
/// the pool has 2..=64 buffers, `fps` is in range, and the V4L2-only options come with a
/// V4L2 source.
#[derive(Clone, Debug, PartialEq)]
pub struct CaptureConfig {
    /// Where frames come from.
    pub source: spec::SourceSpec,
    /// Frames per second: a host source is paced at it, a camera asked for it
    /// (`None`: the source's own rate).
    pub fps: Option<f64>,
    /// Stop after this many frames (`None`: until the source ends or a signal).
    pub frames: Option<u64>,
    /// Buffers in the capture pool (2..=64).
    pub buffers: usize,
    /// V4L2 pixel format (`--format NV12`, ...).
    pub format: Option<crate::core::frame::Fourcc>,
    /// V4L2 frame size, width x height in pixels (`--size WxH`).
    pub size: Option<(u32, u32)>,
    /// V4L2 buffer I/O (`None`: mmap).
    pub capture_io: Option<v4l2::CaptureIo>,
}

/// What a source produces, known before the first frame (used to size the pool).
#[derive(Clone, Debug)]
pub struct SourceInfo {
    /// Human-readable description for logs (`video:tests/data/clip.mp4 768x432 NV12 @10fps`).
    pub description: String,
    /// Largest frame width in pixels any frame will have.
    pub max_width: u32,
    /// Largest frame height in pixels.
    pub max_height: u32,
    /// Nominal frame rate in frames per second (used for pacing unless `--fps` overrides).
    pub fps: f64,
    /// Bytes a pool buffer needs to hold the largest frame (including stride padding).
    pub max_frame_bytes: u64,
}

/// A host capture backend. Sources write NV12 with `bytesperline` aligned to 16 bytes
/// ([`FrameLayout::nv12`]), padding odd sizes to even while the layout keeps the true size.
pub trait FrameSource: Send {
    /// Facts known up front.
    fn info(&self) -> &SourceInfo;
    /// Writes the next frame into `dst` (a mapped pool buffer of at least
    /// `info().max_frame_bytes` bytes) and returns its layout; `Ok(None)` at end of stream.
    /// Errors name the source and the cause (unreadable file, decoder died).
    fn fill(&mut self, dst: &mut [u8]) -> anyhow::Result<Option<FrameLayout>>;
    /// Whether, unpaced (`--fps max`), a buffer filled once may be sent again as it is
    /// instead of being filled anew (a test pattern: yes; a video: no, its frames move
    /// on). Default: no.
    fn reusable(&self) -> bool {
        false
    }
}

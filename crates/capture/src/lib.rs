//! Capture stage: produces frames into the capture pool.
//!
//! Host backends sit behind [`FrameSource`]: still images (`image:PATH`), any file ffmpeg
//! decodes (`video:PATH`), a moving test pattern (`testsrc[:WxH[@FPS]]`) and network
//! streams (`rtsp://...`, [`network`]). A source writes each frame in place into a mapped
//! pool buffer and returns its [`FrameLayout`]; it never allocates per frame. Pacing
//! (`--fps`) and `--frames N` are the stage loop's job, except for a live source (a
//! network stream), which sends at its own pace and may have no frame for a while.
//!
//! A camera (`v4l2[:DEVICE]`, [`v4l2`]) is different: the driver fills the pool's buffers
//! itself (its own, exported with VIDIOC_EXPBUF, or imported dma-bufs), each queued with a
//! `DeviceLoan` of the pool, and paces the stream.
//!
//! The stage process is [`stage`]; its configuration is [`CaptureConfig`]. This folder
//! never imports another stage or the command line.

pub mod auto;
pub mod decoder;
pub mod encode;
pub mod ffmpeg;
pub mod image;
pub mod mjpeg;
pub mod mpp;
pub mod network;
pub mod record;
pub mod report;
pub mod spec;
pub mod stage;
pub mod testsrc;
pub mod v4l2;
pub mod video;

use std::time::Duration;

use zcpipe_core::dmabuf::DmaBuf;
use zcpipe_core::frame::FrameLayout;
use zcpipe_core::stage::Extras;

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
    pub format: Option<zcpipe_sys::fourcc::Fourcc>,
    /// V4L2 frame size, width x height in pixels (`--size WxH`).
    pub size: Option<(u32, u32)>,
    /// V4L2 buffer I/O (`None`: mmap).
    pub capture_io: Option<v4l2::CaptureIo>,
    /// RTSP transport of a network source (`--rtsp-transport`; `None`: TCP).
    pub rtsp_transport: Option<network::RtspTransport>,
    /// A network source that cannot be reached at start-up is waited for
    /// (`--wait-for-camera`) instead of failing the run.
    pub wait_for_camera: bool,
    /// Who decodes a compressed source (`--decoder`; `None`: auto). Applies to `video:`
    /// files, network streams and MJPEG cameras.
    pub decoder: Option<decoder::DecoderChoice>,
    /// The camera is recorded: its encoded stream goes to the run's recorder too
    /// ([`record`]).
    pub record: bool,
    /// Who encodes a raw camera's frames for the recorder (`--encoder`; [`encode`]).
    pub encoder: encode::EncoderChoice,
    /// The camera's name for the recorder (`None`: the stage's camera, else `cam0`).
    pub record_camera: Option<String>,
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
    /// `info().max_frame_bytes` bytes) and returns its layout; `Ok(None)` at end of stream
    /// (a [live](FrameSource::live) source: no frame now, try again). Errors name the source
    /// and the cause (unreadable file, decoder died).
    fn fill(&mut self, dst: &mut [u8]) -> anyhow::Result<Option<FrameLayout>>;
    /// Writes the next frame into the pool buffer `dst` (a dma-buf of at least
    /// `info().max_frame_bytes` bytes); returns as [`FrameSource::fill`]. Default: one CPU
    /// access ([`DmaBuf::write`], between `DMA_BUF_IOCTL_SYNC` START and END) and
    /// [`FrameSource::fill`] into it. A source whose hardware writes the buffer itself (a
    /// decoder given the buffer's fd) overrides it and never maps the buffer.
    fn fill_buffer(&mut self, dst: &mut DmaBuf) -> anyhow::Result<Option<FrameLayout>> {
        let mut bytes = dst.write()?;
        self.fill(&mut bytes)
    }
    /// Whether the source is live: it sends frames at its own pace (the stage does not pace
    /// it; [`FrameSource::wait_frame`] waits for them) and never ends by itself. Default: no.
    fn live(&self) -> bool {
        false
    }
    /// A live source: waits at most about `timeout` for the next frame (doing its own
    /// reconnecting meanwhile) and says whether one is arriving for
    /// [`FrameSource::fill`]. Never blocks much longer, so the stage loop keeps reporting
    /// and sees its stop flag. Default: always ready.
    fn wait_frame(&mut self, _timeout: Duration) -> anyhow::Result<bool> {
        Ok(true)
    }
    /// A live source, after a fill that ended a gap (the stream came back): the frames lost
    /// in it, once, for the frame's restart notice. Default: never.
    fn take_gap(&mut self) -> Option<u64> {
        None
    }
    /// Facts for the stage's reports (a live source's reconnects, gaps, sizes). Default:
    /// none.
    fn facts(&self) -> Extras {
        Vec::new()
    }
    /// Whether, unpaced (`--fps max`), a buffer filled once may be sent again as it is
    /// instead of being filled anew (a test pattern: yes; a video: no, its frames move
    /// on). Default: no.
    fn reusable(&self) -> bool {
        false
    }
}

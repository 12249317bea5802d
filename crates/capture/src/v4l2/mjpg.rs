//! A UVC camera giving Motion JPEG (`--source v4l2:DEV --format MJPG`; most UVC webcams
//! give 1080p30 only as MJPEG): its buffers hold compressed JPEGs (`bytesused` bytes each),
//! so they stay private to capture. [`MjpgCamera`] is a live [`FrameSource`]: each filled
//! camera buffer (DQBUF) is decoded into the pool buffer the capture loop hands it (an NV12
//! pool from `--heap`, the one offered to scale), then queued back (QBUF) at once.
//!
//! Decoding ([`MjpegDecoder`], `--decoder`): on a Rockchip board MPP reads the camera buffer
//! in place (its EXPBUF dma-buf, imported once: `JpegInput::DmaBuf`) and writes the pool
//! buffer (imported once), so no CPU touches either; on a host zune-jpeg reads the camera
//! buffer through one read guard and writes the pool buffer through one write guard.
//!
//! Only `--capture-io mmap` (the driver allocates, EXPBUF exports): the camera's compressed
//! buffers are never the pool. Frames are stamped when dequeued (not with the driver's
//! timestamp), as the other live sources are. vivid has no MJPEG: the streaming here is
//! board-only (unit-tested: the format parsing and layout; the decoder by `video:` MJPEG
//! files, tests/vendor/mjpeg.rs).

use std::io;
use std::time::Duration;

use anyhow::{anyhow, bail, Result};

use super::buffers::Dequeued;
use super::{is_enodev, CamError, CaptureIo, V4l2Capture, V4l2Config};
use crate::decoder::resolve;
use crate::image::STRIDE_ALIGN;
use crate::mjpeg::{mpp_buffer_bytes, MjpegDecoder, MjpegInput};
use crate::{CaptureConfig, FrameSource, SourceInfo};
use zcpipe_core::dmabuf::DmaBuf;
use zcpipe_core::frame::{Fourcc, FrameLayout, MAX_PLANES};
use zcpipe_core::stage::Extras;
use zcpipe_sys::v4l2 as sys;

/// A V4L2 camera streaming MJPG into its own (private) buffers, decoded into the pool.
pub(crate) struct MjpgCamera {
    cam: V4l2Capture,
    bufs: Vec<DmaBuf>,
    decoder: MjpegDecoder,
    info: SourceInfo,
    /// A filled buffer dequeued by [`FrameSource::wait_frame`], for the next fill.
    pending: Option<Dequeued>,
    jpegs: u64,
    corrupt: u64,
}

impl MjpgCamera {
    /// Opens and negotiates `device` for MJPG (`cfg.size`, `cfg.fps`), allocates `cfg.buffers`
    /// MMAP buffers exported with EXPBUF, settles the decoder (`cfg.decoder`), queues every
    /// buffer and starts streaming. Errors are one line: `--capture-io dmabuf`, the node's
    /// own errors ([`V4l2Capture::open`]), the decoder's.
    pub fn open(cfg: &CaptureConfig, device: Option<std::path::PathBuf>) -> Result<MjpgCamera> {
        if cfg.capture_io == Some(CaptureIo::Dmabuf) {
            bail!("--format MJPG keeps the camera's compressed buffers private to capture (the pool is the decoded NV12): use --capture-io mmap");
        }
        let v = V4l2Config {
            device,
            format: Some(Fourcc::MJPG),
            size: cfg.size,
            fps: cfg.fps,
            buffers: cfg.buffers,
            io: CaptureIo::Mmap,
        };
        let mut cam = V4l2Capture::open(&v)?;
        let bufs: Vec<DmaBuf> =
            cam.allocate(cfg.buffers, None)?.into_iter().map(|mut planes| planes.swap_remove(0)).collect();
        let (decoder, why) = resolve(cfg.decoder.unwrap_or_default(), None)?;
        log::info!("decoder {} for MJPG from {} ({why})", decoder.name(), cam.node().label());
        let decoder = MjpegDecoder::new(&decoder)?;
        let g = cam.granted().clone();
        let max_frame_bytes = match decoder {
            MjpegDecoder::Mpp { .. } => mpp_buffer_bytes(g.width, g.height),
            MjpegDecoder::Cpu(_) => FrameLayout::nv12(g.width, g.height, STRIDE_ALIGN).bytes_needed(),
        };
        let info = SourceInfo {
            description: format!("{} decoded by {} into NV12", cam.describe(), decoder.name()),
            max_width: g.width,
            max_height: g.height,
            fps: if g.fps() > 0.0 { g.fps() } else { 30.0 },
            max_frame_bytes,
        };
        for i in 0..bufs.len() as u32 {
            queue(&mut cam, i)?;
        }
        sys::streamon(cam.fd(), cam.buf_type)
            .map_err(|e| anyhow!("v4l2: VIDIOC_STREAMON on {}: {e}", cam.node().label()))?;
        cam.streaming = true;
        log::info!("v4l2: streaming MJPG from {} ({} buffers queued)", cam.node().label(), bufs.len());
        Ok(MjpgCamera { cam, bufs, decoder, info, pending: None, jpegs: 0, corrupt: 0 })
    }

    /// The next filled camera buffer, if one is ready (non-blocking DQBUF).
    fn take(&mut self) -> Result<Option<Dequeued>> {
        if let Some(d) = self.pending.take() {
            return Ok(Some(d));
        }
        Ok(dequeue(&mut self.cam)?)
    }

    /// Queues camera buffer `d` back (its JPEG consumed), then counts the decode's result:
    /// the layout of a picture, or `None` for a skipped JPEG (warned, counted).
    fn requeue(&mut self, d: Dequeued, res: std::result::Result<FrameLayout, String>) -> Result<Option<FrameLayout>> {
        queue(&mut self.cam, d.index)?;
        match res {
            Ok(l) => {
                self.cam.stats.published += 1;
                Ok(Some(l))
            }
            Err(why) => {
                self.skip(&why);
                Ok(None)
            }
        }
    }

    fn skip(&mut self, why: &str) {
        self.corrupt += 1;
        if self.corrupt <= 5 || self.corrupt.is_power_of_two() {
            log::warn!(
                "v4l2: {}: JPEG {} skipped: {why} ({} skipped so far)",
                self.cam.node().label(),
                self.jpegs,
                self.corrupt
            );
        }
    }
}

/// QBUF of MMAP buffer `index` (its previous content consumed).
fn queue(cam: &mut V4l2Capture, index: u32) -> Result<(), CamError> {
    let mut b = sys::Buffer::new(cam.buf_type, cam.memory, index);
    let mut planes = vec![sys::Plane::default(); cam.granted.planes.len()];
    match sys::qbuf(cam.fd(), &mut b, &mut planes) {
        Ok(()) => {
            cam.stats.queued += 1;
            Ok(())
        }
        Err(e) if is_enodev(&e) => Err(CamError::Unplugged),
        Err(e) => Err(anyhow!("v4l2: VIDIOC_QBUF {index} on {}: {e}", cam.node().label()).into()),
    }
}

/// Non-blocking DQBUF: the filled buffer, `None` if none is ready; [`CamError::Unplugged`]
/// on ENODEV.
fn dequeue(cam: &mut V4l2Capture) -> Result<Option<Dequeued>, CamError> {
    let mut b = sys::Buffer::new(cam.buf_type, cam.memory, 0);
    let mut planes = vec![sys::Plane::default(); cam.granted.planes.len()];
    match sys::dqbuf(cam.fd(), &mut b, &mut planes) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
        Err(e) if is_enodev(&e) => return Err(CamError::Unplugged),
        Err(e) => return Err(anyhow!("v4l2: VIDIOC_DQBUF on {}: {e}", cam.node().label()).into()),
    }
    cam.stats.dequeued += 1;
    cam.sequence.see(b.sequence);
    cam.stats.driver_drops = cam.sequence.drops;
    let mut bytesused = [0u32; MAX_PLANES];
    bytesused[0] = if cam.mplane() { planes.first().map_or(0, |p| p.bytesused) } else { b.bytesused };
    Ok(Some(Dequeued {
        index: b.index,
        sequence: b.sequence,
        timestamp_ns: b.timestamp_ns().max(0) as u64,
        monotonic: b.timestamp_is_monotonic(),
        bytesused,
        error: b.is_error(),
    }))
}

impl FrameSource for MjpgCamera {
    fn info(&self) -> &SourceInfo {
        &self.info
    }

    /// The host path through a mapped pool buffer: zune-jpeg whatever `--decoder` says.
    fn fill(&mut self, dst: &mut [u8]) -> Result<Option<FrameLayout>> {
        let Some(d) = self.take()? else { return Ok(None) };
        self.jpegs += 1;
        let res = {
            let src = self.bufs[d.index as usize].read()?;
            let len = (d.bytesused[0] as usize).min(src.len());
            crate::mjpeg::decode_cpu(&src[..len], dst, &mut Vec::new(), (self.info.max_width, self.info.max_height))
                .map_err(|e| format!("{e:#}"))
        };
        self.requeue(d, res)
    }

    /// Decodes the next filled camera buffer into `dst` and queues the camera buffer back;
    /// `Ok(None)`: none ready, or it was flagged or corrupt (counted).
    fn fill_buffer(&mut self, dst: &mut DmaBuf) -> Result<Option<FrameLayout>> {
        let Some(d) = self.take()? else { return Ok(None) };
        self.jpegs += 1;
        if d.error || d.bytesused[0] == 0 {
            self.cam.stats.error_frames += 1;
            queue(&mut self.cam, d.index)?;
            self.skip("the driver flagged the buffer (V4L2_BUF_FLAG_ERROR) or it is empty");
            return Ok(None);
        }
        let i = d.index as usize;
        let max = (self.info.max_width, self.info.max_height);
        let src = &self.bufs[i];
        // MPP reads the camera's dma-buf in place (imported once); the CPU through a read guard.
        let input = MjpegInput::Camera { buf: src, len: (d.bytesused[0] as u64).min(src.size()) as usize };
        let res = self.decoder.decode(input, dst, max)?;
        self.requeue(d, res)
    }

    fn live(&self) -> bool {
        true
    }

    /// Waits up to `timeout` for a filled camera buffer (`poll()`, then DQBUF).
    fn wait_frame(&mut self, timeout: Duration) -> Result<bool> {
        if self.pending.is_some() {
            return Ok(true);
        }
        if !self.cam.wait(timeout)? {
            return Ok(false);
        }
        self.pending = dequeue(&mut self.cam)?;
        Ok(self.pending.is_some())
    }

    fn facts(&self) -> Extras {
        let g = self.cam.granted();
        let s = self.cam.stats();
        let mut f: Extras = vec![
            ("device", self.cam.node().path.display().to_string().into()),
            ("driver", self.cam.node().driver.clone().into()),
            ("format", "MJPG".into()),
            ("width", g.width.into()),
            ("height", g.height.into()),
            ("decoder", self.decoder.name().into()),
            ("jpegs", self.jpegs.into()),
            ("corrupt_jpegs", self.corrupt.into()),
            ("dequeued", s.dequeued.into()),
            ("driver_drops", s.driver_drops.into()),
            ("error_frames", s.error_frames.into()),
        ];
        f.extend(self.decoder.facts());
        f
    }
}

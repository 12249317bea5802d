//! The consumer's side of fan-out: a tap on a producer's pool (the web view, later a
//! display), and the one conversion such consumers need, a frame to RGB24.
//!
//! A tap says [`super::link::tap_hello_holding`] on the producer's listening socket and gets the
//! pool's fds once (SCM_RIGHTS) and a one-slot drop-oldest ring of its own
//! ([`super::pool::PoolProducer::add_tap`]): it sees the newest frame, holds at most one,
//! and its slowness costs only its own frames. [`TapClient`] joins, joins again after the
//! producer restarts (with back-off), and hands out frames; pixels are read only through
//! the read guard ([`super::dmabuf::CpuAccess`]), and only when the caller asks
//! ([`frame_to_rgb`]).

use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::channel::Recv;
use super::copy::CopyCounters;
use super::frame::{Fourcc, FrameLayout};
use super::link::{tap_hello_holding, Conn, WaitMode};
use super::pool::{Frame, PoolConsumer};

/// Counters of a [`TapClient`].
#[derive(Clone, Copy, Debug, Default, serde::Serialize, serde::Deserialize)]
pub struct TapCounters {
    /// Whether it is joined now.
    pub joined: bool,
    /// Times it joined (the first join and every re-join after the producer restarted).
    pub joins: u64,
    /// Frames received.
    pub frames: u64,
    /// Times the producer ended its stream cleanly (end of stream, not a hang-up).
    #[serde(default)]
    pub ends: u64,
}

/// The longest wait between two tries to join a producer that is not there (or refused):
/// the back-off starts at 100 ms and doubles up to this.
pub(crate) const TAP_RETRY_MAX: Duration = Duration::from_secs(2);

/// A tap on the pool served at `socket`: joined lazily, joined again when the producer
/// hangs up (it was restarted), with a back-off of 100 ms doubling to [`TAP_RETRY_MAX`].
pub struct TapClient {
    socket: PathBuf,
    name: String,
    upstream: String,
    consumer: Option<PoolConsumer>,
    next_try: Instant,
    backoff: Duration,
    /// Why the last join failed, said once until it changes (at debug level after that).
    last_error: Option<String>,
    /// The producer ended its stream or hung up, which was said: failed joins until the
    /// next one succeeds are expected (it is shutting down or restarting), at debug level.
    rejoining: bool,
    counters: TapCounters,
    /// Frames it asks to hold at once ([`tap_hello_holding`]).
    hold: usize,
    /// Copy-mode counters of the pools it left (a re-join starts new ones).
    past_copies: CopyCounters,
}

impl TapClient {
    /// A tap named `name` (`view`) on the pool of `upstream` (a stage name for messages,
    /// `capture@front`) listening at `socket`. Nothing is connected yet.
    pub fn new(socket: PathBuf, name: &str, upstream: &str) -> TapClient {
        TapClient {
            socket,
            name: name.into(),
            upstream: upstream.into(),
            consumer: None,
            next_try: Instant::now(),
            backoff: Duration::from_millis(100),
            last_error: None,
            rejoining: false,
            counters: TapCounters::default(),
            hold: 1,
            past_copies: CopyCounters::default(),
        }
    }

    /// Asks the producer to let this tap hold up to `hold` frames at once (1 by default,
    /// at most `TAP_MAX_HELD`, 2): a display holds the frame on screen while the
    /// next one is queued. Takes effect at the next join.
    pub fn holding(mut self, hold: usize) -> TapClient {
        self.hold = hold;
        self
    }

    /// Whether the tap is joined to a producer in copy mode (`--copy-mode`): its frames are
    /// then copies in this process's own memory, not the producer's dma-bufs, so a device
    /// cannot import them. `None` while not joined.
    pub fn copy_mode(&self) -> Option<bool> {
        self.consumer.as_ref().map(|c| c.offer.copy_mode)
    }

    /// The buffers of the pool joined now (`buffers[index][fd_index]`, the fds the producer
    /// sent once at the join; a re-join, counted in [`TapCounters::joins`], brings new ones),
    /// for a device that imports them once (a display's PRIME import). `None` while not joined.
    pub fn buffers(&self) -> Option<&[Vec<super::dmabuf::DmaBuf>]> {
        self.consumer.as_ref().map(|c| c.buffers())
    }

    /// What copy mode cost this tap so far (frames, bytes copied and taken from the data
    /// socket), over every join; `None` while it has joined only zero-copy pools.
    pub fn copy_counters(&self) -> Option<CopyCounters> {
        let now = self.consumer.as_ref().and_then(|c| c.copy_counters());
        match (now, self.past_copies.frames) {
            (None, 0) => None,
            (now, _) => Some(now.unwrap_or_default().plus(self.past_copies)),
        }
    }

    /// Lets go of the pool joined (its buffers are unmapped, its fds closed), keeping its
    /// copy counters.
    fn leave(&mut self) {
        if let Some(c) = self.consumer.take().and_then(|c| c.copy_counters()) {
            self.past_copies = self.past_copies.plus(c);
        }
    }

    /// Counters so far.
    pub fn counters(&self) -> TapCounters {
        TapCounters { joined: self.consumer.is_some(), ..self.counters }
    }

    fn try_join(&mut self) {
        if Instant::now() < self.next_try {
            return;
        }
        let never = AtomicBool::new(false);
        let hello = tap_hello_holding(&self.name, self.hold);
        let joined = Conn::connect_retry(&self.socket, &self.upstream, &never, Duration::from_millis(50))
            .map_err(crate::Error::Other)
            .and_then(|conn| PoolConsumer::join(conn, &hello, WaitMode::Eventfd, &self.upstream));
        match joined {
            Ok(c) => {
                log::info!("tap `{}` joined {} ({} buffers)", self.name, self.upstream, c.buffers().len());
                self.consumer = Some(c);
                self.counters.joins += 1;
                self.backoff = Duration::from_millis(100);
                self.last_error = None;
                self.rejoining = false;
            }
            Err(e) => {
                let why = format!("{e:#}");
                if self.last_error.as_deref() != Some(why.as_str()) && !self.rejoining {
                    log::info!(
                        "tap `{}`: cannot join {} yet ({why}); trying again every {:.1} s at most",
                        self.name,
                        self.upstream,
                        TAP_RETRY_MAX.as_secs_f64()
                    );
                } else {
                    log::debug!("tap `{}`: {why}", self.name);
                }
                self.last_error = Some(why);
                self.next_try = Instant::now() + self.backoff;
                self.backoff = (self.backoff * 2).min(TAP_RETRY_MAX);
            }
        }
    }

    /// The next frame within `timeout` (the newest: the tap's ring has one slot), joining
    /// first if needed. `Ok(None)`: nothing came (not joined yet, the producer ended its
    /// stream or hung up: the next call joins again). Errors: a broken ring or descriptor
    /// from the producer (the tap lets go of it and joins again on the next call).
    pub fn next(&mut self, timeout: Duration) -> Result<Option<Frame>> {
        if self.consumer.is_none() {
            self.try_join();
        }
        let Some(c) = &self.consumer else {
            std::thread::sleep(timeout.min(self.next_try.saturating_duration_since(Instant::now())));
            return Ok(None);
        };
        match c.recv(timeout) {
            Ok(Recv::Item(f)) => {
                self.counters.frames += 1;
                Ok(Some(f))
            }
            Ok(Recv::Idle) => Ok(None),
            Ok(Recv::Eos) => {
                log::info!("tap `{}`: {} ended its stream; joining again when it is back", self.name, self.upstream);
                self.leave();
                self.rejoining = true;
                self.counters.ends += 1;
                Ok(None)
            }
            Ok(Recv::Hangup) => {
                log::info!(
                    "tap `{}`: {} ended its stream or hung up; joining again when it is back",
                    self.name,
                    self.upstream
                );
                self.leave();
                self.rejoining = true;
                Ok(None)
            }
            Err(crate::Error::PeerGone { .. }) => {
                self.leave();
                Ok(None)
            }
            Err(e) => {
                self.leave();
                Err(e.context(format!("tap `{}` on {}", self.name, self.upstream)).into())
            }
        }
    }
}

/// The bytes of plane `i` of `layout` in `bufs` (one slice per dma-buf of the buffer):
/// from its offset to the end of its `length`, clipped to its dma-buf.
fn plane<'a>(bufs: &[&'a [u8]], layout: &FrameLayout, i: usize) -> Result<(&'a [u8], usize)> {
    let p = layout.planes[i];
    let b = bufs
        .get(p.fd_index as usize)
        .with_context(|| format!("plane {i}: dma-buf {} of {}", p.fd_index, bufs.len()))?;
    let end = (p.offset as usize + p.length as usize).min(b.len());
    let bytes = b
        .get(p.offset as usize..end)
        .with_context(|| format!("plane {i}: offset {} past its dma-buf ({} bytes)", p.offset, b.len()))?;
    Ok((bytes, p.bytesperline as usize))
}

/// Converts `frame` to RGB24 (tight rows: `width * 3` bytes each) in `out`, reading its
/// dma-bufs through read guards (DMA_BUF_IOCTL_SYNC START|READ ... END,
/// Documentation/driver-api/dma-buf.rst) held only for the conversion. Reads NV12, NV12M,
/// NV16 and YUYV (BT.601, limited range, as V4L2 cameras send them by default),
/// RGB24/BGR24 and XR24. Returns (width, height) in pixels. Errors: another fourcc (named), or a
/// plane too short for its rows.
pub fn frame_to_rgb(frame: &Frame, out: &mut Vec<u8>) -> Result<(u32, u32)> {
    let layout = frame.desc().layout;
    let (w, h) = (layout.width, layout.height);
    let guards = frame.read()?;
    let bufs: Vec<&[u8]> = guards.iter().map(|g| &g[..]).collect();
    layout_to_rgb(&layout, &bufs, out)?;
    Ok((w, h))
}

/// The rows of each plane a frame of `layout` packs to: (plane, rows, bytes per row), or
/// `None` for a fourcc [`frame_to_packed`] does not read.
fn packed_rows(layout: &FrameLayout) -> Option<Vec<(usize, usize, usize)>> {
    let (w, h) = (layout.width as usize, layout.height as usize);
    let (cw, ch) = (w.div_ceil(2), h.div_ceil(2));
    Some(match layout.fourcc {
        Fourcc::NV12 | Fourcc::NV12M => vec![(0, h, w), (1, ch, 2 * cw)],
        Fourcc::NV16 => vec![(0, h, w), (1, h, 2 * cw)],
        Fourcc::YUYV => vec![(0, h, 4 * cw)],
        Fourcc::RGB24 | Fourcc::BGR24 => vec![(0, h, 3 * w)],
        Fourcc::XR24 => vec![(0, h, 4 * w)],
        _ => return None,
    })
}

/// Copies `frame`'s pixels into `out` packed tight (no padding after a row, plane after
/// plane: the layout of ffmpeg's `rawvideo` of the same format), reading its dma-bufs
/// through read guards held only for the copy: the input of a raw-video encoder. Reads
/// NV12, NV12M, NV16, YUYV, RGB24, BGR24 and XR24. Returns the frame's layout. Errors:
/// another fourcc (named), or a plane too short for its rows.
pub fn frame_to_packed(frame: &Frame, out: &mut Vec<u8>) -> Result<FrameLayout> {
    let layout = frame.desc().layout;
    if packed_rows(&layout).is_none() {
        bail!("cannot pack {} frames (NV12, NV12M, NV16, YUYV, RGB24, BGR24 and XR24 can be)", layout.fourcc)
    }
    let guards = frame.read()?;
    let bufs: Vec<&[u8]> = guards.iter().map(|g| &g[..]).collect();
    layout_to_packed(&layout, &bufs, out)?;
    Ok(layout)
}

/// [`frame_to_packed`] on bytes already mapped: `bufs[fd_index]` per plane.
fn layout_to_packed(layout: &FrameLayout, bufs: &[&[u8]], out: &mut Vec<u8>) -> Result<()> {
    let Some(rows) = packed_rows(layout) else { bail!("cannot pack {} frames", layout.fourcc) };
    if layout.num_planes as usize <= rows.iter().map(|r| r.0).max().unwrap_or(0) {
        bail!("{}: {} plane(s) where {} are read", layout.fourcc, layout.num_planes, rows.len());
    }
    out.clear();
    for (i, n, row) in rows {
        let (p, bpl) = plane(bufs, layout, i)?;
        if n > 0 && (bpl < row || p.len() < bpl * (n - 1) + row) {
            bail!("{}: plane {i} has {} bytes of {bpl} per row; {n} rows of {row} need more", layout.fourcc, p.len());
        }
        for r in 0..n {
            out.extend_from_slice(&p[r * bpl..r * bpl + row]);
        }
    }
    Ok(())
}

/// [`frame_to_rgb`] on bytes already mapped: `bufs[fd_index]` per plane.
pub(crate) fn layout_to_rgb(layout: &FrameLayout, bufs: &[&[u8]], out: &mut Vec<u8>) -> Result<()> {
    use yuv::{YuvBiPlanarImage, YuvConversionMode, YuvPackedImage, YuvRange, YuvStandardMatrix};
    let (w, h) = (layout.width, layout.height);
    if w == 0 || h == 0 {
        bail!("frame of {w}x{h} pixels");
    }
    out.clear();
    out.resize(w as usize * h as usize * 3, 0);
    let err = |e: yuv::YuvError| anyhow::anyhow!("{} -> RGB24: {e:?}", layout.fourcc);
    match layout.fourcc {
        Fourcc::NV12 | Fourcc::NV12M | Fourcc::NV16 => {
            let ((y, ybpl), (uv, uvbpl)) = (plane(bufs, layout, 0)?, plane(bufs, layout, 1)?);
            let img = YuvBiPlanarImage {
                y_plane: y,
                y_stride: ybpl as u32,
                uv_plane: uv,
                uv_stride: uvbpl as u32,
                width: w,
                height: h,
            };
            let convert = if layout.fourcc == Fourcc::NV16 { yuv::yuv_nv16_to_rgb } else { yuv::yuv_nv12_to_rgb };
            convert(&img, out, w * 3, YuvRange::Limited, YuvStandardMatrix::Bt601, YuvConversionMode::Balanced)
                .map_err(err)?;
        }
        Fourcc::YUYV => {
            let (p, bpl) = plane(bufs, layout, 0)?;
            let packed = YuvPackedImage { yuy: p, yuy_stride: bpl as u32, width: w, height: h };
            yuv::yuyv422_to_rgb(&packed, out, w * 3, YuvRange::Limited, YuvStandardMatrix::Bt601).map_err(err)?;
        }
        Fourcc::XR24 => {
            let (p, bpl) = plane(bufs, layout, 0)?;
            if p.len() < bpl * (h as usize - 1) + w as usize * 4 {
                bail!("{}: plane 0 has {} bytes, {h} rows of {bpl} need more", layout.fourcc, p.len());
            }
            for (r, dst) in out.chunks_exact_mut(w as usize * 3).enumerate() {
                for (d, s) in dst.chunks_exact_mut(3).zip(p[r * bpl..r * bpl + w as usize * 4].chunks_exact(4)) {
                    d.copy_from_slice(&[s[2], s[1], s[0]]);
                }
            }
        }
        Fourcc::RGB24 | Fourcc::BGR24 => {
            let (p, bpl) = plane(bufs, layout, 0)?;
            let row = w as usize * 3;
            if p.len() < bpl * (h as usize - 1) + row {
                bail!("{}: plane 0 has {} bytes, {h} rows of {bpl} need more", layout.fourcc, p.len());
            }
            for (r, dst) in out.chunks_exact_mut(row).enumerate() {
                let src = &p[r * bpl..r * bpl + row];
                if layout.fourcc == Fourcc::RGB24 {
                    dst.copy_from_slice(src);
                } else {
                    for (d, s) in dst.chunks_exact_mut(3).zip(src.chunks_exact(3)) {
                        d.copy_from_slice(&[s[2], s[1], s[0]]);
                    }
                }
            }
        }
        other => bail!("cannot show {other} frames yet (NV12, NV12M, NV16, YUYV, RGB24, BGR24 and XR24 can be shown)"),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::PlaneDesc;

    fn nv12(w: u32, h: u32, bpl: u32) -> (FrameLayout, Vec<u8>) {
        // Y 81 (limited-range grey ~ 76 in full range) and neutral chroma: every pixel grey.
        let (ylen, uvlen) = (bpl * h, bpl * h.div_ceil(2));
        let mut planes = [PlaneDesc::default(); 3];
        planes[0] = PlaneDesc { offset: 0, bytesperline: bpl, length: ylen, fd_index: 0 };
        planes[1] = PlaneDesc { offset: ylen, bytesperline: bpl, length: uvlen, fd_index: 0 };
        let mut b = vec![81u8; ylen as usize];
        b.extend(std::iter::repeat_n(128u8, uvlen as usize));
        (FrameLayout { fourcc: Fourcc::NV12, width: w, height: h, num_planes: 2, planes }, b)
    }

    #[test]
    fn nv12_with_a_stride_wider_than_the_picture_becomes_grey_rgb() {
        let (l, b) = nv12(6, 4, 16);
        let mut out = vec![];
        layout_to_rgb(&l, &[&b], &mut out).unwrap();
        assert_eq!(out.len(), 6 * 4 * 3);
        // BT.601 limited: (81 - 16) * 255 / 219 = 75.7.
        assert!(out.iter().all(|&v| (74..=77).contains(&v)), "{out:?}");
    }

    #[test]
    fn bgr24_rows_are_swapped_and_a_short_plane_or_an_unknown_fourcc_is_an_error() {
        let mut planes = [PlaneDesc::default(); 3];
        planes[0] = PlaneDesc { offset: 0, bytesperline: 8, length: 16, fd_index: 0 };
        let l = FrameLayout { fourcc: Fourcc::BGR24, width: 2, height: 2, num_planes: 1, planes };
        let b = [1, 2, 3, 4, 5, 6, 0, 0, 7, 8, 9, 10, 11, 12, 0, 0];
        let mut out = vec![];
        layout_to_rgb(&l, &[&b], &mut out).unwrap();
        assert_eq!(out, [3, 2, 1, 6, 5, 4, 9, 8, 7, 12, 11, 10]);
        let e = layout_to_rgb(&l, &[&b[..10]], &mut out).unwrap_err().to_string();
        assert!(e.contains("plane 0 has"), "{e}");
        let l = FrameLayout { fourcc: Fourcc::new(b"AR24"), ..l };
        let e = layout_to_rgb(&l, &[&b], &mut out).unwrap_err().to_string();
        assert!(e.contains("cannot show AR24"), "{e}");
        // XR24: B G R X bytes.
        let l = FrameLayout { fourcc: Fourcc::XR24, ..l };
        layout_to_rgb(&l, &[&[1, 2, 3, 0, 4, 5, 6, 0, 7, 8, 9, 0, 10, 11, 12, 0]], &mut out).unwrap();
        assert_eq!(out, [3, 2, 1, 6, 5, 4, 9, 8, 7, 12, 11, 10]);
    }

    #[test]
    fn packing_drops_row_padding_and_keeps_an_odd_size_s_chroma() {
        // 5x3 NV12 in rows of 16: Y rows of 5, then 2 CbCr rows of 6 (3 pairs).
        let (mut l, _) = nv12(5, 3, 16);
        l.planes[1].offset = 16 * 4;
        let b: Vec<u8> = (0..16 * 6).map(|i| (i % 16) as u8).collect();
        let mut out = vec![];
        layout_to_packed(&l, &[&b], &mut out).unwrap();
        let y = [0u8, 1, 2, 3, 4];
        let uv = [0u8, 1, 2, 3, 4, 5];
        let want: Vec<u8> = [&y[..], &y, &y, &uv, &uv].concat();
        assert_eq!(out, want);
        // A plane cut short, and a format it does not read, are errors.
        let e = layout_to_packed(&l, &[&b[..70]], &mut out).unwrap_err().to_string();
        assert!(e.contains("plane 1 has"), "{e}");
        let l = FrameLayout { fourcc: Fourcc::new(b"AR24"), ..l };
        assert!(layout_to_packed(&l, &[&b], &mut out).is_err());
    }
}

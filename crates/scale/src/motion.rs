//! Motion gating (`--motion`): a frame whose picture did not change since the last frame of
//! its camera that went on to the NPU is passed over, unless the keep-alive is due.
//!
//! The check reads a 32x18 luma thumbnail of the capture frame: 576 samples picked straight
//! from the frame's luma (NV12, NV12M, NV16: the Y plane; YUYV: every Y byte; RGB24/BGR24:
//! `(r + 2g + b) / 4`), inside the frame's read guard (`DMA_BUF_IOCTL_SYNC`), so it touches
//! 576 bytes of a 3 MB 1080p frame whatever the scaler is. Its cost per frame is measured
//! and reported (`motion_us`). The picture changed when the mean absolute difference of the
//! two thumbnails exceeds `--motion-threshold` (in luma levels, 0..255).

use std::time::Instant;

use zcpipe_core::frame::{Fourcc, FrameLayout};
use zcpipe_core::pool::Frame;
use zcpipe_core::Result;

/// Thumbnail width and height, samples.
const TW: usize = 32;
const TH: usize = 18;

/// A frame's luma thumbnail.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Thumb(Vec<u8>);

impl Thumb {
    /// The thumbnail of `bytes` (each plane's dma-buf mapped, index = `fd_index`) laid out as
    /// `l`; `None` for a format it cannot read (the gate then passes every frame).
    pub fn of_planes(bufs: &[&[u8]], l: &FrameLayout) -> Option<Thumb> {
        let (w, h) = (l.width as usize, l.height as usize);
        let p = l.planes().first()?;
        let buf = bufs.get(p.fd_index as usize)?;
        let (off, bpl) = (p.offset as usize, p.bytesperline as usize);
        let (step, luma): (usize, fn(&[u8]) -> u8) = match l.fourcc {
            Fourcc::NV12 | Fourcc::NV12M | Fourcc::NV16 => (1, |s| s[0]),
            Fourcc::YUYV => (2, |s| s[0]),
            Fourcc::RGB24 | Fourcc::BGR24 => (3, |s| ((s[0] as u16 + 2 * s[1] as u16 + s[2] as u16) / 4) as u8),
            _ => return None,
        };
        if w == 0 || h == 0 {
            return None;
        }
        let mut t = Vec::with_capacity(TW * TH);
        for ty in 0..TH {
            let y = (2 * ty + 1) * h / (2 * TH);
            for tx in 0..TW {
                let x = (2 * tx + 1) * w / (2 * TW);
                let at = off + y * bpl + x * step;
                t.push(luma(buf.get(at..at + step.max(1))?));
            }
        }
        Some(Thumb(t))
    }

    /// The mean absolute difference to `other`, luma levels.
    pub fn diff(&self, other: &Thumb) -> f32 {
        let sum: u32 = self.0.iter().zip(&other.0).map(|(a, b)| a.abs_diff(*b) as u32).sum();
        sum as f32 / self.0.len().max(1) as f32
    }
}

/// One camera's motion gate.
#[derive(Debug)]
pub struct MotionGate {
    threshold: f32,
    keepalive_ns: u64,
    /// The thumbnail and capture stamp of the last frame that went on.
    last: Option<(Thumb, u64)>,
    /// Time spent making and comparing thumbnails, µs, and how many.
    spent_us: f64,
    checks: u64,
}

impl MotionGate {
    /// A gate passing frames that differ by more than `threshold` luma levels (mean absolute
    /// difference of the thumbnails), and one every `keepalive_s` seconds however still.
    pub fn new(threshold: f32, keepalive_s: f64) -> MotionGate {
        MotionGate { threshold, keepalive_ns: (keepalive_s * 1e9) as u64, last: None, spent_us: 0.0, checks: 0 }
    }

    /// Whether `frame` goes on: its picture changed since the last one that went on, the
    /// keep-alive is due, or its format has no thumbnail. Reads the frame under its guard.
    pub fn admit(&mut self, frame: &Frame) -> Result<bool> {
        let t0 = Instant::now();
        let d = frame.desc();
        let thumb = {
            let g = frame.read()?;
            let bufs: Vec<&[u8]> = g.iter().map(|a| a.bytes()).collect();
            Thumb::of_planes(&bufs, &d.layout)
        };
        let pass = match (&thumb, &self.last) {
            (None, _) | (_, None) => true,
            (Some(t), Some((last, ts))) => {
                t.diff(last) > self.threshold || d.timestamp_ns.saturating_sub(*ts) >= self.keepalive_ns
            }
        };
        if pass {
            self.last = thumb.map(|t| (t, d.timestamp_ns));
        }
        self.spent_us += t0.elapsed().as_secs_f64() * 1e6;
        self.checks += 1;
        Ok(pass)
    }

    /// Mean cost of a check, µs (`None`: none made).
    pub fn mean_us(&self) -> Option<f64> {
        (self.checks > 0).then(|| self.spent_us / self.checks as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use zcpipe_core::frame::PlaneDesc;

    fn nv12(w: u32, h: u32, bpl: u32) -> FrameLayout {
        let mut planes = [PlaneDesc::default(); 3];
        planes[0] = PlaneDesc { offset: 0, bytesperline: bpl, length: bpl * h, fd_index: 0 };
        planes[1] = PlaneDesc { offset: bpl * h, bytesperline: bpl, length: bpl * h / 2, fd_index: 0 };
        FrameLayout { fourcc: Fourcc::NV12, width: w, height: h, num_planes: 2, planes }
    }

    #[test]
    fn a_thumbnail_samples_luma_through_the_stride() {
        // 64x36 NV12 with a 128-byte stride: left half 50, right half 200, padding 255.
        let (w, h, bpl) = (64u32, 36u32, 128u32);
        let mut buf = vec![255u8; (bpl * h * 3 / 2) as usize];
        for y in 0..h as usize {
            for x in 0..w as usize {
                buf[y * bpl as usize + x] = if x < 32 { 50 } else { 200 };
            }
        }
        let t = Thumb::of_planes(&[&buf], &nv12(w, h, bpl)).unwrap();
        assert_eq!(t.0.len(), 576);
        assert!(t.0.iter().all(|&v| v == 50 || v == 200), "padding was read");
        assert_eq!(t.0.iter().filter(|&&v| v == 50).count(), 288);
        let mut other = t.clone();
        for v in other.0.iter_mut().take(288) {
            *v = v.saturating_add(10);
        }
        assert_eq!(t.diff(&other), 5.0);
        // A layout whose rows run past the buffer gives no thumbnail rather than a panic.
        assert_eq!(Thumb::of_planes(&[&buf[..100]], &nv12(w, h, bpl)), None);
    }

    #[test]
    fn rgb_luma_weights_green_twice() {
        let mut planes = [PlaneDesc::default(); 3];
        planes[0] = PlaneDesc { offset: 0, bytesperline: 96, length: 96 * 18, fd_index: 0 };
        let l = FrameLayout { fourcc: Fourcc::RGB24, width: 32, height: 18, num_planes: 1, planes };
        let buf: Vec<u8> = (0..32 * 18).flat_map(|_| [40u8, 100, 200]).collect();
        let t = Thumb::of_planes(&[&buf], &l).unwrap();
        assert!(t.0.iter().all(|&v| v == 110));
    }
}

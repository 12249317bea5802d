//! Frame descriptors: what crosses a process boundary instead of pixels.
//!
//! A frame is a fourcc, a size in pixels and up to [`MAX_PLANES`] planes, each
//! `{offset, bytesperline, length}` in bytes inside one pool buffer (named by its index).
//! This is the shape of libcamera's `FrameBuffer` and of a DRM framebuffer. Descriptors are
//! plain data (`repr(C)`, [`bytemuck::Pod`]) so they fit in a ring slot, and they hold
//! indices and offsets only, never addresses. A descriptor read from shared memory comes
//! from an untrusted peer: [`FrameLayout::validate`] checks every index and length before use.

use bytemuck::{Pod, Zeroable};

/// Most planes a frame can have (NV12/NV16: 2, I420: 3).
pub const MAX_PLANES: usize = 3;

pub use zcpipe_sys::fourcc::Fourcc;

/// One plane of a frame, in bytes, relative to the start of its pool buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable, Default, serde::Serialize, serde::Deserialize)]
#[repr(C)]
pub struct PlaneDesc {
    /// Byte offset of the plane's first row inside the buffer.
    pub offset: u32,
    /// Bytes from one row to the next (V4L2 `bytesperline`); >= the row's payload.
    pub bytesperline: u32,
    /// Bytes the plane occupies (bytesperline x rows, or V4L2's per-plane `sizeimage`).
    pub length: u32,
    /// Which dma-buf of the buffer holds this plane (0 unless the format is multi-planar
    /// with one fd per plane, like NV12M).
    pub fd_index: u32,
}

/// The pixel layout of one frame: fourcc, size and planes. Plain data.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable, Default, serde::Serialize, serde::Deserialize)]
#[repr(C)]
pub struct FrameLayout {
    /// Pixel format.
    pub fourcc: Fourcc,
    /// True width in pixels (an odd source keeps its odd width here; the planes are padded).
    pub width: u32,
    /// True height in pixels.
    pub height: u32,
    /// How many entries of `planes` are used.
    pub num_planes: u32,
    /// Plane geometry; entries past `num_planes` are zero.
    pub planes: [PlaneDesc; MAX_PLANES],
}

/// Rounds `v` up to a multiple of `align` (a power of two).
pub const fn align_up(v: u32, align: u32) -> u32 {
    (v + align - 1) & !(align - 1)
}

impl FrameLayout {
    /// The NV12 layout zcpipe's host sources write: the luma plane at offset 0 with
    /// `bytesperline = align_up(even(width), stride_align)`, the CbCr plane right after it
    /// at `even(height)` rows, half as many rows. Odd sizes are padded to even ones; `width`
    /// and `height` keep the true size. Total bytes: `bytesperline * even(height) * 3 / 2`.
    pub fn nv12(width: u32, height: u32, stride_align: u32) -> FrameLayout {
        let (w2, h2) = (align_up(width, 2), align_up(height, 2));
        let bpl = align_up(w2, stride_align);
        let y_len = bpl * h2;
        let mut planes = [PlaneDesc::default(); MAX_PLANES];
        planes[0] = PlaneDesc { offset: 0, bytesperline: bpl, length: y_len, fd_index: 0 };
        planes[1] = PlaneDesc { offset: y_len, bytesperline: bpl, length: bpl * h2 / 2, fd_index: 0 };
        FrameLayout { fourcc: Fourcc::NV12, width, height, num_planes: 2, planes }
    }

    /// A packed 3-bytes-per-pixel layout (`BGR24` or `RGB24`) with the given bytesperline
    /// (>= 3 x width), as the scaler writes the model input.
    pub fn packed24(fourcc: Fourcc, width: u32, height: u32, bytesperline: u32) -> FrameLayout {
        let mut planes = [PlaneDesc::default(); MAX_PLANES];
        planes[0] = PlaneDesc { offset: 0, bytesperline, length: bytesperline * height, fd_index: 0 };
        FrameLayout { fourcc, width, height, num_planes: 1, planes }
    }

    /// The used planes.
    pub fn planes(&self) -> &[PlaneDesc] {
        &self.planes[..(self.num_planes as usize).min(MAX_PLANES)]
    }

    /// Bytes from the buffer start to the end of the last plane (the buffer size needed).
    pub fn bytes_needed(&self) -> u64 {
        self.planes().iter().map(|p| p.offset as u64 + p.length as u64).max().unwrap_or(0)
    }

    /// Checks the layout against the buffers it claims to live in: a known fourcc with the
    /// right plane count, a size in 1..=16384 pixels, each plane's bytesperline at least its
    /// row payload, rows fitting in `length`, and `offset + length` inside
    /// `buffer_sizes[fd_index]`. Errors name the first field that is wrong.
    pub fn validate(&self, buffer_sizes: &[u64]) -> Result<(), String> {
        let planes = self
            .fourcc
            .num_planes()
            .ok_or_else(|| format!("unknown fourcc {:#010x} ({})", self.fourcc.0, self.fourcc))?;
        if self.num_planes as usize != planes {
            return Err(format!("{} needs {} planes, descriptor says {}", self.fourcc, planes, self.num_planes));
        }
        if self.width == 0 || self.height == 0 || self.width > 16384 || self.height > 16384 {
            return Err(format!("frame size {}x{} out of range 1..=16384", self.width, self.height));
        }
        for (i, p) in self.planes().iter().enumerate() {
            let (min_bpl, rows) = self.plane_row_bytes_and_rows(i);
            if (p.bytesperline as u64) < min_bpl {
                return Err(format!(
                    "plane {i}: bytesperline {} < {} bytes of pixels per row",
                    p.bytesperline, min_bpl
                ));
            }
            if (p.length as u64) < p.bytesperline as u64 * (rows - 1) + min_bpl {
                return Err(format!(
                    "plane {i}: length {} too small for {} rows of {} bytes",
                    p.length, rows, p.bytesperline
                ));
            }
            let size = *buffer_sizes.get(p.fd_index as usize).ok_or_else(|| {
                format!("plane {i}: fd_index {} but buffer has {} fds", p.fd_index, buffer_sizes.len())
            })?;
            if p.offset as u64 + p.length as u64 > size {
                return Err(format!("plane {i}: offset {} + length {} past buffer size {}", p.offset, p.length, size));
            }
        }
        Ok(())
    }

    /// (minimum bytes of pixel data per row, rows) of plane `i` for this fourcc and size.
    pub(crate) fn plane_row_bytes_and_rows(&self, i: usize) -> (u64, u64) {
        let (w, h) = (self.width as u64, self.height as u64);
        let (w2, h2) = (w.div_ceil(2) * 2, h.div_ceil(2));
        match (self.fourcc, i) {
            (Fourcc::NV12 | Fourcc::NV12M, 0) => (w, h),
            (Fourcc::NV12 | Fourcc::NV12M, _) => (w2, h2),
            (Fourcc::NV16, 0) => (w, h),
            (Fourcc::NV16, _) => (w2, h),
            (Fourcc::YUYV, _) => (w2 * 2, h),
            (Fourcc::XR24, _) => (w * 4, h),
            _ => (w * 3, h),
        }
    }
}

/// Where the resized picture sits in a letterboxed model input (`--letterbox`), and how its
/// size is rounded: each family's published pre-processing does both its own way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Placement {
    /// At the top-left corner, the pad to the right and below; the picture is
    /// `int(side * r)` pixels (YOLOX `preproc`, `yolox/data/data_augment.py`).
    #[default]
    TopLeft,
    /// Centred: the pad split between both sides, the odd pixel right or below; the picture
    /// is `round(side * r)` pixels (Ultralytics `LetterBox`, `ultralytics/data/augment.py`;
    /// YOLOv5 `letterbox`, `utils/augmentations.py`).
    Center,
}

impl Placement {
    /// How it reads in logs (`top-left`, `centred`).
    pub fn describe(self) -> &'static str {
        match self {
            Placement::TopLeft => "top-left",
            Placement::Center => "centred",
        }
    }
}

/// How a scaler letterboxes a frame into the model input: where the picture goes and the
/// value of every byte around it (114 for every family zcpipe knows).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Letterbox {
    /// Where the picture goes.
    pub placement: Placement,
    /// The value of every byte of the model input outside the picture.
    pub pad: u8,
}

impl Letterbox {
    /// A letterbox with the picture at `placement` and `pad` around it.
    pub const fn new(placement: Placement, pad: u8) -> Letterbox {
        Letterbox { placement, pad }
    }

    /// The geometry of a `src_w x src_h` frame letterboxed into `dst_w x dst_h` with this
    /// placement ([`LetterboxParams::top_left`] or [`LetterboxParams::centered`]).
    pub fn params(self, src_w: u32, src_h: u32, dst_w: u32, dst_h: u32) -> LetterboxParams {
        match self.placement {
            Placement::TopLeft => LetterboxParams::top_left(src_w, src_h, dst_w, dst_h),
            Placement::Center => LetterboxParams::centered(src_w, src_h, dst_w, dst_h),
        }
    }
}

/// How a scaled frame maps back to its source: `model = source * scale + (pad_x, pad_y)`.
/// YOLOX letterboxes at the top-left (`pad_x = pad_y = 0`); Ultralytics and YOLOv5 centre
/// the picture. The pads are whole pixels (the picture starts on a pixel).
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable, Default)]
#[repr(C)]
pub struct LetterboxParams {
    /// Model pixels per source pixel (`min(model_w / src_w, model_h / src_h)`).
    pub scale: f32,
    /// Left offset of the image inside the model input, in model pixels.
    pub pad_x: f32,
    /// Top offset of the image inside the model input, in model pixels.
    pub pad_y: f32,
    /// Width of the resized image inside the model input, in model pixels.
    pub resized_w: u32,
    /// Height of the resized image inside the model input, in model pixels.
    pub resized_h: u32,
    /// Source frame width in pixels (for clamping mapped boxes).
    pub src_w: u32,
    /// Source frame height in pixels.
    pub src_h: u32,
    _pad: u32,
}

impl LetterboxParams {
    /// YOLOX's top-left letterbox of a `src_w x src_h` frame into `dst_w x dst_h`:
    /// `r = min(dst_w/src_w, dst_h/src_h)`, resized to `(int(src_w*r), int(src_h*r))`
    /// (YOLOX `preproc`, `yolox/data/data_augment.py`).
    pub fn top_left(src_w: u32, src_h: u32, dst_w: u32, dst_h: u32) -> LetterboxParams {
        // float64 like YOLOX (Python floats): f32 gives 234 rows for 768x432, YOLOX 233.
        let r = (dst_w as f64 / src_w as f64).min(dst_h as f64 / src_h as f64);
        let rw = ((src_w as f64 * r) as u32).clamp(1, dst_w);
        let rh = ((src_h as f64 * r) as u32).clamp(1, dst_h);
        LetterboxParams { scale: r as f32, pad_x: 0.0, pad_y: 0.0, resized_w: rw, resized_h: rh, src_w, src_h, _pad: 0 }
    }

    /// The Ultralytics / YOLOv5 centred letterbox of a `src_w x src_h` frame into
    /// `dst_w x dst_h`: `r = min(dst_h/src_h, dst_w/src_w)`, resized to
    /// `(round(src_w*r), round(src_h*r))` (Python's `round`: halves to even), and each
    /// pad split as `round(d/2 - 0.1)` before and `round(d/2 + 0.1)` after, that is
    /// `floor(d/2)` before (Ultralytics `LetterBox.__call__` with `center=True`,
    /// `auto=False`, as for an exported model; YOLOv5 `letterbox`). Boxes map back as
    /// Ultralytics `scale_boxes` does: `(box - pad) / r`.
    pub(crate) fn centered(src_w: u32, src_h: u32, dst_w: u32, dst_h: u32) -> LetterboxParams {
        let r = (dst_h as f64 / src_h as f64).min(dst_w as f64 / src_w as f64);
        let rw = ((src_w as f64 * r).round_ties_even() as u32).clamp(1, dst_w);
        let rh = ((src_h as f64 * r).round_ties_even() as u32).clamp(1, dst_h);
        let (px, py) = ((dst_w - rw) / 2, (dst_h - rh) / 2);
        LetterboxParams {
            scale: r as f32,
            pad_x: px as f32,
            pad_y: py as f32,
            resized_w: rw,
            resized_h: rh,
            src_w,
            src_h,
            _pad: 0,
        }
    }

    /// The picture's rectangle in the model input, in whole pixels: `(x, y, width, height)`.
    pub fn picture(&self) -> (u32, u32, u32, u32) {
        (self.pad_x.max(0.0) as u32, self.pad_y.max(0.0) as u32, self.resized_w, self.resized_h)
    }

    /// Moves the picture to `(x, y)` and gives it the size `w x h` a device wrote (it may
    /// round a size or an offset); the scale stays, so boxes map back through the new pads.
    pub fn place(&mut self, x: u32, y: u32, w: u32, h: u32) {
        (self.pad_x, self.pad_y, self.resized_w, self.resized_h) = (x as f32, y as f32, w, h);
    }

    /// Maps a box `[x1, y1, x2, y2]` in model-input pixels back to source pixels, clamped
    /// to `[0, src_w] x [0, src_h]`.
    pub fn unmap_box(&self, b: [f32; 4]) -> [f32; 4] {
        let (w, h) = (self.src_w as f32, self.src_h as f32);
        let s = if self.scale > 0.0 { self.scale } else { 1.0 };
        [
            ((b[0] - self.pad_x) / s).clamp(0.0, w),
            ((b[1] - self.pad_y) / s).clamp(0.0, h),
            ((b[2] - self.pad_x) / s).clamp(0.0, w),
            ((b[3] - self.pad_y) / s).clamp(0.0, h),
        ]
    }
}

/// A restart notice carried in a frame's (and a detections record's) `flags`: `stage` came
/// back after it died, and `lost` frames went missing meanwhile. Set by the neighbour that
/// saw the restart (the upstream of a restarted stage counts the frames it dropped while no
/// consumer was there plus those the dead stage held; for capture, its downstream counts
/// the frames the source did not make while it was down, at its nominal rate). A network
/// camera that came back after its stream dropped is the same notice with `reconnected`
/// set: nothing restarted. Bits 0-2: the stage index + 1 (0: no notice); bit 3:
/// `reconnected`; bits 4-7: the camera ([`camera_of`]); bits 8-31: `lost`, saturating at
/// 2^24 - 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RestartMark {
    /// The stage that restarted.
    pub stage: Stage,
    /// Frames lost while it was gone.
    pub lost: u32,
    /// The capture stage's source reconnected (a network camera came back); the stage
    /// itself did not restart.
    pub reconnected: bool,
}

impl RestartMark {
    /// Largest `lost` the flags word holds.
    pub(crate) const MAX_LOST: u32 = (1 << 24) - 1;

    /// A restart of `stage` that cost `lost` frames.
    pub fn restart(stage: Stage, lost: u64) -> RestartMark {
        RestartMark { stage, lost: lost.min(u32::MAX as u64) as u32, reconnected: false }
    }

    /// The capture stage's network source came back after a gap that cost `lost` frames.
    pub fn reconnect(lost: u64) -> RestartMark {
        RestartMark { reconnected: true, ..RestartMark::restart(Stage::Capture, lost) }
    }

    /// What happened, as the notice line's `event` says it: `restarted` or `reconnected`.
    pub fn event(self) -> &'static str {
        if self.reconnected {
            "reconnected"
        } else {
            "restarted"
        }
    }

    /// The flags word carrying this notice.
    pub(crate) fn to_flags(self) -> u32 {
        (self.stage as u32 + 1) | (u32::from(self.reconnected) << 3) | (self.lost.min(Self::MAX_LOST) << 8)
    }

    /// The notice in a flags word, if any (a stage index out of range is none).
    pub fn from_flags(flags: u32) -> Option<RestartMark> {
        let i = (flags & 0x7) as usize;
        let stage = *Stage::ALL.get(i.checked_sub(1)?)?;
        Some(RestartMark { stage, lost: flags >> 8, reconnected: flags & 0x8 != 0 })
    }

    /// `flags` with this notice, unless it already carries one (the first notice wins;
    /// a second restart in the same gap is rare and its own loss is in the next one).
    pub fn mark(self, flags: u32) -> u32 {
        if RestartMark::from_flags(flags).is_some() {
            flags
        } else {
            (flags & CAMERA_BITS) | self.to_flags()
        }
    }
}

/// Cameras one pipeline serves at most: a frame's camera index (its position in the run's
/// `--source` list) travels in bits 4-7 of [`FrameDesc::flags`] and
/// [`crate::detections::DetectionsDesc::flags`], beside the [`RestartMark`].
pub const MAX_CAMERAS: usize = 16;

/// The bits of a flags word that hold the camera index.
const CAMERA_BITS: u32 = 0xf0;

/// The camera index (0..[`MAX_CAMERAS`]) a flags word carries; 0 for a single camera.
pub fn camera_of(flags: u32) -> usize {
    ((flags & CAMERA_BITS) >> 4) as usize
}

/// `flags` with camera index `camera` (taken modulo [`MAX_CAMERAS`]; the command line
/// refuses more cameras), the restart notice kept.
pub fn with_camera(flags: u32, camera: usize) -> u32 {
    (flags & !CAMERA_BITS) | (((camera % MAX_CAMERAS) as u32) << 4)
}

/// Stages, in pipeline order; index into [`FrameDesc::stamps`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(usize)]
pub enum Stage {
    /// V4L2 / file / test-pattern capture.
    Capture = 0,
    /// Convert and letterbox.
    Scale = 1,
    /// Detector.
    Infer = 2,
    /// Detections to clients.
    Publish = 3,
}

impl Stage {
    /// All stages in order.
    pub const ALL: [Stage; 4] = [Stage::Capture, Stage::Scale, Stage::Infer, Stage::Publish];
    /// Lower-case name (`capture`, ...), as used for sockets and on the command line.
    pub fn name(self) -> &'static str {
        ["capture", "scale", "infer", "publish"][self as usize]
    }
}

/// Per-stage CLOCK_MONOTONIC timestamps in ns: `[in, out]` for each [`Stage`]
/// (`stamps[2*stage]` = taken from the input ring, `stamps[2*stage+1]` = handed on).
/// Zero means "not reached".
pub(crate) type StageStamps = [u64; 8];

/// A frame in flight: which pool buffer, its layout, its sequence number and timestamps.
/// 192 bytes of plain data; one ring slot.
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable, Default)]
#[repr(C)]
pub struct FrameDesc {
    /// Frame number from the source, starting at 0; gaps mean drops upstream.
    pub seq: u64,
    /// Capture time, CLOCK_MONOTONIC ns (V4L2 buffer timestamp, or when a host source
    /// finished producing the frame).
    pub timestamp_ns: u64,
    /// Per-stage entry/exit times.
    pub stamps: StageStamps,
    /// Index of the pool buffer holding the pixels (in the pool of the hop's producer).
    pub buffer_index: u32,
    /// A restart notice ([`RestartMark`], 0 = none): set on the first frame after a stage
    /// re-joined its neighbour, carried down to publish, which tells its clients.
    pub flags: u32,
    /// Pixel layout inside the buffer.
    pub layout: FrameLayout,
    /// For scaled frames: how to map model pixels back to the source frame.
    pub letterbox: LetterboxParams,
    /// Frames of this camera the scale stage passed over by its detection rate
    /// (`--detect-fps`) since the previous one it handed on: the sequence gap before this
    /// frame that is not a drop.
    pub skipped_rate: u32,
    /// Frames of this camera the scale stage passed over as still (`--motion`) since the
    /// previous one it handed on.
    pub skipped_still: u32,
}

/// Current CLOCK_MONOTONIC time in ns (clock_gettime(2)), the clock V4L2 stamps buffers with.
pub fn monotonic_ns() -> u64 {
    let ts =
        nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC).unwrap_or(nix::sys::time::TimeSpec::new(0, 0));
    ts.tv_sec() as u64 * 1_000_000_000 + ts.tv_nsec() as u64
}

impl FrameDesc {
    /// Checks a descriptor a peer wrote (read from a ring slot, untrusted) against the pool
    /// it names: `pool[i][fd_index]` is the byte size of dma-buf `fd_index` of buffer `i`
    /// (as the offer announced them). Accepted: `buffer_index` names a buffer of the pool
    /// and the layout passes [`FrameLayout::validate`] against that buffer's sizes, so every
    /// row of every plane lies inside its dma-buf. Errors name the first field that is wrong
    /// (`buffer index 7 out of 4`, `plane 1: offset ... past buffer size ...`).
    pub fn validate(&self, pool: &[Vec<u64>]) -> Result<(), String> {
        let sizes = pool
            .get(self.buffer_index as usize)
            .ok_or_else(|| format!("buffer index {} out of {}", self.buffer_index, pool.len()))?;
        self.layout.validate(sizes)
    }

    /// Records `stage`'s entry time (now).
    pub fn stamp_in(&mut self, stage: Stage) {
        self.stamps[2 * stage as usize] = monotonic_ns();
    }
    /// Records `stage`'s exit time (now).
    pub fn stamp_out(&mut self, stage: Stage) {
        self.stamps[2 * stage as usize + 1] = monotonic_ns();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_camera_index_shares_the_flags_word_with_a_restart_notice() {
        let m = RestartMark::restart(Stage::Capture, 1000);
        let f = with_camera(m.to_flags(), 11);
        assert_eq!((camera_of(f), RestartMark::from_flags(f)), (11, Some(m)));
        let marked = RestartMark::restart(Stage::Infer, 3).mark(with_camera(0, 7));
        assert_eq!(
            (camera_of(marked), RestartMark::from_flags(marked)),
            (7, Some(RestartMark::restart(Stage::Infer, 3)))
        );
        assert_eq!(camera_of(with_camera(f, 2)), 2);
        assert_eq!(camera_of(0), 0);
    }

    #[test]
    fn a_restart_mark_round_trips_through_the_flags_word() {
        assert_eq!(RestartMark::from_flags(0), None);
        let m = RestartMark::restart(Stage::Infer, 57);
        assert_eq!(m.to_flags(), 3 | 57 << 8);
        assert_eq!(RestartMark::from_flags(m.to_flags()), Some(m));
        let big = RestartMark::restart(Stage::Capture, u32::MAX.into());
        assert_eq!(
            RestartMark::from_flags(big.to_flags()),
            Some(RestartMark::restart(Stage::Capture, RestartMark::MAX_LOST.into()))
        );
        assert_eq!(RestartMark::from_flags(0xf), None, "stage index out of range");
        let back = RestartMark::reconnect(192);
        let f = back.mark(with_camera(0, 3));
        assert_eq!((camera_of(f), RestartMark::from_flags(f)), (3, Some(back)));
        assert_eq!((back.stage, back.lost, back.event()), (Stage::Capture, 192, "reconnected"));
        assert_eq!(RestartMark::restart(Stage::Capture, 192).event(), "restarted");
        assert_eq!(RestartMark::restart(Stage::Scale, 1).mark(m.to_flags()), m.to_flags(), "the first notice wins");
    }

    #[test]
    fn frame_desc_is_one_small_slot() {
        assert_eq!(std::mem::size_of::<FrameDesc>(), 192);
        assert_eq!(std::mem::size_of::<FrameDesc>() % 8, 0);
    }

    #[test]
    fn fourcc_matches_v4l2() {
        // V4L2_PIX_FMT_NV12 = v4l2_fourcc('N','V','1','2') = 0x3231564e
        assert_eq!(Fourcc::NV12.0, 0x3231_564e);
        assert_eq!(Fourcc::YUYV.0, 0x5659_5559);
        assert_eq!(Fourcc::NV12.to_string(), "NV12");
    }

    #[test]
    fn nv12_odd_size_is_padded() {
        let l = FrameLayout::nv12(451, 301, 16);
        assert_eq!(l.planes[0].bytesperline, 464);
        assert_eq!(l.planes[0].length, 464 * 302);
        assert_eq!(l.planes[1].offset, 464 * 302);
        assert_eq!(l.planes[1].length, 464 * 151);
        assert_eq!(l.bytes_needed(), 464 * 302 * 3 / 2);
        assert_eq!((l.width, l.height), (451, 301));
        l.validate(&[l.bytes_needed()]).unwrap();
        assert!(l.validate(&[l.bytes_needed() - 1]).is_err());
    }

    #[test]
    fn a_descriptor_is_checked_against_the_buffer_it_names() {
        let d = FrameDesc { buffer_index: 1, layout: FrameLayout::nv12(640, 480, 16), ..Default::default() };
        let pool = [vec![460800], vec![460800]];
        d.validate(&pool).unwrap();
        assert_eq!(FrameDesc { buffer_index: 2, ..d }.validate(&pool).unwrap_err(), "buffer index 2 out of 2");
        assert_eq!(
            d.validate(&[vec![460800], vec![460799]]).unwrap_err(),
            "plane 1: offset 307200 + length 153600 past buffer size 460799"
        );
    }

    #[test]
    fn nv12_1080p_is_3110400_bytes() {
        assert_eq!(FrameLayout::nv12(1920, 1080, 16).bytes_needed(), 3_110_400);
    }

    #[test]
    fn letterbox_matches_yolox() {
        let lb = LetterboxParams::top_left(768, 576, 416, 416);
        assert_eq!((lb.resized_w, lb.resized_h), (416, 312));
        assert_eq!(LetterboxParams::top_left(768, 432, 416, 416).resized_h, 233);
        assert_eq!(LetterboxParams::top_left(1280, 720, 416, 416).resized_h, 234);
        let b = lb.unmap_box([0.0, 0.0, 416.0, 500.0]);
        assert_eq!(b, [0.0, 0.0, 768.0, 576.0]);
    }

    #[test]
    fn centered_letterbox_matches_ultralytics() {
        // 1280x720 into 640x640: r = 0.5, 640x360, (640-360)/2 = 140 rows above and below.
        let lb = LetterboxParams::centered(1280, 720, 640, 640);
        assert_eq!((lb.resized_w, lb.resized_h, lb.pad_x, lb.pad_y, lb.scale), (640, 360, 0.0, 140.0, 0.5));
        assert_eq!(lb.picture(), (0, 140, 640, 360));
        // 640x640 into 640x384: pillarbox, 128 columns each side.
        assert_eq!(LetterboxParams::centered(640, 640, 640, 384).picture(), (128, 0, 384, 384));
        // 451x300 into 416x416: r = 416/451, height round(276.7...) = 277 (YOLOX's int() gives
        // 276); 139 pad rows, 69 above (round(69.5 - 0.1)) and 70 below.
        let c = LetterboxParams::centered(451, 300, 416, 416);
        assert_eq!(c.picture(), (0, 69, 416, 277));
        assert_eq!(LetterboxParams::top_left(451, 300, 416, 416).picture(), (0, 0, 416, 276));
        // Python's round() takes halves to even: 5 x 2.5 = 12.5 -> 12, 7 x 2.5 = 17.5 -> 18.
        assert_eq!(LetterboxParams::centered(5, 4, 40, 10).picture(), (14, 0, 12, 10));
        assert_eq!(LetterboxParams::centered(7, 4, 40, 10).picture(), (11, 0, 18, 10));
        // A box of the whole picture maps back to the whole frame; pads map outside it.
        assert_eq!(lb.unmap_box([0.0, 140.0, 640.0, 500.0]), [0.0, 0.0, 1280.0, 720.0]);
        assert_eq!(lb.unmap_box([10.0, 150.0, 20.0, 160.0]), [20.0, 20.0, 40.0, 40.0]);
        assert_eq!(lb.unmap_box([0.0, 0.0, 640.0, 140.0]), [0.0, 0.0, 1280.0, 0.0]);
        // Letterbox picks the formula by placement.
        assert_eq!(Letterbox::new(Placement::Center, 114).params(1280, 720, 640, 640), lb);
        assert_eq!(Letterbox::new(Placement::TopLeft, 114).params(1280, 720, 640, 640).picture(), (0, 0, 640, 360));
    }
}

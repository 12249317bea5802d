//! The detections ring slot: one frame's detections, handed from the infer stage to the
//! publish stage through a drop-oldest ring of plain data (no buffers on this hop).

use bytemuck::{Pod, Zeroable};

use super::frame::StageStamps;

/// Most detections carried per frame.
pub const MAX_DETECTIONS: usize = 100;

/// Intersection over union of two boxes `[x1, y1, x2, y2]` in the same pixel units, 0..1.
/// A box with `x2 <= x1` or `y2 <= y1` has zero area; two zero-area boxes give 0, not NaN.
/// NMS (`infer::nms`) and the trackers' association (`publish::track`) both use it.
pub fn iou(a: &[f32; 4], b: &[f32; 4]) -> f32 {
    let area = |r: &[f32; 4]| (r[2] - r[0]).max(0.0) * (r[3] - r[1]).max(0.0);
    let iw = (a[2].min(b[2]) - a[0].max(b[0])).max(0.0);
    let ih = (a[3].min(b[3]) - a[1].max(b[1])).max(0.0);
    let inter = iw * ih;
    let union = area(a) + area(b) - inter;
    if union > 0.0 {
        inter / union
    } else {
        0.0
    }
}

/// One detection in plain data: class, score, box in source-frame pixels.
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable, Default)]
#[repr(C)]
pub struct DetectionRecord {
    /// Class index into the label list.
    pub class_id: u32,
    /// Score in 0..1 (objectness x class probability for YOLOX).
    pub score: f32,
    /// `[x1, y1, x2, y2]` in source-frame pixels, clamped to the frame.
    pub bbox: [f32; 4],
}

/// Frames of one camera passed over between two of its records, and why: none of them is a
/// drop (the sequence gap they leave is accounted for).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Pod, Zeroable)]
#[repr(C)]
pub struct Skipped {
    /// By the camera's detection rate (`--detect-fps`), in the scale stage.
    pub rate: u32,
    /// As still (`--motion`: no change since the last frame inferred), in the scale stage.
    pub still: u32,
    /// Waited longer than `--max-age` for the NPU.
    pub age: u32,
    /// Replaced, while waiting for the NPU, by a newer frame of the same camera.
    pub newer: u32,
    /// This frame's own wait for the NPU (taken from the ring to run), µs.
    pub wait_us: u32,
    /// Zero (alignment).
    pub _pad: u32,
}

impl Skipped {
    /// Frames passed over in all.
    pub fn total(&self) -> u64 {
        self.rate as u64 + self.still as u64 + self.age as u64 + self.newer as u64
    }
}

/// A frame's detections: the ring slot from infer to publish (2,552 bytes).
#[derive(Clone, Copy, Debug, PartialEq, Pod, Zeroable)]
#[repr(C)]
pub struct DetectionsDesc {
    /// Frame sequence number.
    pub seq: u64,
    /// Capture time, CLOCK_MONOTONIC ns.
    pub timestamp_ns: u64,
    /// Per-stage stamps carried from the frame.
    pub stamps: StageStamps,
    /// Source frame width in pixels.
    pub width: u32,
    /// Source frame height in pixels.
    pub height: u32,
    /// Valid entries of `dets`.
    pub count: u32,
    /// A restart notice carried from the frame ([`crate::frame::RestartMark`], 0 = none).
    pub flags: u32,
    /// Frames of this camera passed over since its previous record, and this one's NPU wait.
    pub skipped: Skipped,
    /// Each NPU core's busy time so far in the infer process, µs (core k at index k; 0 for a
    /// core it does not use).
    pub npu_busy_us: [u64; 4],
    /// Detections, best first.
    pub dets: [DetectionRecord; MAX_DETECTIONS],
}

impl Default for DetectionsDesc {
    fn default() -> Self {
        Zeroable::zeroed()
    }
}

impl DetectionsDesc {
    /// Checks a slot from the infer stage: count in range, finite scores in 0..=1, finite
    /// boxes inside the frame, plausible size.
    pub fn validate(&self) -> std::result::Result<(), String> {
        if self.count as usize > MAX_DETECTIONS {
            return Err(format!("detection count {} > {MAX_DETECTIONS}", self.count));
        }
        if self.width == 0 || self.height == 0 || self.width > 16384 || self.height > 16384 {
            return Err(format!("frame size {}x{} out of range", self.width, self.height));
        }
        for d in &self.dets[..self.count as usize] {
            if !(0.0..=1.0).contains(&d.score) || d.bbox.iter().any(|v| !v.is_finite()) {
                return Err(format!("detection with score {} box {:?} is not valid", d.score, d.bbox));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn detections_desc_is_plain_and_validated() {
        assert_eq!(std::mem::size_of::<DetectionsDesc>(), 2552);
        let mut d = DetectionsDesc { width: 640, height: 480, count: 1, ..Default::default() };
        d.dets[0] = DetectionRecord { class_id: 0, score: 0.9, bbox: [1.0, 2.0, 3.0, 4.0] };
        assert!(d.validate().is_ok());
        d.count = 101;
        assert!(d.validate().is_err());
        d.count = 1;
        d.dets[0].score = f32::NAN;
        assert!(d.validate().is_err());
    }
}

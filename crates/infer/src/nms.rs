//! Intersection over union and per-class non-maximum suppression (NMS).
//!
//! The semantics follow YOLOX `multiclass_nms_class_aware` (`yolox/utils/demo_utils.py`):
//! within one class, visit boxes by descending score and drop every box whose IoU with an
//! already kept box is **greater than** the threshold. Boxes of different classes never
//! suppress each other. IoU here is the continuous area ratio (YOLOX's numpy `nms` adds 1 px
//! to widths and heights; on model-input boxes tens of pixels wide the difference is far
//! below what changes a decision at IoU 0.45, and the goldens in `tests/data/golden/`
//! reproduce exactly with the continuous form).

use super::Detection;

/// Intersection over union of two boxes (defined once, in `core`, for NMS here and for the
/// publish stage's tracker).
pub use zcpipe_core::detections::iou;

/// Per-class NMS: returns the kept detections sorted by score, highest first (ties keep
/// their input order). A detection is dropped when its IoU with a kept detection of the
/// same `class_id` and a higher (or equal, earlier) score is `> iou_threshold`.
pub(crate) fn nms_per_class(mut dets: Vec<Detection>, iou_threshold: f32) -> Vec<Detection> {
    dets.sort_by(|a, b| b.score.total_cmp(&a.score));
    let mut kept: Vec<Detection> = Vec::with_capacity(dets.len().min(64));
    for d in dets {
        let suppressed = kept.iter().any(|k| k.class_id == d.class_id && iou(&k.bbox, &d.bbox) > iou_threshold);
        if !suppressed {
            kept.push(d);
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    fn det(class_id: u32, score: f32, bbox: [f32; 4]) -> Detection {
        Detection { class_id, score, bbox }
    }

    #[test]
    fn iou_of_hand_made_boxes() {
        let a = [0.0, 0.0, 10.0, 10.0];
        assert_eq!(iou(&a, &a), 1.0);
        // Half overlap along x: inter 50, union 150.
        assert!((iou(&a, &[5.0, 0.0, 15.0, 10.0]) - 1.0 / 3.0).abs() < 1e-6);
        // One box inside the other: inter 25, union 100.
        assert!((iou(&a, &[2.5, 2.5, 7.5, 7.5]) - 0.25).abs() < 1e-6);
        // Touching edges and disjoint boxes.
        assert_eq!(iou(&a, &[10.0, 0.0, 20.0, 10.0]), 0.0);
        assert_eq!(iou(&a, &[30.0, 30.0, 40.0, 40.0]), 0.0);
        // Degenerate boxes never give NaN.
        assert_eq!(iou(&[1.0, 1.0, 1.0, 1.0], &[1.0, 1.0, 1.0, 1.0]), 0.0);
        assert_eq!(iou(&[5.0, 5.0, 0.0, 0.0], &a), 0.0);
        // Symmetric.
        let b = [3.0, -2.0, 12.0, 6.0];
        assert_eq!(iou(&a, &b), iou(&b, &a));
        // inter 7*6 = 42, union 100 + 72 - 42 = 130.
        assert!((iou(&a, &b) - 42.0 / 130.0).abs() < 1e-6);
    }

    #[test]
    fn nms_suppresses_within_class_only() {
        let dets = vec![
            det(1, 0.6, [1.0, 0.0, 11.0, 10.0]), // IoU 0.818 with the 0.9 box: dropped
            det(1, 0.9, [0.0, 0.0, 10.0, 10.0]),
            det(2, 0.8, [0.0, 0.0, 10.0, 10.0]),       // same box, other class: kept
            det(1, 0.7, [5.0, 0.0, 15.0, 10.0]),       // IoU 1/3 with the 0.9 box: kept
            det(1, 0.5, [100.0, 100.0, 110.0, 110.0]), // far away: kept
        ];
        let kept = nms_per_class(dets, 0.45);
        let got: Vec<(u32, f32)> = kept.iter().map(|d| (d.class_id, d.score)).collect();
        assert_eq!(got, vec![(1, 0.9), (2, 0.8), (1, 0.7), (1, 0.5)]);
    }

    #[test]
    fn nms_threshold_is_strictly_greater() {
        // IoU exactly 1/3: kept at threshold 1/3, dropped just below it.
        let dets = vec![det(0, 0.9, [0.0, 0.0, 10.0, 10.0]), det(0, 0.8, [5.0, 0.0, 15.0, 10.0])];
        assert_eq!(nms_per_class(dets.clone(), iou(&dets[0].bbox, &dets[1].bbox)).len(), 2);
        assert_eq!(nms_per_class(dets, 0.33).len(), 1);
        assert!(nms_per_class(Vec::new(), 0.45).is_empty());
    }

    #[test]
    fn nms_chain_is_greedy() {
        // A suppresses B; B would have suppressed C, but B is gone, and A-C IoU is low: C kept.
        let a = det(0, 0.9, [0.0, 0.0, 10.0, 10.0]);
        let b = det(0, 0.8, [3.0, 0.0, 13.0, 10.0]); // IoU(a,b) = 70/130 = 0.538
        let c = det(0, 0.7, [6.0, 0.0, 16.0, 10.0]); // IoU(b,c) = 0.538, IoU(a,c) = 40/160 = 0.25
        let kept = nms_per_class(vec![c, b, a], 0.45);
        assert_eq!(kept, vec![a, c]);
    }
}

"""Reference decoders for the detection-head layouts zcpipe reads, in numpy.

Written for zcpipe's tests from each family's published post-processing, not from
zcpipe's Rust (crates/infer/src/heads/):

* YOLOX (one output [1, N, 5+C]): YOLOX ``demo_postprocess`` and
  ``multiclass_nms_class_aware`` (yolox/utils/demo_utils.py): per stride s and cell
  (gx, gy), cx = (tx + gx) * s, cy = (ty + gy) * s, w = exp(tw) * s, h = exp(th) * s;
  every class with obj * cls > threshold is a candidate.
* YOLOX split (3 x [1, 5+C, H, W]): the same head per stride, as rknn_model_zoo's
  examples/yolox exports it (stride = input height / H).
* YOLOv5 / YOLOv7 stock export ([1, 3N, 5+C], boxes decoded in the graph): YOLOv5
  ``non_max_suppression`` with multi_label=False: obj > threshold, then the best class of
  obj * cls, kept when > threshold; xywh -> xyxy.
* YOLOv5 split (3 x [1, 3*(5+C), H, W], sigmoid applied, rknn_model_zoo examples/yolov5):
  YOLOv5 ``Detect``: cx = (2x - 0.5 + gx) * s, cy = (2y - 0.5 + gy) * s, w = (2w')^2 * aw,
  h = (2h')^2 * ah with the stride's anchors; scores as above.
* Ultralytics YOLOv8 / YOLO11 stock export ([1, 4+C, N], xywh decoded in the graph, no
  objectness): ``non_max_suppression`` with multi_label=False: the best class score, kept
  when > threshold.
* YOLOv8 split (rknn_model_zoo examples/yolov8: per stride a [1, 4*16, H, W] DFL box map,
  a [1, C, H, W] score map and an optional [1, 1, H, W] score sum): cells whose sum is under
  the threshold are skipped (as the zoo's post-processing does), then the best class >
  threshold; each side's distance is the expectation of softmax over 16 bins (Ultralytics
  ``DFL``) and x1 = (gx + 0.5 - l) * s, y1 = (gy + 0.5 - t) * s, x2 = (gx + 0.5 + r) * s,
  y2 = (gy + 0.5 + b) * s (``dist2bbox``).

NMS is torchvision's ``batched_nms`` definition (per class, greedy by descending score,
continuous-area IoU, a box is dropped when its IoU with a kept box is > iou_threshold);
equal scores keep the order the candidates were produced in (strides in output order,
anchors, cells row-major, classes ascending).

Boxes are [x1, y1, x2, y2] in model-input pixels.
"""

import numpy as np

STRIDES = (8, 16, 32)

# YOLOv5's default anchors (models/yolov5s.yaml), also rknn_model_zoo's anchors_yolov5.txt:
# per stride 8, 16, 32 three (w, h) in pixels.
ANCHORS = (
    ((10, 13), (16, 30), (33, 23)),
    ((30, 61), (62, 45), (59, 119)),
    ((116, 90), (156, 198), (373, 326)),
)


def _grid(gh, gw):
    """Cell coordinates of a gh x gw grid, row-major: (gx, gy) arrays of gh * gw."""
    gy, gx = np.meshgrid(np.arange(gh, dtype=np.float32), np.arange(gw, dtype=np.float32), indexing="ij")
    return gx.reshape(-1), gy.reshape(-1)


def _cands(cls, score, boxes):
    return [(int(c), float(s), [float(v) for v in b]) for c, s, b in zip(cls, score, boxes)]


def _yolox_rows(rows, gx, gy, s, thr):
    """YOLOX rows [n, 5+C] of one stride: every class with obj * cls > thr."""
    scores = rows[:, 4:5] * rows[:, 5:]
    r, c = np.nonzero(scores > thr)  # row-major: cell, then class
    cx = (rows[r, 0] + gx[r]) * s
    cy = (rows[r, 1] + gy[r]) * s
    w = np.exp(rows[r, 2]) * s
    h = np.exp(rows[r, 3]) * s
    boxes = np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1)
    return _cands(c, scores[r, c], boxes)


def decode_yolox(out, w, h, thr):
    rows = out.reshape(out.shape[1], out.shape[2]).astype(np.float32)
    cands, at = [], 0
    for s in STRIDES:
        gh, gw = h // s, w // s
        gx, gy = _grid(gh, gw)
        cands += _yolox_rows(rows[at:at + gh * gw], gx, gy, np.float32(s), thr)
        at += gh * gw
    return cands


def _maps_rows(m):
    """[1, K, H, W] -> rows [H*W, K]."""
    k, gh, gw = m.shape[1:]
    return m.reshape(k, gh * gw).T.astype(np.float32), gh, gw


def decode_yolox_split(outs, w, h, thr):
    cands = []
    for m in outs:
        rows, gh, gw = _maps_rows(m)
        gx, gy = _grid(gh, gw)
        cands += _yolox_rows(rows, gx, gy, np.float32(h // gh), thr)
    return cands


def _v5_scores(rows, thr):
    """YOLOv5 NMS scoring of rows [n, 5+C]: (rows kept, class, score)."""
    obj = rows[:, 4]
    best = np.argmax(rows[:, 5:], axis=1)
    conf = obj * rows[np.arange(len(rows)), 5 + best]
    keep = np.nonzero((obj > thr) & (conf > thr))[0]
    return keep, best[keep], conf[keep]


def decode_yolov5(out, thr):
    rows = out.reshape(out.shape[1], out.shape[2]).astype(np.float32)
    keep, c, s = _v5_scores(rows, thr)
    b = rows[keep, :4]
    boxes = np.stack([b[:, 0] - b[:, 2] / 2, b[:, 1] - b[:, 3] / 2, b[:, 0] + b[:, 2] / 2, b[:, 1] + b[:, 3] / 2], axis=1)
    return _cands(c, s, boxes)


def decode_yolov5_split(outs, w, h, thr, anchors=ANCHORS):
    strides = sorted(h // m.shape[2] for m in outs)
    cands = []
    for m in outs:
        per = m.shape[1] // 3
        s = h // m.shape[2]
        for a in range(3):
            rows, gh, gw = _maps_rows(m[:, a * per:(a + 1) * per])
            gx, gy = _grid(gh, gw)
            keep, c, sc = _v5_scores(rows, thr)
            aw, ah = anchors[strides.index(s)][a]
            r = rows[keep]
            cx = (r[:, 0] * 2 - 0.5 + gx[keep]) * s
            cy = (r[:, 1] * 2 - 0.5 + gy[keep]) * s
            bw = (r[:, 2] * 2) ** 2 * aw
            bh = (r[:, 3] * 2) ** 2 * ah
            boxes = np.stack([cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2], axis=1)
            cands += _cands(c, sc, boxes)
    return cands


def decode_yolov8(out, thr):
    rows = out.reshape(out.shape[1], out.shape[2]).T.astype(np.float32)
    best = np.argmax(rows[:, 4:], axis=1)
    conf = rows[np.arange(len(rows)), 4 + best]
    keep = np.nonzero(conf > thr)[0]
    b = rows[keep, :4]
    boxes = np.stack([b[:, 0] - b[:, 2] / 2, b[:, 1] - b[:, 3] / 2, b[:, 0] + b[:, 2] / 2, b[:, 1] + b[:, 3] / 2], axis=1)
    return _cands(best[keep], conf[keep], boxes)


def dfl(bins):
    """[n, 4, R] logits -> [n, 4] expected distances (softmax over R, then sum i * p_i)."""
    e = np.exp(bins - bins.max(axis=2, keepdims=True))
    p = e / e.sum(axis=2, keepdims=True)
    return (p * np.arange(bins.shape[2], dtype=np.float32)).sum(axis=2)


def decode_yolov8_split(outs, w, h, thr):
    per = len(outs) // 3
    cands = []
    for g in range(3):
        box, cls = outs[g * per], outs[g * per + 1]
        gh, gw = box.shape[2], box.shape[3]
        s = np.float32(h // gh)
        cells = np.arange(gh * gw)
        if per == 3:
            ssum = outs[g * per + 2].reshape(-1)
            cells = cells[~(ssum < thr)]
        scores = cls.reshape(cls.shape[1], -1).T[cells].astype(np.float32)
        best = np.argmax(scores, axis=1)
        conf = scores[np.arange(len(cells)), best]
        keep = conf > thr
        cells, best, conf = cells[keep], best[keep], conf[keep]
        r = box.shape[1] // 4
        bins = box.reshape(4, r, -1)[:, :, cells].transpose(2, 0, 1).astype(np.float32)
        d = dfl(bins)
        gx = (cells % gw).astype(np.float32) + 0.5
        gy = (cells // gw).astype(np.float32) + 0.5
        boxes = np.stack([(gx - d[:, 0]) * s, (gy - d[:, 1]) * s, (gx + d[:, 2]) * s, (gy + d[:, 3]) * s], axis=1)
        cands += _cands(best, conf, boxes)
    return cands


def iou(a, b):
    iw = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    ih = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = iw * ih
    area = lambda r: max(0.0, r[2] - r[0]) * max(0.0, r[3] - r[1])
    union = area(a) + area(b) - inter
    return inter / union if union > 0 else 0.0


def nms(cands, iou_thr):
    order = np.argsort(-np.array([c[1] for c in cands], dtype=np.float64), kind="stable")
    kept = []
    for i in order:
        c = cands[i]
        if not any(k[0] == c[0] and iou(k[2], c[2]) > iou_thr for k in kept):
            kept.append(c)
    return kept


def decode(layout, outs, w, h, thr, iou_thr, anchors=ANCHORS):
    """Detections (class, score, [x1, y1, x2, y2]) of one frame's outputs, after NMS."""
    outs = [np.asarray(o) for o in outs]
    if layout == "yolox":
        cands = decode_yolox(outs[0], w, h, thr)
    elif layout == "yolox-split":
        cands = decode_yolox_split(outs, w, h, thr)
    elif layout == "yolov5":
        cands = decode_yolov5(outs[0], thr)
    elif layout == "yolov5-split":
        cands = decode_yolov5_split(outs, w, h, thr, anchors)
    elif layout == "yolov8":
        cands = decode_yolov8(outs[0], thr)
    elif layout == "yolov8-split":
        cands = decode_yolov8_split(outs, w, h, thr)
    else:
        raise ValueError(f"unknown layout {layout}")
    return nms(cands, iou_thr)


def load_anchors(path):
    """18 numbers (w h, three anchors per stride, stride 8 first), as anchors_yolov5.txt."""
    v = [float(x) for x in open(path).read().replace(",", " ").split()]
    return tuple(tuple((v[i * 6 + a * 2], v[i * 6 + a * 2 + 1]) for a in range(3)) for i in range(3))


def main():
    import argparse
    import json

    ap = argparse.ArgumentParser(description="Decode a model's outputs (.npy files, in output order) and print the detections as JSON.")
    ap.add_argument("--layout", required=True)
    ap.add_argument("--width", type=int, required=True)
    ap.add_argument("--height", type=int, required=True)
    ap.add_argument("--threshold", type=float, default=0.3)
    ap.add_argument("--nms", type=float, default=0.45)
    ap.add_argument("--anchors", help="anchors file for yolov5-split")
    ap.add_argument("outputs", nargs="+")
    a = ap.parse_args()
    outs = [np.load(p).astype(np.float32) for p in a.outputs]
    anchors = load_anchors(a.anchors) if a.anchors else ANCHORS
    dets = decode(a.layout, outs, a.width, a.height, a.threshold, a.nms, anchors)
    print(json.dumps([{"class_id": c, "score": s, "box": b} for c, s, b in dets]))


if __name__ == "__main__":
    main()

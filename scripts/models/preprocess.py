"""Reference pre-processing for zcpipe's whole-pipeline tests, in numpy: a source image
letterboxed into a model's input the way each family's published code does it, and the
boxes mapped back to source pixels the way it does. Written for the tests from the
families' formulas, not from zcpipe's Rust (crates/core/src/frame.rs, crates/scale/src/).

* Resize: OpenCV ``cv2.resize(..., interpolation=cv2.INTER_LINEAR)``: output pixel x
  samples the source at ``(x + 0.5) * src_w / dst_w - 0.5`` (half-pixel centres), clamped
  to the edge, weighted by the two nearest pixels on each axis; rounded to uint8.
* Top-left (YOLOX ``preproc``, yolox/data/data_augment.py):
  ``r = min(dst_h / h, dst_w / w)``, the image resized to ``(int(w * r), int(h * r))``
  and pasted at the top-left of a ``dst_h x dst_w`` image of 114; BGR, raw 0..255 values.
  Boxes map back as YOLOX's demo does: ``boxes / r``.
* Centred (Ultralytics ``LetterBox``, ultralytics/data/augment.py, ``center=True``,
  ``auto=False`` as for an exported model; YOLOv5 ``letterbox``, utils/augmentations.py):
  ``r = min(dst_h / h, dst_w / w)``, resized to ``(round(w * r), round(h * r))``, the pad
  ``dw = dst_w - new_w`` split as ``round(dw / 2 - 0.1)`` left and ``round(dw / 2 + 0.1)``
  right (the same for rows), filled with 114; RGB (the predictor's ``im[..., ::-1]``),
  values / 255. Boxes map back as ``scale_boxes`` does: ``(box - pad) / r``, then
  ``clip_boxes``.

zcpipe clamps every box to the source frame, so the reference clips both families' boxes.
"""

import numpy as np

PAD = 114


def resize_linear(img, dst_w, dst_h):
    """cv2.INTER_LINEAR resize of an [h, w, 3] uint8 image to [dst_h, dst_w, 3]."""
    h, w = img.shape[:2]

    def taps(n_src, n_dst):
        f = (np.arange(n_dst, dtype=np.float64) + 0.5) * (n_src / n_dst) - 0.5
        f = np.clip(f, 0.0, None)
        i0 = np.floor(f).astype(np.int64)
        a = f - i0
        i0 = np.minimum(i0, n_src - 1)
        i1 = np.minimum(i0 + 1, n_src - 1)
        a = np.where(i0 >= n_src - 1, 0.0, a)
        return i0, i1, a

    y0, y1, ay = taps(h, dst_h)
    x0, x1, ax = taps(w, dst_w)
    src = img.astype(np.float64)
    top = src[y0][:, x0] * (1 - ax)[None, :, None] + src[y0][:, x1] * ax[None, :, None]
    bottom = src[y1][:, x0] * (1 - ax)[None, :, None] + src[y1][:, x1] * ax[None, :, None]
    out = top * (1 - ay)[:, None, None] + bottom * ay[:, None, None]
    return np.clip(np.round(out), 0, 255).astype(np.uint8)


def letterbox(rgb, dst_w, dst_h, placement):
    """``rgb`` ([h, w, 3] uint8, RGB) letterboxed into ``dst_w x dst_h`` at ``placement``
    (``top-left`` or ``center``): (image in RGB, r, (left, top))."""
    h, w = rgb.shape[:2]
    r = min(dst_h / h, dst_w / w)
    if placement == "top-left":
        new_w, new_h = int(w * r), int(h * r)
        left = top = 0
    elif placement == "center":
        new_w, new_h = int(round(w * r)), int(round(h * r))
        dw, dh = (dst_w - new_w) / 2, (dst_h - new_h) / 2
        left, top = int(round(dw - 0.1)), int(round(dh - 0.1))
    else:
        raise ValueError(f"unknown placement {placement}")
    out = np.full((dst_h, dst_w, 3), PAD, np.uint8)
    resized = rgb if (new_w, new_h) == (w, h) else resize_linear(rgb, new_w, new_h)
    out[top:top + new_h, left:left + new_w] = resized
    return out, r, (left, top)


def model_input(rgb, dst_w, dst_h, order, placement, unit):
    """The float32 NCHW [1, 3, dst_h, dst_w] a model is fed: ``rgb`` letterboxed, in
    channel ``order`` (``rgb`` or ``bgr``), / 255 if ``unit``; and (r, (left, top))."""
    img, r, pad = letterbox(rgb, dst_w, dst_h, placement)
    if order == "bgr":
        img = img[..., ::-1]
    elif order != "rgb":
        raise ValueError(f"unknown channel order {order}")
    x = img.transpose(2, 0, 1)[None].astype(np.float32)
    if unit:
        x = x / np.float32(255.0)
    return x, r, pad


def unmap(dets, r, pad, src_w, src_h):
    """Boxes in model-input pixels back to source pixels, clipped to the frame."""
    left, top = pad
    out = []
    for c, s, b in dets:
        x1, y1, x2, y2 = b
        box = [(x1 - left) / r, (y1 - top) / r, (x2 - left) / r, (y2 - top) / r]
        box = [min(max(v, 0.0), float(lim)) for v, lim in zip(box, (src_w, src_h, src_w, src_h))]
        out.append((c, s, box))
    return out

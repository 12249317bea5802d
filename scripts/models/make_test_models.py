#!/usr/bin/env python3
"""Builds small ONNX detection models with exactly the output layouts zcpipe decodes, the
test images they see, their outputs (onnxruntime) in float32, float16 and int8, and the
reference detections of each (reference.py), for zcpipe's head tests (tests/pipeline/heads.rs);
and, for the whole-pipeline tests, source images (PNG) with the reference detections of a
model on each, letterboxed the family's way (preprocess.py) and mapped back to the image.

No trained weights: every model is a few fixed layers whose outputs depend on the input
pixels. Per stride s the input is average- and max-pooled over s x s cells (6 features
per cell, 0..1), and 1x1 convolutions with fixed weights (numpy seed per model) turn them
into the head's raw channels: class c's score is high where a cell has colour c of the
palette below (the test image has squares of those colours on a noisy grey background),
read in the family's channel order (BGR for YOLOX, RGB for the others, so a model fed the
other order sees other colours and finds other classes),
objectness follows the best class, and the box terms vary with the features. The head
layers after that are the families' own (sigmoid; YOLOv5 Detect's grid/anchor decode;
Ultralytics DFL + dist2bbox; rknn_model_zoo's split outputs and score sum). One model has
a dynamic input, as Ultralytics' ``dynamic=True`` exports do (symbolic batch, height and
width; its anchors computed from the feature maps' shapes): it has the weights of its
fixed-size twin and is run at 640x640 and at 320x256.

Some cases also have the forms users export (``exports``): ``half``, the whole model in
float16 (input, weights and outputs, as Ultralytics ``half=True`` exports it; ``to_half``),
and ``qdyn``, the float32 model quantized by onnxruntime's ``quantize_dynamic`` (its
defaults: ``DynamicQuantizeLinear`` on each Conv's input, ``ConvInteger`` with per-tensor
int8 weights), each run by onnxruntime on the test image (float16 for ``half``).

Written to --out: per case its ONNX model (and a float16-output variant for some, and the
export forms above), the test image as the model's input (packed uint8 HWC in the family's
channel order, ``<case>_input_<order>.bin``), each output as .npy in float32, float16 and
int8 (and each export form's onnxruntime output), and ``manifest.json``: per case the
layout, input size, classes, files, each output's shape and int8 ``scale``/``zp``, and the
reference detections of the float32, float16 and int8 outputs (``reference`` sets ``f32``,
``f16``, ``i8``; and ``half``, ``qdyn`` of the export forms' onnxruntime outputs, their
models in ``exports``); then the whole-pipeline cases. Every
model of a fixed size also carries, in its ``metadata_props``, what the RKNN fake
(fakes/librknnrt) needs to stand in for a .rknn converted from it: ``rknn_fake_quant`` (each
output's int8 [scale, zp], the manifest's) and ``rknn_fake_std`` (255 for a model that
takes 0..1).

Deterministic: same versions of numpy/onnx/onnxruntime (scripts/models/requirements.txt),
same files. Usage: make_test_models.py --out build/test-models
"""

import argparse
import json
import os
import struct
import sys
import zlib

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
from onnxruntime.quantization import quantize_dynamic

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import preprocess  # noqa: E402
import reference  # noqa: E402

STRIDES = reference.STRIDES
OPSET = 13
SCORE_THRESHOLD = 0.3
NMS_IOU = 0.45

# Class colours, BGR 0..255: six hues 60 degrees apart, so that no two classes of a cell
# score alike (an argmax that float16 rounding could flip). Classes past these never fire.
PALETTE = [
    (40, 40, 220),   # red
    (40, 200, 40),   # green
    (220, 60, 30),   # blue
    (30, 210, 230),  # yellow
    (200, 40, 200),  # magenta
    (210, 200, 30),  # cyan
]


class Graph:
    """A tiny ONNX graph builder: every op returns its output name."""

    def __init__(self, name):
        self.name = name
        self.nodes, self.inits, self.n = [], [], 0

    def _name(self, base):
        self.n += 1
        return f"{base}_{self.n}"

    def const(self, array, base="c"):
        name = self._name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def op(self, op_type, inputs, base=None, **attrs):
        out = self._name(base or op_type.lower())
        self.nodes.append(helper.make_node(op_type, inputs, [out], **attrs))
        return out

    def slice(self, x, axis, start, end):
        return self.op("Slice", [x, self.const(np.array([start], np.int64)), self.const(np.array([end], np.int64)), self.const(np.array([axis], np.int64))])

    def reshape(self, x, shape):
        return self.op("Reshape", [x, self.const(np.array(shape, np.int64))])

    def conv1x1(self, x, weight, bias):
        return self.op("Conv", [x, self.const(weight.astype(np.float32)[:, :, None, None]), self.const(bias.astype(np.float32))])

    def model(self, inputs, outputs, metadata=None):
        graph = helper.make_graph(self.nodes, self.name, inputs, outputs, self.inits)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="zcpipe make_test_models.py")
        m.ir_version = 8
        add_metadata(m, metadata or {})
        onnx.checker.check_model(m)
        return m


def add_metadata(model, metadata):
    """Appends ``metadata`` (str -> str) to the model's ``metadata_props``."""
    for k, v in metadata.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = k, v


def unit_input(layout):
    """Whether a family's ONNX models take their input / 255 (0..1): YOLOv5 and Ultralytics;
    YOLOX takes raw 0..255."""
    return not layout.startswith("yolox")


def rknn_fake_metadata(layout, quant):
    """What the RKNN fake (fakes/librknnrt) reads from the sidecar ONNX, standing in for what
    rknn-toolkit2 builds into a .rknn: ``rknn_fake_quant``, the int8 [scale, zp] of each
    output (as ``quantise`` calibrated them, so the fake's int8 outputs are the manifest's),
    and ``rknn_fake_std`` = 255 for a model that takes 0..1 (the toolkit's std_values; the
    fake divides the uint8 input by it), absent for YOLOX's raw input."""
    meta = {"rknn_fake_quant": json.dumps([[scale, zp] for _, zp, scale in quant])}
    if unit_input(layout):
        meta["rknn_fake_std"] = "255"
    return meta


def channel_order(layout):
    """The channel order a family's models take: BGR for YOLOX (OpenCV images as they
    are), RGB for YOLOv5 and Ultralytics."""
    return "bgr" if layout.startswith("yolox") else "rgb"


def placement(layout):
    """Where a family's letterbox puts the picture: top-left for YOLOX, centred for the
    others."""
    return "top-left" if layout.startswith("yolox") else "center"


def class_weights(classes, rng, order):
    """[classes, 6] weights and [classes] biases on (avg, max) of the input's three
    channels in ``order``: class c fires on palette colour c; classes past the palette
    never fire."""
    w = np.zeros((classes, 6), np.float32)
    b = np.full(classes, -2.5, np.float32)
    for c in range(classes):
        if c < len(PALETTE):
            # Logit 2.5 on the pure colour (score 0.92), -2.5 on grey: scores stay off the
            # sigmoid's flat top, so neighbouring cells differ by more than rounding.
            col = np.array(PALETTE[c], np.float32) / 255.0
            if order == "rgb":
                col = col[::-1]
            d = col - col.mean()
            w[c, :3] = 5.0 * d / float(d @ d)
            w[c, 3:] = rng.normal(0, 0.3, 3)
        else:
            w[c] = rng.normal(0, 1.0, 6)
            b[c] = -9.0
    return w, b


def box_weights(rows, rng, bias):
    """[rows, 6] small random weights on the centred features, and the biases."""
    w = rng.normal(0, 0.3, (rows, 6)).astype(np.float32)
    return w, np.asarray(bias, np.float32) - w.sum(axis=1) * 0.5


def features(g, x, s):
    """[1, 6, H/s, W/s]: mean and max of each channel over each s x s cell."""
    avg = g.op("AveragePool", [x], kernel_shape=[s, s], strides=[s, s])
    mx = g.op("MaxPool", [x], kernel_shape=[s, s], strides=[s, s])
    return g.op("Concat", [avg, mx], axis=1)


def cls_and_obj(g, f, classes, rng, order, obj=True, shift=0.0):
    wc, bc = class_weights(classes, rng, order)
    logits = g.conv1x1(f, wc, bc + shift)
    cls = g.op("Sigmoid", [logits])
    if not obj:
        return cls, None
    best = g.op("ReduceMax", [logits], axes=[1], keepdims=1)
    o = g.op("Add", [g.op("Mul", [best, g.const(np.float32(0.8))]), g.const(np.float32(1.0))])
    return cls, g.op("Sigmoid", [o])


def grid_const(g, gh, gw, offset=0.0):
    gy, gx = np.meshgrid(np.arange(gh, dtype=np.float32), np.arange(gw, dtype=np.float32), indexing="ij")
    return g.const(np.stack([gx.reshape(-1), gy.reshape(-1)])[None] + np.float32(offset))


def head_yolox(g, x, w, h, classes, rng, split):
    outs = []
    for s in STRIDES:
        f = features(g, x, s)
        wb, bb = box_weights(4, rng, [0.5, 0.5, np.log(6.0), np.log(6.0)])
        box = g.conv1x1(f, wb, bb)
        cls, obj = cls_and_obj(g, f, classes, rng, "bgr")
        m = g.op("Concat", [box, obj, cls], axis=1)
        if split:
            outs.append(m)
        else:
            outs.append(g.op("Transpose", [g.reshape(m, [1, 5 + classes, -1])], perm=[0, 2, 1]))
    return outs if split else [g.op("Concat", outs, axis=1)]


def head_yolov5(g, x, w, h, classes, rng, split, anchors):
    outs = []
    for li, s in enumerate(STRIDES):
        f = features(g, x, s)
        gh, gw = h // s, w // s
        per_anchor = []
        for a in range(3):
            wb, bb = box_weights(4, rng, [0.0, 0.0, 0.0, 0.0])
            box = g.op("Sigmoid", [g.conv1x1(f, wb, bb)])
            cls, obj = cls_and_obj(g, f, classes, rng, "rgb", shift=-1.0 - 0.5 * a)
            sig = g.op("Concat", [box, obj, cls], axis=1)  # [1, 5+C, gh, gw]
            if split:
                per_anchor.append(sig)
                continue
            # YOLOv5 Detect: xy = (2 sig - 0.5 + grid) * s, wh = (2 sig)^2 * anchor.
            flat = g.reshape(sig, [1, 5 + classes, gh * gw])
            two = g.const(np.float32(2.0))
            xy = g.op("Mul", [g.op("Add", [g.op("Sub", [g.op("Mul", [g.slice(flat, 1, 0, 2), two]), g.const(np.float32(0.5))]), grid_const(g, gh, gw)]), g.const(np.float32(s))])
            wh2 = g.op("Mul", [g.slice(flat, 1, 2, 4), two])
            wh = g.op("Mul", [g.op("Mul", [wh2, wh2]), g.const(np.array(anchors[li][a], np.float32).reshape(1, 2, 1))])
            dec = g.op("Concat", [xy, wh, g.slice(flat, 1, 4, 5 + classes)], axis=1)
            per_anchor.append(g.op("Transpose", [dec], perm=[0, 2, 1]))
        outs.append(g.op("Concat", per_anchor, axis=1))
    return outs if split else [g.op("Concat", outs, axis=1)]


def grid_of(g, f, offset):
    """[1, 2, gh * gw] cell coordinates (x, y) + ``offset`` of feature map ``f`` [1, C, gh,
    gw], row-major, computed from its shape in the graph (Shape, Range, Expand), as an
    Ultralytics ``dynamic=True`` export makes its anchors: the model takes any input size."""
    shape = g.op("Shape", [f])
    hw = g.slice(shape, 0, 2, 4)

    def cells(axis, row_shape):
        """0..side-1 + offset along ``axis`` of ``f``, reshaped to ``row_shape`` and
        expanded over the grid, then flattened to [1, 1, gh * gw]."""
        side = g.op("Gather", [shape, g.const(np.array(axis, np.int64))], axis=0)
        idx = g.op("Range", [g.const(np.array(0, np.int64)), side, g.const(np.array(1, np.int64))])
        c = g.op("Add", [g.op("Cast", [idx], to=TensorProto.FLOAT), g.const(np.float32(offset))])
        return g.reshape(g.op("Expand", [g.reshape(c, row_shape), hw]), [1, 1, -1])

    return g.op("Concat", [cells(3, [1, -1]), cells(2, [-1, 1])], axis=1)


def head_yolov8(g, x, w, h, classes, rng, split, score_sum, bins=16, dynamic=False):
    outs = []
    for s in STRIDES:
        f = features(g, x, s)
        gh, gw = h // s, w // s
        # A dynamic graph knows no grid size: -1 in its reshapes, its anchors from the shape.
        n = -1 if dynamic else gh * gw
        idx = np.arange(bins, dtype=np.float32)
        bias = np.tile(-((idx - 3.0) ** 2) / 2.0, 4)
        wb = rng.normal(0, 0.5, (4 * bins, 6)).astype(np.float32)
        box = g.conv1x1(f, wb, bias - wb.sum(axis=1) * 0.5)
        cls, _ = cls_and_obj(g, f, classes, rng, "rgb", obj=False)
        if split:
            outs += [box, cls]
            if score_sum:
                ssum = g.op("ReduceSum", [cls, g.const(np.array([1], np.int64))], keepdims=1)
                outs.append(g.op("Clip", [ssum, g.const(np.float32(0.0)), g.const(np.float32(1.0))]))
            continue
        # Ultralytics DFL: softmax over the bins, expectation; dist2bbox to xywh, * stride.
        p = g.op("Softmax", [g.reshape(box, [1, 4, bins, n])], axis=2)
        d = g.op("ReduceSum", [g.op("Mul", [p, g.const(idx.reshape(1, 1, bins, 1))]), g.const(np.array([2], np.int64))], keepdims=0)
        anchor = grid_of(g, f, 0.5) if dynamic else grid_const(g, gh, gw, 0.5)
        x1y1 = g.op("Sub", [anchor, g.slice(d, 1, 0, 2)])
        x2y2 = g.op("Add", [anchor, g.slice(d, 1, 2, 4)])
        cxcy = g.op("Mul", [g.op("Add", [x1y1, x2y2]), g.const(np.float32(0.5))])
        wh = g.op("Sub", [x2y2, x1y1])
        xywh = g.op("Mul", [g.op("Concat", [cxcy, wh], axis=1), g.const(np.float32(s))])
        outs.append(g.op("Concat", [xywh, g.reshape(cls, [1, classes, n])], axis=1))
    return outs if split else [g.op("Concat", outs, axis=2)]


def out_shapes(case):
    """The output shapes of a case's layout."""
    w, h, c, layout = case["width"], case["height"], case["classes"], case["layout"]
    grids = [(h // s, w // s) for s in STRIDES]
    n = sum(gh * gw for gh, gw in grids)
    if layout == "yolox":
        return [[1, n, 5 + c]]
    if layout == "yolox-split":
        return [[1, 5 + c, gh, gw] for gh, gw in grids]
    if layout == "yolov5":
        return [[1, 3 * n, 5 + c]]
    if layout == "yolov5-split":
        return [[1, 3 * (5 + c), gh, gw] for gh, gw in grids]
    if layout == "yolov8":
        return [[1, 4 + c, n]]
    per = [[64, c, 1] if case.get("score_sum") else [64, c] for _ in grids]
    return [[1, k, gh, gw] for (gh, gw), ks in zip(grids, per) for k in ks]


def model_name(case):
    """A case's model file, without ``.onnx``: its own name, or the dynamic model several
    cases share."""
    return case.get("model", case["name"])


def build(case, rng, f16):
    g = Graph(model_name(case))
    w, h, classes, layout = case["width"], case["height"], case["classes"], case["layout"]
    x = "images"
    # Features are 0..1: YOLOX takes raw 0..255 input, the others 0..1.
    x01 = x if unit_input(layout) else g.op("Mul", [x, g.const(np.float32(1 / 255))])
    if layout in ("yolox", "yolox-split"):
        outs = head_yolox(g, x01, w, h, classes, rng, layout == "yolox-split")
    elif layout in ("yolov5", "yolov5-split"):
        outs = head_yolov5(g, x01, w, h, classes, rng, layout == "yolov5-split", case.get("anchors", reference.ANCHORS))
    else:
        outs = head_yolov8(g, x01, w, h, classes, rng, layout == "yolov8-split", case.get("score_sum", False), dynamic=case.get("dynamic", False))
    elem = TensorProto.FLOAT16 if f16 else TensorProto.FLOAT
    names = [f"output{i}" for i in range(len(outs))]
    for o, n in zip(outs, names):
        g.nodes.append(helper.make_node("Cast" if f16 else "Identity", [o], [n], **({"to": TensorProto.FLOAT16} if f16 else {})))
    if case.get("dynamic"):
        # As Ultralytics names the dynamic axes (exporter.py: dynamic=True).
        assert layout == "yolov8", "only the flat YOLOv8 export has a dynamic variant"
        inputs = [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["batch", 3, "height", "width"])]
        shapes = [["batch", 4 + classes, "anchors"]]
    else:
        inputs = [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, 3, h, w])]
        shapes = out_shapes(case)
    outputs = [helper.make_tensor_value_info(n, elem, shape) for n, shape in zip(names, shapes)]
    meta = {}
    if case.get("names"):
        meta["names"] = "{" + ", ".join(f"{i}: {n!r}" for i, n in enumerate(case["names"])) + "}"
        meta["stride"], meta["task"] = "32", "detect"
    return g.model(inputs, outputs, meta)


def to_half(model):
    """The float32 ``model`` wholly in float16, as an Ultralytics ``half=True`` export is
    (``model.half()`` before ``torch.onnx.export``): float16 input, initializers, Cast
    targets and outputs; the nodes unchanged."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    for t in g.initializer:
        if t.data_type == TensorProto.FLOAT:
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float16), t.name))
    for v in list(g.input) + list(g.output):
        if v.type.tensor_type.elem_type == TensorProto.FLOAT:
            v.type.tensor_type.elem_type = TensorProto.FLOAT16
    for n in g.node:
        for a in n.attribute:
            if n.op_type == "Cast" and a.name == "to" and a.i == TensorProto.FLOAT:
                a.i = TensorProto.FLOAT16
    onnx.checker.check_model(m)
    return m


def exports(case, f32_path, x, out):
    """The export forms of ``case`` (``half``, ``qdyn``: the module doc) its flags ask for,
    made from its float32 model at ``f32_path``: per form its file name and onnxruntime's
    outputs on the model input ``x`` (float32 NCHW; float16 for ``half``)."""
    made = {}
    base = model_name(case)
    if case.get("half"):
        model = to_half(onnx.load(f32_path))
        path = f"{base}_half.onnx"
        onnx.save(model, os.path.join(out, path))
        sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        made["half"] = (path, sess.run(None, {"images": x.astype(np.float16)}))
    if case.get("qdyn"):
        path = f"{base}_qdyn.onnx"
        quantize_dynamic(f32_path, os.path.join(out, path))
        sess = ort.InferenceSession(os.path.join(out, path), providers=["CPUExecutionProvider"])
        made["qdyn"] = (path, sess.run(None, {"images": x}))
    return made


def test_image(w, h, rng):
    """Packed BGR, w x h: noisy grey, coloured squares, a 114 pad band at the bottom (a
    top-left letterbox), much as zcpipe's scalers would hand it to the model."""
    img = np.clip(118 + rng.integers(-20, 21, (h, w, 3)), 0, 255).astype(np.int16)
    # One square per colour, each in its own cell of a 3 x 2 layout (no overlaps).
    cw, ch = w // 3, int(h * 0.85) // 2
    for c, colour in enumerate(PALETTE):
        size = int(min(cw, ch) * (0.3 + 0.6 * (c % 4) / 3))
        x0 = (c % 3) * cw + int(rng.integers(0, cw - size + 1))
        y0 = (c // 3) * ch + int(rng.integers(0, ch - size + 1))
        noise = rng.integers(-14, 15, (size, size, 3))
        img[y0:y0 + size, x0:x0 + size] = np.clip(np.array(colour) + noise, 0, 255)
    img[int(h * 0.9):, :] = 114
    return img.astype(np.uint8)


def pipeline_image(w, h, rng):
    """A source frame for the whole-pipeline tests, RGB, w x h (multiples of 4): flat grey
    100, and one flat square of each palette colour in its own cell of a 3 x 2 grid, every
    edge on a multiple of 4 pixels, so that NV12's 2 x 2 chroma and a resize by 1/2 keep
    edges on whole pixels and the colours come through the capture's YCbCr round trip.
    The squares are small (12-30 % of a cell's side), so that a frame's detections stay
    under the 100 a detections record holds."""
    img = np.full((h, w, 3), 100, np.uint8)
    cw, ch = w // 3, h // 2
    for c, colour in enumerate(PALETTE):
        size = 4 * (int(min(cw, ch) * (0.12 + 0.18 * (c % 4) / 3)) // 4)
        x0 = (c % 3) * cw + 4 * (int(rng.integers(0, cw - size + 1)) // 4)
        y0 = (c // 3) * ch + 4 * (int(rng.integers(0, ch - size + 1)) // 4)
        img[y0:y0 + size, x0:x0 + size] = colour[::-1]
    return img


def write_png(path, rgb):
    """An 8-bit RGB PNG (PNG specification: signature, IHDR, one zlib IDAT of rows each
    with filter type 0, IEND)."""
    h, w, _ = rgb.shape

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    rows = b"".join(b"\x00" + rgb[y].tobytes() for y in range(h))
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(rows, 9)) + chunk(b"IEND", b""))


def quantise(a):
    """Per-tensor asymmetric int8 of `a` over its own range, as RKNN's toolkit calibrates:
    scale = (max - min) / 255, zero point so that min maps to -128."""
    lo, hi = float(min(a.min(), 0.0)), float(max(a.max(), 0.0))
    scale = np.float32((hi - lo) / 255.0 if hi > lo else 1.0)
    zp = int(np.clip(round(-128 - lo / float(scale)), -128, 127))
    q = np.clip(np.round(a / scale) + zp, -128, 127).astype(np.int8)
    return q, zp, float(scale)


def dequantise(q, zp, scale):
    return (q.astype(np.float32) - np.float32(zp)) * np.float32(scale)


def det_json(dets):
    return [{"class_id": c, "score": s, "box": b} for c, s, b in dets]


CASES = [
    dict(name="yolox_416_c80", layout="yolox", width=416, height=416, classes=80, f16=True, qdyn=True),
    dict(name="yolox_split_416_c80", layout="yolox-split", width=416, height=416, classes=80),
    dict(name="yolox_split_640x384_c3", layout="yolox-split", width=640, height=384, classes=3),
    dict(name="yolov5_640x384_c3", layout="yolov5", width=640, height=384, classes=3),
    dict(name="yolov5_320_c80", layout="yolov5", width=320, height=320, classes=80),
    dict(name="yolov5_split_640_c80", layout="yolov5-split", width=640, height=640, classes=80),
    dict(name="yolov5_split_416_c7_anchors", layout="yolov5-split", width=416, height=416, classes=7,
         anchors=(((8, 10), (14, 26), (30, 20)), ((28, 56), (60, 40), (52, 110)), ((100, 80), (150, 190), (300, 280)))),
    dict(name="yolov8_640_c80", layout="yolov8", width=640, height=640, classes=80, f16=True, coco_names=True,
         half=True, qdyn=True),
    dict(name="yolov8_640x384_c7_names", layout="yolov8", width=640, height=384, classes=7,
         names=["red", "green", "blue", "yellow", "magenta", "cyan", "driver's seat"]),
    dict(name="yolov8_split9_640_c80", layout="yolov8-split", width=640, height=640, classes=80, score_sum=True),
    dict(name="yolov8_split6_640x384_c5", layout="yolov8-split", width=640, height=384, classes=5),
    dict(name="yolov8_split9_320_c2", layout="yolov8-split", width=320, height=320, classes=2, score_sum=True),
    # An Ultralytics dynamic=True export (input [batch,3,height,width], output
    # [batch,4+C,anchors]) with the weights of its fixed twin (the twin's seed), run at the
    # default 640x640 (no --input-size) and at --input-size 320x256.
    dict(name="yolov8_dynamic_640_c80", layout="yolov8", width=640, height=640, classes=80, coco_names=True,
         dynamic=True, model="yolov8_dynamic_c80", twin="yolov8_640_c80"),
    dict(name="yolov8_dynamic_320x256_c80", layout="yolov8", width=320, height=256, classes=80, coco_names=True,
         dynamic=True, model="yolov8_dynamic_c80", twin="yolov8_640_c80", input_size=True),
]

# Whole-pipeline cases: a model case, the source image's size (the models' inputs times 2
# on one side, so the resize is by 1/2; another aspect, so there is a letterbox), the seed
# of its squares, and the channel order and placement zcpipe is told to use (None: the
# family's own). The last one is the yolov8 image fed the other way, so the tests can show
# that the family's reference does not match it.
PIPELINES = [
    dict(name="pipe_yolox_416", case="yolox_416_c80", size=(832, 624), seed=3000),
    dict(name="pipe_yolox_416_rgb_center", case="yolox_416_c80", size=(624, 832), seed=3001, order="rgb", placement="center"),
    dict(name="pipe_yolov5_320", case="yolov5_320_c80", size=(640, 480), seed=3002),
    dict(name="pipe_yolov8_640", case="yolov8_640_c80", size=(1280, 720), seed=3003),
    dict(name="pipe_yolov8_640x384", case="yolov8_640x384_c7_names", size=(768, 768), seed=3004),
    dict(name="pipe_yolov8_640_bgr_top_left", case="yolov8_640_c80", size=(1280, 720), seed=3003, order="bgr", placement="top-left"),
    dict(name="pipe_yolov8_dynamic_320x256", case="yolov8_dynamic_320x256_c80", size=(640, 400), seed=3005),
]


def pipeline_entry(p, case, model_path, out):
    """A whole-pipeline case: its source PNG and the reference detections of ``case``'s
    model on it (preprocess.py, onnxruntime, reference.py), in source pixels."""
    w, h = p["size"]
    rgb = pipeline_image(w, h, np.random.default_rng(p["seed"]))
    png = f"{p['name']}.png"
    write_png(os.path.join(out, png), rgb)
    layout = case["layout"]
    order = p.get("order") or channel_order(layout)
    place = p.get("placement") or placement(layout)
    x, r, pad = preprocess.model_input(rgb, case["width"], case["height"], order, place, unit=unit_input(layout))
    sess = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])
    outs = sess.run(None, {"images": x})
    dets = reference.decode(layout, outs, case["width"], case["height"], SCORE_THRESHOLD, NMS_IOU, case.get("anchors", reference.ANCHORS))
    dets = preprocess.unmap(dets, r, pad, w, h)
    return {"name": p["name"], "case": case["name"], "image": png, "width": w, "height": h,
            "channel_order": p.get("order"), "placement": p.get("placement"),
            "reference_order": order, "reference_placement": place, "reference": det_json(dets)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="output folder (e.g. build/test-models)")
    ap.add_argument("--coco", default=os.path.join(os.path.dirname(__file__), "..", "..", "models", "coco80.txt"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    coco = [l.strip() for l in open(args.coco) if l.strip()]
    manifest = {"score_threshold": SCORE_THRESHOLD, "nms_iou": NMS_IOU, "versions": {
        "numpy": np.__version__, "onnx": onnx.__version__, "onnxruntime": ort.__version__}, "cases": []}
    for i, case in enumerate(CASES):
        case = dict(case)
        if case.pop("coco_names", False):
            case["names"] = coco
        # A dynamic model has its twin's weights: the twin's seed.
        seed = 1000 + next((j for j, c in enumerate(CASES) if c["name"] == case.get("twin")), i)
        name, w, h = case["name"], case["width"], case["height"]
        entry = {k: case[k] for k in ("name", "layout", "width", "height", "classes")}
        entry["names"] = case.get("names")
        # dynamic: the fixed model of the same weights; input_size: what zcpipe is told
        # (--input-size; null: the default, 640x640).
        entry["dynamic"] = case.get("dynamic", False)
        entry["twin"] = case.get("twin")
        entry["input_size"] = [w, h] if case.get("input_size") else None
        if "anchors" in case:
            path = f"{name}_anchors.txt"
            with open(os.path.join(args.out, path), "w") as f:
                f.write("".join(f"{v}.0\n" for lvl in case["anchors"] for a in lvl for v in a))
            entry["anchors"] = path
        img = test_image(w, h, np.random.default_rng(2000 + i))
        order = channel_order(case["layout"])
        if order == "rgb":
            img = img[..., ::-1]
        entry["channel_order"] = order
        entry["input"] = f"{name}_input_{order}.bin"
        img.tofile(os.path.join(args.out, entry["input"]))
        # What zcpipe's onnx backend feeds: NCHW in the family's order (the scaler writes
        # it so), raw for YOLOX, /255 for the others.
        x = img.transpose(2, 0, 1)[None].astype(np.float32)
        if unit_input(case["layout"]):
            x = x / np.float32(255.0)
        anchors = case.get("anchors", reference.ANCHORS)
        variants = {}
        for f16 in (False, True) if case.get("f16") else (False,):
            model = build(case, np.random.default_rng(seed), f16)
            sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
            variants["f16" if f16 else "f32"] = (f"{model_name(case)}{'_f16' if f16 else ''}.onnx", model, sess.run(None, {"images": x}))
        entry["model"] = variants["f32"][0]
        entry["model_f16"] = variants["f16"][0] if "f16" in variants else None
        outs32 = variants["f32"][2]
        sets = {"f32": [o.astype(np.float32) for o in outs32],
                "f16": variants["f16"][2] if "f16" in variants else [o.astype(np.float16) for o in outs32]}
        quant = [quantise(o) for o in outs32]
        # Each fixed-size model carries what the RKNN fake needs to stand in for its .rknn (a
        # .rknn has a fixed input; the dynamic model, shared by cases of other sizes and
        # calibrations, has none of it).
        for path, model, _ in variants.values():
            if not case.get("dynamic"):
                add_metadata(model, rknn_fake_metadata(case["layout"], quant))
            onnx.save(model, os.path.join(args.out, path))
        made = exports(case, os.path.join(args.out, entry["model"]), x, args.out)
        entry["exports"] = {form: path for form, (path, _) in made.items()}
        entry["outputs"] = []
        for k, o in enumerate(outs32):
            base = f"{name}_out{k}"
            np.save(os.path.join(args.out, base + "_f32.npy"), sets["f32"][k])
            np.save(os.path.join(args.out, base + "_f16.npy"), sets["f16"][k])
            np.save(os.path.join(args.out, base + "_i8.npy"), quant[k][0])
            entry["outputs"].append({"name": f"output{k}", "shape": list(o.shape), "f32": base + "_f32.npy",
                                     "f16": base + "_f16.npy", "i8": base + "_i8.npy", "zp": quant[k][1], "scale": quant[k][2]})
            for form, (_, outs) in made.items():
                np.save(os.path.join(args.out, f"{base}_{form}.npy"), outs[k])
                entry["outputs"][k][form] = f"{base}_{form}.npy"
        decoded = {
            "f32": sets["f32"],
            "f16": [o.astype(np.float32) for o in sets["f16"]],
            "i8": [dequantise(*q) for q in quant],
        }
        decoded.update({form: [o.astype(np.float32) for o in outs] for form, (_, outs) in made.items()})
        entry["reference"] = {k: det_json(reference.decode(case["layout"], v, w, h, SCORE_THRESHOLD, NMS_IOU, anchors))
                              for k, v in decoded.items()}
        manifest["cases"].append(entry)
        print(f"{name}: {case['layout']} {w}x{h}, {case['classes']} classes, outputs "
              f"{', '.join(str(list(o.shape)) for o in outs32)}; reference detections "
              f"f32 {len(entry['reference']['f32'])}, f16 {len(entry['reference']['f16'])}, int8 {len(entry['reference']['i8'])}"
              + "".join(f", {form} {len(entry['reference'][form])}" for form in made))
    manifest["pipelines"] = []
    for p in PIPELINES:
        case = next(c for c in CASES if c["name"] == p["case"])
        entry = pipeline_entry(p, case, os.path.join(args.out, f"{model_name(case)}.onnx"), args.out)
        manifest["pipelines"].append(entry)
        print(f"{p['name']}: {case['name']} on a {p['size'][0]}x{p['size'][1]} image, {entry['reference_order']} "
              f"{entry['reference_placement']}: {len(entry['reference'])} reference detections")
    with open(os.path.join(args.out, "manifest.json"), "w") as f:
        json.dump(manifest, f, indent=1)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Rebuild a YOLOX-Nano .rknn model from yolox_nano.onnx and check it against the goldens.

This is zcpipe's own conversion script for the recipe recorded in section 6 of the shared
test-data PROVENANCE.md (summarised in models/PROVENANCE.md): rknn-toolkit2 2.5.0, w8a8
with hybrid quantization. Run it with the Python of the environment that
scripts/rknn/setup.sh creates (build/rknn-venv); `make rknn-models` does both per platform.

Steps:
  1. Calibration set: every image in --images is letterboxed as YOLOX does it (BGR,
     cv2.INTER_LINEAR, top-left paste on a 416x416 canvas of 114) and saved as uint8 NCHW
     [1,3,416,416] .npy; --work/dataset.txt lists them.
  2. rknn.config(...) + load_onnx + hybrid_quantization_step1(proposal=True).
  3. The .quantization.cfg that step1 wrote is edited: the Focus stem tensors, every
     depthwise conv with its SiLU and the 1x1 conv that consumes it become float16
     (found from the ONNX graph); the entries that step1's proposal added are kept.
  4. hybrid_quantization_step2 builds the model in memory.
  5. Success test on the toolkit's simulator (init_runtime() without a target): every
     golden *_input_u8_nhwc_bgr_416.bin is run, the raw output is compared with
     *_sim_output.npy (cosine, max abs diff) and the decoded detections with
     *_sim_detections.json (same classes, |d score| <= 0.001, box corners within 0.5 px).
     Any mismatch exits with status 1 before anything is exported.
  6. export_rknn(--out).

The exported bytes differ from run to run (header bytes), so the simulator output is the
reproducibility test, not the sha256.
"""

import argparse
import glob
import hashlib
import json
import os
import shutil
import sys
import time

import numpy as np

INPUT_SIZE = 416
PAD_VALUE = 114
STRIDES = (8, 16, 32)
SCORE_THR = 0.3
NMS_IOU = 0.45
# Golden tolerances: the goldens store scores rounded to 4 decimals and boxes to 0.1 px.
SCORE_TOL = 0.001
BOX_TOL_PX = 0.5
PLATFORMS = ("rk3588", "rk3566", "rk3568", "rk3576")

# Focus stem tensors, named as rknn-toolkit2 2.5.0 names them in the .quantization.cfg
# (shared PROVENANCE.md section 6). The toolkit rewrites the Focus slices into convs, hence the
# "_conv" names that do not exist in the ONNX graph.
STEM_TENSORS = ("652_conv", "662_conv", "672_conv", "682_conv",
                "652_conv_add", "652_conv_add_add", "1177", "687")
# Shared PROVENANCE.md section 6: "148 of 271 tensors are float16" in the shipped models.
EXPECTED_FP16 = 148
EXPECTED_TOTAL = 271


class Failure(Exception):
    """A step failed; the message says which and why."""


def log(msg):
    print(f"convert: {msg}", flush=True)


# ---------------------------------------------------------------------------------------
# Preprocessing and decoding (shared PROVENANCE.md section 1, models/PROVENANCE.md)

def letterbox_bgr(img):
    """YOLOX preproc: resize by r = min(416/h, 416/w) with INTER_LINEAR, paste top-left on a
    416x416 canvas of 114. Returns (uint8 HWC BGR canvas, r)."""
    import cv2
    h, w = img.shape[:2]
    r = min(INPUT_SIZE / h, INPUT_SIZE / w)
    resized = cv2.resize(img, (int(w * r), int(h * r)), interpolation=cv2.INTER_LINEAR)
    canvas = np.full((INPUT_SIZE, INPUT_SIZE, 3), PAD_VALUE, dtype=np.uint8)
    canvas[:resized.shape[0], :resized.shape[1]] = resized
    return canvas, r


def nms_yolox(boxes, scores, iou_thr):
    """Greedy NMS as in YOLOX demo_utils.nms (pixel-inclusive areas, "+1")."""
    x1, y1, x2, y2 = boxes[:, 0], boxes[:, 1], boxes[:, 2], boxes[:, 3]
    areas = (x2 - x1 + 1) * (y2 - y1 + 1)
    order = scores.argsort()[::-1]
    keep = []
    while order.size > 0:
        i = order[0]
        keep.append(i)
        xx1 = np.maximum(x1[i], x1[order[1:]])
        yy1 = np.maximum(y1[i], y1[order[1:]])
        xx2 = np.minimum(x2[i], x2[order[1:]])
        yy2 = np.minimum(y2[i], y2[order[1:]])
        w = np.maximum(0.0, xx2 - xx1 + 1)
        h = np.maximum(0.0, yy2 - yy1 + 1)
        inter = w * h
        iou = inter / (areas[i] + areas[order[1:]] - inter)
        order = order[np.where(iou <= iou_thr)[0] + 1]
    return keep


def decode_yolox(raw, ratio):
    """raw: float [1,3549,85] or [3549,85]. Returns detections (class_id, score, box) with
    boxes x1,y1,x2,y2 in original-image pixels (unclamped), best score first per class."""
    out = np.asarray(raw, dtype=np.float32).reshape(-1, 85)
    grids, strides = [], []
    for s in STRIDES:
        n = INPUT_SIZE // s
        gy, gx = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
        grids.append(np.stack((gx, gy), axis=-1).reshape(-1, 2))  # row-major, x fastest
        strides.append(np.full((n * n, 1), s))
    grids = np.concatenate(grids).astype(np.float32)
    strides = np.concatenate(strides).astype(np.float32)
    if out.shape[0] != grids.shape[0]:
        raise Failure(f"output has {out.shape[0]} rows, expected {grids.shape[0]} (3549)")
    cxcy = (out[:, :2] + grids) * strides
    wh = np.exp(out[:, 2:4]) * strides
    boxes = np.concatenate((cxcy - wh / 2, cxcy + wh / 2), axis=1) / ratio
    scores = out[:, 4:5] * out[:, 5:]
    dets = []
    for c in range(scores.shape[1]):
        mask = scores[:, c] > SCORE_THR
        if not mask.any():
            continue
        cb, cs = boxes[mask], scores[mask, c]
        for i in nms_yolox(cb, cs, NMS_IOU):
            dets.append((c, float(cs[i]), [float(v) for v in cb[i]]))
    dets.sort(key=lambda d: -d[1])
    return dets


def compare_detections(got, golden):
    """Returns a list of problems (empty = match). golden: the json's "detections"."""
    problems = []
    remaining = list(got)
    for g in golden:
        same = [d for d in remaining if d[0] == g["class_id"]]
        if not same:
            problems.append(f"missing {g['class']} {g['score']:.4f} {g['box_xyxy']}")
            continue
        best = min(same, key=lambda d: max(abs(a - b) for a, b in zip(d[2], g["box_xyxy"])))
        remaining.remove(best)
        dscore = abs(best[1] - g["score"])
        dbox = max(abs(a - b) for a, b in zip(best[2], g["box_xyxy"]))
        if dscore > SCORE_TOL or dbox > BOX_TOL_PX:
            problems.append(
                f"{g['class']}: score {best[1]:.4f} vs golden {g['score']:.4f} "
                f"(|d|={dscore:.4f}, tol {SCORE_TOL}), box "
                f"[{', '.join(f'{v:.1f}' for v in best[2])}] vs {g['box_xyxy']} "
                f"(max |d|={dbox:.2f} px, tol {BOX_TOL_PX})")
    for d in remaining:
        problems.append(f"extra detection: class {d[0]} score {d[1]:.4f} box "
                        f"[{', '.join(f'{v:.1f}' for v in d[2])}]")
    return problems


# ---------------------------------------------------------------------------------------
# Calibration set

CALIBRATION_IMAGES = ("astronaut.png", "chelsea.png", "coffee.png", "dog.jpg", "person.jpg",
                      "rocket.jpg")


def build_calibration(images_dir, work, golden_dir):
    import cv2
    # Exactly the six photos of the recipe (PROVENANCE section 6), not whatever else the
    # folder holds: another image would change the calibration and the goldens would fail.
    paths = [os.path.join(images_dir, n) for n in CALIBRATION_IMAGES]
    missing = [p for p in paths if not os.path.isfile(p)]
    if missing:
        raise Failure(f"calibration images missing: {', '.join(missing)} (the recipe uses "
                      f"{', '.join(CALIBRATION_IMAGES)})")
    calib = os.path.join(work, "calib")
    os.makedirs(calib, exist_ok=True)
    lines = []
    for p in paths:
        img = cv2.imread(p, cv2.IMREAD_COLOR)  # BGR, as YOLOX expects
        if img is None:
            raise Failure(f"cv2 cannot read calibration image {p}")
        canvas, _ = letterbox_bgr(img)
        name = os.path.splitext(os.path.basename(p))[0]
        # Cross-check against the golden input buffer of the same image, if there is one:
        # the calibration must see exactly the pixels the goldens were made from.
        gj = os.path.join(golden_dir, f"{name}_sim_detections.json")
        if os.path.exists(gj):
            want = json.load(open(gj)).get("input_sha256")
            have = hashlib.sha256(canvas.tobytes()).hexdigest()
            if want and want != have:
                raise Failure(
                    f"letterbox of {p} (sha256 {have}) differs from the golden input "
                    f"({want}); check the opencv version (PROVENANCE: 4.11.0.86)")
            if want:
                log(f"calibration: letterbox of {os.path.basename(p)} is byte-identical to "
                    "the golden input")
        npy = os.path.join(calib, f"{name}.npy")
        # Toolkit 2.5 wants .npy calibration data in the ONNX layout: uint8 NCHW.
        np.save(npy, canvas.transpose(2, 0, 1)[None].copy())
        lines.append(os.path.abspath(npy))
    dataset = os.path.join(work, "dataset.txt")
    with open(dataset, "w") as f:
        f.write("\n".join(lines) + "\n")
    log(f"calibration: {len(lines)} images -> {dataset}")
    return dataset


# ---------------------------------------------------------------------------------------
# Hybrid quantization config

def onnx_fp16_tensors(onnx_path):
    """ONNX tensor names of every depthwise conv (group == input channels > 1), its SiLU
    (Sigmoid + Mul) and the 1x1 conv that consumes the SiLU output."""
    import onnx
    model = onnx.load(onnx_path)
    g = model.graph
    inits = {t.name: t for t in g.initializer}
    consumers = {}
    for n in g.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)

    def attr(node, name, default):
        for a in node.attribute:
            if a.name == name:
                return onnx.helper.get_attribute_value(a)
        return default

    chains = []
    for n in g.node:
        if n.op_type != "Conv" or n.input[1] not in inits:
            continue
        group = attr(n, "group", 1)
        w_dims = list(inits[n.input[1]].dims)  # [C_out, C_in/group, kh, kw]
        c_in = w_dims[1] * group
        if not (group > 1 and group == c_in):
            continue
        dw_out = n.output[0]
        chain = {"dw": dw_out, "sigmoid": None, "silu": None, "pw": None}
        for c in consumers.get(dw_out, []):
            if c.op_type == "Sigmoid":
                chain["sigmoid"] = c.output[0]
        for c in consumers.get(dw_out, []):
            if c.op_type == "Mul" and chain["sigmoid"] in c.input:
                chain["silu"] = c.output[0]
        if chain["silu"] is None:
            raise Failure(f"depthwise conv {n.name} ({dw_out}) is not followed by a SiLU "
                          "(Sigmoid+Mul); the ONNX graph is not the expected YOLOX-Nano")
        for c in consumers.get(chain["silu"], []):
            if c.op_type == "Conv" and c.input[1] in inits:
                dims = list(inits[c.input[1]].dims)
                if dims[2:] == [1, 1] and attr(c, "group", 1) == 1:
                    chain["pw"] = c.output[0]
        if chain["pw"] is None:
            raise Failure(f"no 1x1 conv consumes the SiLU output {chain['silu']} of "
                          f"depthwise conv {n.name}")
        chains.append(chain)
    if not chains:
        raise Failure(f"no depthwise convs found in {onnx_path}")
    return chains


def edit_quant_cfg(cfg_path, chains):
    """Adds float16 entries to custom_quantize_layers, keeping what step1 proposed.
    Returns (n_float16, n_total, names_added)."""
    from ruamel.yaml import YAML
    yaml = YAML()
    yaml.preserve_quotes = True
    yaml.width = 4096
    yaml.indent(mapping=4, sequence=4, offset=0)  # the toolkit's own layout
    with open(cfg_path) as f:
        cfg = yaml.load(f)
    qparams = cfg.get("quantize_parameters") or {}
    known = set(qparams.keys())
    custom = cfg.get("custom_quantize_layers")
    if custom is None:
        custom = {}
    proposed = dict(custom)
    log(f"step1 proposal: {len(proposed)} tensors as {sorted(set(map(str, proposed.values())))}")

    # ONNX names -> cfg names (learned from the cfg that toolkit 2.5.0 writes): conv outputs
    # keep their ONNX tensor names; Sigmoid+Mul becomes one SiLU op whose tensor is named
    # after the Mul output, so the Sigmoid output has no entry of its own.
    missing_stem = [t for t in STEM_TENSORS if t not in known]
    if missing_stem:
        raise Failure(f"{cfg_path} has no entries for the stem tensors {missing_stem}; this "
                      "toolkit names tensors differently than rknn-toolkit2 2.5.0 did")
    wanted = list(STEM_TENSORS)
    for ch in chains:
        for key in ("dw", "silu", "pw"):
            if ch[key] not in known:
                raise Failure(f"{key} tensor {ch[key]!r} of depthwise chain {ch} has no entry "
                              f"in {cfg_path}; this toolkit names tensors differently than "
                              "rknn-toolkit2 2.5.0 did")
            wanted.append(ch[key])
    added = []
    for name in wanted:
        if name not in custom:
            custom[name] = "float16"
            added.append(name)
    cfg["custom_quantize_layers"] = custom
    shutil.copyfile(cfg_path, cfg_path + ".step1")
    with open(cfg_path, "w") as f:
        yaml.dump(cfg, f)
    n16 = sum(1 for v in custom.values() if str(v) == "float16")
    return n16, len(known), added


# ---------------------------------------------------------------------------------------

def check_rknn(ret, what):
    if ret != 0:
        raise Failure(f"rknn-toolkit2 {what} failed (return code {ret}); see the log above")


def run(args):
    t0 = time.time()
    args.onnx = os.path.abspath(args.onnx)
    args.images = os.path.abspath(args.images)
    args.golden = os.path.abspath(args.golden)
    args.out = os.path.abspath(args.out)
    work = os.path.abspath(args.work)
    for p, what in ((args.onnx, "--onnx"), (args.images, "--images"), (args.golden, "--golden")):
        if not os.path.exists(p):
            raise Failure(f"{what} {p} does not exist")
    goldens = sorted(glob.glob(os.path.join(args.golden, "*_input_u8_nhwc_bgr_416.bin")))
    if not goldens:
        raise Failure(f"no *_input_u8_nhwc_bgr_416.bin goldens in {args.golden}")
    # Start from an empty work folder (stale step1 files would be picked up), but only ever
    # delete a folder that this script created.
    marker = os.path.join(work, ".zcpipe-rknn-work")
    if os.path.isdir(work) and os.listdir(work):
        if not os.path.exists(marker):
            raise Failure(f"--work {work} is not empty and was not made by this script; "
                          "give an empty or new folder")
        shutil.rmtree(work)
    os.makedirs(work, exist_ok=True)
    open(marker, "w").close()
    os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)

    try:
        from rknn.api import RKNN
    except ImportError as e:
        raise Failure(f"cannot import rknn-toolkit2 ({e}); run scripts/rknn/setup.sh and use "
                      "build/rknn-venv/bin/python")

    dataset = build_calibration(args.images, work, args.golden)
    chains = onnx_fp16_tensors(args.onnx)
    log(f"ONNX: {len(chains)} depthwise conv chains (dw conv + SiLU + 1x1 conv)")

    # step1 writes <model>.model/.data/.quantization.cfg into the current directory.
    os.chdir(work)
    rknn = RKNN(verbose=args.verbose)
    try:
        check_rknn(rknn.config(mean_values=[[0, 0, 0]], std_values=[[1, 1, 1]],
                               target_platform=args.platform, quantized_dtype="w8a8",
                               quantized_algorithm="normal", quantized_method="channel",
                               optimization_level=3), "config")
        check_rknn(rknn.load_onnx(model=args.onnx), "load_onnx")
        log("hybrid_quantization_step1 (proposal=True)")
        t1 = time.time()
        check_rknn(rknn.hybrid_quantization_step1(dataset=dataset, proposal=True),
                   "hybrid_quantization_step1")
        log(f"step1 took {time.time() - t1:.0f} s")
    finally:
        rknn.release()

    stem = os.path.splitext(os.path.basename(args.onnx))[0]
    cfg = os.path.join(work, f"{stem}.quantization.cfg")
    model_file = os.path.join(work, f"{stem}.model")
    data_file = os.path.join(work, f"{stem}.data")
    for p in (cfg, model_file, data_file):
        if not os.path.exists(p):
            raise Failure(f"step1 did not write {p} (files in {work}: {os.listdir(work)})")
    n16, total, added = edit_quant_cfg(cfg, chains)
    log(f"quantization cfg: {n16} of {total} tensors float16 ({len(added)} added to the "
        f"proposal; PROVENANCE: {EXPECTED_FP16} of {EXPECTED_TOTAL})")

    rknn = RKNN(verbose=args.verbose)
    try:
        check_rknn(rknn.config(mean_values=[[0, 0, 0]], std_values=[[1, 1, 1]],
                               target_platform=args.platform, quantized_dtype="w8a8",
                               quantized_algorithm="normal", quantized_method="channel",
                               optimization_level=3), "config (step2)")
        log("hybrid_quantization_step2")
        t2 = time.time()
        check_rknn(rknn.hybrid_quantization_step2(model_input=model_file, data_input=data_file,
                                                  model_quantization_cfg=cfg),
                   "hybrid_quantization_step2")
        log(f"step2 took {time.time() - t2:.0f} s")

        log("simulator: init_runtime() without target")
        check_rknn(rknn.init_runtime(), "init_runtime (simulator)")
        results, failures = [], []
        for binp in goldens:
            name = os.path.basename(binp)[: -len("_input_u8_nhwc_bgr_416.bin")]
            buf = np.fromfile(binp, dtype=np.uint8)
            if buf.size != INPUT_SIZE * INPUT_SIZE * 3:
                raise Failure(f"{binp}: {buf.size} bytes, expected {INPUT_SIZE * INPUT_SIZE * 3}")
            outs = rknn.inference(inputs=[buf.reshape(1, INPUT_SIZE, INPUT_SIZE, 3)],
                                  data_format=["nhwc"])
            if not outs:
                raise Failure(f"simulator inference on {binp} returned nothing")
            got = np.asarray(outs[0], dtype=np.float32).reshape(1, -1, 85)
            want = np.load(os.path.join(args.golden, f"{name}_sim_output.npy")).astype(np.float32)
            a, b = got.ravel().astype(np.float64), want.ravel().astype(np.float64)
            cos = float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))
            maxabs = float(np.max(np.abs(a - b)))
            identical = bool(np.array_equal(got.reshape(want.shape), want))
            gj = json.load(open(os.path.join(args.golden, f"{name}_sim_detections.json")))
            dets = decode_yolox(got, gj["letterbox_ratio"])
            problems = compare_detections(dets, gj["detections"])
            results.append((name, cos, maxabs, identical, dets, problems))
            log(f"{name}: raw vs golden cos {cos:.6f}, max abs diff {maxabs:.3g}"
                f"{' (bit-identical)' if identical else ''}; "
                f"{len(dets)} detections, golden {len(gj['detections'])}: "
                f"{'MATCH' if not problems else 'MISMATCH'}")
            for c, s, box in dets:
                log(f"    class {c} score {s:.4f} box [{', '.join(f'{v:.1f}' for v in box)}]")
            for p in problems:
                failures.append(f"{name}: {p}")
        if failures:
            raise Failure("the rebuilt model does not reproduce the golden detections:\n  "
                          + "\n  ".join(failures) + "\nnothing was exported")

        check_rknn(rknn.export_rknn(args.out), "export_rknn")
    finally:
        rknn.release()

    digest = hashlib.sha256(open(args.out, "rb").read()).hexdigest()
    print()
    print(f"summary ({args.platform}):")
    print(f"  model          {args.out}")
    print(f"  bytes          {os.path.getsize(args.out)}")
    print(f"  sha256         {digest} (differs from build to build)")
    print(f"  float16        {n16} of {total} tensors (PROVENANCE: {EXPECTED_FP16} of {EXPECTED_TOTAL})")
    for name, cos, maxabs, identical, dets, _ in results:
        print(f"  golden {name:<9} cos {cos:.6f}  max|d| {maxabs:.3g}"
              f"{'  bit-identical' if identical else ''}  detections match")
    print(f"  wall time      {time.time() - t0:.0f} s")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--onnx", required=True, help="yolox_nano.onnx (PROVENANCE.md section 1)")
    ap.add_argument("--platform", required=True, choices=PLATFORMS)
    ap.add_argument("--images", required=True, help="calibration images (jpg/png)")
    ap.add_argument("--golden", required=True,
                    help="folder with *_input_u8_nhwc_bgr_416.bin, *_sim_output.npy, "
                         "*_sim_detections.json")
    ap.add_argument("--out", required=True, help="the .rknn file to write")
    ap.add_argument("--work", required=True, help="scratch folder (emptied first)")
    ap.add_argument("--verbose", action="store_true", help="rknn-toolkit2 verbose log")
    args = ap.parse_args()
    try:
        run(args)
    except Failure as e:
        print(f"convert: FAILED: {e}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()

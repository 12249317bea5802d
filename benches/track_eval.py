#!/usr/bin/env python3
# Tracker evaluation of zcpipe (issue 13): MOTA, IDF1, ID switches (motmetrics) and HOTA
# (TrackEval's metric class) of `zcpipe eval track --tracker T` on four clips, scored against
# the hand-made ground truth in tests/data/track/ (see its README.md for how it was made).
# Written for zcpipe; needs the packages of scripts/track/requirements.txt (benches/track_eval.sh
# makes build/track-venv and the clips, then runs this). Not part of CI (`make track-eval`).
#
# Per clip: one `zcpipe run --tracker none --json` over the clip, cached as
# build/track-eval/<clip>.none.jsonl and checked (seq 0..N-1, every frame once, N = the
# clip's ffprobe frame count); then per tracker `zcpipe eval track` on those detections writes
# build/track-eval/<clip>.<tracker>.txt (MOTChallenge results, frame = seq + 1), which is
# scored on the annotated frames only (<clip>.frames.txt: frames without any object count,
# a box there is a false positive; boxes on other frames are dropped). Matching: IoU >= 0.5.
# The table goes to stdout and build/track-eval/table.md, every number to results.json.
#
# Line crossings: a clip with tests/data/track/<clip>.crossings.json (hand-made, see the README
# there) also gets its line (`eval track --line NAME=x1,y1,...`) and `--crossings
# build/track-eval/<clip>.<tracker>.crossings.jsonl`, when this build's `eval track` has
# --crossings. Predicted crossings are matched one-to-one to the true ones of the same
# direction within CROSS_WINDOW_S (round(fps * CROSS_WINDOW_S) frames), greedily by the
# smallest frame difference; the table gains their precision and recall and the counting
# error per direction (predicted count minus true count).
#
#   track_eval.py [--zcpipe PATH] [--clips a,b] [--trackers a,b] [--rerun]
#   track_eval.py --hyp CLIP=FILE [--hyp ...]   score existing results files only
#   track_eval.py --selftest                     check the scorer on hypotheses made from the GT
import argparse
import contextlib
import hashlib
import io
import json
import os
import random
import subprocess
import sys

import numpy as np

with contextlib.redirect_stdout(io.StringIO()):  # trackeval prints a note about its BURST loader
    import motmetrics as mm
    from trackeval.metrics import HOTA

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
GT_DIR = os.path.join(ROOT, "tests", "data", "track")
OUT_DIR = os.path.join(ROOT, "build", "track-eval")
CLIP_DIR = os.path.join(OUT_DIR, "clips")
TRACKERS = ["iou", "sort", "bytetrack"]

# The label set handed to `eval track --labels` per clip. Person clips: person. Cars clip:
# YOLOX-Nano seen from straight above calls the cars mostly "cell phone", then "bus", "car",
# "suitcase", "truck"; every one of those detections falls on a car, while "kite" fires on the
# empty road. The set is the labels the detector gives these cars, chosen by looking at the
# cached detections against the ground truth (counts: tests/data/track/README.md, "Cars: the
# label set"). `--cars-labels car,truck,bus` scores the COCO vehicle labels only.
# The detector's --score-threshold for the recorded runs (part of the cache's key).
SCORE_THRESHOLD = 0.1

LABELS = {
    "person": "person",
    "two-people": "person",
    "misses": "person",
    "cars": "car,truck,bus,cell phone,suitcase",
}
CLIPS = ["person", "cars", "two-people", "misses"]

# A predicted line crossing matches a true one of the same direction at most this far away,
# seconds (round(fps * CROSS_WINDOW_S) frames: 10 at 10 fps, 12 at 12.5 fps, which is 1.0 s
# exactly for whole frames).
CROSS_WINDOW_S = 1.0
DIRECTIONS = ("in", "out")


# ---------------------------------------------------------------------------------------
# files


def read_mot(path, frames=None):
    """MOTChallenge lines -> {frame: [(id, (x, y, w, h), score)]}; with `frames`, only those."""
    out = {}
    with open(path) as f:
        for ln, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            p = line.split(",")
            if len(p) < 6:
                raise SystemExit("%s:%d: not a MOTChallenge line: %r" % (path, ln, line))
            fr, tid = int(float(p[0])), int(float(p[1]))
            box = tuple(float(v) for v in p[2:6])
            score = float(p[6]) if len(p) > 6 else 1.0
            if frames is None or fr in frames:
                out.setdefault(fr, []).append((tid, box, score))
    return out


def read_frames(path):
    with open(path) as f:
        return sorted({int(l) for l in (l.strip() for l in f) if l and not l.startswith("#")})


def load_gt(clip):
    frames = read_frames(os.path.join(GT_DIR, clip + ".frames.txt"))
    gt = read_mot(os.path.join(GT_DIR, clip + ".gt.txt"))
    stray = sorted(set(gt) - set(frames))
    if stray:
        raise SystemExit("%s.gt.txt has boxes on frames missing from %s.frames.txt: %s" % (clip, clip, stray[:5]))
    return frames, gt


def load_crossings(clip):
    """tests/data/track/<clip>.crossings.json (None when the clip has none), checked."""
    path = os.path.join(GT_DIR, clip + ".crossings.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        t = json.load(f)
    pts = t["line"]["points"]
    if len(pts) < 2 or any(len(p) != 2 for p in pts):
        raise SystemExit("%s: the line needs two or more [x, y] points" % path)
    frames = [c["frame"] for c in t["crossings"]]
    if frames != sorted(frames) or any(c["direction"] not in DIRECTIONS for c in t["crossings"]):
        raise SystemExit("%s: crossings must be sorted by frame, direction in or out" % path)
    return t


def line_flag(truth):
    """`eval track --line` of a crossings.json: NAME=x1,y1,x2,y2[,...][,point=...]."""
    spec = "%s=%s" % (truth["line"]["name"], ",".join("%g" % v for p in truth["line"]["points"] for v in p))
    if truth.get("point", "bottom") != "bottom":
        spec += ",point=" + truth["point"]
    return spec


def read_crossings(path, line):
    """`eval track --crossings` JSON lines -> [(frame, direction)] of the line named `line`."""
    out = []
    with open(path) as f:
        for ln, text in enumerate(f, 1):
            text = text.strip()
            if not text:
                continue
            o = json.loads(text)
            if "direction" not in o:
                continue
            if o["direction"] not in DIRECTIONS:
                raise SystemExit("%s:%d: direction %r is neither in nor out" % (path, ln, o["direction"]))
            if o.get("line") == line:
                out.append((int(o["frame"]), o["direction"]))
    return out


# ---------------------------------------------------------------------------------------
# scoring


def iou_xywh(a, b):
    """IoU matrix of boxes a (n,4) and b (m,4), both x, y, w, h."""
    a = np.asarray(a, dtype=float).reshape(-1, 4)
    b = np.asarray(b, dtype=float).reshape(-1, 4)
    ax2, ay2 = a[:, 0] + a[:, 2], a[:, 1] + a[:, 3]
    bx2, by2 = b[:, 0] + b[:, 2], b[:, 1] + b[:, 3]
    iw = np.clip(np.minimum(ax2[:, None], bx2[None]) - np.maximum(a[:, 0][:, None], b[:, 0][None]), 0, None)
    ih = np.clip(np.minimum(ay2[:, None], by2[None]) - np.maximum(a[:, 1][:, None], b[:, 1][None]), 0, None)
    inter = iw * ih
    union = (a[:, 2] * a[:, 3])[:, None] + (b[:, 2] * b[:, 3])[None] - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1), 0.0)


def hota(frames, gt, hyp):
    gt_map, hyp_map = {}, {}
    data = {"gt_ids": [], "tracker_ids": [], "similarity_scores": [], "num_gt_dets": 0, "num_tracker_dets": 0}
    for f in frames:
        g, h = gt.get(f, []), hyp.get(f, [])
        data["gt_ids"].append(np.array([gt_map.setdefault(i, len(gt_map)) for i, _, _ in g], dtype=int))
        data["tracker_ids"].append(np.array([hyp_map.setdefault(i, len(hyp_map)) for i, _, _ in h], dtype=int))
        data["similarity_scores"].append(iou_xywh([b for _, b, _ in g], [b for _, b, _ in h]))
        data["num_gt_dets"] += len(g)
        data["num_tracker_dets"] += len(h)
    data["num_timesteps"] = len(frames)
    data["num_gt_ids"], data["num_tracker_ids"] = len(gt_map), len(hyp_map)
    with contextlib.redirect_stdout(io.StringIO()):
        res = HOTA().eval_sequence(data)
    return {"HOTA": float(np.mean(res["HOTA"])), "DetA": float(np.mean(res["DetA"])), "AssA": float(np.mean(res["AssA"]))}


def score(frames, gt, hyp):
    """Scores hyp against gt on `frames` (hyp boxes on other frames must already be gone)."""
    acc = mm.MOTAccumulator(auto_id=False)
    for f in frames:
        g, h = gt.get(f, []), hyp.get(f, [])
        d = mm.distances.iou_matrix([b for _, b, _ in g], [b for _, b, _ in h], max_iou=0.5)
        acc.update([i for i, _, _ in g], [i for i, _, _ in h], d, frameid=f)
    names = ["mota", "motp", "idf1", "num_switches", "num_false_positives", "num_misses", "num_objects",
             "num_unique_objects", "precision", "recall", "mostly_tracked", "num_fragmentations"]
    summ = mm.metrics.create().compute(acc, metrics=names, name="x")
    r = {k: summ[k].iloc[0] for k in names}
    r = {k: (float(v) if isinstance(v, (float, np.floating)) else int(v)) for k, v in r.items()}
    r["hyp_ids"] = len({i for f in frames for i, _, _ in hyp.get(f, [])})
    r["hyp_boxes"] = sum(len(hyp.get(f, [])) for f in frames)
    r["frames"] = len(frames)
    r.update(hota(frames, gt, hyp))
    return r


def match_crossings(truth, pred, fps, window_s=CROSS_WINDOW_S):
    """Scores predicted crossings `pred` against `truth`, both [(frame, direction)]: pairs of
    the same direction at most round(fps * window_s) frames apart, matched one-to-one greedily
    by the smallest frame difference (ties: earlier true, then earlier predicted crossing)."""
    window = int(round(fps * window_s))
    pairs = sorted((abs(pf - tf), tf, pf, i, j) for i, (tf, td) in enumerate(truth)
                   for j, (pf, pd) in enumerate(pred) if pd == td and abs(pf - tf) <= window)
    used_t, used_p, diffs = set(), set(), []
    for d, _, _, i, j in pairs:
        if i not in used_t and j not in used_p:
            used_t.add(i)
            used_p.add(j)
            diffs.append(d)
    tp = len(diffs)
    r = {"window_frames": window, "true": len(truth), "predicted": len(pred), "matched": tp,
         "false_positives": len(pred) - tp, "misses": len(truth) - tp,
         "precision": tp / len(pred) if pred else float("nan"),
         "recall": tp / len(truth) if truth else float("nan"),
         "mean_frame_error": float(np.mean(diffs)) if diffs else float("nan")}
    for dr in DIRECTIONS:
        r["true_" + dr] = sum(1 for _, d in truth if d == dr)
        r["predicted_" + dr] = sum(1 for _, d in pred if d == dr)
        r["count_error_" + dr] = r["predicted_" + dr] - r["true_" + dr]
    return r


def fmt(x, pct=False):
    if isinstance(x, float):
        if x != x:
            return "n/a"
        return "%.3f" % x
    return str(x)


def signed(n):
    return "%+d" % n if n else "0"


HEADER = ["clip", "tracker", "MOTA", "IDF1", "ID switches", "HOTA", "GT ids", "hyp ids", "FP", "FN", "GT boxes", "frames",
          "crossings P", "crossings R", "count err in", "count err out"]


def cross_cells(c):
    """The crossing columns of a match_crossings result (`-` for a clip without truth)."""
    if c is None:
        return ["-", "-", "-", "-"]
    return [fmt(c["precision"]), fmt(c["recall"]), signed(c["count_error_in"]), signed(c["count_error_out"])]


def row(clip, name, r):
    return [clip, name, fmt(r["mota"]), fmt(r["idf1"]), str(r["num_switches"]), fmt(r["HOTA"]),
            str(r["num_unique_objects"]), str(r["hyp_ids"]), str(r["num_false_positives"]), str(r["num_misses"]),
            str(r["num_objects"]), str(r["frames"])] + cross_cells(r.get("crossings"))


def table(rows, header=HEADER):
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------
# zcpipe


def help_text(zcpipe, *sub):
    p = subprocess.run([zcpipe, *sub, "--help"], capture_output=True, text=True)
    return p.stdout + p.stderr if p.returncode == 0 else None


def count_frames(path):
    out = subprocess.run(["ffprobe", "-v", "error", "-count_frames", "-select_streams", "v:0", "-show_entries",
                          "stream=nb_read_frames,width,height", "-of", "json", path],
                         check=True, capture_output=True, text=True).stdout
    s = json.loads(out)["streams"][0]
    return int(s["nb_read_frames"]), int(s["width"]), int(s["height"])


def frame_rate(path):
    out = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries", "stream=r_frame_rate",
                          "-of", "csv=p=0", path], check=True, capture_output=True, text=True).stdout.strip()
    num, _, den = out.partition("/")
    return float(num) / float(den or 1)


def check_jsonl(path, n, w, h):
    """The cached detections: one frame line per source frame, seq 0..n-1 in order."""
    seqs, dets, other = [], 0, []
    with open(path) as f:
        for ln, line in enumerate(f, 1):
            o = json.loads(line)
            t = o.get("type", "end" if o.get("end") is True else "frame")
            if t == "frame":
                if (o["width"], o["height"]) != (w, h):
                    return "line %d: frame %dx%d, the clip is %dx%d" % (ln, o["width"], o["height"], w, h)
                seqs.append(o["seq"])
                dets += len(o["detections"])
            elif t != "end":
                other.append(t)
    if other:
        return "has %s lines (a stage restarted: frames may be lost)" % ",".join(sorted(set(other)))
    if seqs != list(range(n)):
        missing = sorted(set(range(n)) - set(seqs))
        return "seq is not 0..%d once each (%d frame lines, first %s, missing %s)" % (
            n - 1, len(seqs), seqs[:1], missing[:10])
    return None


def detections(zcpipe, clip, rerun):
    """build/track-eval/<clip>.none.jsonl, made once."""
    video = os.path.join(CLIP_DIR, clip + ".mp4")
    out = os.path.join(OUT_DIR, clip + ".none.jsonl")
    n, w, h = count_frames(video)
    with open(video, "rb") as f:
        clip_sum = "%s score>=%s" % (hashlib.sha256(f.read()).hexdigest(), SCORE_THRESHOLD)
    stamp = out + ".clip-sha256"  # the cache is of this clip's bytes (not of the zcpipe build: --rerun)
    if os.path.exists(out) and not rerun:
        why = check_jsonl(out, n, w, h)
        same_clip = os.path.exists(stamp) and open(stamp).read().strip() == clip_sum
        if why is None and same_clip:
            return out
        print("track_eval: %s: %s; running it again" % (out, why or "made from another version of the clip"), file=sys.stderr)
    # Unpaced (--fps max) with the block policy: nothing is dropped, only faster. Detections
    # down to 0.1, as ByteTrack's paper feeds its second association; every tracker takes
    # only those of --track-high (0.5) or more for its first association and new tracks.
    cmd = [zcpipe, "run", "--source", "video:" + os.path.relpath(video, ROOT), "--ring-policy", "block",
           "--json", "--stats-interval", "0", "--instance", "trackeval%d" % os.getpid(),
           "--tracker", "none", "--fps", "max", "--score-threshold", str(SCORE_THRESHOLD)]
    print("track_eval: %s > %s" % (" ".join(cmd), os.path.relpath(out, ROOT)), file=sys.stderr)
    with open(out + ".tmp", "w") as f:
        p = subprocess.run(cmd, stdout=f, cwd=ROOT)
    if p.returncode != 0:
        raise SystemExit("track_eval: zcpipe run failed (exit %d) on %s" % (p.returncode, clip))
    why = check_jsonl(out + ".tmp", n, w, h)
    if why:
        raise SystemExit("track_eval: %s.tmp: %s" % (out, why))
    os.replace(out + ".tmp", out)
    with open(stamp, "w") as f:
        f.write(clip_sum + "\n")
    return out


def label_counts(jsonl):
    c = {}
    with open(jsonl) as f:
        for line in f:
            o = json.loads(line)
            for d in o.get("detections", []):
                c[d["label"]] = c.get(d["label"], 0) + 1
    return dict(sorted(c.items(), key=lambda kv: -kv[1]))


def track(zcpipe, clip, jsonl, tracker, eval_help, truth=None):
    """Runs `eval track`: (its MOTChallenge file, its crossings file or None)."""
    out = os.path.join(OUT_DIR, "%s.%s.txt" % (clip, tracker))
    cmd = [zcpipe, "eval", "track", "--detections", os.path.relpath(jsonl, ROOT), "--tracker", tracker,
           "--labels", LABELS[clip], "--mot", os.path.relpath(out, ROOT) + ".tmp"]
    # The detections were made unpaced (--fps max): their capture times are closer together
    # than the scene's, so the tracker's clock (keep-alive) runs on seq / rate.
    cmd += ["--fps", "%g" % frame_rate(os.path.join(CLIP_DIR, clip + ".mp4"))]
    # The clip's hand-made line, when it has one and this build counts crossings.
    cross = None
    if truth is not None and "--crossings" in eval_help:
        cross = os.path.join(OUT_DIR, "%s.%s.crossings.jsonl" % (clip, tracker))
        cmd += ["--line", line_flag(truth), "--crossings", os.path.relpath(cross, ROOT) + ".tmp"]
        if os.path.exists(cross + ".tmp"):
            os.remove(cross + ".tmp")
    print("track_eval: " + " ".join(cmd), file=sys.stderr)
    p = subprocess.run(cmd, cwd=ROOT)
    if p.returncode != 0:
        raise SystemExit("track_eval: zcpipe eval track failed (exit %d) on %s/%s" % (p.returncode, clip, tracker))
    os.replace(out + ".tmp", out)
    if cross is not None:
        if not os.path.exists(cross + ".tmp"):  # no crossing at all may leave no file
            print("track_eval: %s/%s: eval track wrote no %s: no crossings" % (clip, tracker, cross + ".tmp"),
                  file=sys.stderr)
            open(cross + ".tmp", "w").close()
        os.replace(cross + ".tmp", cross)
    return out, cross


def score_file(clip, path):
    frames, gt = load_gt(clip)
    fs = set(frames)
    hyp = read_mot(path, fs)
    return score(frames, gt, hyp)


def score_crossings(truth, path):
    """An `eval track --crossings` file against a crossings.json."""
    true = [(c["frame"], c["direction"]) for c in truth["crossings"]]
    return match_crossings(true, read_crossings(path, truth["line"]["name"]), truth["fps"])


def side(seg, p):
    """(P2 - P1) x (p - P1) for the segment seg = (P1, P2), as zcpipe's geom::cross: > 0 when p is
    on its right-hand side walking from P1 to P2 on screen (image y grows downward), < 0 left."""
    (ax, ay), (bx, by) = seg
    return (bx - ax) * (p[1] - ay) - (by - ay) * (p[0] - ax)


def crossing_dirs(points, a, b):
    """The directions in which the straight move a -> b crosses the polyline `points`, one per
    segment crossed: `in` from the segment's left-hand side to its right-hand side (side < 0 to
    side > 0), `out` the other way."""
    out = []
    for seg in zip(points, points[1:]):
        da, db = side(seg, a), side(seg, b)
        ea, eb = side((a, b), seg[0]), side((a, b), seg[1])
        if da * db < 0 and ea * eb < 0:
            out.append("in" if da < 0 else "out")
    return out


# ---------------------------------------------------------------------------------------
# self-test: hypotheses made from the GT, with the metrics they must give


def selftest():
    rows, ok = [], True

    def expect(name, r, **want):
        nonlocal ok
        for k, v in want.items():
            got = r[k]
            good = abs(got - v) < 1e-9 if isinstance(v, float) else got == v
            if isinstance(v, float) and v != v:
                good = got != got  # nan: no predictions, or no truth
            if not good:
                ok = False
                print("selftest FAIL %s: %s = %r, expected %r" % (name, k, got, v), file=sys.stderr)

    for clip in CLIPS:
        frames, gt = load_gt(clip)
        n_boxes = sum(len(v) for v in gt.values())
        # 1. the GT itself
        r = score(frames, gt, gt)
        expect(clip + "/gt", r, mota=1.0, idf1=1.0, num_switches=0, num_false_positives=0, num_misses=0)
        rows.append(row(clip, "selftest: GT itself", r))
        # 2. every edge moved by up to 4 px: still all matched (IoU >= 0.5)
        rnd = random.Random(13)
        jit = {f: [(i, (x + rnd.uniform(-4, 4), y + rnd.uniform(-4, 4), w + rnd.uniform(-4, 4), h + rnd.uniform(-4, 4)), s)
                   for i, (x, y, w, h), s in v] for f, v in gt.items()}
        r = score(frames, gt, jit)
        expect(clip + "/jitter", r, mota=1.0, num_switches=0)
        rows.append(row(clip, "selftest: GT, edges +-4 px", r))
        # 3. the first GT id gets a new id from the middle of its track on: one switch
        first = min(i for v in gt.values() for i, _, _ in v)
        fr = sorted(f for f, v in gt.items() if any(i == first for i, _, _ in v))
        mid = fr[len(fr) // 2]
        sw = {f: [((i + 1000 if (i == first and f >= mid) else i), b, s) for i, b, s in v] for f, v in gt.items()}
        r = score(frames, gt, sw)
        expect(clip + "/switch", r, num_switches=1, mota=1.0 - 1.0 / n_boxes, num_false_positives=0, num_misses=0)
        rows.append(row(clip, "selftest: one id switch", r))
        # 4. a box on every annotated frame without an object: all false positives
        empty = [f for f in frames if f not in gt]
        fp = {f: list(v) for f, v in gt.items()}
        for f in empty:
            fp[f] = [(999, (10.0, 10.0, 50.0, 100.0), 1.0)]
        r = score(frames, gt, fp)
        expect(clip + "/fp", r, num_false_positives=len(empty), mota=1.0 - len(empty) / n_boxes)
        rows.append(row(clip, "selftest: + a box on each empty frame", r))
        # 5. nothing
        r = score(frames, gt, {})
        expect(clip + "/none", r, num_misses=n_boxes, mota=0.0, num_false_positives=0)
        rows.append(row(clip, "selftest: no output", r))
    print(table(rows))

    # Line crossings: the matching on synthetic cases (at 10 fps the window is 10 frames).
    nan = float("nan")
    cases = [
        ("exact match", [(100, "in")], [(100, "in")], 10,
         dict(matched=1, precision=1.0, recall=1.0, count_error_in=0, count_error_out=0, mean_frame_error=0.0)),
        ("wrong direction", [(100, "in")], [(100, "out")], 10,
         dict(matched=0, precision=0.0, recall=0.0, false_positives=1, misses=1, count_error_in=-1, count_error_out=1)),
        ("outside the window (+11)", [(100, "in")], [(111, "in")], 10,
         dict(matched=0, precision=0.0, recall=0.0, count_error_in=0, count_error_out=0)),
        ("window edge (-10) is in", [(100, "out")], [(90, "out")], 10,
         dict(matched=1, precision=1.0, recall=1.0, mean_frame_error=10.0)),
        ("12.5 fps: 12 frames in, 13 out", [(100, "in"), (200, "in")], [(112, "in"), (187, "in")], 12.5,
         dict(window_frames=12, matched=1, precision=0.5, recall=0.5, count_error_in=0)),
        ("double count", [(100, "in")], [(100, "in"), (103, "in")], 10,
         dict(matched=1, false_positives=1, misses=0, precision=0.5, recall=1.0, count_error_in=1, count_error_out=0)),
        ("nearest first, one-to-one", [(100, "in"), (106, "in")], [(104, "in")], 10,
         dict(matched=1, misses=1, precision=1.0, recall=0.5, mean_frame_error=2.0, count_error_in=-1)),
        ("greedy keeps both", [(100, "in"), (108, "in")], [(103, "in"), (111, "in")], 10,
         dict(matched=2, precision=1.0, recall=1.0, mean_frame_error=3.0)),
        ("mixed", [(50, "in"), (80, "out"), (300, "out")], [(52, "in"), (79, "in"), (81, "out"), (400, "out")], 10,
         dict(matched=2, false_positives=2, misses=1, precision=0.5, recall=2 / 3, count_error_in=1, count_error_out=0)),
        ("no predictions", [(100, "in")], [], 10, dict(matched=0, precision=nan, recall=0.0, count_error_in=-1)),
    ]
    crows = []
    for name, true, pred, fps, want in cases:
        c = match_crossings(true, pred, fps)
        expect("crossings/" + name, c, **want)
        crows.append([name, str(c["true"]), str(c["predicted"]), str(c["matched"])] + cross_cells(c))
    # The hand-made truth files: read back as predictions they score 1.0; each crossing lies
    # within its id's annotated frames, and the ground truth boxes of that id just before and
    # at/after it have their bottom centres on the two sides, the move between them crossing
    # the line once, in the stated direction.
    for clip in CLIPS:
        truth = load_crossings(clip)
        if truth is None:
            continue
        _, gt = load_gt(clip)
        true = [(c["frame"], c["direction"]) for c in truth["crossings"]]
        c = match_crossings(true, list(true), truth["fps"])
        expect(clip + "/crossings itself", c, matched=len(true), precision=1.0, recall=1.0, count_error_in=0,
               count_error_out=0)
        crows.append(["%s.crossings.json itself" % clip, str(c["true"]), str(c["predicted"]), str(c["matched"])]
                     + cross_cells(c))
        pts = [tuple(p) for p in truth["line"]["points"]]
        for x in truth["crossings"]:
            boxes = sorted((f, b) for f, v in gt.items() for i, b, _ in v if i == x["id"])
            before = [(f, b) for f, b in boxes if f < x["frame"]]
            after = [(f, b) for f, b in boxes if f >= x["frame"]]
            if not before or not after:
                ok = False
                print("selftest FAIL %s: crossing %r is not between two boxes of id %d" % (clip, x, x["id"]), file=sys.stderr)
                continue
            ref = [((b[0] + b[2] / 2.0), b[1] + b[3]) for b in (before[-1][1], after[0][1])]
            dirs = crossing_dirs(pts, ref[0], ref[1])
            if dirs != [x["direction"]]:
                ok = False
                print("selftest FAIL %s: id %d from frame %d %s to %d %s crosses %s, expected [%r]"
                      % (clip, x["id"], before[-1][0], ref[0], after[0][0], ref[1], dirs, x["direction"]), file=sys.stderr)
    print(table(crows, ["crossings case", "true", "predicted", "matched", "crossings P", "crossings R", "count err in",
                        "count err out"]))
    print("selftest: %s" % ("all metrics as expected" if ok else "FAILED"))
    return 0 if ok else 1


# ---------------------------------------------------------------------------------------


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--zcpipe", default=os.path.join(ROOT, "target", "release", "zcpipe"))
    ap.add_argument("--clips", default=",".join(CLIPS))
    ap.add_argument("--trackers", default=",".join(TRACKERS))
    ap.add_argument("--rerun", action="store_true", help="run the detector again even if its cache checks out")
    ap.add_argument("--hyp", action="append", default=[], metavar="CLIP=FILE", help="score this results file only")
    ap.add_argument("--selftest", action="store_true")
    ap.add_argument("--cars-labels", default=LABELS["cars"], help="labels of the cars clip (default: %(default)s)")
    a = ap.parse_args()
    LABELS["cars"] = a.cars_labels
    if a.selftest:
        return selftest()
    os.makedirs(OUT_DIR, exist_ok=True)
    rows, results = [], {}
    if a.hyp:
        for spec in a.hyp:
            clip, _, path = spec.partition("=")
            r = score_file(clip, path)
            results["%s/%s" % (clip, path)] = r
            rows.append(row(clip, os.path.basename(path), r))
        print(table(rows))
        return 0
    zc = a.zcpipe
    if not os.access(zc, os.X_OK):
        raise SystemExit("track_eval: %s not found: make build" % zc)
    eval_help = help_text(zc, "eval", "track")
    has_eval = eval_help is not None
    if not has_eval:
        print("track_eval: `%s eval track` does not exist in this build: only the detections are made" % zc, file=sys.stderr)
    elif "--crossings" not in eval_help:
        print("track_eval: this build's `eval track` has no --crossings: line crossings are not scored", file=sys.stderr)
    for clip in a.clips.split(","):
        jsonl = detections(zc, clip, a.rerun)
        results[clip + "/labels"] = label_counts(jsonl)
        print("track_eval: %s: detections by label: %s" % (clip, json.dumps(results[clip + "/labels"])), file=sys.stderr)
        if not has_eval:
            continue
        truth = load_crossings(clip)
        if truth is not None:
            rate = frame_rate(os.path.join(CLIP_DIR, clip + ".mp4"))
            if abs(rate - truth["fps"]) > 1e-6:
                raise SystemExit("track_eval: %s.crossings.json says %g fps, the clip has %g" % (clip, truth["fps"], rate))
        for t in a.trackers.split(","):
            out, cross = track(zc, clip, jsonl, t, eval_help, truth)
            r = score_file(clip, out)
            if cross is not None:
                r["crossings"] = score_crossings(truth, cross)
            results["%s/%s" % (clip, t)] = r
            rows.append(row(clip, t, r))
    if not rows:
        return 0 if has_eval else 2
    t = table(rows)
    print(t)
    with open(os.path.join(OUT_DIR, "table.md"), "w") as f:
        f.write("Tracker evaluation (benches/track_eval.py; ground truth tests/data/track/, IoU >= 0.5, annotated frames only;"
                " crossings: same direction within %g s, one-to-one)\n\n" % CROSS_WINDOW_S + t)
    with open(os.path.join(OUT_DIR, "results.json"), "w") as f:
        json.dump(results, f, indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

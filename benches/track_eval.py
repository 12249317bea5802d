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


def fmt(x, pct=False):
    if isinstance(x, float):
        if x != x:
            return "n/a"
        return "%.3f" % x
    return str(x)


HEADER = ["clip", "tracker", "MOTA", "IDF1", "ID switches", "HOTA", "GT ids", "hyp ids", "FP", "FN", "GT boxes", "frames"]


def row(clip, name, r):
    return [clip, name, fmt(r["mota"]), fmt(r["idf1"]), str(r["num_switches"]), fmt(r["HOTA"]),
            str(r["num_unique_objects"]), str(r["hyp_ids"]), str(r["num_false_positives"]), str(r["num_misses"]),
            str(r["num_objects"]), str(r["frames"])]


def table(rows):
    lines = ["| " + " | ".join(HEADER) + " |", "|" + "|".join("---" for _ in HEADER) + "|"]
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


def track(zcpipe, clip, jsonl, tracker, eval_help):
    out = os.path.join(OUT_DIR, "%s.%s.txt" % (clip, tracker))
    cmd = [zcpipe, "eval", "track", "--detections", os.path.relpath(jsonl, ROOT), "--tracker", tracker,
           "--labels", LABELS[clip], "--mot", os.path.relpath(out, ROOT) + ".tmp"]
    # The detections were made unpaced (--fps max): their capture times are closer together
    # than the scene's, so the tracker's clock (keep-alive) runs on seq / rate.
    cmd += ["--fps", "%g" % frame_rate(os.path.join(CLIP_DIR, clip + ".mp4"))]
    print("track_eval: " + " ".join(cmd), file=sys.stderr)
    p = subprocess.run(cmd, cwd=ROOT)
    if p.returncode != 0:
        raise SystemExit("track_eval: zcpipe eval track failed (exit %d) on %s/%s" % (p.returncode, clip, tracker))
    os.replace(out + ".tmp", out)
    return out


def score_file(clip, path):
    frames, gt = load_gt(clip)
    fs = set(frames)
    hyp = read_mot(path, fs)
    return score(frames, gt, hyp)


# ---------------------------------------------------------------------------------------
# self-test: hypotheses made from the GT, with the metrics they must give


def selftest():
    rows, ok = [], True

    def expect(name, r, **want):
        nonlocal ok
        for k, v in want.items():
            got = r[k]
            good = abs(got - v) < 1e-9 if isinstance(v, float) else got == v
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
    for clip in a.clips.split(","):
        jsonl = detections(zc, clip, a.rerun)
        results[clip + "/labels"] = label_counts(jsonl)
        print("track_eval: %s: detections by label: %s" % (clip, json.dumps(results[clip + "/labels"])), file=sys.stderr)
        if not has_eval:
            continue
        for t in a.trackers.split(","):
            r = score_file(clip, track(zc, clip, jsonl, t, eval_help))
            results["%s/%s" % (clip, t)] = r
            rows.append(row(clip, t, r))
    if not rows:
        return 0 if has_eval else 2
    t = table(rows)
    print(t)
    with open(os.path.join(OUT_DIR, "table.md"), "w") as f:
        f.write("Tracker evaluation (benches/track_eval.py; ground truth tests/data/track/, IoU >= 0.5, annotated frames only)\n\n" + t)
    with open(os.path.join(OUT_DIR, "results.json"), "w") as f:
        json.dump(results, f, indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

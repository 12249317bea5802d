#!/usr/bin/env python3
# Derives the ground truth of the two synthetic tracking clips (zcpipe issue 13) from the
# hand-made person.gt.txt / person.frames.txt in tests/data/track/ (see its README.md).
# Written for zcpipe; stdlib only. scripts/track/make_clips.sh calls it with the same
# parameters it builds the clips with, so clips and ground truth cannot drift apart.
#
#   derive_gt.py --gt-dir tests/data/track --out DIR --shift S --length L --width W --blanks "a-b c-d ..."
#
# two-people: frame n (0-based) of the composite = source frame n on the left, source frame
#   n+S on the right (shifted right by W pixels); L frames. Annotated where both source frames
#   are annotated. Left ids are kept, right ids get +100 (a person seen in both halves is two
#   tracks: they are 18 s apart and never side by side with themselves).
# misses: the source with the frames of the runs a-b (0-based, inclusive) blacked out. The
#   blanked frames are left out of the annotated set; the others keep their boxes.
import argparse
import os


def read_gt(path):
    rows = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line and not line.startswith("#"):
                p = line.split(",")
                rows.append((int(p[0]), int(p[1]), int(p[2]), int(p[3]), int(p[4]), int(p[5])))
    return rows


def read_frames(path):
    with open(path) as f:
        return [int(l) for l in (l.strip() for l in f) if l and not l.startswith("#")]


def write(out, name, rows, frames, what):
    with open(os.path.join(out, name + ".gt.txt"), "w") as f:
        for r in sorted(rows):
            f.write("%d,%d,%d,%d,%d,%d,1,1,1\n" % r)
    with open(os.path.join(out, name + ".frames.txt"), "w") as f:
        f.write("# Annotated frames of %s.gt.txt (MOT frame = ffmpeg decode index + 1): %s. See README.md.\n" % (name, what))
        for fr in sorted(frames):
            f.write("%d\n" % fr)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gt-dir", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--shift", type=int, required=True)
    ap.add_argument("--length", type=int, required=True)
    ap.add_argument("--width", type=int, required=True)
    ap.add_argument("--blanks", required=True)
    a = ap.parse_args()
    gt = read_gt(os.path.join(a.gt_dir, "person.gt.txt"))
    frames = set(read_frames(os.path.join(a.gt_dir, "person.frames.txt")))
    by_frame = {}
    for r in gt:
        assert r[0] in frames, "person.gt.txt frame %d is not in person.frames.txt" % r[0]
        by_frame.setdefault(r[0], []).append(r)
    os.makedirs(a.out, exist_ok=True)

    # two-people (MOT frame F = n + 1: left source frame F, right source frame F + S)
    tp_frames, tp_rows = [], []
    for f in sorted(frames):
        if f <= a.length and (f + a.shift) in frames:
            tp_frames.append(f)
            for (_, i, x, y, w, h) in by_frame.get(f, []):
                tp_rows.append((f, i, x, y, w, h))
            for (_, i, x, y, w, h) in by_frame.get(f + a.shift, []):
                tp_rows.append((f, i + 100, x + a.width, y, w, h))
    write(a.out, "two-people", tp_rows, tp_frames,
          "person.frames.txt frames F with F+%d also annotated; left half = source F, right half = source F+%d, ids +100" % (a.shift, a.shift))

    # misses
    blanked = set()
    for run in a.blanks.split():
        lo, hi = (int(v) for v in run.split("-"))
        blanked.update(range(lo + 1, hi + 2))  # 0-based n -> MOT frame n + 1
    m_frames = sorted(frames - blanked)
    m_rows = [r for r in gt if r[0] not in blanked]
    write(a.out, "misses", m_rows, m_frames,
          "person.frames.txt minus the blanked frames %s (0-based runs)" % ",".join(a.blanks.split()))
    print("derive_gt: two-people %d frames %d boxes; misses %d frames %d boxes (%d annotated frames blanked)"
          % (len(tp_frames), len(tp_rows), len(m_frames), len(m_rows), len(frames & blanked)))


if __name__ == "__main__":
    main()

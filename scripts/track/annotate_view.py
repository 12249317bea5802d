#!/usr/bin/env python3
# Annotation aid for the hand-made tracking ground truth in tests/data/track/ (zcpipe issue 13).
# It only renders pictures for a person to read pixel coordinates from; it detects nothing.
# Written for zcpipe; stdlib Python plus the ffmpeg binary (no third-party code or data).
#
#   annotate_view.py extract CLIP OUTDIR N [N ...]
#       decodes CLIP once and writes frame n (0-based decode index, = MOT frame - 1) of each N
#       to OUTDIR/fNNNNN.png.
#   annotate_view.py view OUT.png [--scale S] [--gt GT.txt] [--grid G] SPEC [SPEC ...]
#       SPEC = PNG[@x0,y0,w,h]: crops each frame (source pixels), magnifies it S times
#       (nearest neighbour), draws a grid every G source pixels (default 10; a stronger line and
#       a label every 5G), draws the
#       boxes of GT.txt (MOTChallenge format, frame = n + 1) for that frame with their ids,
#       and puts the frames side by side in OUT.png.
import os
import re
import subprocess
import sys

FONT = "/usr/share/fonts/truetype/dejavu/DejaVuSansMono.ttf"


def run(cmd):
    subprocess.run(cmd, check=True)


def extract(clip, outdir, ns):
    os.makedirs(outdir, exist_ok=True)
    ns = sorted(set(int(n) for n in ns))
    for k in range(0, len(ns), 60):  # ffmpeg's expression parser limits the length
        part = ns[k:k + 60]
        expr = "+".join("eq(n\\,%d)" % n for n in part)
        tmp = os.path.join(outdir, "tmp_%05d.png")
        run(["ffmpeg", "-v", "error", "-y", "-i", clip, "-vf", "select='%s'" % expr,
             "-fps_mode", "passthrough", "-frames:v", str(len(part)), "-start_number", "0", tmp])
        for i, n in enumerate(part):
            os.replace(os.path.join(outdir, "tmp_%05d.png" % i), os.path.join(outdir, "f%05d.png" % n))


def probe_size(png):
    out = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries",
                          "stream=width,height", "-of", "csv=p=0", png],
                         check=True, capture_output=True, text=True).stdout.strip()
    w, h = out.split(",")
    return int(w), int(h)


def load_gt(path):
    boxes = {}
    if not path:
        return boxes
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            p = line.split(",")
            fr, tid = int(p[0]), int(p[1])
            x, y, w, h = (float(v) for v in p[2:6])
            boxes.setdefault(fr, []).append((tid, x, y, w, h))
    return boxes


COLORS = ["red", "lime", "cyan", "magenta", "yellow", "orange", "blue"]


def chain_for(png, crop, scale, grid, gt):
    W, H = probe_size(png)
    n = int(re.search(r"f(\d+)\.png$", png).group(1))
    x0, y0, w, h = crop if crop else (0, 0, W, H)
    f = ["crop=%d:%d:%d:%d" % (w, h, x0, y0), "scale=%d:%d:flags=neighbor" % (w * scale, h * scale)]
    # grid lines at multiples of `grid` source px (faint) and of 5*grid (stronger)
    for g, col in ((grid, "white@0.3"), (5 * grid, "yellow@0.7")):
        ox = ((-x0) % g) * scale
        oy = ((-y0) % g) * scale
        f.append("drawgrid=x=%d:y=%d:w=%d:h=%d:t=1:c=%s" % (ox, oy, g * scale, g * scale, col))
    # labels at multiples of 5*grid, along the top, the bottom and the left edge, plus a middle row
    lab = 5 * grid
    for xs in range(((x0 + lab - 1) // lab) * lab, x0 + w, lab):
        px = (xs - x0) * scale + 2
        for py in (2, h * scale - 16, (h * scale) // 2):
            f.append("drawtext=fontfile=%s:text='%d':x=%d:y=%d:fontsize=12:fontcolor=yellow:box=1:boxcolor=black@0.6"
                     % (FONT, xs, px, py))
    for ys in range(((y0 + lab - 1) // lab) * lab, y0 + h, lab):
        py = (ys - y0) * scale + 2
        for px in (2, (w * scale) // 2):
            f.append("drawtext=fontfile=%s:text='%d':x=%d:y=%d:fontsize=12:fontcolor=cyan:box=1:boxcolor=black@0.6"
                     % (FONT, ys, px, py))
    for tid, bx, by, bw, bh in gt.get(n + 1, []):
        c = COLORS[tid % len(COLORS)]
        f.append("drawbox=x=%d:y=%d:w=%d:h=%d:t=1:c=%s" % ((bx - x0) * scale, (by - y0) * scale,
                                                         bw * scale, bh * scale, c))
        f.append("drawtext=fontfile=%s:text='id%d':x=%d:y=%d:fontsize=14:fontcolor=%s:box=1:boxcolor=black"
                 % (FONT, tid, max(0, (bx - x0) * scale), max(0, (by - y0) * scale - 18), c))
    f.append("drawtext=fontfile=%s:text='n=%d F=%d':x=4:y=20:fontsize=16:fontcolor=white:box=1:boxcolor=red"
             % (FONT, n, n + 1))
    return ",".join(f), h * scale


def view(out, specs, scale, grid, gtpath):
    gt = load_gt(gtpath)
    cmd = ["ffmpeg", "-v", "error", "-y"]
    chains = []
    hs = []
    for i, spec in enumerate(specs):
        png, _, c = spec.partition("@")
        crop = tuple(int(v) for v in c.split(",")) if c else None
        cmd += ["-i", png]
        ch, hh = chain_for(png, crop, scale, grid, gt)
        chains.append((i, ch))
        hs.append(hh)
    H = max(hs)
    parts = []
    for i, ch in chains:
        parts.append("[%d:v]%s,pad=iw+6:%d:0:0:black[v%d]" % (i, ch, H, i))
    if len(specs) > 1:
        parts.append("".join("[v%d]" % i for i in range(len(specs))) + "hstack=inputs=%d[o]" % len(specs))
        out_label = "[o]"
    else:
        out_label = "[v0]"
    cmd += ["-filter_complex", ";".join(parts), "-map", out_label, "-frames:v", "1", out]
    run(cmd)


def main(argv):
    if len(argv) >= 4 and argv[1] == "extract":
        extract(argv[2], argv[3], argv[4:])
        return
    if len(argv) >= 3 and argv[1] == "view":
        out = argv[2]
        scale, grid, gtpath, specs = 2, 10, None, []
        it = iter(argv[3:])
        for a in it:
            if a == "--scale":
                scale = int(next(it))
            elif a == "--grid":
                grid = int(next(it))
            elif a == "--gt":
                gtpath = next(it)
            else:
                specs.append(a)
        view(out, specs, scale, grid, gtpath)
        return
    sys.exit(__doc__ or "usage: see the header of this file")


if __name__ == "__main__":
    main(sys.argv)

#!/usr/bin/env bash
# Fan-in: how several cameras share one scale, infer and publish stage. 1, 2, 4 and 8
# test-pattern cameras (`--source testsrc:1920x1080@30` each, one capture process per camera),
# first transport only (`--scaler none --infer none`: what zcpipe's own plumbing costs), then
# with the CPU letterbox (`--scaler cpu --infer none`). Each run captures FRAMES frames per
# camera (default 300: 10 s at 30 fps) and writes its --summary-json under target/multicam/.
#
#   bash benches/multicam.sh [FRAMES] [CAMERA_COUNTS]      defaults: 300 "1 2 4 8"
#
# Prints one row per run: cameras, frames captured and published per second (all cameras),
# drops per camera (min/max over cameras: its ring's drop-oldest plus frames the scale stage
# passed over for a newer one of the same camera), CPU per frame of each stage (user+system
# µs over the frames that stage took in; capture: the mean of the camera processes), and the
# end-to-end latency p50/p99 (capture timestamp to published line, all cameras). The goal on
# a 2-core host: 4 cameras x 30 fps transport-only with no drops, and capture, scale and
# publish CPU per frame no higher than with one camera.
set -euo pipefail
cd "$(dirname "$0")/.."
frames=${1:-300}
counts=${2:-"1 2 4 8"}
bin=target/release/zcpipe
[ -x "$bin" ] || cargo build --release --locked
out=target/multicam
mkdir -p "$out"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rows=()
for scaler in none cpu; do
    for n in $counts; do
        sources=()
        for i in $(seq 0 $((n - 1))); do sources+=(--source "cam$i=testsrc:1920x1080@30"); done
        summary="$out/${scaler}-${n}.json"
        log="$out/${scaler}-${n}.log"
        "$bin" run --instance "multicam-bench-$$" --run-dir "$work/run" --publish "$work/d.sock" \
            --scaler "$scaler" --infer none --no-print --stats-interval 0 --frames "$frames" \
            --summary-json "$summary" "${sources[@]}" 2>"$log" || { echo "run failed: $scaler x$n (see $log)" >&2; tail -3 "$log" >&2; exit 1; }
        rows+=("$scaler $n $summary")
    done
done
python3 - "$frames" "${rows[@]}" <<'PY'
import json, sys
frames = int(sys.argv[1])
print(f"{'scaler':<7}{'cams':>5}{'fps in':>9}{'fps out':>9}{'drops/cam':>11}{'capture':>10}{'scale':>9}{'publish':>9}{'p50 ms':>8}{'p99 ms':>8}")
print(f"{'':<7}{'':>5}{'(total)':>9}{'(total)':>9}{'min-max':>11}{'µs/frame':>10}{'µs/frame':>9}{'µs/frame':>9}")
for row in sys.argv[2:]:
    scaler, n, path = row.split()
    s = json.load(open(path))
    st = s["stages"]
    caps = [r for k, r in st.items() if k == "capture" or k.startswith("capture@")]
    def cpu(r):
        p = r.get("process") or {}
        return (p.get("user_us", 0) + p.get("system_us", 0)) / max(r.get("frames_in") or r.get("frames_out") or 1, 1)
    def span_fps(r):
        sp = r.get("out_span") or {}
        d = sp.get("last_s", 0) - sp.get("first_s", 0)
        return (sp.get("frames", 0) - 1) / d if d > 0 else 0.0
    fps_in = sum(span_fps(r) for r in caps)
    fps_out = span_fps(st["publish"])
    if s.get("cameras"):
        drops = [c["dropped"] for c in s["cameras"].values()]
    else:
        ring = (st["capture"].get("output_ring") or {}).get("dropped", 0)
        drops = [ring]
    cap_cpu = sum(cpu(r) for r in caps) / len(caps)
    lat = st["publish"].get("latency", {}).get("total", {})
    print(f"{scaler:<7}{n:>5}{fps_in:>9.1f}{fps_out:>9.1f}{min(drops):>5}-{max(drops):<5}{cap_cpu:>10.0f}{cpu(st['scale']):>9.0f}{cpu(st['publish']):>9.0f}{lat.get('p50_us', 0)/1000:>8.1f}{lat.get('p99_us', 0)/1000:>8.1f}")
PY

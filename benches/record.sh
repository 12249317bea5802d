#!/usr/bin/env bash
# What recording costs: CPU per camera and bytes per second written, for a 1080p H.264 camera
# served by a real RTSP server (scripts/rtsp_server.py, GStreamer: the file's own packets,
# 30 fps, a keyframe every 2 s, about 4 Mbit/s), with a clip open the whole run.
#
# Two runs of the same stream, detection replaced by a replayed box on every frame (`--infer
# replay:FILE`: one person in view from the first frame to the last, so one clip spans the
# run) and the CPU scaler: without `--record-dir`, then with it. The CPU of each run is every
# process's user + system time (the stages, their ffmpeg children, the recorder's remuxing
# ffmpeg: `/usr/bin/time` counts what the run waited for); recording's cost is the
# difference, over the run's wall time, as a share of one core. Goal: under 2% of one core
# per 1080p camera. Then the same for a raw camera (the 1080p30 test pattern), whose frames
# are encoded on the CPU for its clip (libx264 through an ffmpeg child).
#
#   bash benches/record.sh [SECONDS]      default 40 (of the 60 s stream)
# Needs GStreamer's RTSP server for python3 (scripts/setup-test.sh) and ffmpeg with libx264
# (to make the 1080p stream once, into build/bench/). Prints a markdown table.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-40}
bin=target/release/zcpipe
[ -x "$bin" ] || cargo build --release --locked
mkdir -p build/bench
clip=build/bench/record-1080p.mp4
if [ ! -s "$clip" ]; then
    echo "record.sh: making $clip (60 s of 1080p H.264 from the bundled clip, libx264)" >&2
    ffmpeg -nostdin -loglevel error -y -stream_loop -1 -t 60 -i tests/data/one-by-one-person-detection.mp4 \
        -vf scale=1920:1080,fps=30 -c:v libx264 -preset veryfast -b:v 4M -maxrate 4M -bufsize 8M \
        -g 60 -pix_fmt yuv420p -an "$clip"
fi
work=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
/usr/bin/python3 scripts/rtsp_server.py --port "$port" --mount /cam --file "$clip" > "$work/server.out" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; [ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
for _ in $(seq 100); do grep -q '^ready' "$work/server.out" && break; sleep 0.1; done
grep -q '^ready' "$work/server.out" || { cat "$work/server.out" >&2; exit 1; }
printf '{"type":"frame","width":1920,"height":1080,"detections":[{"class_id":0,"label":"person","score":0.9,"box":[600,200,1000,1000]}]}\n' > "$work/box.jsonl"
frames=$(( secs * 30 ))

# run NAME SOURCE [FLAGS...]: CPU seconds (user + system, children included) and wall seconds.
run() {
    local name=$1 source=$2
    shift 2
    /usr/bin/time -f '%U %S %e' -o "$work/$name.time" \
        "$bin" run --instance "bench-rec-$name" --run-dir "$work/run-$name" --publish "$work/$name.sock" \
        --source "$source" --scaler cpu --infer "replay:$work/box.jsonl" \
        --frames "$frames" --no-print --stats-interval 0 --summary-json "$work/$name.json" "$@" \
        2> "$work/$name.log" || { tail -20 "$work/$name.log" >&2; exit 1; }
    read -r u s e < "$work/$name.time"
    echo "$u $s $e"
}
cam="rtsp://127.0.0.1:$port/cam"
read -r u0 s0 e0 < <(run plain "$cam")
read -r u1 s1 e1 < <(run record "$cam" --record-dir "$work/clips" --record-pre 5 --record-post 5)
bytes=$(du -sb "$work/clips" | cut -f1)
# A raw camera: the 1080p30 test pattern, its frames encoded on the CPU (libx264) for the clip.
raw=testsrc:1920x1080@30
read -r u2 s2 e2 < <(run rawplain "$raw")
read -r u3 s3 e3 < <(run rawrecord "$raw" --record-dir "$work/rawclips" --record-pre 5 --record-post 5)
rawbytes=$(du -sb "$work/rawclips" | cut -f1)
python3 - "$u2" "$s2" "$e2" "$u3" "$s3" "$e3" "$rawbytes" "$work/rawrecord.json" > "$work/raw.md" <<'PY'
import json, sys
u0, s0, e0, u1, s1, e1 = map(float, sys.argv[1:7])
written, summary = int(sys.argv[7]), json.load(open(sys.argv[8]))
rec = summary["stages"]["record"]["extra"]["record"]
sent = summary["stages"]["capture"]["extra"].get("record", {})
cost = (u1 + s1) - (u0 + s0)
print()
print("| 1080p raw test pattern, 30 fps | without recording | with recording (encoded on the CPU, a clip the whole run) |")
print("|---|---|---|")
print(f"| wall time | {e0:.1f} s | {e1:.1f} s |")
print(f"| CPU, every process | {u0 + s0:.2f} s ({100 * (u0 + s0) / e0:.1f}% of a core) | {u1 + s1:.2f} s ({100 * (u1 + s1) / e1:.1f}% of a core) |")
print(f"| recording's cost | | {cost:.2f} s: **{100 * cost / e1:.1f}% of one core** (libx264 ultrafast) |")
print(f"| frames encoded | | {sent.get('units_sent', 0)} of the run's {int(e1 * 30)} or so (the tap drops what the encoder cannot take) |")
print(f"| written | | {written / e1 / 1e6:.2f} MB/s ({written / 1e6:.1f} MB, {rec['clips']} clips, {rec['complete']} complete) |")
PY
python3 - "$u0" "$s0" "$e0" "$u1" "$s1" "$e1" "$bytes" "$work/record.json" <<'PY'
import json, sys
u0, s0, e0, u1, s1, e1 = map(float, sys.argv[1:7])
written, summary = int(sys.argv[7]), json.load(open(sys.argv[8]))
rec = summary["stages"]["record"]["extra"]["record"]
cost = (u1 + s1) - (u0 + s0)
print("| 1080p H.264 over RTSP, 30 fps, 4 Mbit/s | without recording | with recording (a clip the whole run) |")
print("|---|---|---|")
print(f"| wall time | {e0:.1f} s | {e1:.1f} s |")
print(f"| CPU, every process | {u0 + s0:.2f} s ({100 * (u0 + s0) / e0:.1f}% of a core) | {u1 + s1:.2f} s ({100 * (u1 + s1) / e1:.1f}% of a core) |")
print(f"| recording's cost | | {cost:.2f} s: **{100 * cost / e1:.2f}% of one core** (goal: under 2%) |")
print(f"| written | | {written / e1 / 1e6:.2f} MB/s ({written / 1e6:.1f} MB, {rec['clips']} clips, {rec['complete']} complete) |")
PY
cat "$work/raw.md"

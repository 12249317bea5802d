#!/usr/bin/env bash
# Frames per second through the four stage processes, transport only, at 1080p NV12: the
# test pattern unpaced (`testsrc:1920x1080@max`: each pool buffer rendered once, then sent
# again untouched, so the source costs nothing), `--scaler none --infer none`, and
# `--ring-policy block` (every frame goes through every stage; under drop-oldest an unpaced
# source measures only how fast capture can drop).
#
#   bash benches/throughput.sh [FRAMES] [ROUNDS] [SPIN_US...]   defaults: 50000 5 0 50
#
# For each spin budget (`--spin-us`, 0 = never spin), ROUNDS runs of FRAMES frames; prints
# the median fps (publish's first to last frame), the min and max, and each stage's CPU
# time per frame (user + system, from getrusage) and wake-ups (voluntary context switches)
# per frame, medians over the rounds. Speed is a benchmark, never a test.
set -euo pipefail
cd "$(dirname "$0")/.."
frames=${1:-50000}
rounds=${2:-5}
shift $(( $# >= 2 ? 2 : $# ))
if [ $# -gt 0 ]; then spins=("$@"); else spins=(0 50); fi
bin=target/release/zcpipe
[ -x "$bin" ] || cargo build --release --locked
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

for spin in "${spins[@]}"; do
    for r in $(seq 1 "$rounds"); do
        d="$work/$spin-$r"
        mkdir -p "$d/rt"
        if ! XDG_RUNTIME_DIR="$d/rt" "$bin" --quiet run --source testsrc:1920x1080@max --frames "$frames" \
            --scaler none --infer none --ring-policy block --spin-us "$spin" --no-print --stats-interval 0 \
            --summary-json "$d/summary.json" >/dev/null 2>"$d/stderr"; then
            echo "throughput.sh: run $r (spin $spin µs) failed:" >&2
            cat "$d/stderr" >&2
            exit 1
        fi
    done
done
python3 - "$work" "$frames" "$rounds" "${spins[@]}" <<'PY'
import json, statistics, sys
work, frames, rounds, spins = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
STAGES = ["capture", "scale", "infer", "publish"]
print(f"\n### 1080p NV12, four stages, transport only, unpaced, block policy: {rounds} runs of {frames} frames\n")
print("| --spin-us | fps median (min-max) | CPU µs/frame: capture, scale, infer, publish | wake-ups/frame: capture, scale, infer, publish |")
print("|---|---|---|---|")
for spin in spins:
    fps, cpu, wake = [], {s: [] for s in STAGES}, {s: [] for s in STAGES}
    for r in range(1, rounds + 1):
        s = json.load(open(f"{work}/{spin}-{r}/summary.json"))["stages"]
        span = s["publish"]["out_span"]
        assert span["frames"] == frames, (spin, r, span)
        fps.append((span["frames"] - 1) / (span["last_s"] - span["first_s"]))
        for st in STAGES:
            p = s[st]["process"]
            cpu[st].append((p["user_us"] + p["system_us"]) / frames)
            wake[st].append(p["voluntary_ctx"] / frames)
    med = statistics.median
    print(f"| {spin} | {med(fps):,.0f} ({min(fps):,.0f}-{max(fps):,.0f}) | "
          + ", ".join(f"{med(cpu[s]):.1f}" for s in STAGES) + " | "
          + ", ".join(f"{med(wake[s]):.2f}" for s in STAGES) + " |")
PY

#!/usr/bin/env bash
# The host pipeline's glue cost per frame: the four stage processes with the CPU backends
# replaced by pass-through (--scaler none --infer none), so only transport, wake-ups and
# bookkeeping are measured, zero-copy against --copy-mode, at 480p, 1080p and 4K.
#   bash benches/glue.sh [ROUNDS] [FRAMES]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
frames=${2:-150}
bin=target/release/zcpipe
[ -x "$bin" ] || cargo build --release --locked
for size in 640x480 1920x1080 3840x2160; do
    echo "== $size NV12, $frames frames, $rounds rounds (zcpipe compare --scaler none --infer none)"
    "$bin" --quiet compare --source "testsrc:$size@30" --frames "$frames" --scaler none --infer none \
        --ring-policy block --rounds "$rounds" \
        | grep -E '^\| (metric|---|latency p50 (scale|infer|total)|cpu µs/frame|voluntary ctx|copied bytes)'
done

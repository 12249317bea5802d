#!/usr/bin/env bash
# Restart cost under fault injection: `kill -9` of each stage KILLS times (round robin,
# testsrc 320x240 at 30 fps), through tests/faults/faults.rs's kill test, once with `--infer none`
# and once with the ONNX detector (a restarted ONNX infer stage pays its model load).
#
#   bash benches/faults.sh [KILLS]     default: 100 per stage (400 kills per run)
#
# Prints, per stage and run: restart-to-first-frame time p50/p99/max (from the kill to the
# first frame through the whole pipeline after the restart notice; for publish, the first
# frame on the client's new connection), frames lost per restart, fds leaked by the
# survivors and buffers still out at the end (the test fails if either is not 0). Speed is
# a benchmark, never a test: nothing here asserts a time.
set -euo pipefail
cd "$(dirname "$0")/.."
kills=${1:-100}
for infer in none onnx; do
    echo "== --infer $infer, $kills kills per stage =="
    ZCPIPE_FAULT_KILLS="$kills" ZCPIPE_FAULT_INFER="$infer" \
        cargo test --release --locked --test faults -- --exact faults::kill_9_of_any_stage_restarts_it_alone_and_the_stream_goes_on --nocapture 2>&1 \
        | grep -E '^faults:|test result|panicked|FAILED'
done

#!/usr/bin/env bash
# The NPU scheduler on a fake RK3588 (or RK3566) whose cores take real time: how many cameras
# at what detection rate a board serves, and whether the scheduler shares the cores fairly.
#
#   bash benches/npu_sched.sh [SECONDS] [CAMERAS...]       defaults: 10 1 2 4 8 16
#   NPU_SCHED_SOC=rk3566 NPU_SCHED_RUN_US=... bash benches/npu_sched.sh
#
# Each run: N test-pattern cameras at 160x120, 30 fps (small, so that this 2-core host is not
# what limits), the CPU scaler, `--infer rknn` on the test-only fake librknnrt in its timing
# mode (`ZCPIPE_FAKE_RKNN_RUN_US`: each rknn_run holds its NPU core that long and spends no
# host CPU; fakes/librknnrt documents the calibration), one context per core
# (`--npu-cores 0,1,2` on the RK3588, `0` on the RK3566; `NPU_SCHED_CONTEXTS="1 2"` adds
# `--npu-contexts-per-core 2`), `--detect-fps` 30, 10 and 5 (`NPU_SCHED_RATES`).
# Default run time: YOLOv8n INT8 640x640 on one RK3588 core, 13.6 ms (rknn_model_zoo:
# 73.5 fps per core). The fake's model shapes come from models/yolox_nano.onnx; in timing
# mode its outputs are zeros (no detections), so the host's per-frame work is the
# pipeline's, the head's decoding and NMS of an empty output included.
#
# Prints one row per (cameras, --detect-fps): inferred fps per camera (min and max), each
# core's busy fraction, the wait for a core (p50 and p99 over every camera's frames, and the
# p99 of the camera that waited most), frames dropped for
# age (--max-age 1 s), frames skipped by rate, and the infer process's CPU per inferred frame.
# Speed is a benchmark, never a test.
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-10}
shift $(( $# >= 1 ? 1 : 0 ))
if [ $# -gt 0 ]; then cams=("$@"); else cams=(1 2 4 8 16); fi
soc=${NPU_SCHED_SOC:-rk3588}
run_us=${NPU_SCHED_RUN_US:-13600}
rates=(${NPU_SCHED_RATES:-30 10 5})
ctxs=(${NPU_SCHED_CONTEXTS:-1})
case "$soc" in
    rk3588) cores=0,1,2; ncores=3; model=models/yolox_nano_416_rk3588.rknn ;;
    rk3566 | rk3568) cores=0; ncores=1; model=models/yolox_nano_416_rk3566_rk3568.rknn ;;
    *) echo "npu_sched.sh: NPU_SCHED_SOC=$soc: use rk3588 or rk3566" >&2; exit 2 ;;
esac
bin=target/release/zcpipe
lib=target/release/librknnrt.so
[ -x "$bin" ] && [ -f "$lib" ] || cargo build --release --locked --bins --lib -p zcpipe -p zcpipe-fake-librknnrt
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/root/proc/device-tree"
printf 'vendor,board\0rockchip,%s\0' "$soc" >"$work/root/proc/device-tree/compatible"
frames=$((secs * 30))

for n in "${cams[@]}"; do
  for fps in "${rates[@]}"; do
    for ctx in "${ctxs[@]}"; do
        d="$work/$n-$fps-$ctx"
        mkdir -p "$d/rt"
        src=()
        for i in $(seq 0 $((n - 1))); do src+=(--source "c$i=testsrc:160x120@30"); done
        if ! XDG_RUNTIME_DIR="$d/rt" ZCPIPE_TEST_ROOT="$work/root" ZCPIPE_LIBRKNNRT="$lib" \
            ZCPIPE_FAKE_RKNN_ONNX=models/yolox_nano.onnx ZCPIPE_FAKE_RKNN_RUN_US="$run_us" \
            ZCPIPE_FAKE_RKNN_CORES="$ncores" \
            "$bin" --quiet run --detect-fps "$fps" "${src[@]}" --frames "$frames" --scaler cpu --infer rknn \
            --model "$model" --npu-cores "$cores" --npu-contexts-per-core "$ctx" \
            --no-print --stats-interval 0 --summary-json "$d/summary.json" \
            >/dev/null 2>"$d/stderr"; then
            echo "npu_sched.sh: $n cameras at --detect-fps $fps, $ctx context(s) per core failed:" >&2
            tail -n 20 "$d/stderr" >&2
            exit 1
        fi
    done
  done
done
python3 - "$work" "$soc" "$run_us" "$secs" "${rates[*]}" "${ctxs[*]}" "${cams[@]}" <<'PY'
import json, sys
work, soc, run_us, secs = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
rates, ctxs, cams = sys.argv[5].split(), sys.argv[6].split(), sys.argv[7:]
print(f"\n### {soc}, fake NPU at {run_us / 1000:.1f} ms per inference per core, "
      f"testsrc 160x120 @30 fps per camera, {secs} s per row\n")
print("| cameras | --detect-fps | contexts per core | demand fps | inferred fps per camera (min-max) | NPU busy per core | "
      "wait p50 / p99 ms (all cameras; worst camera's p99) | dropped for age | skipped by rate | infer CPU µs per inferred frame |")
print("|---|---|---|---|---|---|---|---|---|---|")
for n, fps, ctx in ((n, f, c) for n in cams for f in rates for c in ctxs):
        s = json.load(open(f"{work}/{n}-{fps}-{ctx}/summary.json"))
        inf = s["stages"]["infer"]
        ex = inf["extra"]
        cams_ = ex["cameras"]
        fpss = [c.get("inferred_fps") or 0.0 for c in cams_.values()]
        busy = " ".join(f"{c['busy'] * 100:.0f}%" for c in ex["cores"])
        p50 = (ex.get("wait_p50_us") or 0) / 1000
        p99 = (ex.get("wait_p99_us") or 0) / 1000
        worst = max((c.get("wait_p99_us") or 0) for c in cams_.values()) / 1000
        age = sum(c.get("expired", 0) for c in cams_.values())
        rate = s["stages"]["scale"]["extra"].get("skipped_rate", 0)
        cpu = ex.get("cpu_us_per_frame") or 0
        demand = int(n) * min(30, float(fps))
        print(f"| {n} | {fps} | {ctx} | {demand:.0f} | {min(fpss):.1f}-{max(fpss):.1f} | {busy} | "
              f"{p50:.1f} / {p99:.1f} ({worst:.1f}) | {age} | {rate} | {cpu:.0f} |")
PY

#!/usr/bin/env bash
# The inference service of a real `zcpipe run` (`<run dir>/npu.sock`): what it adds to a
# client's request beyond the model's run, and what many clients cost.
#
#   bash benches/npu_service.sh                          (`make bench-service`)
#   NPU_SERVICE_CLIENTS=8 NPU_SERVICE_HOLD=20 NPU_SERVICE_REQUESTS=500 bash benches/npu_service.sh
#   NPU_SERVICE_DETECTORS="none onnx" bash benches/npu_service.sh
#
# For each detector (`--infer none`: no model, the service's glue alone; then `onnx`: YOLOX-Nano
# on the CPU with tract), one pipeline: testsrc at 640x480, 5 fps (its frames share the engine
# with the clients), its own --instance and --run-dir under a temporary directory. Once
# npu.sock is there:
# 1. `zcpipe bench service --json`: one client registers a 640x480 NV12 sealed memfd and sends
#    NPU_SERVICE_REQUESTS `request`s one after another; each round trip is timed on the client
#    (CLOCK_MONOTONIC), and the answer's latency_us gives the engine's run (infer), the
#    letterbox on the CPU (scale) and the wait for a free engine (capture).
# 2. NPU_SERVICE_CLIENTS `zcpipe bench service --hold NPU_SERVICE_HOLD` at once (each connects,
#    registers its own picture, runs 10 requests, then holds its connection); once all say
#    `holding`, each client's Pss and the infer stage's Pss and RSS (/proc/PID/smaps_rollup),
#    then the infer stage's again after they left. The infer stage is the child of `zcpipe run`
#    whose command line holds `stage infer`; "model loads" counts its model-load log line
#    (`zcpipe infer: model PATH: ...`) in the run's stderr.
# Prints one markdown table per part with the goals. Speed is a benchmark, never a test.
set -euo pipefail
cd "$(dirname "$0")/.."
clients=${NPU_SERVICE_CLIENTS:-8}
hold=${NPU_SERVICE_HOLD:-20}
requests=${NPU_SERVICE_REQUESTS:-500}
detectors=(${NPU_SERVICE_DETECTORS:-none onnx})
bin=target/release/zcpipe
[ -x "$bin" ] || cargo build --release --locked --bins -p zcpipe
work=$(mktemp -d)
run_pid=
hold_pids=()

cleanup() {
    for p in "${hold_pids[@]}" $run_pid; do
        kill -INT "$p" 2>/dev/null || true
    done
    for p in "${hold_pids[@]}" $run_pid; do
        wait "$p" 2>/dev/null || true
    done
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

die() {
    echo "npu_service.sh: $*" >&2
    exit 1
}

# pss_rss PID: "Pss_KiB Rss_KiB" of a live process.
pss_rss() {
    awk '/^Pss:/ { p = $2 } /^Rss:/ { r = $2 } END { print p + 0, r + 0 }' "/proc/$1/smaps_rollup"
}

# The infer stage of the run $run_pid.
infer_pid() {
    local p
    for p in $(pgrep -P "$run_pid"); do
        if tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -q 'stage infer'; then
            echo "$p"
            return
        fi
    done
    die "no child of zcpipe run (pid $run_pid) runs 'stage infer'"
}

# wait_for SECONDS WHAT CMD...: polls CMD every 0.1 s.
wait_for() {
    local secs=$1 what=$2
    shift 2
    for _ in $(seq $((secs * 10))); do
        "$@" && return 0
        kill -0 "$run_pid" 2>/dev/null || { tail -n 20 "$d/stderr" >&2; die "zcpipe run exited while waiting for $what"; }
        sleep 0.1
    done
    die "no $what after $secs s"
}

all_holding() {
    local i
    for i in $(seq "$clients"); do grep -q '^holding:' "$d/hold.$1.$i.out" 2>/dev/null || return 1; done
}

# clients_round INFER_PID ROUND: $clients --hold clients at once; once all hold, each one's
# "Pss Rss" to $d/clients, then the infer stage's with them and after they left to
# $d/infer.ROUND.
clients_round() {
    local ipid=$1 round=$2 i p with
    hold_pids=()
    for i in $(seq "$clients"); do
        "$bin" --quiet bench service --run-dir "$d/run" --hold "$hold" >"$d/hold.$round.$i.out" \
            2>"$d/hold.$round.$i.err" &
        hold_pids+=($!)
    done
    wait_for "$hold" "$clients clients holding" all_holding "$round"
    sleep 1
    for p in "${hold_pids[@]}"; do pss_rss "$p" >>"$d/clients"; done
    with=$(pss_rss "$ipid")
    for p in "${hold_pids[@]}"; do
        wait "$p" || die "a --hold client ($det) failed: $(cat "$d"/hold.*.err)"
    done
    hold_pids=()
    sleep 2
    printf '%s\n' "$with" "$(pss_rss "$ipid")" >"$d/infer.$round"
}

for det in "${detectors[@]}"; do
    d="$work/$det"
    mkdir -p "$d/rt"
    XDG_RUNTIME_DIR="$d/rt" "$bin" run --instance "npu-service-$det" --run-dir "$d/run" \
        --source testsrc:640x480@5 --infer "$det" --stats-interval 0 --no-print \
        >/dev/null 2>"$d/stderr" &
    run_pid=$!
    wait_for 120 "$d/run/npu.sock" test -S "$d/run/npu.sock"
    ipid=$(infer_pid)
    sleep 1
    read -r start_pss start_rss < <(pss_rss "$ipid")
    "$bin" --quiet bench service --run-dir "$d/run" --requests "$requests" --json >"$d/bench.json" \
        || die "zcpipe bench service ($det) failed"
    sleep 1
    read -r before_pss before_rss < <(pss_rss "$ipid")

    clients_round "$ipid" 1
    clients_round "$ipid" 2
    loads=$(grep -c '^zcpipe infer: model ' "$d/stderr" || true)
    printf '%s\n' "$loads" "$start_pss $start_rss" "$before_pss $before_rss" >"$d/infer"
    cat "$d/infer.1" "$d/infer.2" >>"$d/infer"

    kill -INT "$run_pid"
    wait "$run_pid" || true
    run_pid=
done

python3 - "$work" "$clients" "$hold" "${detectors[@]}" <<'PY'
import json, sys
work, clients, hold, dets = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4:]
name = {"none": "`--infer none` (no model)", "onnx": "`--infer onnx` (YOLOX-Nano on the CPU, tract)"}
mib = lambda k: f"{k / 1024:.1f}"
sign = lambda k: f"{'+' if k >= 0 else '−'}{abs(k) / 1024:.1f}"
yes = lambda b: "yes" if b else "**no**"
print("\n### Inference service: one client, a 640x480 NV12 sealed memfd, `request`s one after another "
      "(the pipeline's own testsrc 640x480 @5 fps shares the engine); µs\n")
print("| detector | requests | round trip p50 / p99 | engine p50 | letterbox p50 | wait for an engine p50 / p99 | "
      "round trip − engine p50 / p99 | round trip − engine − letterbox p50 / p99 |")
print("|---|---|---|---|---|---|---|---|")
rows, mem = {}, {}
for det in dets:
    r = rows[det] = json.load(open(f"{work}/{det}/bench.json"))
    p = lambda k: f"{r[k]['p50']:.0f} / {r[k]['p99']:.0f}"
    print(f"| {name.get(det, det)} | {r['requests']} | {p('round_trip_us')} | {r['engine_us']['p50']:.0f} | "
          f"{r['letterbox_us']['p50']:.0f} | {p('wait_us')} | {p('minus_engine_us')} | {p('glue_us')} |")

print(f"\n### {clients} clients at once, twice (`zcpipe bench service --hold {hold}`: each registers its own "
      "640x480 NV12 memfd, 450 KiB, runs 10 requests, holds); MiB\n")
print(f"| detector | model loads | infer Pss: start → after the 1-client bench → with {clients} → after → with {clients} "
      "again → after | infer RSS: same | client Pss min / max | client RSS max |")
print("|---|---|---|---|---|---|")
for det in dets:
    lines = open(f"{work}/{det}/infer").read().split("\n")
    loads = int(lines[0])
    st = [tuple(map(int, l.split())) for l in lines[1:7]]
    cl = [tuple(map(int, l.split())) for l in open(f"{work}/{det}/clients") if l.strip()]
    mem[det] = (loads, st, cl)
    print(f"| {name.get(det, det)} | {loads} | {' → '.join(mib(s[0]) for s in st)} | "
          f"{' → '.join(mib(s[1]) for s in st)} | {mib(min(c[0] for c in cl))} / {mib(max(c[0] for c in cl))} | "
          f"{mib(max(c[1] for c in cl))} |")

print("\n### Goals\n")
print("| goal | detector | measured | met |")
print("|---|---|---|---|")
for det in dets:
    r = rows[det]
    e, g = r["minus_engine_us"]["p50"], r["glue_us"]["p50"]
    print(f"| request-to-answer − inference ≤ 200 µs p50, 640x480 memfd image: − engine only | {name.get(det, det)} | "
          f"{e:.0f} µs (includes the letterbox, {r['letterbox_us']['p50']:.0f} µs) | {yes(e <= 200)} |")
    print(f"| the same, − engine and letterbox | {name.get(det, det)} | {g:.0f} µs | {yes(g <= 200)} |")
for det in dets:
    loads, st, cl = mem[det]
    if det != "none":
        print(f"| {clients} clients: one model load | {name.get(det, det)} | {loads} | {yes(loads == 1)} |")
    base, w1, a1, w2, a2 = st[1][0], st[2][0], st[3][0], st[4][0], st[5][0]
    flat = a2 - a1 <= 1024 and w2 - w1 <= 1024
    print(f"| {clients} clients: service memory flat (a second round of {clients} costs nothing more: with and "
          f"after within 1 MiB of the first) | {name.get(det, det)} | Pss with {clients}: {sign(w1 - base)} then "
          f"{sign(w2 - base)} ({clients} × 450 KiB pictures mapped = {mib(clients * 450)}); after: {sign(a1 - base)} "
          f"then {sign(a2 - base)} | {yes(flat)} |")
    worst = max(c[0] for c in cl)
    print(f"| {clients} clients: each client's Pss < 5 MiB | {name.get(det, det)} | max {mib(worst)} MiB | "
          f"{yes(worst < 5 * 1024)} |")
PY

#!/usr/bin/env bash
# Syscalls per frame per stage, by name, with the wake-ups: the four stage processes with
# the CPU backends replaced by pass-through (--scaler none --infer none), so what is counted
# is the transport, the wake-ups and the bookkeeping of each hop.
#
# Each stage is traced with `strace -f -ff` (one file per process, every syscall). Set-up
# and tear-down cost the same whatever the frame count, so each rate is run twice, with
# FEW and MANY frames, and a stage's per-frame figure is (count(MANY) - count(FEW)) /
# (MANY - FEW). Wake-ups are the stage's voluntary context switches (getrusage, from the
# run summary) in the same two runs without strace (a traced syscall stops the process,
# which would count as a switch), taken the same way.
#
#   bash benches/syscalls.sh [FEW] [MANY] [FPS...]      defaults: 100 600 100 1000 max
# FPS `max` is full load: the test pattern unpaced (`testsrc:...@max`, each buffer rendered
# once) with `--ring-policy block`, so every frame goes through every stage (under
# drop-oldest an unpaced source would only measure how fast capture drops). Extra flags for
# every run (e.g. `--spin-us 50`) come from $SYSCALLS_FLAGS.
# Needs strace (apt-get install strace). Prints one markdown table per rate.
set -euo pipefail
cd "$(dirname "$0")/.."
few=${1:-100}
many=${2:-600}
shift $(( $# >= 2 ? 2 : $# ))
if [ $# -gt 0 ]; then rates=("$@"); else rates=(100 1000 max); fi
read -r -a extra <<< "${SYSCALLS_FLAGS:-}"
command -v strace >/dev/null || { echo "syscalls.sh: needs strace (apt-get install strace)" >&2; exit 1; }
bin=target/release/zcpipe
[ -x "$bin" ] || cargo build --release --locked
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# run RATE FRAMES [strace...]: one transport-only run into $work/RATE-FRAMES[-plain]/.
run() {
    local rate=$1 frames=$2 dir="$work/$1-$2"
    shift 2
    [ $# -gt 0 ] || dir="$dir-plain"
    mkdir -p "$dir/rt"
    local policy=drop-oldest
    [ "$rate" = max ] && policy=block
    if ! XDG_RUNTIME_DIR="$dir/rt" "$@" "$bin" --quiet run --source "testsrc:1920x1080@$rate" --frames "$frames" \
        --scaler none --infer none --no-print --stats-interval 0 --ring-policy "$policy" ${extra[@]+"${extra[@]}"} \
        --summary-json "$dir/summary.json" \
        >/dev/null 2>"$dir/stderr"; then
        echo "syscalls.sh: the run at $rate fps, $frames frames failed:" >&2
        cat "$dir/stderr" >&2
        exit 1
    fi
}

for rate in "${rates[@]}"; do
    for frames in "$few" "$many"; do
        run "$rate" "$frames" strace -f -ff -qq -o "$work/$rate-$frames/trace"
        run "$rate" "$frames"
    done
    python3 - "$work/$rate-$few" "$work/$rate-$many" "$few" "$many" "$rate" <<'PY'
import collections, glob, json, re, sys

few_dir, many_dir, few, many, rate = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
STAGES = ["capture", "scale", "infer", "publish"]
CALL = re.compile(r"^([a-z_0-9]+)\(")
RESUMED = re.compile(r"^<\.\.\. ([a-z_0-9]+) resumed>")
THREAD = re.compile(r"^clone3?\(.*CLONE_THREAD.*= (\d+)$")

def traces(d):
    """tid -> its trace lines (strace -ff writes one file per thread, trace.<tid>)."""
    return {int(f.rsplit(".", 1)[1]): open(f, errors="replace").read().splitlines() for f in glob.glob(f"{d}/trace.*")}

def counts(d):
    """Per stage: syscall name -> count over all the stage's threads, its voluntary context
    switches (getrusage, from the summary), frames in and out."""
    s, t = json.load(open(f"{d}/summary.json")), traces(d)
    owner = {}  # thread -> the thread that cloned it with CLONE_THREAD
    for tid, lines in t.items():
        for line in lines:
            m = THREAD.match(line.strip())
            if m:
                owner[int(m.group(1))] = tid
    def process(tid):
        while tid in owner:
            tid = owner[tid]
        return tid
    out = {}
    for st in STAGES:
        r = s["stages"][st]
        c = collections.Counter()
        for tid, lines in t.items():
            if process(tid) != r["pid"]:
                continue
            for line in lines:
                m = CALL.match(line)
                if m and not line.endswith("<unfinished ...>"):
                    c[m.group(1)] += 1
                elif (m := RESUMED.match(line)):
                    c[m.group(1)] += 1
        plain = json.load(open(f"{d}-plain/summary.json"))["stages"][st]
        out[st] = (c, (plain.get("process") or {}).get("voluntary_ctx", 0), r["frames_in"], r["frames_out"])
    return out

a, b, n = counts(few_dir), counts(many_dir), many - few
load = "unpaced (full load, --ring-policy block)" if rate == "max" else f"at {rate} fps"
print(f"\n### 1080p NV12 testsrc {load}, transport only: per frame ({many} - {few} frames)\n")
print("| stage | frames in/out | syscalls/frame | wake-ups/frame | by name (per frame, >= 0.05) |")
print("|---|---|---|---|---|")
for st in STAGES:
    (ca, va, _, _), (cb, vb, fin, fout) = a[st], b[st]
    per = {k: (cb[k] - ca[k]) / n for k in set(ca) | set(cb)}
    parts = ", ".join(f"{k} {v:.2f}" for k, v in sorted(per.items(), key=lambda kv: -kv[1]) if v >= 0.05)
    print(f"| {st} | {fin}/{fout} | {sum(per.values()):.2f} | {(vb - va) / n:.2f} | {parts} |")
PY
done

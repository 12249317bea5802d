#!/usr/bin/env bash
# Soak: does a long run leak? FRAMES frames through the four stage processes, transport
# only (the 1080p NV12 test pattern unpaced, `testsrc:1920x1080@max`, `--ring-policy block`
# so every frame goes through every stage, `--scaler none --infer none`), then a shorter
# run with the real CPU work (`--scaler cpu --infer onnx`, the bundled YOLOX-Nano, same
# unpaced source: as fast as tract takes frames). Every INTERVAL_S seconds each stage
# process (a child of `zcpipe run`; its /proc/PID/cmdline says which stage) is sampled:
# RSS (VmRSS, /proc/PID/status), Pss (/proc/PID/smaps_rollup), open fds (/proc/PID/fd),
# memfds (fd links `/memfd:...`) and dma-bufs (`anon_inode:dmabuf`, `/dmabuf:...`), with the
# frames published so far (the run's latest stats line, one a second).
#
#   bash benches/soak.sh [FRAMES] [ONNX_FRAMES] [INTERVAL_S] [WARMUP_S]   defaults: 1000000 3000 1 2
#
# (10^6 transport-only frames take ~20 s on a busy 2-core host and 3000 ONNX frames ~6 min,
# hence a sample a second.) ONNX_FRAMES 0 skips the second run. Writes target/soak/RUN.csv
# (t_s, stage, pid, rss_kib, pss_kib, fds, memfds, dmabufs, frames: one row per sample per
# stage), the run's log and its --summary-json next to it. The start of each curve is the
# first sample, all four stages alive, taken at least WARMUP_S seconds after the stages
# appeared and after 1% of the frames (at least 50) were published (set-up, the first
# frames and the allocator's first arenas are not a leak: tract's infer grows ~0.8 MiB over
# its first 10 frames); its end is the last sample with all four stages
# alive (capture leaves first once its frames are out, the others drain). Prints per stage
# the start and end values and the growth, and a verdict: exits 1 unless, per stage, the fd,
# memfd and dma-buf counts end where they started and RSS grew by less than 1 MiB, and every
# frame was published. A long run, never a test: `make soak`; `make soak-short` (300000
# and 100 frames) is the same in under a minute.
set -euo pipefail
cd "$(dirname "$0")/.."
frames=${1:-1000000}
onnx_frames=${2:-3000}
interval=${3:-1}
warmup=${4:-2}
bin=target/release/zcpipe
[ -x "$bin" ] || cargo build --release --locked
out=target/soak
mkdir -p "$out"
work=$(mktemp -d)
pid=
trap '[ -z "$pid" ] || kill "$pid" 2>/dev/null; rm -rf "$work"' EXIT
status=0

# soak NAME FRAMES FLAGS...: one run, sampled until it ends; prints its table and verdict.
soak() {
    local name=$1 n=$2
    shift 2
    local csv="$out/$name.csv" log="$out/$name.log" summary="$out/$name.summary.json"
    mkdir -p "$work/$name"
    echo "soak.sh: $name: zcpipe run --source testsrc:1920x1080@max --frames $n --ring-policy block $* (every ${interval} s)" >&2
    XDG_RUNTIME_DIR="$work/$name" "$bin" run --source testsrc:1920x1080@max --frames "$n" --ring-policy block \
        --no-print --stats-interval 1 --summary-json "$summary" "$@" >/dev/null 2>"$log" &
    pid=$!
    local verdict=0
    python3 - "$pid" "$csv" "$log" "$interval" "$warmup" "$n" "$name" <<'PY' || verdict=$?
import os, re, sys, time

pid, csv, log, interval, warmup, frames, name = int(sys.argv[1]), sys.argv[2], sys.argv[3], float(sys.argv[4]), float(sys.argv[5]), int(sys.argv[6]), sys.argv[7]
STAGES = ["capture", "scale", "infer", "publish"]
FIELDS = ["rss_kib", "pss_kib", "fds", "memfds", "dmabufs"]
PUBLISHED = re.compile(r"published (\d+) frames")

def running(p):
    """Whether process p exists and is not a zombie (`zcpipe run` stays one until bash waits)."""
    try:
        stat = open(f"/proc/{p}/stat").read()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"

def stages():
    """stage name -> pid, for the children of `zcpipe run` (`zcpipe stage NAME ...`)."""
    found = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = open(f"/proc/{d}/stat").read()
            ppid = int(stat[stat.rindex(")") + 2:].split()[1])
            argv = open(f"/proc/{d}/cmdline", "rb").read().split(b"\0")
        except (OSError, ValueError, IndexError):
            continue
        if ppid == pid and len(argv) > 2 and argv[1] == b"stage" and argv[2].decode() in STAGES:
            found[argv[2].decode()] = int(d)
    return found

def sample(p):
    """One stage's values, or None if it is gone."""
    try:
        rss = next(int(l.split()[1]) for l in open(f"/proc/{p}/status") if l.startswith("VmRSS:"))
        pss = next(int(l.split()[1]) for l in open(f"/proc/{p}/smaps_rollup") if l.startswith("Pss:"))
        links = []
        for fd in os.listdir(f"/proc/{p}/fd"):
            try:
                links.append(os.readlink(f"/proc/{p}/fd/{fd}"))
            except OSError:
                pass  # closed between listdir and readlink
    except (OSError, StopIteration):
        return None
    memfds = sum(l.startswith("/memfd:") for l in links)
    dmabufs = sum(l.startswith("anon_inode:dmabuf") or l.startswith("/dmabuf:") for l in links)
    return {"rss_kib": rss, "pss_kib": pss, "fds": len(links), "memfds": memfds, "dmabufs": dmabufs}

def published():
    """Frames published so far, from the run's latest stats line."""
    try:
        hits = PUBLISHED.findall(open(log, errors="replace").read()[-4096:])
    except OSError:
        return 0
    return int(hits[-1]) if hits else 0

# Rounds: t_s (from the moment all four stages were seen), frames, stage -> sample (or None).
rounds, pids, t0 = [], {}, None
with open(csv, "w") as f:
    f.write("t_s,stage,pid,rss_kib,pss_kib,fds,memfds,dmabufs,frames\n")
    while running(pid):
        if t0 is None:
            pids = stages()
            if len(pids) < 4:
                time.sleep(0.05)
                continue
            t0 = time.monotonic()
            next_at = t0
        t = time.monotonic() - t0
        n = published()
        r = {st: sample(pids[st]) for st in STAGES}
        # A stage that left during the round (its teardown) makes the round incomplete.
        if not all(running(pids[st]) for st in STAGES):
            r = {st: None for st in STAGES}
        rounds.append((t, n, r))
        for st in STAGES:
            if r[st]:
                f.write(f"{t:.1f},{st},{pids[st]},{','.join(str(r[st][k]) for k in FIELDS)},{n}\n")
        f.flush()
        next_at += interval
        while running(pid) and time.monotonic() < next_at:
            time.sleep(0.05)

complete = [(t, n, r) for t, n, r in rounds if all(r.values())]
settled = max(frames // 100, 50)
starts = [x for x in complete if x[0] >= warmup and x[1] >= settled]
if t0 is None:
    sys.exit(f"soak.sh: {name}: the four stages never all ran; see {log}")
if not starts or starts[0] is complete[-1]:
    sys.exit(f"soak.sh: {name}: no sample after the warm-up ({warmup:g} s, {settled} frames) but before the end; "
             f"give more frames or a shorter interval")
(t1, n1, a), (t2, n2, b) = starts[0], complete[-1]
window = [r for t, _, r in complete if t1 <= t <= t2]
print(f"\n### {name}: {frames:,} frames, samples every {interval:g} s, start at {t1:.0f} s ({n1:,} frames published), "
      f"end at {t2:.0f} s ({n2:,} frames), {len(window)} samples\n")
print("| stage | RSS KiB start → end (growth; max between) | Pss KiB start → end | fds start → end | memfds start → end | dma-bufs start → end | verdict |")
print("|---|---|---|---|---|---|---|")
bad = []
for st in STAGES:
    x, y = a[st], b[st]
    grow, top = y["rss_kib"] - x["rss_kib"], max(r[st]["rss_kib"] for r in window)
    why = [k for k in ("fds", "memfds", "dmabufs") if x[k] != y[k]] + (["RSS +1 MiB"] if grow >= 1024 else [])
    bad += [f"{st} {w}" for w in why]
    print(f"| {st} | {x['rss_kib']:,} → {y['rss_kib']:,} ({grow:+,}; {top:,}) | {x['pss_kib']:,} → {y['pss_kib']:,} ({y['pss_kib'] - x['pss_kib']:+,}) | "
          f"{x['fds']} → {y['fds']} | {x['memfds']} → {y['memfds']} | {x['dmabufs']} → {y['dmabufs']} | {'FLAT' if not why else 'GREW: ' + ', '.join(why)} |")
print(f"\nsoak.sh: {name}: " + ("flat: fds, memfds and dma-bufs unchanged, RSS growth under 1 MiB in every stage" if not bad
                             else "NOT flat: " + "; ".join(bad)) + f" ({csv})")
sys.exit(2 if bad else 0)
PY
    local rc=0
    wait "$pid" || rc=$?
    pid=
    if [ "$rc" -ne 0 ]; then
        echo "soak.sh: $name: zcpipe run exited $rc:" >&2
        tail -n 20 "$log" >&2
        status=1
        return
    fi
    python3 - "$summary" "$n" "$name" <<'PY' || status=1
import json, sys
s, n, name = json.load(open(sys.argv[1])), int(sys.argv[2]), sys.argv[3]
p = s["stages"]["publish"]
span = p["out_span"]
fps = (span["frames"] - 1) / (span["last_s"] - span["first_s"]) if span["frames"] > 1 else 0
print(f"soak.sh: {name}: {p['frames_out']:,} of {n:,} frames published in {s['elapsed_s']:.1f} s ({fps:,.0f} fps), exit codes {s['exit_codes']}")
sys.exit(0 if p["frames_out"] == n and not any(s["exit_codes"].values()) else 1)
PY
    [ "$verdict" -eq 0 ] || status=1
}

soak transport "$frames" --scaler none --infer none
[ "$onnx_frames" -eq 0 ] || soak onnx "$onnx_frames" --scaler cpu --infer onnx
exit "$status"

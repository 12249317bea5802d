#!/usr/bin/env bash
# The frame-ring hop against a Unix-socket copy at 480p, 1080p and 4K NV12 frames
# (640x480, 1920x1080, 3840x2160), through `zcpipe bench ipc`.
#
#   benches/ring_vs_socket.sh                 # hot caches, 5 runs per row
#   benches/ring_vs_socket.sh --cold --rounds 9 --cpus 4,5
#
# Extra arguments go to `zcpipe bench ipc`. Prints the bench's table, then one line per
# size: ring, ring-desc and unix medians and how many times faster the ring is.
# Set ZCPIPE to use another binary (default: target/release/zcpipe, built if missing).
set -euo pipefail
cd "$(dirname "$0")/.."
zcpipe=${ZCPIPE:-target/release/zcpipe}
if [[ ! -x $zcpipe ]]; then
    cargo build --release
fi
json=$(mktemp)
trap 'rm -f "$json"' EXIT
"$zcpipe" bench ipc --sizes 480p,1080p,4k --transports ring,ring-desc,unix --json "$@" >"$json"
python3 - "$json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
rows = {(x["transport"], x["size"]): x for x in r["rows"]}
print("# frame ring vs Unix socket, one-way µs (median of runs)\n")
print(f"- CPUs: {r['placement']['description']}")
print(f"- load average {r['host']['loadavg']} at start; scheduling {r['host']['scheduling']}; ring pool: {r['ring_memory']}\n")
print("| frame | ring µs | ring-desc µs | unix µs | none µs | unix / ring | ring / none |")
print("|---|---:|---:|---:|---:|---:|---:|")
for size in ("480p", "1080p", "4k"):
    m = {t: (rows.get((t, size)) or {}).get("median_us") for t in ("ring", "ring-desc", "unix", "none")}
    f = lambda v: "–" if v is None else f"{v:.1f}"
    q = lambda a, b: "–" if a is None or b is None else f"{a / b:.2f}x"
    print(f"| {size} | {f(m['ring'])} | {f(m['ring-desc'])} | {f(m['unix'])} | {f(m['none'])} | {q(m['unix'], m['ring'])} | {q(m['ring'], m['none'])} |")
print()
for g in r["goals"]:
    if g["value"] is not None:
        print(f"- {g['name']}: {g['value']:.2f}x (goal {g['target']}): {'met' if g['met'] else 'MISSED'}")
failed = [f"{x['transport']} {x['size']}: {x['reason']}" for x in r["rows"] if x["status"] == "failed"]
if failed:
    print("failed:", *failed, sep="\n  ")
    sys.exit(1)
PY

#!/usr/bin/env bash
# Build what the guest runs and lay it out in OUTDIR (the harness runs every top-level
# executable of OUTDIR as one test):
#   OUTDIR/10-devices.sh ...     vm/smoke-tests/* and vm/guest-tests/* (wrapper scripts)
#   OUTDIR/bin/zcpipe            static zcpipe, without the onnx feature (--infer none)
#   OUTDIR/bin/vm_guest          static test binary of tests/vm_guest.rs
#   OUTDIR/bin/models/coco80.txt labels (the infer stage loads them even with --infer none)
# usage: vm/build-guest.sh OUTDIR
# Cargo builds into $ZCPIPE_VM_BUILD/cargo (default build/vm/cargo) with an explicit
# --target, so these static artifacts never mix with the normal `cargo build` ones.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${ZCPIPE_VM_BUILD:-$ROOT/build/vm}
CARGO=${CARGO:-cargo}
TARGET=x86_64-unknown-linux-gnu

log() { echo "vm/build-guest: $*"; }
die() { echo "vm/build-guest: ERROR: $*" >&2; exit 1; }

[ $# -eq 1 ] || die "usage: $0 OUTDIR"
OUT=$1
command -v "$CARGO" >/dev/null || die "$CARGO not found: install Rust (rustup)"

export CARGO_TARGET_DIR=$BUILD/cargo
# Static glibc binaries: the guest is a busybox initramfs without a libc. With --target,
# RUSTFLAGS reach only the target artifacts, not build scripts or proc-macros.
export RUSTFLAGS="-C target-feature=+crt-static"
FLAGS=(--release --locked --no-default-features --target "$TARGET")

cd "$ROOT"
start=$(date +%s)
log "building static zcpipe and tests/vm_guest.rs (no onnx) in $CARGO_TARGET_DIR"
"$CARGO" build "${FLAGS[@]}" --bin zcpipe
TEST_EXE=$("$CARGO" test "${FLAGS[@]}" --test vm_guest --no-run --message-format=json \
    | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -n1)
[ -n "$TEST_EXE" ] && [ -x "$TEST_EXE" ] || die "cargo test --no-run gave no vm_guest executable"
ZCPIPE_EXE=$CARGO_TARGET_DIR/$TARGET/release/zcpipe
for f in "$ZCPIPE_EXE" "$TEST_EXE"; do
    if readelf -l "$f" 2>/dev/null | grep -q INTERP; then die "$f is dynamically linked"; fi
done
log "built in $(( $(date +%s) - start )) s"

rm -rf "$OUT"
mkdir -p "$OUT/bin/models"
cp "$ROOT"/vm/smoke-tests/* "$ROOT"/vm/guest-tests/* "$OUT/"
# Without debug info (symbols stay, for backtraces): a smaller initramfs boots faster.
strip --strip-debug -o "$OUT/bin/zcpipe" "$ZCPIPE_EXE"
strip --strip-debug -o "$OUT/bin/vm_guest" "$TEST_EXE"
cp "$ROOT/models/coco80.txt" "$OUT/bin/models/"
log "$OUT: $(ls "$OUT" | tr '\n' ' ')+ bin/ ($(du -sh "$OUT/bin" | cut -f1))"

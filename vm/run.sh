#!/usr/bin/env bash
# Boot Debian's 6.12 kernel under qemu (TCG) with the tests in TESTDIR baked into the
# initramfs, and report their result.
#   usage: vm/run.sh TESTDIR
# Environment (optional):
#   VM_TIMEOUT=600        wall-clock limit for the whole VM run, seconds
#   VM_TEST_TIMEOUT=300   limit per test inside the guest, seconds
#   VM_TEST_FILTER=STR    run only tests whose file name contains STR
#   VM_MEM=1024 VM_SMP=2  guest memory (MiB) and CPUs
#   VM_APPEND="..."       more kernel parameters, e.g. "drm.debug=0x16 loglevel=8" to see
#                         why a DRM commit is refused, in the console log
# Exit status: 0 only if the guest ran at least one test and all passed.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${ZCPIPE_VM_BUILD:-$ROOT/build/vm}
export ZCPIPE_VM_BUILD=$BUILD
VM_TIMEOUT=${VM_TIMEOUT:-600}
VM_MEM=${VM_MEM:-1024}
VM_SMP=${VM_SMP:-2}
LOG=$BUILD/last-run.log
INITRD=$BUILD/initramfs.cpio.gz

log() { echo "vm/run: $*"; }
die() { echo "vm/run: ERROR: $*" >&2; exit 2; }

[ $# -eq 1 ] || die "usage: $0 TESTDIR"
TESTDIR=$1
[ -d "$TESTDIR" ] || die "test directory '$TESTDIR' not found"
command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86_64 not found: run vm/setup.sh first"
QBOOT=/usr/share/qemu/qboot.rom
[ -f "$QBOOT" ] || die "$QBOOT not found: run vm/setup.sh first"

mkdir -p "$BUILD"
# One VM run at a time per build dir (they share the initramfs and the log).
exec 9>"$BUILD/.run.lock"
flock -n 9 || { log "another vm/run.sh is using $BUILD; waiting"; flock 9; }

bash "$ROOT/vm/kernel.sh"
bash "$ROOT/vm/initramfs.sh" "$INITRD" "$TESTDIR"

APPEND="console=ttyS0 quiet panic=-1"
[ -n "${VM_TEST_TIMEOUT:-}" ] && APPEND+=" zcpipe.timeout=$VM_TEST_TIMEOUT"
[ -n "${VM_TEST_FILTER:-}" ] && APPEND+=" zcpipe.filter=$VM_TEST_FILTER"
[ -n "${VM_APPEND:-}" ] && APPEND+=" $VM_APPEND"

QEMU=(qemu-system-x86_64 -accel tcg -nographic -no-reboot -m "$VM_MEM" -smp "$VM_SMP"
      -nic none -bios "$QBOOT"
      -device isa-debug-exit,iobase=0xf4,iosize=0x04
      -kernel "$BUILD/kernel/vmlinuz" -initrd "$INITRD" -append "$APPEND")
log "booting $(cat "$BUILD/kernel/kver") (timeout ${VM_TIMEOUT}s, console log: $LOG)"
start=$(date +%s)
set +e
# stdin from /dev/null: qemu must not grab (or be stopped by) the terminal.
timeout -k 10 "$VM_TIMEOUT" "${QEMU[@]}" </dev/null 2>&1 | sed -u 's/\r$//' | tee "$LOG"
rc=${PIPESTATUS[0]}
set -e
secs=$(( $(date +%s) - start ))

summary=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$LOG" | tail -n1 || true)
status=1
case $rc in
    124|137)
        running=$(awk '$1 == "VMTEST" && $3 == "START" { t = $2 } $1 == "VMTEST" && ($3 == "PASS" || $3 == "FAIL") { t = "" } END { print t }' "$LOG")
        if [ -n "$running" ]; then where="while test $running was running"
        elif grep -q '^zcpipe-vm: kernel' "$LOG"; then where="in the guest's init"
        else where="before init started (hung boot?)"; fi
        msg="TIMEOUT: the VM did not finish within ${VM_TIMEOUT}s, $where (see $LOG)" ;;
    0)
        if grep -q 'Kernel panic' "$LOG"; then
            msg="GUEST PANIC: $(grep -m1 'Kernel panic' "$LOG") (see $LOG)"
        else
            msg="the guest stopped without reporting a result (see $LOG)"
        fi ;;
    *)
        if [ $((rc % 2)) -eq 1 ]; then
            code=$(( (rc - 1) / 2 ))   # isa-debug-exit: qemu exits with (code << 1) | 1
            case $code in
                0) if [ -n "$summary" ] && ! grep -q '^zcpipe-vm: no tests were run' "$LOG"; then
                       status=0; msg="all tests passed"
                   else
                       msg="qemu exited with status 1 without a test summary (qemu error?)"
                   fi ;;
                1) msg="some tests FAILED: $(grep '^zcpipe-vm: failed:' "$LOG" | tail -n1 | sed 's/^zcpipe-vm: failed: *//')" ;;
                2) msg="no tests were run (no executables in $TESTDIR?)" ;;
                3) msg="tests passed but kernel modules failed to load (see VMTEST-SETUP in $LOG)" ;;
                *) msg="guest reported exit code $code" ;;
            esac
        else
            msg="qemu failed with exit status $rc (see $LOG)"
        fi ;;
esac

echo
if [ $status -eq 0 ]; then log "$msg (VM ${secs}s)"; else log "FAILED: $msg (VM ${secs}s, qemu status $rc)"; fi
if [ -n "$summary" ]; then
    echo "$summary"
fi
exit $status

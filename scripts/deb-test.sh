#!/usr/bin/env bash
# CI test of the amd64 package (`make deb-test`, after `make deb-amd64`): installs
# build/deb/zcpipe_<version>_amd64.deb on this machine with apt-get (as root), runs
# `zcpipe doctor` and a 20-frame `zcpipe run` of the default job from the installed paths only
# (a temporary directory as the current one, and the checkout hidden under an empty tmpfs where
# `unshare -m` may mount one), then purges the package, also when a step fails (trap), and
# checks that its files are gone.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD

log() { echo "deb-test: $*" >&2; }
die() { echo "deb-test: error: $*" >&2; exit 1; }

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n1)
deb=build/deb/zcpipe_${version}-1_amd64.deb
[ -f "$deb" ] || die "$deb does not exist: run make deb-amd64 first"
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
# Never purge a zcpipe someone installed by other means.
# dpkg's state of the zcpipe package: empty or not-installed when absent.
pkg_state() { dpkg-query -W -f='${db:Status-Status}' zcpipe 2>/dev/null || true; }
if [ -n "$(pkg_state)" ] && [ "$(pkg_state)" != not-installed ]; then
    die "a zcpipe package is already on this machine ($(dpkg-query -W -f='${Version} ${Status}' zcpipe)); purge it first (apt-get purge zcpipe)"
fi
[ ! -e /usr/bin/zcpipe ] || die "/usr/bin/zcpipe exists and belongs to no package: remove it first"

# What the package installs, checked present after install and absent after purge.
files=(
    /usr/bin/zcpipe
    /usr/share/zcpipe/models/yolox_nano.onnx
    /usr/share/zcpipe/models/coco80.txt
    /usr/share/zcpipe/models/yolox_nano_416_rk3588.rknn
    /usr/share/zcpipe/one-by-one-person-detection.mp4
    /usr/share/zcpipe/one-by-one-person-detection.PROVENANCE.md
    /usr/lib/udev/rules.d/99-zcpipe.rules
    /usr/lib/systemd/system/zcpipe.target
    /usr/lib/systemd/system/zcpipe.service
    /usr/lib/systemd/system/zcpipe-capture.service
    /usr/lib/systemd/system/zcpipe-capture@.service
    /usr/lib/systemd/system/zcpipe-infer.service
    /etc/zcpipe/zcpipe.toml
    /usr/share/doc/zcpipe/examples/zcpipe.toml
    /usr/share/doc/zcpipe/copyright
    /usr/share/man/man1/zcpipe.1.gz
)

tmp=$(mktemp -d /tmp/zcpipe-deb-test.XXXXXX)
installed=0
cleanup() {
    local rc=$?
    if [ "$installed" = 1 ]; then
        log "purging the package (a step failed)"
        $SUDO env DEBIAN_FRONTEND=noninteractive apt-get purge -y zcpipe || true
    fi
    rm -rf "$tmp"
    exit "$rc"
}
trap cleanup EXIT

bash scripts/deb.sh lint amd64

log "apt-get install -y ./$deb"
installed=1
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y "./$deb"
for f in "${files[@]}"; do
    [ -e "$f" ] || die "$f is missing after install"
done
getent group zcpipe >/dev/null || die "postinst did not create the zcpipe group"
getent passwd zcpipe >/dev/null || die "postinst did not create the zcpipe user"
$SUDO dpkg --verify zcpipe || die "dpkg --verify zcpipe: installed files differ from the package's md5sums"
log "installed: $(dpkg-query -W -f='${Package} ${Version} ${Architecture}, Depends: ${Depends}' zcpipe)"

# From the installed paths only: a directory outside the checkout, and the checkout (with the
# build's target dir) hidden under an empty tmpfs in a private mount namespace where allowed.
hide=("$repo")
[ -z "${CARGO_TARGET_DIR:-}" ] || hide+=("$(realpath -m "$CARGO_TARGET_DIR")")
run_installed() {
    local script=$1
    if $SUDO unshare -m true 2>/dev/null; then
        # shellcheck disable=SC2016
        $SUDO unshare -m env -u ZCPIPE_DATA_DIR HIDE="${hide[*]}" sh -c 'for d in $HIDE; do [ ! -d "$d" ] || mount -t tmpfs -o size=1m zcpipe-deb-test "$d"; done; '"$script"
    else
        log "unshare -m is not allowed here: the checkout stays visible (the binary looks in /usr/share/zcpipe before its build tree)"
        env -u ZCPIPE_DATA_DIR sh -c "$script"
    fi
}
cd "$tmp"
log "zcpipe doctor (in $tmp, checkout hidden)"
run_installed "ls $repo | wc -l | sed 's/^/files visible in the checkout: /'; cd $tmp && zcpipe doctor" | tee doctor.txt
log "zcpipe run --frames 20 (the default job: the bundled clip, YOLOX-Nano on the CPU)"
run_installed "cd $tmp && zcpipe run --frames 20 --ring-policy block --stats-interval 1 --run-dir $tmp/run --publish $tmp/detections.sock \
    --summary-json $tmp/summary.json >$tmp/frames.txt" 2>&1 | tee run.txt
frames=$(grep -c '^frame ' frames.txt || true)
head -n 3 frames.txt
python3 - "$tmp/summary.json" "$frames" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
frames = int(sys.argv[2])
assert s["stages"]["capture"]["frames_out"] == 20, s["stages"]["capture"]
assert all(c == 0 for c in s["exit_codes"].values()), s["exit_codes"]
assert frames == 20, f"{frames} frame lines on stdout, want 20"
print("deb-test: installed zcpipe: 20 frames captured and printed, every stage exited 0")
PY
grep -q '/usr/share/zcpipe/models/yolox_nano.onnx' run.txt || die "the run did not use /usr/share/zcpipe/models/yolox_nano.onnx (run.txt: $(grep -m3 -i 'model' run.txt))"
grep -q '/usr/share/zcpipe/one-by-one-person-detection.mp4' run.txt || die "the run did not play /usr/share/zcpipe/one-by-one-person-detection.mp4"
cd "$repo"

log "apt-get purge -y zcpipe"
$SUDO env DEBIAN_FRONTEND=noninteractive apt-get purge -y zcpipe
installed=0
for f in "${files[@]}" /usr/share/zcpipe /etc/zcpipe /usr/share/doc/zcpipe; do
    [ ! -e "$f" ] || die "$f is still there after apt-get purge zcpipe"
done
[ -z "$(pkg_state)" ] || [ "$(pkg_state)" = not-installed ] || die "dpkg still has zcpipe ($(pkg_state)) after the purge"
log "purged: every file of the package is gone (the zcpipe user and group stay, as Debian packages leave them)"

#!/usr/bin/env bash
# Builds the Debian package of zcpipe with dpkg-deb from the project's own files (no cargo-deb, no
# debhelper): build/deb/zcpipe_<version>_<arch>.deb.
#   bash scripts/deb.sh amd64|arm64   package the release binary already built for that
#                                     architecture (amd64: `make build`, target/release/zcpipe;
#                                     arm64: `make aarch64`, target/aarch64-unknown-linux-gnu/release/zcpipe)
#   bash scripts/deb.sh lint [ARCH]   lintian on the packages in build/deb/ (both, or ARCH's)
#   ZCPIPE_DEB_BIN=path               package that binary instead (it must be built for ARCH)
#   ZCPIPE_DEB_MAINTAINER="Name <mail>"  the Maintainer field
# What goes where (docs/src/user/install.md "Install from a package"):
#   /usr/bin/zcpipe                          stripped
#   /usr/share/zcpipe/models/                the ONNX and .rknn models, coco80.txt, PROVENANCE.md
#   /usr/share/zcpipe/one-by-one-person-detection.mp4 (+ .PROVENANCE.md): what --source auto plays
#                                            (crates/core/src/data.rs looks in /usr/share/zcpipe)
#   /usr/lib/udev/rules.d/99-zcpipe.rules    the device nodes for the zcpipe group
#   /usr/lib/systemd/system/                 deploy/'s units (installed, not enabled)
#   /etc/zcpipe/zcpipe.toml                  deploy/zcpipe.toml with every setting commented out, a conffile
#   /usr/share/doc/zcpipe/examples/zcpipe.toml   deploy/zcpipe.toml as it is
#   /usr/share/doc/zcpipe/examples/mosquitto/zcpipe-bridge.conf   deploy/mosquitto/'s bridge
#   /usr/share/doc/zcpipe/                   copyright (machine-readable), changelog.Debian.gz
#   /usr/share/man/man1/zcpipe*.1.gz
# Depends: dpkg-shlibdeps where it can resolve the binary's libraries (the host's architecture),
# else the glibc and libgcc symbol versions the binary needs (objdump); plus ffmpeg (the video and
# network sources run it) and adduser (postinst).
set -euo pipefail
cd "$(dirname "$0")/.."

log() { echo "deb: $*" >&2; }
die() { echo "deb: error: $*" >&2; exit 1; }

# lintian on the packages built (docs/src/user/install.md "Install from a package" explains each override):
# fails on an error or a warning that is not overridden; prints the overridden ones too.
lint() {
    local debs=() a
    for a in "${@:-amd64 arm64}"; do
        for a in $a; do
            debs+=(build/deb/zcpipe_*_"$a".deb)
        done
    done
    debs=($(ls "${debs[@]}" 2>/dev/null || true))
    ((${#debs[@]})) || die "no package in build/deb/: run make deb-amd64 (or make deb) first"
    if ! command -v lintian >/dev/null 2>&1; then
        die "lintian not found: apt-get install lintian (make setup installs it)"
    fi
    # Every tag down to pedantic and experimental, overridden ones as O:; an E: or W: line fails.
    # (lintian 2.116's --fail-on also counts overridden tags when --show-overrides is given.)
    log "lintian --pedantic --display-experimental --show-overrides ${debs[*]}"
    local out
    out=$(lintian --pedantic --display-experimental --show-overrides "${debs[@]}" 2>&1) || true
    echo "$out"
    if grep -q '^[EW]: ' <<<"$out"; then
        die "lintian: an error or warning above is neither fixed nor overridden (packaging/deb/lintian-overrides)"
    fi
    log "lintian: no error or warning left; the O: lines are overridden in packaging/deb/lintian-overrides (docs/src/user/install.md \"Install from a package\")"
}
if [ "${1:-}" = lint ]; then
    shift
    lint "$@"
    exit 0
fi

arch=${1:-}
case "$arch" in
    amd64) triple=x86_64-unknown-linux-gnu; machine=62; tools= ;;
    arm64) triple=aarch64-unknown-linux-gnu; machine=183; tools=aarch64-linux-gnu- ;;
    *) echo "usage: $0 amd64|arm64" >&2; exit 2 ;;
esac
target_dir=${CARGO_TARGET_DIR:-target}
if [ "$arch" = amd64 ] && [ "$(dpkg --print-architecture)" = amd64 ]; then
    default_bin=$target_dir/release/zcpipe
else
    default_bin=$target_dir/$triple/release/zcpipe
fi
bin=${ZCPIPE_DEB_BIN:-$default_bin}
[ -f "$bin" ] || die "$bin does not exist: build it first (make build for amd64, make aarch64 for arm64), or set ZCPIPE_DEB_BIN"
# ELF e_machine (2 bytes, little-endian, at offset 18): 62 x86-64, 183 aarch64.
got=$(od -An -t u2 -j 18 -N 2 "$bin" | tr -d ' ')
[ "$got" = "$machine" ] || die "$bin is not an $arch binary (ELF machine $got, want $machine): build it for $triple"
for t in "${tools}strip" "${tools}objdump"; do
    command -v "$t" >/dev/null 2>&1 || die "$t not found: install binutils$([ -z "$tools" ] || echo "-${tools%-}") (make aarch64 installs the cross binutils)"
done

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n1)
[ -n "$version" ] || die "no version = \"...\" line in Cargo.toml"
debversion=$version-1
maintainer=${ZCPIPE_DEB_MAINTAINER:-zcpipe maintainers <maintainers@users.noreply.a-seed-55b749e7.example>}
# Dates and mtimes from the last commit, so two builds of one commit are the same bytes.
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}
config=deploy/zcpipe.toml
[ -f "$config" ] || die "$config is missing (the example config installed as /etc/zcpipe/zcpipe.toml)"

out=build/deb
root=$out/zcpipe_${debversion}_$arch
deb=$out/zcpipe_${debversion}_$arch.deb
rm -rf "$root" "$deb"
mkdir -p "$root/DEBIAN"
umask 022

# The binary, stripped as dh_strip does (debug info and symbols off, .comment and .note too).
install -D -m 0755 "$bin" "$root/usr/bin/zcpipe"
"${tools}strip" --remove-section=.comment --remove-section=.note "$root/usr/bin/zcpipe"
log "binary: $(stat -c %s "$bin") bytes, stripped $(stat -c %s "$root/usr/bin/zcpipe") bytes"

# Data: what `zcpipe run`'s defaults look up (crates/core/src/data.rs, INSTALLED_DATA_DIR).
share=$root/usr/share/zcpipe
for f in models/yolox_nano.onnx models/coco80.txt models/yolox_nano_416_*.rknn models/PROVENANCE.md; do
    install -D -m 0644 "$f" "$share/$f"
done
clip=one-by-one-person-detection.mp4
install -D -m 0644 "tests/data/$clip" "$share/$clip"
# The clip's rows of tests/data/PROVENANCE.md: the table header, its row, the attribution.
{
    echo "# $clip: provenance (from zcpipe's tests/data/PROVENANCE.md)"
    echo
    grep -m1 '^| file | size' tests/data/PROVENANCE.md
    grep -m1 '^|---' tests/data/PROVENANCE.md
    grep -m1 "^| \`$clip\` |" tests/data/PROVENANCE.md
    echo
    grep -m1 '^Attribution (required by CC BY 4.0' tests/data/PROVENANCE.md
    echo
    grep -m1 '^\*"Sample video from intel-iot-devkit' tests/data/PROVENANCE.md
} >"$share/${clip%.mp4}.PROVENANCE.md"
[ "$(grep -c "$clip\|Sample video from" "$share/${clip%.mp4}.PROVENANCE.md")" -ge 3 ] ||
    die "tests/data/PROVENANCE.md no longer has the clip's row and attribution where this script looks"

# udev rules, systemd units (not enabled: the admin enables zcpipe.target), the example config.
install -D -m 0644 udev/99-zcpipe.rules "$root/usr/lib/udev/rules.d/99-zcpipe.rules"
for u in deploy/*.service deploy/*.target; do
    if [[ $u == *.service ]] && { ! grep -q '^ExecStart=' "$u" || grep '^ExecStart=' "$u" | grep -qv '^ExecStart=/usr/bin/zcpipe '; }; then
        die "$u: each ExecStart must run /usr/bin/zcpipe, where the package puts the binary"
    fi
    install -D -m 0644 "$u" "$root/usr/lib/systemd/system/$(basename "$u")"
done
# /etc/zcpipe/zcpipe.toml is the example with every setting commented out: `zcpipe run` reads
# that file when it exists, and right after install it must run the built-in default (the
# bundled clip), not the example's cameras. The example itself goes to the docs.
install -d -m 0755 "$root/etc/zcpipe"
{
    echo "# Every setting below is commented out: zcpipe runs its built-in default until you"
    echo "# uncomment what you need. The example as written: /usr/share/doc/zcpipe/examples/zcpipe.toml"
    sed -E '/^[[:space:]]*(#|$)/!s/^/# /' "$config"
} >"$root/etc/zcpipe/zcpipe.toml"
chmod 0644 "$root/etc/zcpipe/zcpipe.toml"
install -D -m 0644 "$config" "$root/usr/share/doc/zcpipe/examples/zcpipe.toml"
# A board's mosquitto bridged to a fleet's central broker (docs/src/user/fleet.md): an
# example to copy into /etc/mosquitto/conf.d/ and fill in, not active as installed.
install -D -m 0644 deploy/mosquitto/zcpipe-bridge.conf "$root/usr/share/doc/zcpipe/examples/mosquitto/zcpipe-bridge.conf"
echo /etc/zcpipe/zcpipe.toml >"$root/DEBIAN/conffiles"

# Documentation: copyright, changelog, manual pages (packaging/man/: zcpipe.1 and one page per
# subcommand, written from the argument parser by `make docs`).
doc=$root/usr/share/doc/zcpipe
install -D -m 0644 packaging/deb/copyright "$doc/copyright"
install -d "$root/usr/share/man/man1"
for page in packaging/man/*.1; do
    gzip -9n <"$page" >"$root/usr/share/man/man1/$(basename "$page").gz"
    chmod 0644 "$root/usr/share/man/man1/$(basename "$page").gz"
done
{
    echo "zcpipe ($debversion) unstable; urgency=medium"
    echo
    echo "  * Package built from zcpipe $version (git $(git rev-parse --short HEAD 2>/dev/null || echo unknown))."
    echo "    Changes: the project's git history."
    echo
    echo " -- $maintainer  $(date -u -R -d "@$SOURCE_DATE_EPOCH")"
} | gzip -9n >"$doc/changelog.Debian.gz"
chmod 0644 "$doc/changelog.Debian.gz"
install -D -m 0644 packaging/deb/lintian-overrides "$root/usr/share/lintian/overrides/zcpipe"

# Depends. dpkg-shlibdeps maps each library the binary needs to its package and version (it
# needs a debian/control and the libraries of that architecture installed); where it cannot
# (a cross build), the versions come from the binary's own symbol versions: glibc's
# GLIBC_x.y (libc6 >= x.y) and libgcc's GCC_x.y (libgcc-s1 >= x.y). Any other library is an error.
objdump_depends() {
    local needed lib glibc gcc deps=()
    needed=$("${tools}objdump" -p "$1" | awk '$1 == "NEEDED" { print $2 }')
    for lib in $needed; do
        case "$lib" in
            libc.so.6 | libm.so.6 | libpthread.so.0 | libdl.so.2 | librt.so.1 | ld-linux*.so.*) ;;
            libgcc_s.so.1) ;;
            *) die "the binary needs $lib, which this script cannot map to a package: add it to objdump_depends" ;;
        esac
    done
    glibc=$("${tools}objdump" -T "$1" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -n1)
    [ -n "$glibc" ] && deps+=("libc6 (>= $glibc)")
    if grep -qx libgcc_s.so.1 <<<"$needed"; then
        gcc=$("${tools}objdump" -T "$1" | grep -o 'GCC_[0-9][0-9.]*' | sed 's/GCC_//' | sort -uV | tail -n1 | cut -d. -f1,2)
        deps+=("libgcc-s1 (>= ${gcc:-3.0})")
    fi
    local IFS=,
    echo "${deps[*]}" | sed 's/,/, /g'
}
shlibs=
if command -v dpkg-shlibdeps >/dev/null 2>&1 && [ "$arch" = "$(dpkg --print-architecture)" ]; then
    work=$(mktemp -d)
    mkdir "$work/debian"
    printf 'Source: zcpipe\n\nPackage: zcpipe\nArchitecture: %s\n' "$arch" >"$work/debian/control"
    if shlibs=$(cd "$work" && dpkg-shlibdeps -O -e"$OLDPWD/$root/usr/bin/zcpipe" 2>"$work/err"); then
        shlibs=${shlibs#shlibs:Depends=}
        log "dpkg-shlibdeps: $shlibs (objdump would say: $(objdump_depends "$root/usr/bin/zcpipe"))"
    else
        log "dpkg-shlibdeps failed ($(tr '\n' ' ' <"$work/err")), using objdump"
        shlibs=
    fi
    rm -rf "$work"
fi
if [ -z "$shlibs" ]; then
    shlibs=$(objdump_depends "$root/usr/bin/zcpipe")
    log "objdump: $shlibs"
fi
depends="$shlibs, adduser, ffmpeg"

# Maintainer scripts.
install -m 0755 packaging/deb/postinst packaging/deb/prerm packaging/deb/postrm "$root/DEBIAN/"

# Installed-Size: KiB, each file rounded up, as dpkg-gencontrol counts.
installed_size=$(find "$root" -path "$root/DEBIAN" -prune -o -type f -printf '%s\n' | awk '{ s += int(($1 + 1023) / 1024) } END { print s }')
cat >"$root/DEBIAN/control" <<EOF
Package: zcpipe
Version: $debversion
Architecture: $arch
Maintainer: $maintainer
Installed-Size: $installed_size
Depends: $depends
Suggests: udev, systemd, mosquitto
Section: video
Priority: optional
Description: zero-copy camera to NPU pipeline for Rockchip boards
 zcpipe moves camera frames through four stage processes (capture, scale,
 infer, publish) that share them as dma-buf file descriptors, and measures
 what that saves against copying. It drives V4L2 cameras, the Rockchip RGA
 scaler and the RKNN NPU (their vendor libraries are loaded at run time when
 present), and runs anywhere with host backends: image, video, test-pattern
 and network-stream sources, a CPU scaler, and YOLOX-Nano on the CPU.
 .
 The package holds the zcpipe binary, the YOLOX-Nano models (ONNX and .rknn
 for RK3588, RK3566/RK3568 and RK3576), a sample clip for the default job,
 udev rules giving the zcpipe group the device nodes, and systemd units that
 run each stage as its own service.
EOF

# md5sums of every file outside DEBIAN/, paths relative to the root.
(cd "$root" && find . -path ./DEBIAN -prune -o -type f -printf '%P\n' | LC_ALL=C sort | xargs -d '\n' md5sum) >"$root/DEBIAN/md5sums"
chmod 0644 "$root/DEBIAN/control" "$root/DEBIAN/conffiles" "$root/DEBIAN/md5sums"

find "$root" -newermt "@$SOURCE_DATE_EPOCH" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
log "built $deb ($(stat -c %s "$deb") bytes; Depends: $depends)"
echo "$deb"

#!/usr/bin/env bash
# Install the host packages the qemu test harness needs (Debian 12 x86-64, run as root).
# Idempotent: does nothing when everything is already installed.
set -euo pipefail

log() { echo "vm/setup: $*"; }
die() { echo "vm/setup: ERROR: $*" >&2; exit 1; }

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null 2>&1 || die "must run as root (or have sudo)"
    SUDO="sudo"
fi
export DEBIAN_FRONTEND=noninteractive

# Packages for building the initramfs and the out-of-tree modules (vim2m, v4l2-mem2mem).
BASE_PKGS=(busybox-static kmod xz-utils cpio gzip gcc make bc libc6-dev libelf-dev flex bison)
# qemu-system-x86 comes from bookworm-backports: the image's qemu-utils 10.x (backports)
# conflicts with bookworm's qemu-system 7.2.
QEMU_PKGS=(qemu-system-x86)

installed() { [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null || true)" = "install ok installed" ]; }

missing_base=()
for p in "${BASE_PKGS[@]}"; do installed "$p" || missing_base+=("$p"); done
missing_qemu=()
for p in "${QEMU_PKGS[@]}"; do installed "$p" || missing_qemu+=("$p"); done

if [ ${#missing_base[@]} -eq 0 ] && [ ${#missing_qemu[@]} -eq 0 ] \
   && command -v qemu-system-x86_64 >/dev/null && [ -f /usr/share/qemu/qboot.rom ]; then
    log "all host packages already installed ($(qemu-system-x86_64 --version | head -n1))"
    exit 0
fi

. /etc/os-release
[ "${VERSION_CODENAME:-}" = bookworm ] || log "warning: expected Debian 12 (bookworm), found '${VERSION_CODENAME:-?}'"

need_update=0
# Add bookworm-backports if no apt source mentions it. The mirror is taken from the
# source that already serves 'bookworm' (deb822 .sources or one-line sources.list).
if [ ${#missing_qemu[@]} -gt 0 ] && \
   ! grep -Rqs --include='*.list' --include='*.sources' -E '(^|[[:space:]])bookworm-backports([[:space:]]|$)' \
       /etc/apt/sources.list /etc/apt/sources.list.d/; then
    mirror=""
    for f in /etc/apt/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        mirror=$(awk '
            BEGIN { RS=""; FS="\n" }
            {
                uris=""; suites=""; types=""
                for (i = 1; i <= NF; i++) {
                    if ($i ~ /^URIs:/)   { uris=$i;   sub(/^URIs:[ \t]*/, "", uris) }
                    if ($i ~ /^Suites:/) { suites=" " $i " " }
                    if ($i ~ /^Types:/)  { types=$i }
                }
                if (types ~ /deb([ \t]|$)/ && suites ~ /[ \t]bookworm[ \t]/) { split(uris, u, /[ \t]+/); print u[1]; exit }
            }' "$f")
        [ -n "$mirror" ] && break
    done
    if [ -z "$mirror" ]; then
        mirror=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null \
            | awk '$1 == "deb" && !found { i = 2; if ($2 ~ /^\[/) { while ($i !~ /\]$/) i++; i++ } if ($(i+1) == "bookworm") { print $i; found = 1 } }')
    fi
    [ -n "$mirror" ] || die "no apt source for 'bookworm' found to derive a bookworm-backports source from"
    log "adding bookworm-backports ($mirror) to /etc/apt/sources.list.d/bookworm-backports.sources"
    $SUDO tee /etc/apt/sources.list.d/bookworm-backports.sources >/dev/null <<SRC
Types: deb
URIs: $mirror
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
    need_update=1
fi

# Update package lists if we added a source, if lists look empty, or if a wanted package
# (or its backports version) is unknown to apt.
if [ $need_update -eq 0 ]; then
    for p in "${missing_base[@]}" "${missing_qemu[@]}"; do
        if ! apt-cache show "$p" >/dev/null 2>&1; then need_update=1; break; fi
    done
fi
if [ $need_update -eq 0 ] && [ ${#missing_qemu[@]} -gt 0 ] && \
   ! apt-cache policy qemu-system-x86 2>/dev/null | grep 'bookworm-backports' >/dev/null; then
    need_update=1
fi
if [ $need_update -eq 1 ]; then
    log "apt-get update"
    $SUDO apt-get -o DPkg::Lock::Timeout=600 update -qq
fi

if [ ${#missing_base[@]} -gt 0 ]; then
    log "installing: ${missing_base[*]}"
    $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends "${missing_base[@]}"
fi
if [ ${#missing_qemu[@]} -gt 0 ]; then
    log "installing from bookworm-backports: ${missing_qemu[*]}"
    $SUDO apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends -t bookworm-backports "${missing_qemu[@]}"
fi

command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86_64 still missing after install"
[ -f /usr/share/qemu/qboot.rom ] || die "/usr/share/qemu/qboot.rom missing (qemu-system-data?)"
for c in busybox depmod modprobe xz cpio gzip gcc make; do
    command -v "$c" >/dev/null || die "'$c' still missing after install"
done
log "done ($(qemu-system-x86_64 --version | head -n1))"

#!/usr/bin/env bash
# Fetch Debian's 6.12 amd64 kernel (without installing it), build vim2m + v4l2-mem2mem out of
# tree (and vkms, which Debian's amd64 6.12 config leaves out: `# CONFIG_DRM_VKMS is not set`),
# and lay out what the initramfs needs:
#   build/vm/kernel/vmlinuz           kernel image
#   build/vm/kernel/modules/*.ko      uncompressed modules
#   build/vm/kernel/modules.order     module names (one a line) in insmod order
#   build/vm/kernel/kver              kernel release string
# Cached: does nothing when those outputs exist. Delete build/vm/kernel to start over.
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD=${ZCPIPE_VM_BUILD:-$ROOT/build/vm}
OUT=$BUILD/kernel
DEBS=$OUT/debs
SCR=$OUT/root          # scratch root all .debs are unpacked into
MODSRC=$OUT/m2m-src    # out-of-tree build dir for vim2m + v4l2-mem2mem
VKMSSRC=$OUT/vkms-src  # out-of-tree build dir for vkms (when the kernel has no vkms.ko)
META=linux-image-6.12-amd64
# Modules to load (with their dependencies) besides what is built in. vkms (virtual KMS,
# drivers/gpu/drm/vkms) gives the guest a DRM card with dumb buffers, planes and a writeback
# connector (--display, --heap drm).
WANT=(vivid vim2m vkms)

# The fix applied to the vkms built here (see "vkms's encoders are clones" below); a cache
# built without it (or with an older one) is rebuilt.
VKMS_PATCH=clones-1

log() { echo "vm/kernel: $*"; }
die() { echo "vm/kernel: ERROR: $*" >&2; exit 1; }

outputs_ok() {
    [ -s "$OUT/vmlinuz" ] && [ -s "$OUT/modules.order" ] && [ -s "$OUT/kver" ] || return 1
    local m
    while read -r m; do [ -s "$OUT/modules/$m.ko" ] || return 1; done < "$OUT/modules.order"
    for m in "${WANT[@]}"; do grep -qx "$m" "$OUT/modules.order" || return 1; done  # a cache from before a module was added
    [ "$(cat "$OUT/vkms-patch" 2>/dev/null)" = "$VKMS_PATCH" ] || return 1           # or before the vkms fix below changed
}
if outputs_ok; then
    log "cached: $(cat "$OUT/kver"), $(wc -l < "$OUT/modules.order") modules in $OUT"
    exit 0
fi

for c in apt-get apt-cache dpkg depmod modprobe xz make gcc tar; do
    command -v "$c" >/dev/null || die "'$c' not found: run vm/setup.sh first"
done

# --- resolve packages -------------------------------------------------------------------
resolve_image() {
    apt-cache depends "$META" 2>/dev/null \
        | awk '$1 == "Depends:" && $2 ~ /^linux-image-/ && !found { print $2; found = 1 }'
}
IMG=$(resolve_image || true)
if [ -z "$IMG" ]; then
    log "$META unknown to apt; running apt-get update"
    apt-get -o DPkg::Lock::Timeout=600 update -qq
    IMG=$(resolve_image || true)
fi
[ -n "$IMG" ] || die "cannot resolve the linux-image package from $META (apt-cache depends $META)"
KVER=${IMG#linux-image-}                       # 6.12.117+deb12-amd64
ABI=${KVER%-amd64}                              # 6.12.117+deb12
PKGVER=$(apt-cache show --no-all-versions "$IMG" | awk '/^Version:/ && !found { print $2; found = 1 }')
[ -n "$PKGVER" ] || die "no version for $IMG"
log "kernel $KVER (package $IMG $PKGVER)"

SRCPKG=linux-source-6.12
if apt-cache show "$SRCPKG=$PKGVER" >/dev/null 2>&1; then
    SRCSPEC="$SRCPKG=$PKGVER"
else
    log "warning: $SRCPKG $PKGVER not found, using the candidate version"
    SRCSPEC=$SRCPKG
fi

# --- download (each .deb once) -------------------------------------------------------------
mkdir -p "$DEBS"
download() {  # $1 = package name, $2 = apt spec
    local have
    have=$(ls "$DEBS/$1"_*.deb 2>/dev/null | head -n1 || true)
    if [ -n "$have" ]; then echo "$have"; return; fi
    log "downloading $2" >&2
    (cd "$DEBS" && apt-get -q -o APT::Sandbox::User=root download "$2" >&2) || die "apt-get download $2 failed"
    ls "$DEBS/$1"_*.deb | head -n1
}
# Version-qualified names: ensure a stale deb from another kernel is not picked up.
DEB_IMG=$(download "$IMG" "$IMG")
DEB_HDR=$(download "linux-headers-$KVER" "linux-headers-$KVER")
DEB_COM=$(download "linux-headers-$ABI-common" "linux-headers-$ABI-common")
DEB_KB=$(download "linux-kbuild-$ABI" "linux-kbuild-$ABI")
for d in "$DEBS/${SRCPKG}"_*.deb; do  # drop a source deb of another version
    [ -e "$d" ] || continue
    case "$d" in *"_${PKGVER//:/%3a}_"*) ;; *) log "removing stale $(basename "$d")"; rm -f "$d" ;; esac
done
DEB_SRC=$(download "$SRCPKG" "$SRCSPEC")

# --- unpack into the scratch root ------------------------------------------------------------
rm -rf "$SCR"
mkdir -p "$SCR"
for d in "$DEB_IMG" "$DEB_HDR" "$DEB_COM" "$DEB_KB"; do
    log "unpacking $(basename "$d")"
    dpkg -x "$d" "$SCR"
done
MODDIR=""
for cand in "$SCR/lib/modules/$KVER" "$SCR/usr/lib/modules/$KVER"; do
    [ -d "$cand/kernel" ] && { MODDIR=$cand; break; }
done
[ -n "$MODDIR" ] || die "no modules directory for $KVER in $IMG"
if [ "$MODDIR" = "$SCR/usr/lib/modules/$KVER" ] && [ ! -e "$SCR/lib" ]; then
    ln -s usr/lib "$SCR/lib"    # depmod/modprobe -d look under DIR/lib/modules
fi
[ -f "$SCR/boot/vmlinuz-$KVER" ] || die "no /boot/vmlinuz-$KVER in $IMG"
CONFIG=$SCR/boot/config-$KVER

HDR=$SCR/usr/src/linux-headers-$KVER
[ -f "$HDR/Makefile" ] || die "no headers Makefile at $HDR"
# The arch headers' Makefile includes the common tree by absolute path: point it at the
# scratch root.
sed -i "s|^\(include[[:space:]]\+\)/usr/src/|\1$SCR/usr/src/|" "$HDR/Makefile"
grep -q "$SCR/usr/src/linux-headers-$ABI-common" "$HDR/Makefile" \
    || die "could not rewrite the include path in $HDR/Makefile: $(grep -n include "$HDR/Makefile" | head -n3)"

# --- build vim2m + v4l2-mem2mem (and vkms) out of tree ------------------------------------------
# vkms: Debian's module if the kernel config builds one, else from the source deb.
NEED_VKMS=0
grep -q '^CONFIG_DRM_VKMS=[my]' "$CONFIG" || NEED_VKMS=1
if [ ! -s "$MODSRC/vim2m.c" ] || [ ! -s "$MODSRC/v4l2-mem2mem.c" ] || { [ $NEED_VKMS = 1 ] && [ ! -s "$VKMSSRC/vkms_drv.c" ]; }; then
    log "extracting vim2m.c, v4l2-mem2mem.c and drivers/gpu/drm/vkms from $(basename "$DEB_SRC") (takes a minute)"
    rm -rf "$OUT/src-tmp"
    mkdir -p "$OUT/src-tmp" "$MODSRC"
    dpkg-deb --fsys-tarfile "$DEB_SRC" \
        | tar -x -C "$OUT/src-tmp" --wildcards './usr/src/linux-source-6.12.tar.*'
    TARBALL=$(ls "$OUT"/src-tmp/usr/src/linux-source-6.12.tar.* | head -n1)
    tar -x -f "$TARBALL" -C "$OUT/src-tmp" --strip-components=1 --wildcards \
        '*/drivers/media/test-drivers/vim2m.c' '*/drivers/media/v4l2-core/v4l2-mem2mem.c' '*/drivers/gpu/drm/vkms/*'
    cp "$OUT/src-tmp/drivers/media/test-drivers/vim2m.c" "$OUT/src-tmp/drivers/media/v4l2-core/v4l2-mem2mem.c" "$MODSRC/"
    rm -rf "$VKMSSRC"
    cp -R "$OUT/src-tmp/drivers/gpu/drm/vkms" "$VKMSSRC"
    rm -rf "$OUT/src-tmp"
fi
echo 'obj-m := v4l2-mem2mem.o vim2m.o' > "$MODSRC/Kbuild"
log "building v4l2-mem2mem.ko and vim2m.ko against linux-headers-$KVER"
# No BTF for these modules (would need pahole; nothing here uses it).
KMAKE=(make -j1 -C "$HDR" M="$MODSRC" CONFIG_DEBUG_INFO_BTF_MODULES=)
"${KMAKE[@]}" clean >/dev/null 2>&1 || true
"${KMAKE[@]}" modules > "$OUT/m2m-build.log" 2>&1 \
    || { tail -n 40 "$OUT/m2m-build.log" >&2; die "module build failed (log: $OUT/m2m-build.log)"; }
for m in v4l2-mem2mem vim2m; do
    [ -f "$MODSRC/$m.ko" ] || die "$m.ko not built (log: $OUT/m2m-build.log)"
done
mkdir -p "$MODDIR/extra"
for m in v4l2-mem2mem vim2m; do
    strip --strip-debug -o "$MODDIR/extra/$m.ko" "$MODSRC/$m.ko"
done
if [ $NEED_VKMS = 1 ]; then
    # The source's own Makefile (vkms-y := ...; obj-$(CONFIG_DRM_VKMS) += vkms.o), with the
    # config symbol given on the command line; its KUnit tests stay out.
    # vkms's encoders are clones. 6.12 added a check (drm_atomic_helper.c,
    # drm_atomic_check_valid_clones, in drm_atomic_helper_check_modeset): a CRTC drives
    # several encoders only if each lists the others in possible_clones. vkms 6.12 leaves
    # them unset, which drm_mode_config.c reads as "its own clone only", so every commit
    # that routes the writeback connector beside Virtual-1 (the writeback of what is on
    # screen, its whole point) fails that check with EINVAL (said only at drm.debug 0x01).
    # Declare the two encoders clones of each other, as display controllers with a
    # writeback do (exynos, for one), before the device registers.
    if ! grep -q 'zcpipe: clones' "$VKMSSRC/vkms_output.c"; then
        [ "$(grep -c '^	drm_mode_config_reset(dev);$' "$VKMSSRC/vkms_output.c")" = 1 ] \
            || die "vkms_output.c has not one 'drm_mode_config_reset(dev);' line: the clones fix does not apply to this kernel's vkms"
        awk '/^\tdrm_mode_config_reset\(dev\);$/ {
                print "\t/* zcpipe: clones (vm/kernel.sh): the writeback encoder and the Virtual one may share the CRTC. */"
                print "\tif (vkmsdev->config->writeback && !writeback) {"
                print "\t\tu32 both = drm_encoder_mask(encoder) | drm_encoder_mask(&output->wb_connector.encoder);"
                print ""
                print "\t\tencoder->possible_clones = both;"
                print "\t\toutput->wb_connector.encoder.possible_clones = both;"
                print "\t}"
                print ""
            } { print }' "$VKMSSRC/vkms_output.c" > "$VKMSSRC/vkms_output.c.new"
        mv "$VKMSSRC/vkms_output.c.new" "$VKMSSRC/vkms_output.c"
        log "vkms: its Virtual and writeback encoders declared clones (the 6.12 clone check refuses the writeback otherwise)"
    fi
    log "building vkms.ko against linux-headers-$KVER (the kernel config has no CONFIG_DRM_VKMS)"
    VMAKE=(make -j1 -C "$HDR" M="$VKMSSRC" CONFIG_DRM_VKMS=m CONFIG_DRM_VKMS_KUNIT_TEST= CONFIG_DEBUG_INFO_BTF_MODULES=)
    "${VMAKE[@]}" clean >/dev/null 2>&1 || true
    "${VMAKE[@]}" modules > "$OUT/vkms-build.log" 2>&1 \
        || { tail -n 40 "$OUT/vkms-build.log" >&2; die "vkms build failed (log: $OUT/vkms-build.log)"; }
    [ -f "$VKMSSRC/vkms.ko" ] || die "vkms.ko not built (log: $OUT/vkms-build.log)"
    strip --strip-debug -o "$MODDIR/extra/vkms.ko" "$VKMSSRC/vkms.ko"
else
    log "vkms: the kernel's own module (CONFIG_DRM_VKMS=m)"
fi

# --- dependency order --------------------------------------------------------------------------
# udmabuf is built in on Debian's amd64 6.12 kernel; load it as a module if it is not.
if grep -q '^CONFIG_UDMABUF=m' "$CONFIG" 2>/dev/null; then WANT+=(udmabuf); fi
grep -q '^CONFIG_DMABUF_HEAPS_SYSTEM=y' "$CONFIG" 2>/dev/null \
    || log "warning: CONFIG_DMABUF_HEAPS_SYSTEM is not built in: /dev/dma_heap/system will be missing"
depmod -b "$SCR" "$KVER"
mapfile -t PATHS < <(modprobe -d "$SCR" -S "$KVER" --show-depends -a "${WANT[@]}" \
    | awk '$1 == "insmod" && !seen[$2]++ { print $2 }')
[ ${#PATHS[@]} -gt 0 ] || die "modprobe --show-depends found nothing for ${WANT[*]}"
for m in "${WANT[@]}"; do  # modprobe only warns about a module it cannot find
    printf '%s\n' "${PATHS[@]}" | grep -q "/${m//-/[-_]}\.ko" || die "module $m not found for $KVER (modprobe -d $SCR --show-depends $m)"
done

rm -rf "$OUT/modules" "$OUT/modules.order"
mkdir -p "$OUT/modules"
: > "$OUT/modules.order.tmp"
for p in "${PATHS[@]}"; do
    f=$(basename "$p")
    name=${f%%.ko*}
    case "$p" in
        *.ko.xz)  xz -dc "$p" > "$OUT/modules/$name.ko" ;;
        *.ko.zst) zstd -qdc "$p" > "$OUT/modules/$name.ko" ;;
        *.ko.gz)  gzip -dc "$p" > "$OUT/modules/$name.ko" ;;
        *.ko)     cp "$p" "$OUT/modules/$name.ko" ;;
        *) die "unexpected module file $p" ;;
    esac
    echo "$name" >> "$OUT/modules.order.tmp"
done
cp "$SCR/boot/vmlinuz-$KVER" "$OUT/vmlinuz"
echo "$KVER" > "$OUT/kver"
echo "$VKMS_PATCH" > "$OUT/vkms-patch"
mv "$OUT/modules.order.tmp" "$OUT/modules.order"   # written last: marks the cache complete

# Drop debs of other kernel versions; keep this version's (a rebuild then needs no download).
for d in "$DEBS"/*.deb; do
    case "$d" in "$DEB_IMG"|"$DEB_HDR"|"$DEB_COM"|"$DEB_KB"|"$DEB_SRC") ;; *) rm -f "$d" ;; esac
done
# The unpacked scratch root (~200 MB) is only needed for building: set VM_KEEP_SCRATCH=1 to keep it.
[ "${VM_KEEP_SCRATCH:-0}" = 1 ] || rm -rf "$SCR"
log "done: $KVER; insmod order: $(tr '\n' ' ' < "$OUT/modules.order")"

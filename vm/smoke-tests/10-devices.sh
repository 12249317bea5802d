#!/bin/sh
# Smoke test for the VM harness (busybox sh): the devices zcpipe's tests need are present.
fail=0
ok()  { echo "  ok:   $*"; }
bad() { echo "  FAIL: $*"; fail=1; }

node_for() {  # $1 = video4linux name; prints /dev/videoN
    for d in /sys/class/video4linux/video*; do
        [ -r "$d/name" ] || continue
        [ "$(cat "$d/name")" = "$1" ] && { echo "/dev/${d##*/}"; return 0; }
    done
    return 1
}

echo "video4linux devices:"
for d in /sys/class/video4linux/*; do
    [ -r "$d/name" ] && echo "  /dev/${d##*/} = $(cat "$d/name")"
done

for want in vivid-000-vid-cap:single-planar vivid-001-vid-cap:multi-planar vim2m:mem2mem; do
    name=${want%%:*}
    what=${want#*:}
    if n=$(node_for "$name"); then
        if [ -c "$n" ]; then ok "$name ($what) at $n"; else bad "$name: $n is not a character device"; fi
    else
        bad "no /dev/video* named $name ($what)"
    fi
done

if [ -r /etc/zcpipe-vm.env ]; then
    . /etc/zcpipe-vm.env
    [ "$VIVID_SP" = "$(node_for vivid-000-vid-cap)" ] && [ -n "$VIVID_SP" ] && ok "VIVID_SP=$VIVID_SP" || bad "VIVID_SP='$VIVID_SP' does not match"
    [ "$VIVID_MP" = "$(node_for vivid-001-vid-cap)" ] && [ -n "$VIVID_MP" ] && ok "VIVID_MP=$VIVID_MP" || bad "VIVID_MP='$VIVID_MP' does not match"
    [ "$VIM2M" = "$(node_for vim2m)" ] && [ -n "$VIM2M" ] && ok "VIM2M=$VIM2M" || bad "VIM2M='$VIM2M' does not match"
else
    bad "/etc/zcpipe-vm.env missing"
fi

for dev in /dev/dma_heap/system /dev/udmabuf; do
    if [ -c "$dev" ]; then ok "$dev ($(ls -l "$dev" | awk '{print $5 $6}'))"; else bad "$dev missing"; fi
done
[ -d /dev/dma_heap ] && echo "dma heaps: $(ls /dev/dma_heap | tr '\n' ' ')"

# vkms (enable_overlay=1 enable_writeback=1): one card, its Virtual-1 connector connected and
# its writeback connector, named in sysfs as cardN-<type>-<index>.
. /etc/zcpipe-vm.env 2>/dev/null
if [ -n "$DRM_CARD" ] && [ -c "$DRM_CARD" ]; then
    ok "DRM_CARD=$DRM_CARD ($(ls -l "$DRM_CARD" | awk '{print $5 $6}'), device $(basename "$(readlink /sys/class/drm/${DRM_CARD##*/}/device)"))"
    card=${DRM_CARD##*/}
    st=$(cat "/sys/class/drm/$card-Virtual-1/status" 2>/dev/null)
    [ "$st" = connected ] && ok "$card-Virtual-1 is connected ($(head -n1 "/sys/class/drm/$card-Virtual-1/modes") first of $(wc -l < "/sys/class/drm/$card-Virtual-1/modes") modes)" || bad "$card-Virtual-1 status '$st' (want connected)"
    [ -d "/sys/class/drm/$card-Writeback-1" ] && ok "$card-Writeback-1 (writeback connector)" || bad "no writeback connector $card-Writeback-1"
else
    bad "DRM_CARD='$DRM_CARD' is not a character device (vkms loaded? $(ls /dev/dri 2>&1 | tr '\n' ' '))"
fi

exit $fail

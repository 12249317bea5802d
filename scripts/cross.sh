#!/usr/bin/env bash
# `cross` (cross-rs) for aarch64, proven here without a container registry (issue 17).
#   bash scripts/cross.sh image   make the local stand-in for cross's aarch64 image (`make cross-image`):
#                                 a Debian bookworm root from debootstrap, `docker import`ed, and
#                                 deploy/cross/Dockerfile built on it; a no-op when the tag exists
#   bash scripts/cross.sh test    `make cross-test`: installs the pinned cross, points it at that
#                                 image for this run only, `cross build --release`, checks the
#                                 binary (aarch64 ELF; `--version` and `doctor --json` under
#                                 qemu-user through `cross run`), then `cross test` on the library
# Cross.toml is left as users need it (cross's own image from its registry): the image is named
# here by CROSS_TARGET_AARCH64_UNKNOWN_LINUX_GNU_IMAGE, which cross reads before Cross.toml.
#
# Cached: the debootstrap root as build/cross/bookworm-minbase.tar (kept across runs of the
# same clone), the imported base image and the built image in docker (tagged by a hash of the
# Dockerfile, so an edited Dockerfile builds a new image and the old tags are removed), cross
# in build/cross/cargo/bin, and the aarch64 build in $CARGO_TARGET_DIR/cross.
#
# Environment: CROSS_VERSION (default 0.2.5, the newest on crates.io, which builds with Rust
# 1.95), ZCPIPE_DEBIAN_MIRROR (debootstrap's mirror; default: debootstrap's own),
# CROSS_TEST_FEATURES (default: the default features, onnx included, for `cross build`).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# TARGET and QEMU_OLD_IOCTL_SKIPS (the tests qemu-user < 8.1 cannot pass).
source scripts/aarch64.sh

CROSS_VERSION=${CROSS_VERSION:-0.2.5}
CACHE=build/cross
BASE_TAR=$CACHE/bookworm-minbase.tar
BASE_IMAGE=zcpipe/debian:bookworm-minbase
IMAGE_REPO=zcpipe/cross-aarch64
DOCKERFILE=deploy/cross/Dockerfile
IMAGE=$IMAGE_REPO:bookworm-$(sha256sum "$DOCKERFILE" | cut -c1-12)
ENGINE=${CROSS_CONTAINER_ENGINE:-docker}

log() { echo "cross: $*" >&2; }
die() { log "$*"; exit 1; }
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
# Seconds since $1 (a `date +%s`).
since() { echo $(($(date +%s) - $1)); }

need_engine() {
    command -v "$ENGINE" >/dev/null 2>&1 || die "no $ENGINE: install Docker Engine (Debian: apt-get install docker.io), or use make aarch64 / make test-aarch64"
    "$ENGINE" info >/dev/null 2>&1 || die "$ENGINE does not answer (\`$ENGINE info\` fails): start the daemon (systemctl start docker) or use make aarch64 / make test-aarch64"
}

have_image() { "$ENGINE" image inspect "$1" >/dev/null 2>&1; }

# The debootstrap root, made once per clone (root: debootstrap makes device nodes and chowns).
base_tar() {
    [ -s "$BASE_TAR" ] && return 0
    if ! command -v debootstrap >/dev/null 2>&1; then
        log "installing debootstrap (apt-get)"
        $SUDO apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
    fi
    local root=$CACHE/rootfs t0
    t0=$(date +%s)
    mkdir -p "$CACHE"
    $SUDO rm -rf "$root"
    log "debootstrap --variant=minbase bookworm $root ${ZCPIPE_DEBIAN_MIRROR:-} (log: $CACHE/debootstrap.log)"
    # shellcheck disable=SC2086 # the mirror is optional: unquoted, empty means debootstrap's default
    if ! $SUDO debootstrap --variant=minbase bookworm "$root" ${ZCPIPE_DEBIAN_MIRROR:-} >"$CACHE/debootstrap.log" 2>&1; then
        tail -n 5 "$CACHE/debootstrap.log" >&2
        die "debootstrap failed (full log: $CACHE/debootstrap.log); is Debian's archive reachable? ZCPIPE_DEBIAN_MIRROR names another mirror"
    fi
    $SUDO tar -C "$root" -cf "$BASE_TAR.tmp" .
    $SUDO chown "$(id -u):$(id -g)" "$BASE_TAR.tmp"
    mv "$BASE_TAR.tmp" "$BASE_TAR"
    $SUDO rm -rf "$root"
    log "debootstrap root: $BASE_TAR ($(du -h "$BASE_TAR" | cut -f1)) in $(since "$t0") s"
}

image() {
    need_engine
    if have_image "$IMAGE"; then
        log "$IMAGE is there: nothing to do"
        return 0
    fi
    local t0
    t0=$(date +%s)
    if ! have_image "$BASE_IMAGE"; then
        base_tar
        log "docker import $BASE_TAR $BASE_IMAGE"
        "$ENGINE" import "$BASE_TAR" "$BASE_IMAGE" >/dev/null
    fi
    log "building $IMAGE from $DOCKERFILE (apt-get inside: gcc, gcc-aarch64-linux-gnu, libc6-dev-arm64-cross, qemu-user; log: $CACHE/image.log)"
    mkdir -p "$CACHE"
    # DOCKER_BUILDKIT=0: the classic builder resolves FROM from the local images and never asks
    # a registry.
    if ! DOCKER_BUILDKIT=0 "$ENGINE" build --build-arg BASE="$BASE_IMAGE" -t "$IMAGE" -f "$DOCKERFILE" deploy/cross >"$CACHE/image.log" 2>&1; then
        tail -n 15 "$CACHE/image.log" >&2
        die "building $IMAGE failed (full log: $CACHE/image.log)"
    fi
    # Images of an older Dockerfile.
    local old
    for old in $("$ENGINE" images --format '{{.Repository}}:{{.Tag}}' "$IMAGE_REPO"); do
        [ "$old" = "$IMAGE" ] || { log "removing $old (an older $DOCKERFILE)"; "$ENGINE" rmi "$old" >/dev/null || true; }
    done
    log "$IMAGE built in $(since "$t0") s: $("$ENGINE" run --rm "$IMAGE" sh -c 'aarch64-linux-gnu-gcc --version | head -n1; qemu-aarch64 --version | head -n1' | tr '\n' ';')"
}

# cross itself, pinned, in build/cross/cargo/bin (not on the user's PATH).
install_cross() {
    local root=$CACHE/cargo
    if "${CARGO:-cargo}" install --list --root "$root" 2>/dev/null | grep -qx "cross v$CROSS_VERSION:"; then
        return 0
    fi
    local t0
    t0=$(date +%s)
    log "cargo install cross --locked --version $CROSS_VERSION --root $root"
    "${CARGO:-cargo}" install cross --locked --version "$CROSS_VERSION" --root "$root" --quiet
    log "cross $CROSS_VERSION installed in $(since "$t0") s"
}

run_cross_test() {
    image
    install_cross
    # The host toolchain's aarch64 std, which cross mounts into the container with the rest of
    # the toolchain (read-only, at /rust): the image has no Rust.
    if ! rustup target list --installed | grep -qx "$TARGET"; then
        log "rustup target add $TARGET"
        rustup target add "$TARGET"
    fi
    # Every crate into $CARGO_HOME (which cross mounts at /cargo) before the container starts,
    # so that cargo inside needs no network (CARGO_NET_OFFLINE below; cross passes CARGO_* on).
    "${CARGO:-cargo}" fetch --locked --quiet

    local out=${CARGO_TARGET_DIR:-target}/cross
    mkdir -p "$out"
    out=$(cd "$out" && pwd)
    # For cross only: the pinned cross and the read-only rustup first on PATH; the local image
    # for this target; no rustup install of rust-src/std (CROSS_CUSTOM_TOOLCHAIN: the std was
    # added above); Cross.toml's pre-build image built FROM the local one by docker's classic
    # builder, which takes FROM from the local images (never a registry); the aarch64 build
    # apart from the host's (cross mounts it at /target). The image's own linker and runner
    # must win: cross passes every CARGO_* of the host into the container, so the host's
    # (scripts/aarch64.sh's) are unset.
    local -a env_cross=(
        env -u CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER -u CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER
        -u CC_aarch64_unknown_linux_gnu -u AR_aarch64_unknown_linux_gnu
        PATH="$PWD/scripts/cross-rustup:$PWD/$CACHE/cargo/bin:$PATH"
        CROSS_CONTAINER_ENGINE="$ENGINE"
        CROSS_TARGET_AARCH64_UNKNOWN_LINUX_GNU_IMAGE="$IMAGE"
        CROSS_CUSTOM_TOOLCHAIN=1
        CARGO_NET_OFFLINE=true
        DOCKER_BUILDKIT=0
        CARGO_TARGET_DIR="$out"
    )
    local features=()
    [ -z "${CROSS_TEST_FEATURES+x}" ] || features=(--no-default-features ${CROSS_TEST_FEATURES:+--features "$CROSS_TEST_FEATURES"})

    local t0
    t0=$(date +%s)
    log "cross build --release --locked --target $TARGET ${features[*]-} (image $IMAGE)"
    "${env_cross[@]}" cross build --release --locked --target "$TARGET" ${features[@]+"${features[@]}"}
    local t_build
    t_build=$(since "$t0")
    log "cross build: ${t_build} s"

    local bin=$out/$TARGET/release/zcpipe
    # ELF header: magic, 64-bit (class 2), little-endian (1), e_machine 183 = EM_AARCH64.
    local hdr
    hdr=$(od -An -tx1 -N20 "$bin" | tr -d ' \n')
    [ "${hdr:0:12}" = 7f454c460201 ] && [ "${hdr:36:4}" = b700 ] ||
        die "$bin is not a 64-bit little-endian aarch64 ELF (header $hdr)"
    log "$bin: 64-bit LSB ELF, machine aarch64 (e_machine 183), $(du -h "$bin" | cut -f1)"
    # `--version` by the image's runner (its qemu-aarch64) in the image: `cross run -- --version`
    # cannot say it, as cross 0.2.5 takes `--version` and `-V` for its own wherever they stand.
    local version
    version=$("$ENGINE" run --rm -v "$bin:/zcpipe:ro" "$IMAGE" sh -c 'exec $CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER /zcpipe --version')
    [ "$version" = "zcpipe $(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)" ] ||
        die "zcpipe --version under qemu-user printed '$version'"
    log "zcpipe --version under qemu-user: $version"
    # `doctor --json` through `cross run`, as a user would run it. Cross.toml's [build.env] too: ZCPIPE_LIBRKNNRT naming a host file outside the project (not
    # a library) must reach zcpipe with the file mounted: dlopen then finds it and rejects its
    # header, where a variable not passed on or a file not mounted would read differently.
    local notlib
    notlib=$(mktemp /tmp/zcpipe-cross-notlib.XXXXXX)
    head -c 4096 /dev/zero | tr '\0' x >"$notlib"
    ZCPIPE_LIBRKNNRT=$notlib "${env_cross[@]}" cross run --release --locked --target "$TARGET" ${features[@]+"${features[@]}"} --quiet -- doctor --json >"$out/doctor.json"
    rm -f "$notlib"
    python3 - "$out/doctor.json" "$notlib" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
for k in ("zcpipe", "kernel", "heaps", "libraries", "problems", "plan"):
    assert k in r, f"doctor --json under qemu-user lacks {k!r}: {sorted(r)}"
rknn = [l for l in r["libraries"] if l["name"] == "librknnrt.so"]
assert rknn and f"{sys.argv[2]}: invalid ELF header" in (rknn[0]["error"] or ""), \
    f"ZCPIPE_LIBRKNNRT={sys.argv[2]} did not reach zcpipe in the container as a mounted file (Cross.toml [build.env]): {rknn}"
print(f"cross: zcpipe doctor --json under qemu-user: zcpipe {r['zcpipe']}, kernel {r['kernel']}, "
      f"{len(r['libraries'])} libraries checked, {len(r['problems'])} problems; ZCPIPE_LIBRKNNRT passed on and mounted", file=sys.stderr)
PY

    # The library's unit tests, the scope of `make test-aarch64` (no onnx), run by the image's
    # runner. qemu-user before 8.1 (Debian 12's, and cross's own image's 6.1) cannot pass the
    # tests that expect ENOTTY from a V4L2 ioctl: skipped, and said so (scripts/aarch64.sh).
    local qemu args=(--) t
    qemu=$("$ENGINE" run --rm "$IMAGE" qemu-aarch64 --version | head -n1)
    if [[ $qemu =~ version\ ([0-9]+)\.([0-9]+) ]] && ((BASH_REMATCH[1] < 8 || (BASH_REMATCH[1] == 8 && BASH_REMATCH[2] < 1))); then
        log "$qemu < 8.1: unknown ioctls give ENOSYS, skipping ${QEMU_OLD_IOCTL_SKIPS[*]}"
        for t in "${QEMU_OLD_IOCTL_SKIPS[@]}"; do args+=(--skip "$t"); done
    fi
    t0=$(date +%s)
    log "cross test --release --locked --no-default-features --lib --target $TARGET"
    "${env_cross[@]}" cross test --release --locked --no-default-features --lib --target "$TARGET" "${args[@]}"
    log "cross test: $(since "$t0") s (cross build: $t_build s)"
}

main() {
    case "${1:-}" in
        image) image ;;
        test) run_cross_test ;;
        *) echo "usage: $0 image|test" >&2; return 2 ;;
    esac
}
# One line, read whole before it runs: editing this file during a run cannot change what runs.
main "$@"; exit $?

#!/usr/bin/env bash
# zcpipe for aarch64 (RK3588/RK3568/RK3566 boards), cross-compiled on an x86-64 Debian/Ubuntu host.
#   bash scripts/aarch64.sh [setup]  install what the rustup path needs (idempotent, apt-get only if missing)
#   bash scripts/aarch64.sh build    release binary target/aarch64-unknown-linux-gnu/release/zcpipe
#                                    (default features, onnx included); with `cross` when cross and a
#                                    working docker or podman are present, else rustup's target + gcc
#   bash scripts/aarch64.sh test     library unit tests, no onnx feature, run under qemu-aarch64-static
# The linker and the qemu runner are set here in the environment, not in a .cargo/config.toml: a
# [target.aarch64-unknown-linux-gnu] section there would also apply to native builds on an aarch64
# board (runner = qemu, linker = a cross gcc), which is where users build most.
# Extra cargo arguments after `build`/`test` are passed on (e.g. `test -- ring::`).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

TARGET=aarch64-unknown-linux-gnu
SYSROOT=/usr/aarch64-linux-gnu
CARGO=${CARGO:-cargo}

log() { echo "aarch64: $*" >&2; }

# cross needs its binary and a container engine that answers (a docker client without a daemon
# does not count). ZCPIPE_NO_CROSS=1 forces the rustup path.
use_cross() {
    [ -z "${ZCPIPE_NO_CROSS:-}" ] || return 1
    command -v cross >/dev/null 2>&1 || return 1
    local engine
    for engine in ${CROSS_CONTAINER_ENGINE:-docker podman}; do
        command -v "$engine" >/dev/null 2>&1 && "$engine" info >/dev/null 2>&1 && return 0
    done
    return 1
}

setup() {
    local need_apt=()
    command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 || need_apt+=(gcc-aarch64-linux-gnu)
    [ -e "$SYSROOT/lib/libc.so.6" ] && [ -e "$SYSROOT/include/stdio.h" ] || need_apt+=(libc6-dev-arm64-cross)
    command -v qemu-aarch64-static >/dev/null 2>&1 || need_apt+=(qemu-user-static)
    if ((${#need_apt[@]})); then
        log "installing ${need_apt[*]} (apt-get)"
        if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
        $SUDO apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
    fi
    if ! command -v rustup >/dev/null 2>&1; then
        log "rustup not found: install Rust with rustup (https://rustup.rs), then rerun"
        exit 1
    fi
    if ! rustup target list --installed | grep -qx "$TARGET"; then
        log "rustup target add $TARGET"
        rustup target add "$TARGET"
    fi
}

# Values already in the environment win (e.g. another qemu as the runner).
rustup_env() {
    export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=${CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER:-aarch64-linux-gnu-gcc}
    export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER=${CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER:-"qemu-aarch64-static -L $SYSROOT"}
    # For any crate that builds C through the cc crate (none does today).
    export CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc
    export AR_aarch64_unknown_linux_gnu=aarch64-linux-gnu-ar
}

build() {
    if use_cross; then
        # cross 0.2.5 would otherwise `rustup toolchain add` the toolchain in use on every call
        # (it misreads rustup >= 1.28's list) and add rust-src: scripts/cross-rustup/rustup
        # answers its questions read-only, and the target's std is added here instead.
        rustup target list --installed | grep -qx "$TARGET" || rustup target add "$TARGET"
        log "building with cross (cross's image, Cross.toml)"
        PATH="$PWD/scripts/cross-rustup:$PATH" CROSS_CUSTOM_TOOLCHAIN=1 cross build --release --locked --target "$TARGET" "$@"
    else
        log "building with rustup's $TARGET and aarch64-linux-gnu-gcc (no cross or no container engine)"
        setup
        rustup_env
        "$CARGO" build --release --locked --target "$TARGET" "$@"
    fi
    local bin="${CARGO_TARGET_DIR:-target}/$TARGET/release/zcpipe"
    if command -v file >/dev/null 2>&1; then file "$bin"; else ls -l "$bin"; fi
}

# qemu-user before 8.1 answers an ioctl it does not know (every V4L2 one) with ENOSYS instead of
# passing on the kernel's ENOTTY (fixed upstream by "linux-user: report ENOTTY for unknown
# ioctls"); Debian 12's qemu-user-static is 7.2. With such a qemu the tests that expect ENOTTY
# from a V4L2 ioctl on a non-V4L2 fd are skipped, and said so; with qemu >= 8.1 (e.g.
# bookworm-backports' qemu-user: RUNNER="qemu-aarch64 -L /usr/aarch64-linux-gnu") all run.
# A new test of that kind goes in this list.
QEMU_OLD_IOCTL_SKIPS=(
    v4l2::tests::wrappers_report_enotty_on_a_non_v4l2_fd
    v4l2::tests::missing_node_is_one_clear_line
)

qemu_before_8_1() {
    local runner=${CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER%% *} v major minor
    v=$("$runner" --version 2>/dev/null | sed -n '1s/.* version \([0-9][0-9]*\)\.\([0-9][0-9]*\).*/\1 \2/p')
    [ -n "$v" ] || return 1
    read -r major minor <<<"$v"
    ((major < 8 || (major == 8 && minor < 1)))
}

run_tests() {
    setup
    rustup_env
    local args=("$@")
    if qemu_before_8_1; then
        log "$(${CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER%% *} --version | head -n1) < 8.1: unknown ioctls give ENOSYS, skipping ${QEMU_OLD_IOCTL_SKIPS[*]}"
        [[ " ${args[*]-} " == *" -- "* ]] || args+=(--)
        local t
        for t in "${QEMU_OLD_IOCTL_SKIPS[@]}"; do args+=(--skip "$t"); done
    fi
    log "unit tests (lib, no onnx) under ${CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER%% *}"
    "$CARGO" test --release --locked --no-default-features --lib --target "$TARGET" "${args[@]}"
}

# Sourced (scripts/cross.sh reads TARGET and QEMU_OLD_IOCTL_SKIPS): define only.
[[ "${BASH_SOURCE[0]}" == "$0" ]] || return 0

cmd=${1:-setup}
[ $# -eq 0 ] || shift
case "$cmd" in
    setup) setup ;;
    build) build "$@" ;;
    test) run_tests "$@" ;;
    *) echo "usage: $0 [setup|build|test] [cargo args...]" >&2; exit 2 ;;
esac

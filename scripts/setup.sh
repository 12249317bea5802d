#!/usr/bin/env bash
# What the main job needs (`make run`), and the release build. Idempotent; installs nothing
# the job does not use (the tests' tools are scripts/setup-test.sh, `make setup-test`).
#   ffmpeg/ffprobe: the video source decodes the bundled clip (and files, network cameras) with them.
#   gcc: the C compiler some crates' build scripts need.
#   cargo: the Rust toolchain (rustup); not installed here, it must already exist.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v ffmpeg >/dev/null 2>&1 && command -v ffprobe >/dev/null 2>&1 || need_apt+=(ffmpeg)
command -v cc >/dev/null 2>&1 || need_apt+=(gcc)
if ((${#need_apt[@]})); then
    echo "setup: installing ${need_apt[*]} (apt-get)"
    if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi
if ! command -v cargo >/dev/null 2>&1; then
    echo "setup: cargo not found: install Rust with rustup (https://rustup.rs), then rerun" >&2
    exit 1
fi
# The toolchain rust-toolchain.toml pins (linked to the installed stable of that version
# when rustup cannot download it).
bash scripts/toolchain.sh
echo "setup: building zcpipe (release; the first build takes several minutes: tract-onnx)"
cargo build --release --locked

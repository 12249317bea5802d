#!/usr/bin/env bash
# Makes the toolchain rust-toolchain.toml pins usable on this machine before any cargo runs
# (.ci/run's first step, scripts/setup.sh). rustup installs a pinned channel it does not have
# by downloading it; where it cannot (no network to static.rust-lang.org) but the installed
# `stable` is that very version, the pinned name is made a symbolic link to stable's folder in
# rustup's toolchains/ (`rustup toolchain link` refuses a name that looks like a release), so
# nothing is downloaded. Otherwise one line says what to install.
set -euo pipefail
cd "$(dirname "$0")/.."
want=$(sed -n 's/^channel *= *"\(.*\)"/\1/p' rust-toolchain.toml)
[ -n "$want" ] || { echo "toolchain: no channel in rust-toolchain.toml" >&2; exit 1; }
command -v rustup >/dev/null || { echo "toolchain: rustup not found: install Rust $want with rustup" >&2; exit 1; }
if rustup toolchain list | grep -q "^$want-"; then
    echo "toolchain: $want installed"
    exit 0
fi
# The stable toolchain's version, asked of its own rustc (RUSTUP_TOOLCHAIN beats the file).
have=$(RUSTUP_TOOLCHAIN=stable rustc --version 2>/dev/null | awk '{print $2}') || true
if [ "$have" = "$want" ]; then
    sysroot=$(RUSTUP_TOOLCHAIN=stable rustc --print sysroot)
    host=$(RUSTUP_TOOLCHAIN=stable rustc -vV | sed -n 's/^host: //p')
    ln -s "$sysroot" "${RUSTUP_HOME:-$HOME/.rustup}/toolchains/$want-$host"
    rustup toolchain list | grep -q "^$want-" || { echo "toolchain: rustup does not see the linked $want" >&2; exit 1; }
    echo "toolchain: $want is the installed stable ($sysroot)"
    exit 0
fi
echo "toolchain: rust-toolchain.toml pins $want; installing it with rustup (stable here is ${have:-absent})"
rustup toolchain install "$want" --profile minimal --component clippy,rustfmt --target aarch64-unknown-linux-gnu \
    || { echo "toolchain: could not install Rust $want: run 'rustup toolchain install $want' with network access" >&2; exit 1; }

#!/usr/bin/env bash
# Creates the Python environment for scripts/rknn/convert.py: build/rknn-venv with
# Rockchip's rknn-toolkit2 2.5.0 from PyPI (x86-64 Linux, cp311 wheel) and the versions the
# shipped models were built with (shared test-data PROVENANCE.md section 6). Not part of
# CI: several GB. torch comes from its CPU-only index where download.pytorch.org is
# reachable; otherwise PyPI's torch brings the CUDA wheels too (~3 GB download, 5.6 GB venv).
# Idempotent: a stamp file makes a second run a no-op.
#   PYTHON=python3.11 (override with any CPython 3.11 interpreter)
set -euo pipefail
cd "$(dirname "$0")/../.."

VENV=build/rknn-venv
STAMP="$VENV/.zcpipe-rknn-setup-v1"
PYTHON="${PYTHON:-python3.11}"

if [ -f "$STAMP" ]; then
    echo "rknn-setup: $VENV is ready (delete it to rebuild)"
    exit 0
fi
if [ "$(uname -m)" != x86_64 ]; then
    echo "rknn-setup: rknn-toolkit2 is published for x86-64 Linux hosts only (this is $(uname -m))" >&2
    exit 1
fi
if ! command -v "$PYTHON" >/dev/null 2>&1; then
    echo "rknn-setup: $PYTHON not found. rknn-toolkit2 2.5.0's wheels are cp311-style per Python" >&2
    echo "  version; install Python 3.11 (e.g. apt-get install python3.11-venv, or pyenv) or set PYTHON=" >&2
    exit 1
fi
pyver=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if [ "$pyver" != 3.11 ]; then
    echo "rknn-setup: $PYTHON is Python $pyver; this recipe was verified with 3.11 only" >&2
    exit 1
fi

echo "rknn-setup: creating $VENV with $PYTHON"
"$PYTHON" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip --disable-pip-version-check)
"${PIP[@]}" install -q --upgrade pip wheel

# torch first, as the CPU-only wheel: rknn-toolkit2 depends on torch, and the PyPI default
# build would drag in the CUDA libraries (several GB) that the converter never uses.
# If that index is unreachable (firewalled hosts), fall back to PyPI's torch 2.4.0, which
# also installs the nvidia-* CUDA wheels (~2.5 GB more; unused, but torch will not import
# without them). TORCH_INDEX= (empty) skips the CPU index.
TORCH_INDEX="${TORCH_INDEX-https://download.pytorch.org/whl/cpu}"
if [ -n "$TORCH_INDEX" ] && "${PIP[@]}" install --retries 1 --timeout 30 "torch==2.4.0" --index-url "$TORCH_INDEX"; then
    echo "rknn-setup: torch 2.4.0 installed from $TORCH_INDEX"
else
    echo "rknn-setup: torch CPU index ${TORCH_INDEX:-(skipped)} not usable; installing torch 2.4.0 from PyPI (with CUDA wheels, several GB)"
    "${PIP[@]}" install "torch==2.4.0"
fi

# The versions recorded for the shipped models. A constraints file keeps the toolkit's own
# requirements from moving them (torch==2.4.0 is satisfied by the installed 2.4.0+cpu).
constraints=$(mktemp)
trap 'rm -f "$constraints"' EXIT
cat >"$constraints" <<'PINS'
torch==2.4.0
onnx==1.18.0
onnxruntime==1.26.0
numpy==1.26.4
opencv-python==4.11.0.86
protobuf==4.25.4
PINS
echo "rknn-setup: installing rknn-toolkit2 2.5.0 and its requirements (PyPI)"
"${PIP[@]}" install -c "$constraints" "rknn-toolkit2==2.5.0" "onnx==1.18.0" "numpy==1.26.4" \
    "opencv-python==4.11.0.86"

"$VENV/bin/python" - <<'PY'
import importlib.metadata as md
for name in ("rknn-toolkit2", "torch", "onnx", "onnxruntime", "numpy", "opencv-python", "protobuf"):
    try:
        print(f"rknn-setup:   {name} {md.version(name)}")
    except md.PackageNotFoundError:
        print(f"rknn-setup:   {name} (not installed)")
from rknn.api import RKNN  # noqa: F401  (fails here, not mid-conversion, if the wheel is broken)
PY
touch "$STAMP"
echo "rknn-setup: done ($VENV)"

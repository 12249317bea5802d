#!/usr/bin/env bash
# What the tests need besides the main job's set-up (scripts/setup.sh, run first): `make test`
# and CI call it (`make setup-test`). Idempotent: a tool already there is not installed again.
#   mosquitto, mosquitto-clients: the real MQTT broker and mosquitto_sub/_pub/_passwd of
#     tests/outputs/mqtt.rs (the MQTT bridge's tests start their own broker on a free port).
#   GStreamer's RTSP server for /usr/bin/python3 (python3-gi, gir1.2-gst-rtsp-server-1.0,
#     gstreamer1.0-plugins-good: qtdemux, rtph264pay; -bad: h264parse): scripts/rtsp_server.py,
#     the real RTSP camera of tests/pipeline/rtsp.rs (Debian's python, not a pyenv one first on PATH).
#   procps: ps -eo args as another user (tests/pipeline/rtsp.rs).
#   python3-venv: build/py-venv, the pinned onnx/onnxruntime/numpy of
#     scripts/models/requirements.txt, for the head tests' models (tests/pipeline/heads.rs).
#   lintian: `make deb-test` (CI) checks the package with it.
#   chromium: headless Chromium for `make test-browser` (tests/browser.rs: the web view in a real browser).
#   iproute2: ip netns and veth pairs for `make test-fleet` (tests/outputs/fleet.rs: boards in namespaces).
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
PATH="$PATH:/usr/sbin" command -v mosquitto >/dev/null 2>&1 && command -v mosquitto_passwd >/dev/null 2>&1 || need_apt+=(mosquitto)
command -v mosquitto_sub >/dev/null 2>&1 && command -v mosquitto_pub >/dev/null 2>&1 || need_apt+=(mosquitto-clients)
command -v python3 >/dev/null 2>&1 || need_apt+=(python3)
command -v ps >/dev/null 2>&1 || need_apt+=(procps)
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || need_apt+=(python3-venv)
command -v lintian >/dev/null 2>&1 || need_apt+=(lintian)
command -v chromium >/dev/null 2>&1 || need_apt+=(chromium)
PATH="$PATH:/usr/sbin:/sbin" command -v ip >/dev/null 2>&1 || need_apt+=(iproute2)
/usr/bin/python3 -c 'import sys, gi; gi.require_version("Gst", "1.0"); gi.require_version("GstRtspServer", "1.0")
from gi.repository import Gst, GstRtspServer; Gst.init(None)
sys.exit(any(Gst.ElementFactory.find(e) is None for e in ("qtdemux", "h264parse", "rtph264pay")))' >/dev/null 2>&1 ||
    need_apt+=(python3-gi gir1.2-gst-rtsp-server-1.0 gstreamer1.0-plugins-good gstreamer1.0-plugins-bad)
if ((${#need_apt[@]})); then
    echo "setup-test: installing ${need_apt[*]} (apt-get)"
    if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; else SUDO=; fi
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi
# The head tests' Python (scripts/models/): a venv with the pinned packages, remade when
# requirements.txt changes (PyPI; Debian's python3-onnx serves only /usr/bin/python3).
venv=build/py-venv
req=scripts/models/requirements.txt
if ! cmp -s "$req" "$venv/requirements.txt" 2>/dev/null; then
    echo "setup-test: making $venv (pip: $(grep -v '^#' "$req" | tr '\n' ' '))"
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$req"
    cp "$req" "$venv/requirements.txt"
fi

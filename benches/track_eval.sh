#!/usr/bin/env bash
# Tracker evaluation (zcpipe issue 13; `make track-eval`, not in CI): makes the Python venv
# build/track-venv from scripts/track/requirements.txt (PyPI; remade when that file changes),
# the four clips (scripts/track/make_clips.sh), then runs benches/track_eval.py, which scores
# `zcpipe eval track` against the hand-made ground truth of tests/data/track/ (README.md there).
# Arguments go to track_eval.py (e.g. --clips person --trackers sort, --rerun, --selftest).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=build/track-venv
req=scripts/track/requirements.txt
if ! cmp -s "$req" "$venv/requirements.txt" 2>/dev/null; then
    echo "track_eval: making $venv (pip, --no-deps: see $req)"
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install --quiet --disable-pip-version-check --no-deps -r "$req"
    cp "$req" "$venv/requirements.txt"
fi
bash scripts/track/make_clips.sh
exec "$venv/bin/python" benches/track_eval.py "$@"

#!/usr/bin/env bash
# `make docs-check` (CI): builds the book (docs/) with mdbook and checks every link of the book,
# the README and ARCHITECTURE.md offline (scripts/doc-links.py). mdbook is used from PATH, else
# from build/tools, where it is installed (pinned, without its server and watcher) when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
MDBOOK_VERSION=0.5.4
mdbook=$(command -v mdbook || true)
if [ -z "$mdbook" ] || ! "$mdbook" --version | grep -q "v$MDBOOK_VERSION"; then
    mdbook=build/tools/bin/mdbook
    if ! [ -x "$mdbook" ] || ! "$mdbook" --version | grep -q "v$MDBOOK_VERSION"; then
        echo "docs: installing mdbook $MDBOOK_VERSION into build/tools (cargo install)"
        # --debug: a quicker build (a 31-page book takes mdbook no time either way).
        cargo install --quiet --debug --locked --no-default-features --root build/tools --version "$MDBOOK_VERSION" mdbook
    fi
fi
"$mdbook" build docs
python3 scripts/doc-links.py

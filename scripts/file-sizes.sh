#!/usr/bin/env bash
# No Rust file over 800 lines in any crate, the fakes, the tests, the benches or the fuzz
# targets (`make lint`): a file that grows past it is split into modules.
set -euo pipefail
cd "$(dirname "$0")/.."
LIMIT=${LIMIT:-800}
over=$(git ls-files -z -- '*.rs' | xargs -0 wc -l | awk -v l="$LIMIT" '$2 != "total" && $1 > l {print "  " $2 ": " $1 " lines"}')
if [ -n "$over" ]; then
    echo "file-sizes: over $LIMIT lines (split each into modules):" >&2
    echo "$over" >&2
    exit 1
fi
echo "file-sizes: every .rs file has at most $LIMIT lines"

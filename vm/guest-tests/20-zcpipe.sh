#!/bin/sh
# zcpipe's Rust VM tests (tests/vm_guest.rs, built static by vm/build-guest.sh) against the
# static zcpipe beside them in bin/. One guest test: every #[ignore]d test, one at a time.
cd /tests/bin || exit 1
export ZCPIPE_BIN=/tests/bin/zcpipe RUST_BACKTRACE=1
exec ./vm_guest --ignored --test-threads=1 --nocapture

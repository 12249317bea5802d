# zcpipe: `make run` sets up and runs the default job; `make test` runs the tests.
CARGO ?= cargo
ZCPIPE := target/release/zcpipe

.PHONY: setup build run test lint clean

setup:
	bash scripts/setup.sh

build:
	$(CARGO) build --release --locked

# The main job: the bundled clip through the four stage processes, detections on stdout.
run: setup
	$(ZCPIPE) run

# Unit tests and the multi-process integration tests (release: tract is slow in debug).
test:
	$(CARGO) test --release --locked

lint:
	$(CARGO) clippy --release --all-targets -- -D warnings

clean:
	$(CARGO) clean

include vm/Makefile.inc

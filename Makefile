# zcpipe: `make run` sets up and runs the default job; `make test` runs the tests.
CARGO ?= cargo
ZCPIPE := target/release/zcpipe

.PHONY: setup build run test lint clean aarch64 test-aarch64

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

# aarch64 (Rockchip boards), cross-compiled: see scripts/aarch64.sh and "Cross-compiling for aarch64".
# The release binary (onnx included): target/aarch64-unknown-linux-gnu/release/zcpipe.
aarch64:
	CARGO="$(CARGO)" bash scripts/aarch64.sh build

# The library unit tests built for aarch64 (no onnx) and run under qemu-aarch64-static.
test-aarch64:
	CARGO="$(CARGO)" bash scripts/aarch64.sh test

lint:
	$(CARGO) clippy --release --all-targets -- -D warnings

clean:
	$(CARGO) clean

include vm/Makefile.inc

# zcpipe: `make run` sets up and runs the default job; `make test` runs the tests.
CARGO ?= cargo
ZCPIPE := target/release/zcpipe

.PHONY: test-browser setup setup-test build run test lint clean aarch64 test-aarch64 test-faults test-service-crashes docs docs-check

# What the main job needs (ffmpeg) and the release build: scripts/setup.sh.
setup:
	bash scripts/setup.sh

# The tests' tools besides (mosquitto, the RTSP server's GStreamer packages, the onnxruntime
# venv, lintian, Chromium): scripts/setup-test.sh. `make test` runs it; idempotent.
setup-test: setup
	bash scripts/setup-test.sh

build:
	$(CARGO) build --release --locked

# The main job: the bundled clip through the four stage processes, detections on stdout.
run: setup
	$(ZCPIPE) run

# Unit tests and the multi-process integration tests (release: tract is slow in debug).
# First the test-only ABI fake of librknnrt.so (fakes/librknnrt, for tests/vendor/rknn.rs and
# tests/pipeline/heads.rs), built next to zcpipe's library so that both share one build of tract.
# ZCPIPE_ABI_REQUIRE=probe: the C compiler for the target must build the layout probe
# (crates/sys/abi/README.md); headers given in $$ZCPIPE_*_HEADER_DIR are compiled against.
export ZCPIPE_ABI_REQUIRE ?= probe
test: setup-test
	$(CARGO) build --release --locked --lib -p zcpipe -p zcpipe-fake-librknnrt
	$(CARGO) test --release --locked

# The web view and compare's chart in a real browser (tests/browser.rs, ignored by `make test`): a run on the bundled
# clip with --http, the page in headless Chromium (Debian's chromium, installed by scripts/setup-test.sh), its
# screenshot checked (the camera's picture, the boxes where the detections say); the screenshot is
# left in target/browser/web-view.png.
test-browser:
	$(CARGO) test --release --locked --test browser -- --ignored --nocapture

# A fleet on one machine (tests/outputs/fleet.rs, ignored by `make test`: it needs root for
# ip netns, as CI has): a central mosquitto, three boards each in its own network namespace
# with its own mosquitto (deploy/mosquitto/zcpipe-bridge.conf) bridged to the centre and its
# own zcpipe run, and zcpipe fleet; one board's link cut and its broker restarted meanwhile.
# Every event arrives once, in order; the page in headless Chromium shows the cut board offline.
.PHONY: test-fleet
test-fleet:
	$(CARGO) test --release --locked --test outputs -- --ignored --nocapture fleet::

# Fault injection (tests/faults/faults.rs): kill -9 of each stage 20 times while testsrc flows, a hung
# stage found by the watchdog, a consumer that keeps every buffer losing its lease. `make test`
# runs the same tests with 2 kills per stage; benches/faults.sh runs 100 and prints the times.
FAULT_KILLS ?= 20
test-faults:
	ZCPIPE_FAULT_KILLS=$(FAULT_KILLS) $(CARGO) test --release --locked --test faults -- faults:: --nocapture

# The inference service's clients killed with requests in flight (kill -9), 1,000 in a row:
# no fd or buffer leaked, the camera never stalled. `make test` runs 20.
SERVICE_CRASHES ?= 1000
test-service-crashes:
	ZCPIPE_SERVICE_CRASHES=$(SERVICE_CRASHES) $(CARGO) test --release --locked --test faults -- service::crashing --nocapture

# aarch64 (Rockchip boards), cross-compiled: see scripts/aarch64.sh and "Cross-compiling for aarch64".
# The release binary (onnx included): target/aarch64-unknown-linux-gnu/release/zcpipe.
aarch64:
	CARGO="$(CARGO)" bash scripts/aarch64.sh build

# The library unit tests built for aarch64 (no onnx) and run under qemu-aarch64-static.
test-aarch64:
	CARGO="$(CARGO)" bash scripts/aarch64.sh test

# Debian packages (scripts/deb.sh, docs/src/user/install.md "Install from a package"), built with dpkg-deb from the
# project's own files: build/deb/zcpipe_<version>-1_{amd64,arm64}.deb. amd64 packages the host
# release build (`make build`), arm64 the cross build of `make aarch64` (onnx included, so the
# package runs the default job). `deb-test` (CI) installs the amd64 package on this machine with
# apt-get (root), runs `zcpipe doctor` and 20 frames of the default job from the installed paths,
# and purges it, also when a step fails. `deb-lint` runs lintian on both packages.
.PHONY: deb deb-amd64 deb-arm64 deb-test deb-lint
deb: deb-amd64 deb-arm64

deb-amd64: build
	bash scripts/deb.sh amd64

deb-arm64: aarch64
	bash scripts/deb.sh arm64

deb-test: deb-amd64
	bash scripts/deb-test.sh

deb-lint:
	bash scripts/deb.sh lint

# The same with cross (cross-rs) in Docker, as users with a container registry build (docs/src/dev/cross.md
# "Cross-compiling for aarch64"). No registry here, so `make cross-image` builds a local
# stand-in for cross's aarch64 image from Debian's packages (debootstrap, docker import,
# deploy/cross/Dockerfile; a no-op when it exists), and `make cross-test` installs the pinned
# cross, points it at that image for this run only, cross-builds the release binary, runs its
# `--version` and `doctor --json` under qemu-user, and `cross test`s the library (no onnx).
.PHONY: cross-image cross-test
cross-image:
	bash scripts/cross.sh image

cross-test:
	CARGO="$(CARGO)" bash scripts/cross.sh test

# Coverage-guided fuzzing of the decoders of what a peer sends (fuzz/, scripts/fuzz.sh,
# docs/src/dev/testing.md "Fuzzing"): `make fuzz` runs each target for FUZZ_RUNS executions (optimised build),
# `make fuzz-ci` for FUZZ_CI_SECONDS each (quick unoptimised build). Installs cargo-fuzz if missing.
FUZZ_RUNS ?= 10000000
FUZZ_CI_SECONDS ?= 20

.PHONY: fuzz fuzz-ci
fuzz:
	CARGO="$(CARGO)" bash scripts/fuzz.sh runs $(FUZZ_RUNS)

fuzz-ci:
	CARGO="$(CARGO)" FUZZ_BUILD=dev bash scripts/fuzz.sh time $(FUZZ_CI_SECONDS)

# The house rules, by tools: rustfmt (rustfmt.toml), clippy with warnings denied (the workspace's
# lints: missing_docs in the library crates, undocumented_unsafe_blocks), the crate graph
# (scripts/layers.py: no crate names one at or above its layer) and no .rs file over 800 lines.
lint:
	$(CARGO) fmt --all --check
	$(CARGO) fmt --check --manifest-path fuzz/Cargo.toml
	$(CARGO) clippy --release --locked --workspace --all-targets -- -D warnings
	python3 scripts/layers.py
	bash scripts/file-sizes.sh

# Soak, a long run (not in CI): 10^6 frames through the four stages transport-only, then 3000
# with the CPU scaler and ONNX, every stage's RSS, Pss, fds and memfds sampled each second;
# fails if a count moved or RSS grew by 1 MiB (benches/soak.sh, docs/src/dev/testing.md "Soak"). soak-short
# (CI): the transport-only run of 300000 frames, under a minute. Its ONNX run is left to
# `make soak`: tract's infer takes one 1.3-1.7 MiB allocator step at a frame count that
# varies from run to run (between frames 50 and 120 here), which a run of a few hundred
# frames cannot tell from a leak, and 3000 frames can.
.PHONY: soak soak-short
soak: build
	bash benches/soak.sh

soak-short: build
	bash benches/soak.sh 300000 0

# Tracker evaluation (issue 13; not in CI): MOTA, IDF1, ID switches and HOTA of each
# `--tracker` on four clips against the hand-made ground truth in tests/data/track/ (its
# README.md). Makes build/track-venv (scripts/track/requirements.txt) and the clips
# (scripts/track/make_clips.sh), runs the detector once per clip (cached in build/track-eval/),
# then `zcpipe eval track` per tracker; the table goes to build/track-eval/table.md.
.PHONY: track-eval
track-eval: build
	bash benches/track_eval.sh

clean:
	$(CARGO) clean

# The book (docs/): `make docs` writes the pages generated from the argument parser (the
# command-line reference docs/src/user/cli.md and the man pages in packaging/man/; `make test`
# fails when they are out of date). `make docs-check` (CI) builds the book with mdbook (installed
# into build/tools by scripts/docs.sh when missing) and checks every link of the book, the
# README and ARCHITECTURE.md offline (scripts/doc-links.py): no broken link, no page outside
# docs/src/SUMMARY.md.
docs:
	ZCPIPE_WRITE_DOCS=1 $(CARGO) test --release --locked --test pipeline -- docs::the_cli_reference

docs-check:
	bash scripts/docs.sh

include vm/Makefile.inc

# Rebuild the YOLOX-Nano .rknn models (recipe: models/PROVENANCE.md) with rknn-toolkit2
# 2.5.0 into build/rknn/ (never over models/), each checked on the toolkit's simulator
# against tests/data/golden/ before it is written. NOT part of CI or `make test`: the
# toolkit's venv (build/rknn-venv) is several GB. See docs/src/user/models.md "Rebuilding the .rknn models".
RKNN_PLATFORMS ?= rk3588 rk3566 rk3576

.PHONY: rknn-models
rknn-models:
	bash scripts/rknn/setup.sh
	@set -e; built=; for p in $(RKNN_PLATFORMS); do \
	    case $$p in rk3566) f=rk3566_rk3568;; *) f=$$p;; esac; \
	    out=build/rknn/yolox_nano_416_$$f.rknn; \
	    echo "rknn-models: $$p -> $$out"; \
	    build/rknn-venv/bin/python scripts/rknn/convert.py --onnx models/yolox_nano.onnx \
	        --platform $$p --images tests/data --golden tests/data/golden \
	        --out $$out --work build/rknn/work-$$p; \
	    built="$$built $$out"; \
	done; \
	echo; echo "rknn-models: all models reproduce the simulator goldens. sha256 (differs per build):"; \
	sha256sum $$built; \
	echo "rknn-models: to use them, copy them over models/ (e.g. cp build/rknn/*.rknn models/)"

# The inference service of a real `zcpipe run` (benches/npu_service.sh; not in CI): a client's
# round trip minus the engine's run and the letterbox (`zcpipe bench service`), with no model
# and with YOLOX-Nano on the CPU, then 8 clients at once twice: model loads, the infer stage's
# Pss and RSS with them and after, each client's Pss. Prints markdown tables with the goals.
.PHONY: bench-service
bench-service: build
	bash benches/npu_service.sh

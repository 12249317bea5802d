#!/usr/bin/env bash
# Coverage-guided fuzzing of the decoders of what a peer sends (fuzz/; docs/src/dev/testing.md "Fuzzing"):
# control messages (control_msg), frame descriptors (frame_desc), the detections-socket
# reader of `zcpipe watch` (watch_lines) and the inference service's messages (service_msg).
#
#   scripts/fuzz.sh runs N [TARGET...]      each target for N executions (`make fuzz`)
#   scripts/fuzz.sh time SECONDS [TARGET...]  each target for SECONDS (`make fuzz-ci`)
#
# Runs on the stable toolchain: cargo-fuzz (installed with `cargo install --locked` when
# missing) builds the libFuzzer targets without a sanitizer (`-s none`: rustc's sanitizers
# need nightly, and the code under test is safe Rust) and with debug assertions (integer
# overflow panics). Each target's corpus grows in fuzz/corpus/<target> (not in git), starting
# from fuzz/seeds/<target>; a crash is saved in fuzz/artifacts/<target>/ and fails the run.
# Prints how many executions each target ran.
set -euo pipefail
cd "$(dirname "$0")/.."

CARGO=${CARGO:-cargo}
CARGO_FUZZ_VERSION=0.13.2
ALL_TARGETS=(control_msg frame_desc watch_lines service_msg packet_stream run_control)
# FUZZ_BUILD=release (`make fuzz`): optimised, 10^5-10^6 executions per second per target.
# FUZZ_BUILD=dev (`make fuzz-ci`): unoptimised (fuzz/Cargo.toml's dev profile), about half
# the build time, 10^3-10^4 executions per second: enough for a short run.
FUZZ_BUILD=${FUZZ_BUILD:-release}
case $FUZZ_BUILD in
    release) FUZZ_FLAGS=(--sanitizer none --debug-assertions --release) ;;
    dev) FUZZ_FLAGS=(--sanitizer none --debug-assertions --dev) ;;
    *) echo "FUZZ_BUILD=$FUZZ_BUILD: use release or dev" >&2; exit 2 ;;
esac

usage() {
    echo "usage: scripts/fuzz.sh runs N|time SECONDS [TARGET...]; targets: ${ALL_TARGETS[*]}" >&2
    exit 2
}
[ $# -ge 2 ] || usage
mode=$1
amount=$2
shift 2
case $mode in
    runs) limit=(-runs="$amount") ;;
    time) limit=(-max_total_time="$amount") ;;
    *) usage ;;
esac
[[ $amount =~ ^[0-9]+$ ]] || usage
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${ALL_TARGETS[@]}")

if ! $CARGO fuzz --version >/dev/null 2>&1; then
    echo "fuzz: cargo-fuzz is missing; installing cargo-fuzz $CARGO_FUZZ_VERSION (cargo install --locked)"
    $CARGO install --quiet cargo-fuzz --locked --version "$CARGO_FUZZ_VERSION"
fi
echo "fuzz: $($CARGO fuzz --version), $(rustc --version)"

mkdir -p fuzz/artifacts
start=$(date +%s)
if ! $CARGO fuzz build "${FUZZ_FLAGS[@]}" >fuzz/artifacts/build.log 2>&1; then
    tail -40 fuzz/artifacts/build.log >&2
    echo "fuzz: the fuzz targets did not build (fuzz/artifacts/build.log)" >&2
    exit 1
fi
echo "fuzz: built ($FUZZ_BUILD) in $(( $(date +%s) - start )) s"

failed=()
summary=()
for t in "${targets[@]}"; do
    mkdir -p "fuzz/corpus/$t"
    log="fuzz/artifacts/$t.log"
    t0=$(date +%s)
    if $CARGO fuzz run "${FUZZ_FLAGS[@]}" "$t" "fuzz/corpus/$t" "fuzz/seeds/$t" -- "${limit[@]}" -print_final_stats=1 >"$log" 2>&1; then
        runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
        line="$t: ${runs:-?} executions in $(( $(date +%s) - t0 )) s, no crash (corpus: $(ls "fuzz/corpus/$t" | wc -l) inputs)"
    else
        runs=$(grep -o '^#[0-9]*' "$log" | tail -1 | tr -d '#')
        line="$t: CRASH after about ${runs:-?} executions; log $log, input in fuzz/artifacts/$t/"
        failed+=("$t")
        grep -E -A12 'panicked|ERROR: libFuzzer' "$log" | head -40 >&2 || tail -40 "$log" >&2
    fi
    echo "fuzz: $line"
    summary+=("$line")
done

echo "fuzz: summary ($(date +%F), $mode $amount, $(( $(date +%s) - start )) s in all):"
printf '  %s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
    echo "fuzz: ${#failed[@]} target(s) crashed: ${failed[*]}; reproduce with: cargo fuzz run ${FUZZ_FLAGS[*]} TARGET fuzz/artifacts/TARGET/crash-..." >&2
    exit 1
fi

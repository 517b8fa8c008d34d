#!/usr/bin/env bash
# Runs the cargo-fuzz targets of fuzz/ (libFuzzer, nightly toolchain), each
# for SECONDS (default 60), every target or the named ones:
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]
#
# Each target starts from a scratch copy of its committed seed corpus
# (fuzz/corpus/<target>/) and of its regressions (fuzz/regressions/<target>/),
# so the repository's corpus is not bloated by what libFuzzer adds; the
# copies are under fuzz/target/fuzz-run/. The script fails if any target
# finds a crash, and prints where the crashing input is. A crash found
# becomes a regression: fix the bug, then copy the input to
# fuzz/regressions/<target>/ (the stable tests of crates/doorbell-fuzzing
# replay it).
#
# Needs the nightly toolchain and cargo-fuzz (scripts/setup.sh installs
# cargo-fuzz).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

die() {
    printf 'fuzz.sh: error: %s\n' "$*" >&2
    exit 1
}

seconds=60
if [[ $# -gt 0 && $1 =~ ^[0-9]+$ ]]; then
    seconds=$1
    shift
fi

rustup toolchain list 2>/dev/null | grep -q '^nightly' ||
    die "no nightly toolchain: install it with 'rustup toolchain install nightly'"
cargo +nightly fuzz --version >/dev/null 2>&1 ||
    die "no cargo-fuzz: install it with 'cargo install cargo-fuzz --locked' (scripts/setup.sh does)"

mapfile -t all < <(cd fuzz && cargo +nightly fuzz list)
targets=("$@")
if ((${#targets[@]} == 0)); then
    targets=("${all[@]}")
fi
for t in "${targets[@]}"; do
    [[ " ${all[*]} " == *" $t "* ]] || die "no fuzz target '$t' (targets: ${all[*]})"
done

# Release code with debug assertions and overflow checks: an overflow is a
# bug found, as in the stable tests.
flags=(-O --debug-assertions)
echo "fuzz.sh: building the targets (cargo +nightly fuzz build ${flags[*]})"
(cd fuzz && cargo +nightly fuzz build "${flags[@]}")

scratch="$PWD/fuzz/target/fuzz-run"
failed=()
for t in "${targets[@]}"; do
    corpus="$scratch/corpus/$t"
    artifacts="$scratch/artifacts/$t"
    rm -rf "$corpus" "$artifacts"
    mkdir -p "$corpus" "$artifacts"
    cp -R "fuzz/corpus/$t/." "$corpus/" 2>/dev/null || true
    cp -R "fuzz/regressions/$t/." "$corpus/" 2>/dev/null || true
    log="$scratch/$t.log"
    echo "fuzz.sh: $t for ${seconds}s"
    if (cd fuzz && cargo +nightly fuzz run "${flags[@]}" "$t" "$corpus" -- \
        -max_total_time="$seconds" -artifact_prefix="$artifacts/" \
        -print_final_stats=1) >"$log" 2>&1; then
        grep -E '^(stat::number_of_executed_units|Done )' "$log" | tail -n 2 | sed "s/^/fuzz.sh: $t: /"
    else
        failed+=("$t")
        echo "fuzz.sh: $t FAILED; its log is $log; the crashing input:" >&2
        ls -1 "$artifacts"/* 2>/dev/null | sed 's/^/  /' >&2 || echo "  (none written)" >&2
        grep -E 'panicked at|ERROR: libFuzzer|SUMMARY' "$log" | head -n 5 | sed 's/^/  /' >&2
    fi
done

if ((${#failed[@]} > 0)); then
    die "${#failed[@]} target(s) found a crash: ${failed[*]}"
fi
echo "fuzz.sh: ok: ${#targets[@]} targets, ${seconds}s each, no crash"

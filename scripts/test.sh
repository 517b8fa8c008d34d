#!/usr/bin/env bash
# Installs what the tests need (scripts/setup.sh), then runs every check:
# formatting, clippy, the docs' links, the module graph of each crate, the
# whole test suite (as a debug build, then as a release build), the
# rc_pingpong example, and every fuzz target for a short fixed time.
#
#   scripts/test.sh
#
# CI runs exactly this (.ci/run).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

scripts/setup.sh

echo "test.sh: cargo fmt --check"
cargo fmt --all -- --check

echo "test.sh: cargo clippy"
cargo clippy --workspace --all-targets --locked -- -D warnings

echo "test.sh: cargo doc, every link resolving"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked

echo "test.sh: no circle of modules"
/usr/bin/python3 scripts/check-modules.py

echo "test.sh: cargo test"
cargo test --workspace --locked

# Again as the release build that users run (decision record 0065): a race
# that a debug build's slowness hides, or code the optimiser gets wrong,
# shows only there.
echo "test.sh: cargo test --release"
cargo test --release --workspace --locked --lib --bins --tests

echo "test.sh: rc_pingpong example"
cargo run --locked -q -p doorbell-cli --example rc_pingpong -- 4096 200 100 1024

# Every cargo-fuzz target for FUZZ_SECONDS each (default 15): the nightly
# build takes a few minutes the first time, the runs 11 x 15 s.
echo "test.sh: fuzz targets, ${FUZZ_SECONDS:-15}s each"
scripts/fuzz.sh "${FUZZ_SECONDS:-15}"

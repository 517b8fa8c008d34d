#!/usr/bin/env bash
# Installs what the tests need (scripts/setup.sh), then runs every check:
# formatting, clippy, the module graph of each crate, the whole test suite,
# and the rc_pingpong example.
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

echo "test.sh: no circle of modules"
/usr/bin/python3 scripts/check-modules.py

echo "test.sh: cargo test"
cargo test --workspace --locked

echo "test.sh: rc_pingpong example"
cargo run --locked -q -p doorbell-cli --example rc_pingpong -- 4096 200 100 1024

#!/usr/bin/env bash
# The whole test suite, as CI runs it: installs what it needs, checks formatting and lints,
# then runs every test (real-system tests need root and skip with a reason without it).
set -euo pipefail
cd "$(dirname "$0")/.."

need() { command -v "$1" >/dev/null 2>&1; }
if ! need ip || ! need tc; then
  if [ "$(id -u)" = 0 ] && need apt-get; then
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iproute2 >/dev/null
  else
    echo "note: iproute2 missing and cannot be installed; network tests will skip" >&2
  fi
fi
if ! need cargo; then
  echo "cargo not found: install Rust 1.95 (rustup) first" >&2
  exit 1
fi
rustup component add rustfmt clippy >/dev/null 2>&1 || true

echo "== cargo fmt --check"
cargo fmt --all -- --check
echo "== cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings
echo "== cargo test"
# Real-system tests share the network stack and CPUs: run test binaries one test at a time
# where they say so (they take a file lock); everything else runs in parallel.
cargo test --workspace --all-targets --no-fail-fast 2>&1 | tee target/test.log
# cargo test exits non-zero on failure (pipefail); summarise for CI's reader.
passed=$(grep -Eo 'test result: ok\. [0-9]+ passed' target/test.log | awk '{s+=$4} END {print s+0}')
failed=$(grep -Eo '[0-9]+ failed' target/test.log | awk '{s+=$1} END {print s+0}')
ignored=$(grep -Eo '[0-9]+ ignored' target/test.log | awk '{s+=$1} END {print s+0}')
echo "tests: $passed passed, $failed failed, $ignored skipped"

#!/usr/bin/env bash
# Builds placer's .deb: the stripped binary, the systemd unit with its maintainer scripts,
# the config with every setting commented out, man pages (placer.toml(5) too), bash/zsh/fish
# completions, the docs and the copyright. Needs cargo-deb (`cargo install
# cargo-deb`). Usage: scripts/package.sh [release|dev] (dev reuses a debug build: for tests).
set -euo pipefail
cd "$(dirname "$0")/.."
profile=${1:-release}
case "$profile" in
  release) dir=release ;;
  dev) dir=debug ;;
  *) echo "usage: $0 [release|dev]" >&2; exit 2 ;;
esac
target=${CARGO_TARGET_DIR:-target}
# PLACER_SKIP_BUILD=1: the binary is already built (the package test runs inside cargo test).
[ "${PLACER_SKIP_BUILD:-0}" = 1 ] || cargo build -q -p placer --profile "$profile"
bin="$target/$dir/placer"
gen=dist/generated
rm -rf "$gen"
mkdir -p "$gen/man" "$gen/completions"
"$bin" man "$gen/man" >/dev/null
"$bin" completions bash >"$gen/completions/placer.bash"
"$bin" completions zsh >"$gen/completions/_placer"
"$bin" completions fish >"$gen/completions/placer.fish"
"$bin" daemon --no-config --print-default-config --commented-out >"$gen/placer.toml"
out="$target/debian"
mkdir -p "$out"
cargo deb -q -p placer --no-build --strip --profile "$profile" -o "$out" >&2
deb=$(ls -t "$out"/placer_*.deb | head -1)
echo "$deb"

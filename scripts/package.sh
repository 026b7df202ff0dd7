#!/usr/bin/env bash
# Builds placer's .deb (and its placer-dbgsym .ddeb, with md5sums in both): the stripped binary, the systemd unit with its maintainer scripts,
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
# --dbgsym: the binary stripped, its debug symbols in placer-dbgsym_*.ddeb beside the .deb
# (/usr/lib/debug/.build-id/, for gdb and debuginfod).
cargo deb -q -p placer --no-build --dbgsym --profile "$profile" -o "$out" >&2
deb=$(ls -t "$out"/placer_*.deb | head -1)
ddeb=$(ls -t "$out"/placer-dbgsym_*.ddeb | head -1)

# cargo-deb (3.8) writes no md5sums (dpkg --verify and debsums read them): each package is
# unpacked, given DEBIAN/md5sums as dh_md5sums writes it (every regular file but the
# conffiles, its path relative to /, two spaces) and packed again. The .ddeb is also given
# what Debian's own -dbgsym packages have: its doc directory a link to placer's (copyright,
# changelog), on which it then depends, and priority optional ("extra" is obsolete).
repack() {
  local pkg=$1 tmp
  tmp=$(mktemp -d)
  dpkg-deb -R "$pkg" "$tmp/root"
  (
    cd "$tmp/root"
    if [ "$(sed -n 's/^Package: //p' DEBIAN/control)" = placer-dbgsym ]; then
      sed -i 's/^Priority: extra$/Priority: optional/; s/^Recommends: placer (/Depends: placer (/' DEBIAN/control
      mkdir -p usr/share/doc
      ln -s placer usr/share/doc/placer-dbgsym
    fi
    find . -path ./DEBIAN -prune -o -type f -print0 | LC_ALL=C sort -z | xargs -0 md5sum |
      sed 's|  \./|  |' |
      awk -v conf="$(sed 's|^/||' DEBIAN/conffiles 2>/dev/null)" \
        'BEGIN { n = split(conf, c, "\n"); for (i = 1; i <= n; i++) skip[c[i]] = 1 }
         !(substr($0, 35) in skip)' >DEBIAN/md5sums
    chmod 0644 DEBIAN/md5sums
  )
  dpkg-deb --root-owner-group -Zxz -b "$tmp/root" "$pkg" >/dev/null
  rm -rf "$tmp"
}
repack "$deb"
repack "$ddeb"
echo "$deb"

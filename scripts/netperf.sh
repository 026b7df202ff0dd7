#!/usr/bin/env bash
# Installs netperf (netperf and netserver), which `placer ab --workload netperf:...` and its
# root test (crates/placer/tests/hardening.rs) run. Idempotent: with both present it returns
# at once. Root only; without root it says what is missing and returns (the test then skips,
# which fails under PLACER_REQUIRE_ROOT=1).
#
# Debian 12 has netperf (2.7.0-0.1) in its non-free section only. As scripts/cri-tools.sh
# does for containerd, the .deb is downloaded through a private apt configuration (its own
# source list, lists and cache under a temporary directory; nothing is added to /etc/apt)
# and installed with the system's configuration (it depends on libc6 only).
#
# The package's init script starts a netserver on every address (port 12865) at install and
# at boot; where that happened (no policy-rc.d forbade it), that server is stopped and
# disabled: the preset starts its own, on loopback only.
set -euo pipefail
# shellcheck source=scripts/apt-wait.sh
. "$(dirname "$0")/apt-wait.sh"

need() { command -v "$1" >/dev/null 2>&1; }
need netperf && need netserver && exit 0

if [ "$(id -u)" != 0 ] || ! need apt-get; then
  echo "note: netperf (Debian 12 non-free) cannot be installed without root and apt" >&2
  exit 0
fi

tmp=$(mktemp -d)
chmod 755 "$tmp" # apt downloads as _apt
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/lists/partial" "$tmp/cache/archives/partial" "$tmp/parts"
echo "deb http://deb.debian.org/debian bookworm non-free" >"$tmp/sources.list"
private=(-o "Dir::Etc::SourceList=$tmp/sources.list" -o "Dir::Etc::SourceParts=$tmp/parts"
  -o "Dir::State::Lists=$tmp/lists" -o "Dir::Cache=$tmp/cache" -o "APT::Get::List-Cleanup=0")
apt_get "${private[@]}" update -qq
(cd "$tmp" && apt_get "${private[@]}" download netperf -qq)
already=$(pgrep -x netserver || true)
DEBIAN_FRONTEND=noninteractive apt_get install -y -qq "$tmp"/netperf_*.deb >/dev/null
if [ -z "$already" ] && pgrep -x netserver >/dev/null; then
  start-stop-daemon --stop --quiet --oknodo --exec /usr/bin/netserver
fi
update-rc.d netperf disable >/dev/null 2>&1 || true
need netperf && need netserver || { echo "netperf did not install" >&2; exit 1; }
echo "netperf: $(netperf -V | head -1)"

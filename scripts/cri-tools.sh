#!/usr/bin/env bash
# Installs what the CRI end-to-end test (crates/placer/tests/cri_e2e.rs) runs on: containerd
# >= 1.7 (the first with NRI), runc, busybox-static (the test's image) and crictl (the
# kubelet's stand-in); and helm, which renders the chart in crates/placer/tests/deploy.rs. Idempotent: a second run with everything present returns at once.
# Root only; without root it says what is missing and returns (the test then skips, which
# fails under PLACER_REQUIRE_ROOT=1).
#
# Debian bookworm's containerd is 1.6.20 (no NRI), so containerd comes from trixie's archive
# through a private apt configuration (its own source list, lists and cache under a temporary
# directory): nothing is added to /etc/apt and no other package is upgraded. Its .deb depends
# only on runc and libc6 >= 2.34, both bookworm's. The version is not pinned: only the latest
# point release stays in the archive. crictl is built from the Go module proxy; its module
# and build caches live under a stable directory so that a rerun is quick.
set -euo pipefail
# shellcheck source=scripts/apt-wait.sh
. "$(dirname "$0")/apt-wait.sh"

need() { command -v "$1" >/dev/null 2>&1; }
containerd_minor() {
  containerd --version 2>/dev/null | tr ' ' '\n' | sed -n 's/^v\{0,1\}\([0-9]\+\)\.\([0-9]\+\).*/\1 \2/p' | head -1
}
containerd_ok() {
  need containerd || return 1
  read -r major minor <<<"$(containerd_minor)" || return 1
  [ "${major:-0}" -gt 1 ] || { [ "${major:-0}" -eq 1 ] && [ "${minor:-0}" -ge 7 ]; }
}

if [ "$(id -u)" != 0 ] || ! need apt-get; then
  containerd_ok && need runc && need crictl && need busybox && need helm ||
    echo "note: the CRI test's runtime (containerd >= 1.7, runc, crictl, busybox-static) cannot be installed without root and apt" >&2
  exit 0
fi

if ! need busybox || ! need runc; then
  DEBIAN_FRONTEND=noninteractive apt_get install -y -qq busybox-static runc >/dev/null
fi

if ! containerd_ok; then
  tmp=$(mktemp -d)
  chmod 755 "$tmp" # apt downloads as _apt
  trap 'rm -rf "$tmp"' EXIT
  mkdir -p "$tmp/lists/partial" "$tmp/cache/archives/partial" "$tmp/parts"
  echo "deb http://deb.debian.org/debian trixie main" >"$tmp/sources.list"
  private=(-o "Dir::Etc::SourceList=$tmp/sources.list" -o "Dir::Etc::SourceParts=$tmp/parts"
    -o "Dir::State::Lists=$tmp/lists" -o "Dir::Cache=$tmp/cache" -o "APT::Get::List-Cleanup=0")
  apt_get "${private[@]}" update -qq
  (cd "$tmp" && apt_get "${private[@]}" download containerd -qq)
  # Installed with the system's own configuration: its dependencies (runc) come from bookworm.
  DEBIAN_FRONTEND=noninteractive apt_get install -y -qq "$tmp"/containerd_*.deb >/dev/null
  # The package starts nothing here (no systemd); stop a daemon its scripts might have started.
  containerd_ok || { echo "containerd >= 1.7 did not install" >&2; exit 1; }
fi

# crictl, and helm for the chart's render test (crates/placer/tests/deploy.rs), from the Go
# module proxy. Cold, each takes minutes (mostly downloads; they share the Kubernetes
# modules); with the caches below, a rerun that finds the binaries returns at once.
go_install() {
  local tool=$1 pkg=$2
  need "$tool" && return 0
  local go=${GO:-/usr/local/go/bin/go}
  need "$go" || go=go
  if ! need "$go"; then
    echo "note: $tool needs Go (/usr/local/go/bin/go or GO=) to build" >&2
    return 0
  fi
  local cache=/var/cache/placer-ci/go
  mkdir -p "$cache"
  GOPATH="$cache" GOMODCACHE="$cache/mod" GOCACHE="$cache/build" GOBIN=/usr/local/bin \
    GOFLAGS=-mod=mod "$go" install "$pkg"
}
go_install crictl sigs.k8s.io/cri-tools/cmd/crictl@v1.37.0
go_install helm helm.sh/helm/v3/cmd/helm@v3.19.0
echo "CRI runtime: $(containerd --version | cut -d' ' -f3), runc $(runc --version | sed -n 's/^runc version //p'), crictl $(crictl --version | awk '{print $NF}'); $(helm version --short)"

#!/usr/bin/env bash
# The whole test suite, as CI runs it: installs what it needs, checks formatting and lints,
# then runs every test. Root tests are ignored (counted as skipped) without root; with
# PLACER_REQUIRE_ROOT=1 (set by .ci/run) a skip is a failure. Works with CARGO_TARGET_DIR.
# Each phase (install, fmt, clippy, build, test) prints its elapsed time; package installs
# first wait (at most 10 min, saying for whom) for another apt-get or dpkg to finish.
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/apt-wait.sh
. scripts/apt-wait.sh

t_start=$SECONDS
t_phase=$SECONDS
phase_name=""
# Ends the running phase (its time, and the total so far) and starts the next one.
phase() {
  local now=$SECONDS
  [ -z "$phase_name" ] ||
    echo "== $phase_name: $((now - t_phase))s (total $(((now - t_start) / 60))m$(((now - t_start) % 60))s)"
  phase_name=$1
  t_phase=$now
  [ -z "$phase_name" ] || echo "== $phase_name"
}
phase "install (packages, cargo-deb)"

need() { command -v "$1" >/dev/null 2>&1; }
missing=()
need ip || missing+=(iproute2)
need tc || missing+=(iproute2)
need python3 || missing+=(python3)
# The package test runs lintian on the .deb and readelf on its binary.
need lintian || missing+=(lintian)
need readelf || missing+=(binutils)
# Installed without their recommends (no daemons beside them):
# - the unit's sandbox test (crates/placer/tests/sandbox.rs): systemd-analyze expands its
#   system call groups and scores it (the systemd package: systemd-sysv, not it, makes
#   systemd the init), and the kernel's system call numbers (linux-libc-dev);
# - promtool (the metrics' exposition and the chart's alert rules' unit tests): Debian's
#   prometheus package; where systemd is the init its server is stopped and disabled.
bare=()
need systemd-analyze || bare+=(systemd)
[ -e /usr/include/x86_64-linux-gnu/asm/unistd_64.h ] || [ "$(uname -m)" != x86_64 ] || bare+=(linux-libc-dev)
need promtool || bare+=(prometheus)
# top's live view is tested in a real terminal.
need tmux || missing+=(tmux)
# placer next to a real irqbalance (crates/placer/tests/coexist_real.rs starts its own,
# banning every IRQ, when no irqbalance service runs).
need irqbalance || missing+=(irqbalance)
# placer ab's real-program presets (their root test); the tests start their own servers.
need iperf3 || missing+=(iperf3)
need redis-server || missing+=(redis-server)
need redis-benchmark || missing+=(redis-tools)
need nginx || missing+=(nginx)
need wrk || missing+=(wrk)
need memcached || missing+=(memcached)
need memcaslap || missing+=(libmemcached-tools)
# The lab (placer_testkit::lab, crates/placer/tests/lab.rs): qemu, Debian's kernel, busybox;
# without their recommends (firmware, a GUI's libraries).
lab=()
need qemu-system-x86_64 || lab+=(qemu-system-x86)
need busybox || lab+=(busybox-static)
need xz || lab+=(xz-utils)
ls /boot/vmlinuz-* >/dev/null 2>&1 || lab+=(linux-image-amd64)
if [ ${#missing[@]} -gt 0 ] || [ ${#lab[@]} -gt 0 ] || [ ${#bare[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && need apt-get; then
    apt_get update -qq
    [ ${#lab[@]} -eq 0 ] || DEBIAN_FRONTEND=noninteractive apt_get install -y -qq --no-install-recommends "${lab[@]}" >/dev/null
    [ ${#missing[@]} -eq 0 ] || DEBIAN_FRONTEND=noninteractive apt_get install -y -qq "${missing[@]}" >/dev/null
    if [ ${#bare[@]} -gt 0 ]; then
      DEBIAN_FRONTEND=noninteractive apt_get install -y -qq --no-install-recommends "${bare[@]}" >/dev/null
      [ ! -d /run/systemd/system ] || ! need prometheus ||
        systemctl disable --now prometheus >/dev/null 2>&1 || true
    fi
  else
    echo "note: ${missing[*]} ${lab[*]} ${bare[*]} missing and cannot be installed; the tests that need them skip" >&2
  fi
fi
# The CRI end-to-end tests' runtime (containerd >= 1.7, runc, busybox-static, crictl) and helm (quick
# when present; built cold, crictl and helm take minutes each).
bash scripts/cri-tools.sh
# netperf for placer ab's netperf preset: Debian 12 has it in non-free only (quick when present).
bash scripts/netperf.sh

# A fresh build (CI) gains nothing from incremental compilation's bookkeeping.
[ -z "${CI:-}" ] || export CARGO_INCREMENTAL=0
if ! need cargo; then
  echo "cargo not found: install Rust 1.95 (rustup) first" >&2
  exit 1
fi
rustup component add rustfmt clippy >/dev/null 2>&1 || true
# The package test builds the .deb (about a minute to install cargo-deb once).
if ! cargo deb --version >/dev/null 2>&1; then
  cargo install cargo-deb --locked -q
fi

# Leftovers of an interrupted earlier run (namespaces, processes) would disturb this one.
bash scripts/reap-tests.sh

log_dir=$(mktemp -d)
trap 'bash scripts/reap-tests.sh; rm -rf "$log_dir"' EXIT

phase "cargo fmt --check"
cargo fmt --all -- --check
phase "cargo clippy"
cargo clippy --workspace --all-targets -- -D warnings
# The tests built once, timed apart from their run.
phase "build the tests"
status=0
: >"$log_dir/test.log"
if cargo test --workspace --all-targets --no-run; then
  phase "cargo test"
  # Real-system tests share the network stack and CPUs: they take a file lock and run one
  # at a time; everything else runs in parallel.
  cargo test --workspace --all-targets --no-fail-fast 2>&1 | tee "$log_dir/test.log" || status=$?
else
  status=$?
fi
phase ""
# Each test binary's time (cargo runs them one after another), the slowest first.
echo "== test groups, slowest first"
awk '/^ *Running /{bin = $NF; sub(/.*\//, "", bin); sub(/-[0-9a-f]+\)$/, "", bin); name = bin ": " $2}
  /^test result:/ && match($0, /finished in [0-9.]+s/) {
  printf "%8.1fs  %s\n", substr($0, RSTART + 12, RLENGTH - 13), name}' "$log_dir/test.log" |
  sort -rn | head -15
sum() { grep -Eo "$1" "$log_dir/test.log" | awk '{s+=$1} END {print s+0}'; }
passed=$(sum '[0-9]+ passed')
failed=$(sum '[0-9]+ failed')
skipped=$(sum '[0-9]+ ignored')
echo "$passed passed, $failed failed, $skipped skipped"
if [ "$status" -ne 0 ] && [ "$failed" -eq 0 ]; then
  echo "cargo test exited with $status (a build error or a crashed test binary)" >&2
fi
exit "$status"

#!/usr/bin/env bash
# Removes what an interrupted test run left behind: network namespaces the tests and
# benchmarks create (names PREFIX-PID[-N]) whose creating process is gone (their veths go with
# them, and any process still inside is killed), and temporary dirs of dead test processes.
# Safe beside a running suite: it never touches what a live process owns.
set -uo pipefail
# The one harness (placer-linux/src/testnet.rs) names them placer-a-PID-N, placer-b-PID-N and
# placer-bn-PID-N, the lab (placer-testkit/src/lab.rs) placer-lab-PID with its tap and qemu
# inside; the older prefixes are kept for leftovers of earlier builds.
prefixes='placer-a|placer-b|placer-bn|placer-lab|plobs-rx|plobs-tx|plr-rx|plr-tx|plrb-rx|plrb-tx'
reaped=0
if [ "$(id -u)" = 0 ] && command -v ip >/dev/null 2>&1; then
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}'); do
    [[ $ns =~ ^($prefixes)-([0-9]+) ]] || continue
    pid=${BASH_REMATCH[2]}
    [ -d "/proc/$pid" ] && continue
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null
    ip netns del "$ns" 2>/dev/null && reaped=$((reaped + 1))
  done
fi
# The fault-injection script's work dirs (placer-test-faults-PID-*, PID its own) whose
# script is gone: its victim (comm plfault), whose pid it recorded there, is ended first.
# Only that pid: another process named plfault is none of this suite's business.
for d in /tmp/placer-test-faults-[0-9]*-*; do
  [ -d "$d" ] || continue
  [[ $(basename "$d") =~ ^placer-test-faults-([0-9]+)- ]] || continue
  [ -d "/proc/${BASH_REMATCH[1]}" ] && continue
  victim=$(cat "$d/victim.pid" 2>/dev/null || true)
  if [[ $victim =~ ^[0-9]+$ ]] && [ "$(cat "/proc/$victim/comm" 2>/dev/null)" = plfault ]; then
    kill -9 "$victim" 2>/dev/null && reaped=$((reaped + 1))
  fi
  rm -rf "$d" && reaped=$((reaped + 1))
done
for d in "${TMPDIR:-/tmp}"/placer-*-[0-9]*; do
  [ -e "$d" ] || continue
  [[ $(basename "$d") =~ -([0-9]+)(-[0-9]+)?(\.[a-z]+)?$ ]] || continue
  pid=${BASH_REMATCH[1]}
  [ -d "/proc/$pid" ] && continue
  rm -rf "$d" && reaped=$((reaped + 1))
done
[ "$reaped" -gt 0 ] && echo "reap-tests: removed $reaped leftover(s) of an earlier run"
exit 0

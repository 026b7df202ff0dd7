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
for d in "${TMPDIR:-/tmp}"/placer-*-[0-9]*; do
  [ -e "$d" ] || continue
  [[ $(basename "$d") =~ -([0-9]+)(-[0-9]+)?(\.[a-z]+)?$ ]] || continue
  pid=${BASH_REMATCH[1]}
  [ -d "/proc/$pid" ] && continue
  rm -rf "$d" && reaped=$((reaped + 1))
done
# The fault-injection script's victim (comm plfault) when its script was killed.
pkill -9 -x plfault 2>/dev/null && reaped=$((reaped + 1))
for d in "${TMPDIR:-/tmp}"/placer-test-faults-*; do
  [ -d "$d" ] && ! pgrep -f "faults.sh" >/dev/null && rm -rf "$d" && reaped=$((reaped + 1))
done
[ "$reaped" -gt 0 ] && echo "reap-tests: removed $reaped leftover(s) of an earlier run"
exit 0

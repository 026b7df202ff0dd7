#!/usr/bin/env bash
# The receive cost of each reader placement over loopback, for the simulator's network
# inputs (docs/simulator.md, "seed 002"): one TCP stream, the sender pinned to CPU 0, RPS
# steering receive processing to one CPU, and the reader on that CPU, on a CPU sharing its
# L2, on one sharing only its L3, on one sharing no cache, and unpinned (the kernel's
# choice). Placements that the machine has no CPU for are skipped and said so. The cache
# classes come from sysfs (index2 = L2, index3 = L3 shared_cpu_list of the RPS CPU).
# Writes machine.txt, caches.txt and net-PLACEMENT.json into OUTDIR. Needs root (RPS).
#
# Usage: scripts/loopback-costs.sh OUTDIR
#   PLACER_BIN: the binary (default: the release build, built when missing)
#   PLACER_RPS_CPU: the receive CPU (default 3, as in docs/daemon.md)
#   PLACER_NET_RUNS, PLACER_NET_DURATION: trials per placement and their length (7, 2s)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/loopback-costs.sh OUTDIR}
bin=${PLACER_BIN:-${CARGO_TARGET_DIR:-target}/release/placer}
[ -x "$bin" ] || cargo build --release -q -p placer
mkdir -p "$out"
ncpu=$(nproc)
rps=${PLACER_RPS_CPU:-3}
[ "$rps" -lt "$ncpu" ] || { echo "needs more than $rps CPUs" >&2; exit 2; }
runs=${PLACER_NET_RUNS:-7}
dur=${PLACER_NET_DURATION:-2s}
sender=0

# Expand a sysfs CPU list ("0-3,8") to one CPU per line.
expand() {
  tr ',' '\n' <<<"$1" | while IFS=- read -r a b; do seq "$a" "${b:-$a}"; done
}
shared() { cat "/sys/devices/system/cpu/cpu$rps/cache/index$1/shared_cpu_list" 2>/dev/null || echo "$rps"; }
l2=$(shared 2)
l3=$(shared 3)
{
  echo "cpus $ncpu"
  echo "kernel $(uname -r)"
  grep -m1 "model name" /proc/cpuinfo || true
  grep -m1 "cpu MHz" /proc/cpuinfo || true
  echo "date $(date -u +%FT%TZ)"
  "$bin" --version
} >"$out/machine.txt"
{
  for i in 0 1 2 3; do
    d=/sys/devices/system/cpu/cpu$rps/cache/index$i
    [ -d "$d" ] && echo "cpu$rps index$i L$(cat "$d/level") $(cat "$d/type") $(cat "$d/size") shared $(cat "$d/shared_cpu_list")"
  done
  echo "rps $rps sender $sender"
} >"$out/caches.txt"
cat "$out/machine.txt" "$out/caches.txt"

# The first CPU (other than the sender's and the RPS CPU) in `want` and not in `avoid`.
pick() {
  local want=$1 avoid=$2 c
  for c in $want; do
    [ "$c" = "$rps" ] || [ "$c" = "$sender" ] && continue
    grep -qx "$c" <<<"$avoid" && continue
    echo "$c"
    return
  done
}
all=$(seq 0 $((ncpu - 1)))
l2s=$(expand "$l2")
l3s=$(expand "$l3")
declare -A place=([same]=$rps)
place[l2]=$(pick "$l2s" "")
place[llc]=$(pick "$l3s" "$l2s")
place[none]=$(pick "$all" "$l3s")
place[kernel]=unpinned
for p in same l2 llc none kernel; do
  c=${place[$p]}
  if [ -z "$c" ]; then
    echo "$p: no CPU of this class here, skipped"
    continue
  fi
  args=(bench net --path loopback --buffers reuse --runs "$runs" --duration "$dur"
    --sender-cpu "$sender" --rps-cpus "$rps" --json)
  [ "$c" = unpinned ] || args+=(--receiver-cpu "$c")
  "$bin" "${args[@]}" >"$out/net-$p.json"
  echo "$p (reader on $c): $out/net-$p.json"
done

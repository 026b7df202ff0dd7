#!/usr/bin/env bash
# The multi-core measurements the docs still list as "to be measured", in one command for a
# machine of 8 or more cores: `placer ab` with one and four streams (docs/daemon.md), the
# agent's own cost (`bench overhead`, docs/observation.md), one cycle over 8,000 generated
# processes (`bench cycle`), the harm curve (`bench contention`, docs/contention.md), and the
# agent's cost on a busy machine beside irqbalance (`busy`: `bench overhead --background`,
# 100,000 switches/s and one loopback stream, 5 runs; about 150 s; docs/observation.md).
# Writes STEP.json per step and machine.txt into OUTDIR. Needs root (ab sets RPS).
#
# Usage: scripts/multicore.sh OUTDIR [STEP ...]
#   steps: ab1 ab4 overhead cycle contention busy (default: all; each under 10 minutes)
#   PLACER_BIN: the binary (default: the release build, built when missing)
#   PLACER_RPS_CPU: ab's receive CPU (default 3, as in docs/daemon.md; at most the last CPU)
#   PLACER_MULTICORE_QUICK=1: seconds-long versions of every step (the test that keeps this
#   script working uses them; their numbers mean nothing)
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: scripts/multicore.sh OUTDIR [STEP ...]}
shift
steps=("$@")
[ ${#steps[@]} -gt 0 ] || steps=(ab1 ab4 overhead cycle contention busy)
bin=${PLACER_BIN:-${CARGO_TARGET_DIR:-target}/release/placer}
[ -x "$bin" ] || cargo build --release -q -p placer
mkdir -p "$out"
last=$(($(nproc) - 1))
rps=${PLACER_RPS_CPU:-3}
[ "$rps" -le "$last" ] || rps=$last
if [ "${PLACER_MULTICORE_QUICK:-0}" = 1 ]; then
  ab=(--rounds 2 --phase 1s --warmup 1s)
  overhead=(--duration 2s --procs 20 --conns 5 --runs 1)
  cycle=(--runs 2 --gen-procs 200 --gen-threads 400)
  contention=(--points 0,1 --duration 300ms --stream-bytes 33554432)
  busy=(--duration 1s --procs 20 --conns 5 --runs 1 --background switches:2000,stream:1,stream-gbit:0.2)
else
  ab=(--rounds 10 --phase 10s)
  overhead=(--duration 20s --procs 500 --conns 200)
  cycle=(--runs 20 --pause 10ms --gen-procs 8000 --gen-threads 80000)
  contention=()
  busy=(--duration 10s --procs 500 --conns 200 --runs 5 --background switches:100000,stream:1)
fi
{
  echo "cpus $(nproc)"
  echo "kernel $(uname -r)"
  grep -m1 "model name" /proc/cpuinfo || true
  echo "date $(date -u +%FT%TZ)"
  "$bin" --version
} >"$out/machine.txt"
for s in "${steps[@]}"; do
  case "$s" in
    ab1) "$bin" ab --workload streams:1 --rps-cpu "$rps" "${ab[@]}" --json >"$out/$s.json" ;;
    ab4) "$bin" ab --workload streams:4 --rps-cpu "$rps" "${ab[@]}" --json >"$out/$s.json" ;;
    overhead) "$bin" bench overhead --policies all "${overhead[@]}" --json >"$out/$s.json" ;;
    cycle) "$bin" bench cycle --mode generated "${cycle[@]}" --json >"$out/$s.json" ;;
    contention) "$bin" bench contention "${contention[@]}" --json >"$out/$s.json" ;;
    busy) "$bin" bench overhead --policies all "${busy[@]}" --vs irqbalance --json >"$out/$s.json" ;;
    *)
      echo "unknown step $s (steps: ab1 ab4 overhead cycle contention busy)" >&2
      exit 2
      ;;
  esac
  echo "$s: $out/$s.json"
done

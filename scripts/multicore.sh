#!/usr/bin/env bash
# The multi-core measurements the docs still list as "to be measured", in one command for a
# machine of 8 or more cores: `placer ab` with one and four streams (docs/daemon.md), the
# agent's own cost (`bench overhead`, docs/observation.md), one cycle over 8,000 generated
# processes (`bench cycle`), the harm curve (`bench contention`, docs/contention.md), and the
# agent's cost on a busy machine beside irqbalance (`busy`: `bench overhead --background`,
# 100,000 switches/s and one loopback stream, 5 runs; about 150 s; docs/observation.md);
# and issue 45's device checks: `placer ab` over redis and nginx, and one continuous daemon
# run beside four loopback streams that logs every move and verdict.
# Writes STEP.json per step and machine.txt into OUTDIR. Needs root (ab sets RPS).
#
# Usage: scripts/multicore.sh OUTDIR [STEP ...]
#   steps: ab1 ab4 overhead cycle contention busy (default: these; each under 10 minutes),
#          redis nginx daemon4 (on request)
#   daemon4: `placer daemon` for PLACER_DAEMON_SECS (default 300) beside 4 loopback streams
#     with RPS on PLACER_RPS_CPU; writes daemon4.log (the daemon's log: each move and verdict),
#     daemon4.json (`placer report --json` of its verdicts), daemon4-verdicts.jsonl,
#     daemon4-decisions.json (its last decisions) and daemon4-rates.txt (each stream's
#     Gbit/s per 10 s)
#   PLACER_INTERVAL: the daemon's interval in the ab and daemon4 steps (default: the daemon's
#     own, 1s); shorter lets the judge decide inside short phases (its first look comes
#     2 + 2 x 12 intervals after a pin, docs/config.md)
#   PLACER_AB: the ab steps' rounds and phase options (default: --rounds 10 --phase 10s)
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
  daemon_secs=${PLACER_DAEMON_SECS:-4}
  tick=1
  busy=(--duration 1s --procs 20 --conns 5 --runs 1 --background switches:2000,stream:1,stream-gbit:0.2)
else
  read -ra ab <<<"${PLACER_AB:---rounds 10 --phase 10s}"
  overhead=(--duration 20s --procs 500 --conns 200)
  cycle=(--runs 20 --pause 10ms --gen-procs 8000 --gen-threads 80000)
  contention=()
  daemon_secs=${PLACER_DAEMON_SECS:-300}
  tick=10
  busy=(--duration 10s --procs 500 --conns 200 --runs 5 --background switches:100000,stream:1)
fi
daemon_cfg=()
if [ -n "${PLACER_INTERVAL:-}" ]; then
  printf 'interval = "%s"\n' "$PLACER_INTERVAL" >"$out/daemon.toml"
  daemon_cfg=(--config "$out/daemon.toml")
fi

# One continuous daemon run beside 4 loopback streams (RPS on $rps); everything it started
# is stopped and RPS restored on any exit.
daemon4_pids=()
daemon4_state=
daemon4_rps=
daemon4_cleanup() {
  kill "${daemon4_pids[@]}" 2>/dev/null || true
  wait 2>/dev/null || true
  [ -z "$daemon4_rps" ] || echo "$daemon4_rps" >/sys/class/net/lo/queues/rx-0/rps_cpus
  [ -z "$daemon4_state" ] || rm -rf "$daemon4_state"
}
daemon4() {
  local rps_file=/sys/class/net/lo/queues/rx-0/rps_cpus i t now cfg=("${daemon_cfg[@]}")
  [ ${#cfg[@]} -gt 0 ] || cfg=(--no-config)
  trap daemon4_cleanup EXIT
  daemon4_rps=$(cat "$rps_file")
  daemon4_state=$(mktemp -d)
  printf '%x\n' $((1 << rps)) >"$rps_file"
  for i in 1 2 3 4; do
    "$bin" ab --worker rx:127.0.0.1:0 >"$daemon4_state/rx$i" &
    daemon4_pids+=($!)
  done
  for i in 1 2 3 4; do
    for _ in $(seq 50); do [ -s "$daemon4_state/rx$i" ] && break; sleep 0.1; done
    "$bin" ab --worker "tx:$(head -n1 "$daemon4_state/rx$i")" >/dev/null &
    daemon4_pids+=($!)
  done
  "$bin" daemon "${cfg[@]}" --state-dir "$daemon4_state/run" 2>"$out/daemon4.log" &
  local daemon=$!
  echo "${daemon4_pids[@]}" "$daemon" >"$out/daemon4.pids"
  # Each receiver prints its cumulative bytes every 100 ms: one line per stream per tick
  # (stream, time, cumulative bytes), Gbit/s per tick computed below.
  local start
  start=$(date +%s.%N)
  for ((t = tick; t <= daemon_secs; t += tick)); do
    sleep "$tick"
    now=$(date +%s.%N)
    for i in 1 2 3 4; do echo "$i $now $(tail -n1 "$daemon4_state/rx$i")"; done
  done >"$daemon4_state/counts"
  # The daemon removes its decisions when it stops: keep them (why it moved or did not).
  cp "$daemon4_state/run/decisions.json" "$out/daemon4-decisions.json" 2>/dev/null || true
  kill -INT "$daemon"
  wait "$daemon" || true
  cp "$daemon4_state/run/verdicts.jsonl" "$out/daemon4-verdicts.jsonl" 2>/dev/null || true
  "$bin" report --json --no-config --state-dir "$daemon4_state/run" >"$out/daemon4.json"
  awk -v t0="$start" '{ if ($1 in t) printf "stream %s %.0fs %.2f Gbit/s\n", $1, $2 - t0, ($3 - b[$1]) * 8 / ($2 - t[$1]) / 1e9; t[$1] = $2; b[$1] = $3 }' \
    "$daemon4_state/counts" >"$out/daemon4-rates.txt"
  daemon4_cleanup
  trap - EXIT
  daemon4_pids=()
  daemon4_rps=
  daemon4_state=
}

{
  echo "cpus $(nproc)"
  echo "kernel $(uname -r)"
  grep -m1 "model name" /proc/cpuinfo || true
  echo "date $(date -u +%FT%TZ)"
  "$bin" --version
} >"$out/machine.txt"
for s in "${steps[@]}"; do
  case "$s" in
    ab1) "$bin" ab --workload streams:1 --rps-cpu "$rps" "${ab[@]}" "${daemon_cfg[@]}" --json >"$out/$s.json" ;;
    ab4) "$bin" ab --workload streams:4 --rps-cpu "$rps" "${ab[@]}" "${daemon_cfg[@]}" --json >"$out/$s.json" ;;
    redis | nginx) "$bin" ab --workload "$s" --rps-cpu "$rps" "${ab[@]}" "${daemon_cfg[@]}" --json >"$out/$s.json" ;;
    daemon4) daemon4 ;;
    overhead) "$bin" bench overhead --policies all "${overhead[@]}" --json >"$out/$s.json" ;;
    cycle) "$bin" bench cycle --mode generated "${cycle[@]}" --json >"$out/$s.json" ;;
    contention) "$bin" bench contention "${contention[@]}" --json >"$out/$s.json" ;;
    busy) "$bin" bench overhead --policies all "${busy[@]}" --vs irqbalance --json >"$out/$s.json" ;;
    *)
      echo "unknown step $s (steps: ab1 ab4 overhead cycle contention busy redis nginx daemon4)" >&2
      exit 2
      ;;
  esac
  echo "$s: $out/$s.json"
done

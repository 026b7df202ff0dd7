#!/usr/bin/env bash
# Fault injection (issues 17, 36): crash and signal trials against a real daemon holding a
# 1,000-thread process pinned, then `placer restore`; checks that every thread got its
# affinity back. TRIALS of each kind: SIGTERM then SIGKILL 0-30 ms later (a restore cut
# short), SIGKILL at a random moment, a terminating signal (USR1, USR2, ALRM, QUIT,
# INT, TERM, XCPU, XFSZ, VTALRM, PROF, PWR, IO, STKFLT, SYS, TRAP, RTMIN, RTMAX in turn;
# the daemon alone must restore, before `placer restore`), SIGTERM to the next daemon
# while it restores what a SIGKILLed one left (the daemon alone must restore), and a
# planted journal entry (an RPS device name with `..` reaching a file outside /sys, a
# non-mask value) that `placer restore` must refuse without writing.
# Then 10 x TRIALS faults of the NRI plugin's runtime (issue 36 item 3), through
# crates/placer/tests/hardening.rs's nri_runtime_faults_are_answered_or_end_in_exit_1: real
# daemons with --nri against a runtime played on the wire, sent malformed frames and
# requests (each must be answered, and a valid request after it), then an oversized ttrpc
# header or mux frame, a request cut short, Shutdown or a closed connection, or a refused
# registration (each daemon must exit 1 within 5 s, having put back through the runtime
# what it still could, else kept it journaled).
# Prints "N tried, M failed" (", nothing lost" when M = 0) and fails when M > 0.
# Usage: scripts/faults.sh [TRIALS]   (root; PLACER_BIN=path skips the build of placer,
# PLACER_NRI_FAULTS_TEST=path that of the hardening test binary)
set -euo pipefail
cd "$(dirname "$0")/.."
trials=${1:-20}
if [ "$(id -u)" != 0 ]; then
  echo "faults.sh needs root (it pins another process and restores it)" >&2
  exit 2
fi
bin=${PLACER_BIN:-}
if [ -z "$bin" ]; then
  cargo build -q -p placer
  bin=${CARGO_TARGET_DIR:-target}/debug/placer
fi
# Its pid in the name: scripts/reap-tests.sh ends the victim (its pid in victim.pid) of a
# faults.sh that is gone, and only that one.
work=$(mktemp -d "/tmp/placer-test-faults-$$-XXXXXX")
chmod 700 "$work"
victim=""
daemon=""
cleanup() {
  [ -n "$daemon" ] && kill -9 "$daemon" 2>/dev/null || true
  [ -n "$victim" ] && kill -9 "$victim" 2>/dev/null || true
  "$bin" restore --no-config --state-dir "$work/state" >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

# The victim: 1,000 threads, one of them busy (so smt-energy wants it), named plfault.
python3 - "$work/victim.pid" <<'PY' &
import ctypes, os, sys, threading, time
ctypes.CDLL(None).prctl(15, b"plfault", 0, 0, 0)
for _ in range(998):
    threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()
def spin():
    while True:
        pass
threading.Thread(target=spin, daemon=True).start()
open(sys.argv[1], "w").write(str(os.getpid()))
time.sleep(3600)
PY
for _ in $(seq 100); do [ -s "$work/victim.pid" ] && break; sleep 0.05; done
victim=$(cat "$work/victim.pid")
original=$(awk '/Cpus_allowed_list/ {print $2}' "/proc/$victim/status")
if [ "$original" = "$(awk '{print $1}' /sys/devices/system/cpu/online)" ] && [ "$(nproc)" -lt 2 ]; then
  echo "faults.sh needs 2 CPUs" >&2
  exit 2
fi
cat >"$work/c.toml" <<EOF2
interval = "100ms"
policies = ["smt-energy"]
[metrics]
enabled = false
[smt_energy]
apps = [{ comm = "plfault" }]
max_units = 1
min_cpu_share = 0.3
EOF2

threads_not_back() {
  awk -v o="$original" '/^Cpus_allowed_list/ && $2 != o {n++} END {print n + 0}' \
    /proc/"$victim"/task/*/status 2>/dev/null
}

signals=(USR1 USR2 ALRM QUIT INT TERM XCPU XFSZ VTALRM PROF PWR IO STKFLT SYS TRAP RTMIN RTMAX)
kinds=5
left=0
total=$((trials * kinds))
# The file a planted `..` device name reaches from /sys/class/net.
mkdir -p "$work/outside/queues/rx-0"
planted_dev="../../..$work/outside"
for i in $(seq "$total"); do
  if [ $((i % kinds)) = 4 ]; then
    echo 1 >"$work/outside/queues/rx-0/rps_cpus"
    mkdir -p "$work/state" && chmod 700 "$work/state"
    printf '{"version":1,"entries":[{"knob":"rps","dev":"%s","queue":"rx-0","previous":"written by a planted journal","applied":"1"},{"knob":"rps","dev":"lo","queue":"rx-0","previous":"0\\nmore","applied":"1"}]}' \
      "$planted_dev" >"$work/state/journal.json"
    "$bin" restore --no-config --state-dir "$work/state" >>"$work/restore.log" 2>&1 || true
    if [ "$(cat "$work/outside/queues/rx-0/rps_cpus")" != 1 ]; then
      left=$((left + 1))
      echo "trial $i (planted journal): a file outside /sys was written" >&2
    fi
    rm -f "$work/state/journal.json"
    continue
  fi
  "$bin" daemon --config "$work/c.toml" --state-dir "$work/state" 2>>"$work/daemon.log" &
  daemon=$!
  # Wait until the victim is pinned (every thread: the daemon walks them all).
  for _ in $(seq 200); do
    [ "$(threads_not_back)" -ge 1000 ] && break
    sleep 0.05
  done
  case $((i % kinds)) in
    0)
      kill -TERM "$daemon"
      sleep "0.0$((RANDOM % 3))$((RANDOM % 10))"
      kill -KILL "$daemon" 2>/dev/null || true
      what="SIGTERM then SIGKILL"
      ;;
    1)
      sleep "0.$((RANDOM % 10))"
      kill -KILL "$daemon"
      what="SIGKILL"
      ;;
    2)
      sig=${signals[$(((i / kinds) % ${#signals[@]}))]}
      kill -"$sig" "$daemon"
      what="SIG$sig"
      ;;
    3)
      # A crash leaves the journal; the next daemon is stopped while it restores it.
      kill -KILL "$daemon"
      wait "$daemon" 2>/dev/null || true
      "$bin" daemon --config "$work/c.toml" --state-dir "$work/state" 2>>"$work/daemon.log" &
      daemon=$!
      for _ in $(seq 2000); do
        [ "$(cat "$work/state/daemon.lock" 2>/dev/null)" = "$daemon" ] && break
        sleep 0.001
      done
      kill -TERM "$daemon"
      what="SIGTERM during the start-up restore"
      ;;
  esac
  wait "$daemon" 2>/dev/null || true
  daemon=""
  if [ $((i % kinds)) -ge 2 ]; then
    # A signal the daemon catches: it must have restored on its own.
    n=$(threads_not_back)
    if [ "$n" -ne 0 ]; then
      left=$((left + 1))
      echo "trial $i ($what): $n thread(s) left pinned by the daemon itself" >&2
      "$bin" restore --no-config --state-dir "$work/state" >>"$work/restore.log" 2>&1 || true
      continue
    fi
  fi
  "$bin" restore --no-config --state-dir "$work/state" >>"$work/restore.log" 2>&1 || true
  n=$(threads_not_back)
  if [ "$n" -ne 0 ]; then
    left=$((left + 1))
    echo "trial $i ($what): $n thread(s) left pinned" >&2
  fi
done

# The NRI runtime's faults.
nri_test=${PLACER_NRI_FAULTS_TEST:-}
if [ -z "$nri_test" ]; then
  nri_test=$(cargo test -q -p placer --test hardening --no-run --message-format=json |
    python3 -c 'import json, sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("executable") and m.get("target", {}).get("name") == "hardening":
        print(m["executable"])')
fi
nri_trials=$((trials * 10))
nri_out=$(PLACER_NRI_FAULT_TRIALS=$nri_trials "$nri_test" --exact \
  nri_runtime_faults_are_answered_or_end_in_exit_1 --nocapture 2>"$work/nri.log" || true)
nri_line=$(printf '%s\n' "$nri_out" | sed -n 's/^NRI: \([0-9]*\) tried, \([0-9]*\) failed.*/\1 \2/p')
if [ -z "$nri_line" ]; then
  echo "NRI faults: no result (see below)" >&2
  tail -20 "$work/nri.log" >&2
  total=$((total + nri_trials))
  left=$((left + nri_trials))
else
  read -r nri_tried nri_failed <<<"$nri_line"
  total=$((total + nri_tried))
  left=$((left + nri_failed))
  [ "$nri_failed" -eq 0 ] || grep '^daemon ' "$work/nri.log" >&2 || true
fi
if [ "$left" -eq 0 ]; then
  echo "$total tried, 0 failed, nothing lost"
else
  echo "$total tried, $left failed"
fi
[ "$left" -eq 0 ]

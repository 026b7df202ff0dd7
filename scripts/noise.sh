#!/usr/bin/env bash
# A busy host for the test suite (issue 47 item 4): loopback TCP streams in the host's own
# network namespace (python3, and iperf3 when installed), a fork loop (processes that come
# and go) and CPU hogs, for SECONDS (default 600). Run it beside `bash scripts/test.sh`; a
# test that observes the whole host instead of what it started fails under it.
# Everything it starts is ended by pid when it returns, is interrupted or killed by a
# catchable signal; each child also stops on its own at the deadline, so even a SIGKILLed
# noise.sh leaves nothing behind for long.
# Usage: scripts/noise.sh [SECONDS]   (NOISE_HOGS=N CPU hogs, default the online CPUs;
# NOISE_STREAMS=N python3 streams, default 4)
set -euo pipefail
secs=${1:-600}
if ! [[ $secs =~ ^[0-9]+$ ]] || [ "$secs" -lt 1 ]; then
  echo "usage: $0 [SECONDS] (a positive whole number, default 600)" >&2
  exit 2
fi
hogs=${NOISE_HOGS:-$(nproc)}
streams=${NOISE_STREAMS:-4}
deadline=$(($(date +%s) + secs))
pids=()

cleanup() {
  trap - EXIT INT TERM HUP
  local p
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  echo "noise: stopped ${#pids[@]} process(es): ${pids[*]}"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

started() { pids+=("$1"); echo "noise: pid $1: $2"; }

# Loopback streams: one server draining every connection, clients sending as fast as they
# can, all on 127.0.0.1 so the host's socket tables fill with sockets of other processes.
python3 - "$deadline" "$streams" <<'PY' &
import socket, sys, threading, time
deadline, n = float(sys.argv[1]), int(sys.argv[2])
srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen(n)
port = srv.getsockname()[1]
def drain(c):
    try:
        while c.recv(1 << 16):
            pass
    except OSError:
        pass
def accept():
    while True:
        c, _ = srv.accept()
        threading.Thread(target=drain, args=(c,), daemon=True).start()
def send():
    c = socket.create_connection(("127.0.0.1", port))
    buf = b"x" * (1 << 16)
    while time.time() < deadline:
        c.sendall(buf)
threading.Thread(target=accept, daemon=True).start()
for _ in range(n):
    threading.Thread(target=send, daemon=True).start()
print(f"noise: python3 streams on 127.0.0.1:{port}", flush=True)
time.sleep(max(0.0, deadline - time.time()))
PY
started $! "python3: $streams TCP stream(s) over 127.0.0.1"

if command -v iperf3 >/dev/null 2>&1; then
  port=$((20000 + RANDOM % 20000))
  iperf3 -s -B 127.0.0.1 -p "$port" >/dev/null 2>&1 &
  started $! "iperf3 -s -B 127.0.0.1 -p $port"
  sleep 0.5
  # -t bounds the client; the server is ended with the rest.
  iperf3 -c 127.0.0.1 -p "$port" -t "$secs" -P 2 >/dev/null 2>&1 &
  started $! "iperf3 -c 127.0.0.1 -p $port -t $secs -P 2"
fi

# A fork loop: short-lived processes appearing and vanishing all the time.
bash -c 'while [ "$(date +%s)" -lt "$1" ]; do /bin/true; done' noise-fork "$deadline" &
started $! "fork loop (bash running /bin/true until the deadline)"

for i in $(seq "$hogs"); do
  bash -c 'while [ "$SECONDS" -lt "$1" ]; do :; done' noise-hog "$secs" &
  started $! "CPU hog $i of $hogs (bash busy loop)"
done

echo "noise: running for ${secs}s (until $(date -d "@$deadline" +%T)); Ctrl-C ends it early"
while [ "$(date +%s)" -lt "$deadline" ]; do
  sleep 1 &
  wait $! || true
done

#!/usr/bin/env python3
"""Per-interval noise of a loopback stream on the running machine, for the verdict
calibration (placer bench verdicts, docs/daemon.md).

Starts one stream between `placer ab --worker` helpers (the streams:1 workload of
placer ab), samples every INTERVAL seconds for N intervals: the receiver's bytes and the
two helpers' CPU seconds (/proc/PID/stat). Writes the series as JSON lines and prints, per
metric, the AR(1) fit of the log values: sd of the log around its mean (sigma) and the
lag-1 autocorrelation (rho). Nothing here looks at a verdict.

usage: verdict_noise.py PLACER_BINARY OUT.jsonl [INTERVAL_S=1] [N=120]
"""
import json, math, os, subprocess, sys, threading, time

placer, out = sys.argv[1], sys.argv[2]
interval = float(sys.argv[3]) if len(sys.argv) > 3 else 1.0
n = int(sys.argv[4]) if len(sys.argv) > 4 else 120
hz = os.sysconf("SC_CLK_TCK")

rx = subprocess.Popen([placer, "ab", "--worker", "rx:127.0.0.1:0"], stdout=subprocess.PIPE, text=True)
addr = rx.stdout.readline().strip()
tx = subprocess.Popen([placer, "ab", "--worker", "tx:" + addr])
latest = [0]

def read():
    for line in rx.stdout:
        try:
            latest[0] = int(line)
        except ValueError:
            pass

threading.Thread(target=read, daemon=True).start()

def cpu_s():
    total = 0
    for p in (rx.pid, tx.pid):
        with open(f"/proc/{p}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / hz

try:
    time.sleep(2.0)  # the stream's start, as ab's warm-up
    rows = []
    b0, c0, t0 = latest[0], cpu_s(), time.monotonic()
    for i in range(n):
        time.sleep(max(0.0, t0 + interval - time.monotonic()))
        b1, c1, t1 = latest[0], cpu_s(), time.monotonic()
        dt = t1 - t0
        bps = (b1 - b0) / dt
        rows.append({"i": i, "bytes_per_s": bps, "cpu_share": (c1 - c0) / dt,
                     "cpu_s_per_gb": (c1 - c0) / max((b1 - b0) / 1e9, 1e-12)})
        b0, c0, t0 = b1, c1, t1
finally:
    tx.kill(); rx.kill(); tx.wait(); rx.wait()

with open(out, "w") as f:
    f.write(json.dumps({"verdict_noise": 1, "interval_s": interval, "intervals": n,
                        "source": "placer ab streams:1 helpers on loopback, "
                                  + os.uname().release}) + "\n")
    for r in rows:
        f.write(json.dumps(r) + "\n")

def ar1(xs):
    logs = [math.log(x) for x in xs if x > 0]
    m = sum(logs) / len(logs)
    d = [x - m for x in logs]
    var = sum(x * x for x in d) / (len(d) - 1)
    rho = sum(a * b for a, b in zip(d, d[1:])) / sum(x * x for x in d)
    return math.sqrt(var), rho, len(logs)

for k in ("bytes_per_s", "cpu_s_per_gb", "cpu_share"):
    s, r, m = ar1([row[k] for row in rows])
    print(f"{k}: sigma {s:.4f} (log), rho {r:.3f}, {m} intervals")

#!/usr/bin/env bash
# Regenerates the figures README.md quotes ("placer's own cost"), on this machine, in one
# run: builds the release binary, writes the seeds' simulated figures into README.md,
# docs/seeds.md, docs/seed-003-seeds.md and docs/smt.md (`placer bench seeds --write .`),
# runs each benchmark, prints the table with the machine and the date, writes it to docs/figures.md and between the figures markers of README.md, so the
# two always agree. Needs root for `bench daemon` (network namespaces); without root that row
# says so. Takes about 4 minutes after the build.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p placer
bin=${CARGO_TARGET_DIR:-target}/release/placer
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
# The seeds' simulated figures (deterministic: the test seed_figures checks the docs hold
# what this computes).
"$bin" bench seeds --seeds 40 --write .
"$bin" bench topo --runs 100 --json | tail -1 >"$out/topo.json"
# The 256-CPU snapshot from hwloc's test suite (in the repository).
tar xjf crates/placer-linux/tests/fixtures/hwloc/256ppc-8n8s4t.tar.bz2 -C "$out"
"$bin" bench topo --root "$out/256ppc-8n8s4t" --runs 100 --json | tail -1 >"$out/topo256.json"
"$bin" bench cycle --runs 30 --json >"$out/cycle.json"
# Issue 16's two cycle targets: 8,000 processes with 10% running, and the idle curve.
"$bin" bench cycle --mode generated --gen-procs 8000 --gen-threads 80000 --runs 20 --pause 10ms \
  --json >"$out/cycle8k.json"
"$bin" bench cycle --curve 500,2000,8000,32000 --gen-procs 8000 --gen-threads 80000 --busy 0 \
  --runs 20 --pause 10ms --json >"$out/curve.json"
"$bin" bench sim --json >"$out/sim.json"
"$bin" bench overhead --policies all --paths events,proc --duration 20s --json >"$out/overhead.json"
if [ "$(id -u)" = 0 ]; then
  "$bin" bench daemon --duration 30s --runs 10 --json >"$out/daemon.json" || echo '{}' >"$out/daemon.json"
else
  echo '{}' >"$out/daemon.json"
fi
python3 - "$out" <<'PY'
import json, os, platform, subprocess, sys, datetime, re
d = sys.argv[1]
load = lambda n: json.load(open(os.path.join(d, n)))
topo, topo256 = load("topo.json"), load("topo256.json")
cycle, sim, daemon = load("cycle.json"), load("sim.json"), load("daemon.json")
overhead = load("overhead.json")
cpu_model = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "unknown CPU")
machine = f"{os.cpu_count()} CPUs ({cpu_model}), Linux {platform.release()}"
when = datetime.date.today().isoformat()
rows = [
    ("read this machine's topology", "placer bench topo --runs 100",
     f"{topo['median_ms']:.2f} ms (CPU {topo['median_cpu_ms']:.2f} ms)"),
    ("read a 256-CPU snapshot's topology (POWER7 SMT4, hwloc fixture)",
     "placer bench topo --root 256ppc-8n8s4t --runs 100",
     f"{topo256['median_ms']:.2f} ms (CPU {topo256['median_cpu_ms']:.2f} ms)"),
]
for c in cycle:
    rows.append((f"one sample+observe cycle: {c['setup']}", "placer bench cycle --runs 30",
                 f"{c['median_cpu_ms']:.1f} ms CPU (wall {c['median_wall_ms']:.1f} ms)"))
for c in load("cycle8k.json"):
    rows.append((f"one sample+observe cycle: {c['setup']}",
                 "placer bench cycle --mode generated --gen-procs 8000 --gen-threads 80000 --runs 20 --pause 10ms",
                 f"{c['median_cpu_ms']:.1f} ms CPU (wall {c['median_wall_ms']:.1f} ms)"))
curve = load("curve.json")
rows.append(("one cycle, idle generated /proc: 500 / 2,000 / 8,000 / 32,000 processes (10 threads each)",
             "placer bench cycle --curve 500,2000,8000,32000 --gen-procs 8000 --gen-threads 80000 --busy 0 --runs 20 --pause 10ms",
             " / ".join(f"{c['median_cpu_ms']:.2f} ms" for c in curve)
             + f" CPU ({curve[2]['median_cpu_ms'] / curve[0]['median_cpu_ms']:.2f}x at 8,000 vs 500)"))
o = daemon.get("overhead")
rows.append(("daemon, net-affinity, 500 sleeping processes + 200 connections, 1 s interval",
             "placer bench daemon --duration 30s",
             f"{o['cpu_percent_of_one']:.2f}% of one CPU (mean cycle {o['mean_cycle_ms']:.1f} ms)" if o else "not measured (needs root)"))
for a in overhead["agents"]:
    path = "kernel events" if a.get("path") == "events" else "/proc only (kernel_events = false)"
    cmd = "placer bench overhead --policies all --paths events,proc --duration 20s"
    rows.append((f"daemon, all five policies, {path}, 500 sleeping processes + 200 connections, 1 s interval", cmd,
                 (f"{a['cpu_percent_of_one']:.3f}% of one CPU"
                  + (f" + {a['in_kernel_percent_of_one']:.3f}% in its eBPF program" if a.get("in_kernel_percent_of_one") is not None else ""))
                 if a["cpu_percent_of_one"] is not None else f"not measured: {a['missing']}"))
r = daemon.get("reaction")
rows.append(("reaction, stream start to pin, 1 s interval", "placer bench daemon --runs 10",
             f"median {r['median_ms']:.0f} ms over {len(r['runs_ms'])} runs, {r['missed']} missed" if r else "not measured (needs root)"))
rows.append(("simulator, 10 simulated s of 64 tasks on 64 CPUs", "placer bench sim",
             f"{sim['median_s']:.3f} s"))
table = [f"Measured by `bash scripts/figures.sh` on {machine}, {when}; release build, medians, one run.", "",
         "| what | command | measured |", "|---|---|---|"]
table += [f"| {a} | `{b}` | {c} |" for a, b, c in rows]
text = "\n".join(table) + "\n"
print(text)
# The table replaces the one at the top; the dated sections below it (each change's
# side-by-side figures) stay.
try:
    old = open("docs/figures.md").read()
except FileNotFoundError:
    old = ""
kept = old[old.index("\n## "):] if "\n## " in old else ""
open("docs/figures.md", "w").write("# placer's own cost, as measured\n\n" + text + kept)
readme = open("README.md").read()
begin, end = "<!-- figures:begin -->", "<!-- figures:end -->"
if begin in readme and end in readme:
    readme = re.sub(re.escape(begin) + ".*?" + re.escape(end), begin + "\n" + text + end, readme, flags=re.S)
    open("README.md", "w").write(readme)
PY

#!/usr/bin/env python3
"""Medians and paired ratios of run.sh's JSON (one placer agent per file)."""
import json, glob, os, statistics, sys

d = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(__file__)

def load(mode, which):
    rows = []
    for f in sorted(glob.glob(f"{d}/{mode}-{which}-*.json"), key=lambda p: int(p.split('-')[-1].split('.')[0])):
        try:
            r = json.load(open(f))
        except Exception as e:
            print(f"# {f}: {e}"); continue
        a = [x for x in r["agents"] if x["agent"] == "placer"][0]
        own, kern = a.get("cpu_percent_of_one"), a.get("in_kernel_percent_of_one") or 0.0
        bg = a.get("background") or {}
        load = open(f + ".load").read().split()
        progs = {p["program"]: p["percent_of_one"] for p in a.get("programs", [])}
        rows.append(dict(i=int(f.split('-')[-1].split('.')[0]), own=own, kern=kern, total=own + kern,
                         sw=bg.get("machine_switches_per_s"), pp=bg.get("pingpong_switches_per_s"),
                         segs=bg.get("segments_per_s"), gbit=bg.get("stream_gbit_per_s"),
                         load=(float(load[1]), float(load[-3])), progs=progs))
    return rows

med = lambda xs: statistics.median(xs) if xs else float('nan')
for mode in ["busy", "quiet"]:
    old, new = load(mode, "old"), load(mode, "new")
    print(f"## {mode}: {len(old)} old, {len(new)} new runs")
    for name, rows in [("old", old), ("new", new)]:
        if not rows: continue
        print(f"{name}: own {med([r['own'] for r in rows]):.3f}%  in-kernel {med([r['kern'] for r in rows]):.3f}%  "
              f"total {med([r['total'] for r in rows]):.3f}%  per run " + " / ".join(f"{r['total']:.2f}" for r in rows))
        if rows[0]['sw'] is not None:
            print(f"     machine switches/s {med([r['sw'] for r in rows]):.0f}, ping-pong {med([r['pp'] or 0 for r in rows]):.0f}, "
                  f"segments/s {med([r['segs'] or 0 for r in rows]):.0f}, Gbit/s {med([r['gbit'] or 0 for r in rows]):.2f}")
        progs = sorted({p for r in rows for p in r['progs']})
        print("     programs: " + ", ".join(f"{p} {med([r['progs'].get(p, 0.0) for r in rows]):.3f}%" for p in progs))
        print("     load before/after: " + " ".join(f"{r['load'][0]:.1f}/{r['load'][1]:.1f}" for r in rows))
    pairs = [(o, n) for o in old for n in new if o['i'] == n['i']]
    ratios = [n['total'] / o['total'] for o, n in pairs if o['total'] > 0]
    if ratios:
        print(f"paired new/old total, run by run: " + " ".join(f"{x:.2f}" for x in ratios) +
              f"; median {med(ratios):.2f}, range {min(ratios):.2f}-{max(ratios):.2f}")

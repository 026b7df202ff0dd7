#!/usr/bin/env python3
"""Summarises `placer sim seed-003* --json` runs beside the paper's numbers.

Usage: for s in seed-003-6 seed-003 seed-003-g1g3 seed-003-18 seed-003-24 seed-003-28; do
         placer sim $s --json > /tmp/$s.json; done
       python3 traces/seed003_report.py /tmp/seed-003*.json

Per scenario and policy: mean makespan, mean completion time and sum of completion times
(over the apps of a run) over seeds; gain of
contention over linux-default (makespan and mean completion, percent); run-to-run spread =
per workload instance, the standard deviation of its completion time over the seeds (the
paper's Fig. 9 statistic, 5 runs), shown as min..max over the instances, and its range
(max - min completion over the seeds, the paper's "10-81 s vs 2-11 s"), min..max over the
instances; per-app speedup =
per seed, the mean over apps of T_linux / T_policy - 1 (apps paired by name), then the mean
over seeds (min..max over seeds); makespan range = max - min of the makespan over seeds.
"""
import json
import statistics
import sys


def load(path):
    with open(path) as f:
        return json.load(f)


def summarise(rows):
    out = {}
    for r in rows:
        key = (r.get("variant") or "-", r["policy"])
        runs = r["runs"]
        if not runs:
            continue
        mk = [x["metrics"]["makespan_s"] for x in runs if x["metrics"].get("makespan_s")]
        cm = [x["metrics"]["completion_mean_s"] for x in runs if x["metrics"].get("completion_mean_s")]
        per = {}
        for x in runs:
            for p in x["procs"]:
                if p["completions_s"]:
                    per.setdefault(p["name"], []).append(p["completions_s"][0])
        sds = [statistics.pstdev(v) for v in per.values() if len(v) == len(runs)]
        spans = [max(v) - min(v) for v in per.values() if len(v) == len(runs)]
        sums = [sum(completions(x).values()) for x in runs if completions(x)]
        out[key] = {
            "makespan": statistics.mean(mk) if mk else None,
            "completion": statistics.mean(cm) if cm else None,
            "sd_min": min(sds) if sds else None,
            "sd_max": max(sds) if sds else None,
            "span_min": min(spans) if spans else None,
            "span_max": max(spans) if spans else None,
            "sum": statistics.mean(sums) if sums else None,
            "actions": statistics.mean(x["metrics"]["actions"] for x in runs),
            "undone": statistics.mean(x["metrics"].get("undone", 0) for x in runs),
            "mk_range": max(mk) - min(mk) if mk else None,
            "by_seed": {x["seed"]: completions(x) for x in runs},
        }
    return out


def completions(run):
    return {p["name"]: p["completions_s"][0] for p in run["procs"] if p["completions_s"]}


def app_speedup(base, pol):
    """Mean over seeds of the mean per-app speedup, and its min and max over seeds."""
    per_seed = []
    for seed, theirs in pol["by_seed"].items():
        ours = base["by_seed"].get(seed)
        if not ours:
            continue
        apps = [ours[n] / theirs[n] - 1 for n in theirs if n in ours and theirs[n] > 0]
        if apps:
            per_seed.append(statistics.mean(apps) * 100)
    if not per_seed:
        return None
    return statistics.mean(per_seed), min(per_seed), max(per_seed)


def main(paths):
    print(f"{'scenario':16} {'variant':15} {'policy':14} {'makespan s':>10} {'mean compl s':>12} "
          f"{'sum compl s':>11} {'gain mk %':>9} {'gain mean %':>11} {'gain sum %':>10} {'per-app % (seeds)':>21} "
          f"{'run-to-run sd s':>16} {'run-to-run range s':>18} "
          f"{'mk range s':>10} {'actions':>7} {'undone':>6}")
    for path in paths:
        data = load(path)
        rows = data["rows"] if isinstance(data, dict) else data
        s = summarise(rows)
        name = data.get("scenario", path) if isinstance(data, dict) else path
        for (var, pol), v in s.items():
            base = s.get((var, "linux-default"))
            g_mk = g_cm = g_sum = app = ""
            if base and pol != "linux-default" and v["makespan"] and base["makespan"]:
                g_mk = f"{(base['makespan'] / v['makespan'] - 1) * 100:+.1f}"
                g_cm = f"{(base['completion'] / v['completion'] - 1) * 100:+.1f}"
                g_sum = f"{(base['sum'] / v['sum'] - 1) * 100:+.1f}"
                a = app_speedup(base, v)
                if a:
                    app = f"{a[0]:+.1f} ({a[1]:+.1f}..{a[2]:+.1f})"
            sd = f"{v['sd_min']:.1f}..{v['sd_max']:.1f}" if v["sd_min"] is not None else "-"
            rng = f"{v['mk_range']:.1f}" if v["mk_range"] is not None else "-"
            span = f"{v['span_min']:.1f}..{v['span_max']:.1f}" if v["span_min"] is not None else "-"
            print(f"{name:16} {var:15} {pol:14} {v['makespan']:>10.1f} {v['completion']:>12.1f} "
                  f"{v['sum']:>11.1f} {g_mk:>9} {g_cm:>11} {g_sum:>10} {app:>21} {sd:>16} {span:>18} "
                  f"{rng:>10} {v['actions']:>7.1f} {v['undone']:>6.1f}")


if __name__ == "__main__":
    main(sys.argv[1:])

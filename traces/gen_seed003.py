#!/usr/bin/env python3
"""Builds the seed-003 counter traces in this directory (format: placer counter trace v1,
see crates/placer-core/src/counter_trace.rs and docs/contention.md).

These traces are BUILT, NOT MEASURED. The paper (../shared/seeds/003_8cca66dc96130eb1.txt)
shows its per-workload counter values only as bar charts (Figs. 2-5) without numbers; the
rates below are chosen to keep the relations the text states:
  - buffer-full (OFFCORE_REQUESTS_SQ_FULL): Group 1 apart from all others by an order of
    magnitude ("extremely divided"); sp.B and ua.B next (Fig. 3, 5 discussion);
  - LLC references: Group 2 far above the others; canneal, ferret, gromacs lowest (Fig. 4);
  - memory bandwidth: Group 1 highest, sp.B/ua.B next, the rest under 2 GB/s (Fig. 2),
    and LLC references >= bandwidth / 64 B (every line from memory was an LLC reference);
  - L2 prefetch: Group 1 and sp.B/ua.B high; sphinx above the other Group 2 (Fig. 5).
Per-second rates on the paper's 2.93 GHz Xeon X5570, one app per core.
Deterministic: python3 gen_seed003.py rewrites the same files.
"""
import json
import random

CLOCK_HZ = 2.93e9
# name, group, buffer_full/s, llc_references/s, l2_prefetch/s, memory bytes/s
PAPER = [
    ("lbm", 1, 9.0e7, 1.0e8, 6.0e7, 5.5e9),
    ("libquantum", 1, 7.5e7, 9.0e7, 5.2e7, 4.8e9),
    ("lu.B", 1, 6.0e7, 8.0e7, 4.5e7, 4.2e9),
    ("sphinx", 2, 2.0e6, 1.8e8, 2.0e7, 1.2e9),
    ("omnetpp", 2, 1.2e6, 2.1e8, 6.0e6, 0.9e9),
    ("streamcluster", 2, 1.5e6, 1.6e8, 8.0e6, 1.5e9),
    ("sp.B", 3, 4.0e6, 6.0e7, 3.5e7, 3.2e9),
    ("ua.B", 3, 3.5e6, 5.5e7, 3.0e7, 2.8e9),
    ("canneal", 3, 0.8e6, 2.5e7, 3.0e6, 1.1e9),
    ("ferret", 3, 0.3e6, 1.2e7, 2.0e6, 0.5e9),
    ("gromacs", 3, 0.1e6, 5.0e6, 1.0e6, 0.2e9),
]
W = {w[0]: w for w in PAPER}
NOISE = 0.10  # +-10% uniform per interval and event


def noisy(rng, v):
    return v * (1.0 + rng.uniform(-NOISE, NOISE))


def paper_groups():
    rng = random.Random(3)
    out = [json.dumps({
        "placer_counter_trace": 1,
        "machine": "xeon-x5570x2",
        "interval_s": 10.0,
        "source": "built, not measured: the 11 workloads of seed 003 run solo, rates in the "
                  "paper's proportions with +-10% noise (traces/gen_seed003.py)",
    })]
    for k in range(1, 7):
        t = 10.0 * k
        for i, (name, _g, bf, llc, pf, bw) in enumerate(PAPER):
            out.append(json.dumps({
                "t_s": t, "pid": 1000 + i, "comm": name, "cpu": i % 8, "cpu_share": 1.0,
                "rates": {
                    "offcore_requests_buffer_full": round(noisy(rng, bf)),
                    "llc_references": round(noisy(rng, llc)),
                    "l2_prefetch_requests": round(noisy(rng, pf)),
                    "mem_bandwidth_bytes": round(noisy(rng, bw)),
                    "cycles": CLOCK_HZ,
                },
            }))
    return "\n".join(out) + "\n"


def basic_mix_raw():
    """8 apps (3 G1, 3 G2, 2 G3) placed as Linux might (G1 and G2 mixed on both packages),
    raw cumulative counters multiplexed at 50% running time, one-interval buffer-full spike
    on ferret at t=40 s."""
    rng = random.Random(8)
    mix = ["lbm", "sphinx", "libquantum", "omnetpp", "lu.B", "streamcluster", "ferret", "gromacs"]
    events = [("offcore_requests_buffer_full", 2), ("llc_references", 3),
              ("l2_prefetch_requests", 4), ("cycles", None)]
    out = [json.dumps({
        "placer_counter_trace": 1,
        "machine": "xeon-x5570x2",
        "interval_s": 10.0,
        "source": "built, not measured: Basic-like 8-app mix of seed 003, raw cumulative "
                  "counters, multiplexed (running = 50% of enabled), ferret spikes at t=40 "
                  "(traces/gen_seed003.py)",
    })]
    total = {(n, e): 0.0 for n in mix for e, _ in events}
    for k in range(0, 7):
        t = 10.0 * k
        for cpu, name in enumerate(mix):
            w = W[name]
            counters = []
            for ev, col in events:
                if k > 0:
                    rate = CLOCK_HZ if col is None else noisy(rng, w[col])
                    if name == "ferret" and k == 4 and ev == "offcore_requests_buffer_full":
                        rate *= 500.0
                    # Counted only while scheduled on the PMU: half of the time.
                    total[(name, ev)] += rate * 10.0 * 0.5
                enabled = int(t * 1e9)
                counters.append({
                    "event": ev, "value": round(total[(name, ev)]),
                    "time_enabled_ns": enabled, "time_running_ns": enabled // 2,
                })
            out.append(json.dumps({
                "t_s": t, "pid": 2000 + cpu, "comm": name, "cpu": cpu, "cpu_share": 1.0,
                "counters": counters,
            }))
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    with open("seed003-paper-groups.jsonl", "w") as f:
        f.write(paper_groups())
    with open("seed003-basic-mix-raw.jsonl", "w") as f:
        f.write(basic_mix_raw())

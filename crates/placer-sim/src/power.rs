//! Power: governors choosing each DVFS domain's frequency, and whole-node power
//!
//! `P = node_idle_w + package_w * sum(active packages) + sum(core power) + smt_sibling_w *
//! sum(busy second threads) + sum over frequency domains of V(f) * cluster_leak_a * active`, where a package is active the fraction of time its busiest
//! CPU is busy, a core draws `core_w(type) * V(f)^2 f / (V(fmax)^2 fmax)` (no scaling
//! without an OPP table) times the busy fraction of its busiest thread, and a second
//! thread counts the time both threads are busy (the lesser busy fraction). This is seed
//! 001's `P = Pn + Ps*packages + Pc*cores + Pt*siblings` in fractional form, with CAL A's
//! V^2 f scaling for DVFS domains. Energy is its integral over the ticks.

use crate::machine::core_power_w;
use crate::world::SimHost;

/// Sets each frequency domain's current frequency from its governor (schedutil: lowest
/// available frequency >= headroom * util * f_max, util being the domain's busiest CPU's
/// frequency-invariant average).
pub fn governors(h: &mut SimHost) {
    for (d, dom) in h.world.topo.freq_domains.iter().enumerate() {
        let st = &h.world.domains[d];
        let (lo, hi) = (
            st.scaling_min_khz,
            st.scaling_max_khz.max(st.scaling_min_khz),
        );
        let clamp_avail = |target: u64| -> u64 {
            dom.available_khz
                .iter()
                .copied()
                .filter(|&f| f >= target && f >= lo && f <= hi)
                .min()
                .unwrap_or(hi)
        };
        let khz = match st.governor.as_str() {
            "performance" => hi,
            "powersave" => lo,
            "userspace" => st.speed_khz.map(|s| s.clamp(lo, hi)).unwrap_or(hi),
            _ => {
                let mut util: f64 = 0.0;
                let mut fmax = 0u64;
                for id in dom.cpus.iter() {
                    if let Some(c) = h.world.m.idx(id) {
                        util = util.max(h.world.cpu[c].util_avg);
                        fmax = fmax.max(h.world.m.cpus[c].max_khz);
                    }
                }
                let target = h.world.params.sched.schedutil_headroom * util * fmax as f64;
                clamp_avail(target.ceil() as u64)
            }
        };
        h.world.domains[d].khz = khz;
    }
}

/// CPU `c`'s busy fraction in the last tick, softirq included (at most 1).
fn busy_fraction(h: &SimHost, c: usize) -> f64 {
    (h.world.cpu[c].busy + h.world.cpu[c].softirq).min(1.0)
}

/// Whole-node power now, W: a measured table's where the scenario has one, else the model's.
pub fn node_power_w(h: &SimHost) -> f64 {
    if let Some(t) = &h.world.params.power_table {
        return table_power_w(h, t);
    }
    let pw = &h.world.params.power;
    let mut p = pw.node_idle_w;
    let mut pkg_active = vec![0.0f64; h.world.m.n_packages];
    for (c, info) in h.world.m.cpus.iter().enumerate() {
        let u = busy_fraction(h, c);
        pkg_active[info.package] = pkg_active[info.package].max(u);
        // Count each core once, at its lowest-index thread.
        if info.siblings.iter().any(|&s| s < c) {
            continue;
        }
        let mut hi = u;
        let mut second = 0.0f64;
        for &s in &info.siblings {
            let us = busy_fraction(h, s);
            second = second.max(us.min(hi));
            hi = hi.max(us);
        }
        let (w, opp) = if info.little {
            (pw.little_core_w, &pw.little_opp)
        } else {
            (pw.big_core_w, &pw.big_opp)
        };
        p += core_power_w(w, opp, h.world.cpu[c].khz, info.max_khz) * hi;
        p += pw.smt_sibling_w * second;
    }
    p + pw.package_w * pkg_active.iter().sum::<f64>() + cluster_static_w(h)
}

/// Static power of the frequency domains now: `V(f) * cluster_leak_a` per domain, times
/// its busiest CPU's busy fraction (an idle cluster is power-gated).
pub fn cluster_static_w(h: &SimHost) -> f64 {
    let pw = &h.world.params.power;
    if pw.cluster_leak_a <= 0.0 {
        return 0.0;
    }
    let mut w = 0.0;
    for (d, dom) in h.world.topo.freq_domains.iter().enumerate() {
        let mut active = 0.0f64;
        let mut little = false;
        for id in dom.cpus.iter() {
            if let Some(c) = h.world.m.idx(id) {
                active = active.max(busy_fraction(h, c));
                little |= h.world.m.cpus[c].little;
            }
        }
        let opp = if little { &pw.little_opp } else { &pw.big_opp };
        let v =
            crate::machine::volts_at(opp, h.world.domains[d].khz as f64 / 1000.0).unwrap_or(1.0);
        w += pw.cluster_leak_a * v * active;
    }
    w
}

/// Whole-node power now from a measured table, W: its base, plus per cluster at its current
/// frequency the busy CPUs' watts (each CPU's busy fraction) and the cluster's own while
/// active (its busiest CPU's busy fraction; an idle cluster is power-gated), the same
/// fractional form as the model's. A machine without cpufreq is the table's one pseudo
/// cluster of every CPU.
pub fn table_power_w(h: &SimHost, t: &placer_core::power_table::StatePowerTable) -> f64 {
    let doms = &h.world.topo.freq_domains;
    if doms.is_empty() {
        let all = 0..h.world.m.cpus.len();
        return t.base_w
            + table_cluster_w(h, t, placer_core::power_table::NO_CPUFREQ_DOMAIN, 0, all);
    }
    t.base_w
        + doms
            .iter()
            .enumerate()
            .map(|(d, dom)| {
                let cpus = dom.cpus.iter().filter_map(|id| h.world.m.idx(id));
                table_cluster_w(h, t, dom.id, h.world.domains[d].khz, cpus)
            })
            .sum::<f64>()
}

/// One cluster's watts from the table at `khz`: its CPUs' busy fractions times a busy CPU's
/// watts, and its busiest CPU's fraction times the active cluster's.
fn table_cluster_w(
    h: &SimHost,
    t: &placer_core::power_table::StatePowerTable,
    domain: u32,
    khz: u64,
    cpus: impl Iterator<Item = usize>,
) -> f64 {
    let (sum, max) = cpus.fold((0.0f64, 0.0f64), |(s, m), c| {
        let u = busy_fraction(h, c);
        (s + u, m.max(u))
    });
    t.point(domain, khz)
        .map_or(0.0, |p| p.cluster_active_w * max + p.busy_cpu_w * sum)
}

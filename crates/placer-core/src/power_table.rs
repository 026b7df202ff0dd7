//! Watts per cluster and frequency, the power table energy-qos plans with: from a measured
//! table (`placer power calibrate`, `power_table`) or the machine's model (Exynos 5422
//! tables, else a generic `V^2 f` curve); and the clusters (cpufreq domains) it is keyed
//! by. Neutral ground: the policy plans with it, the power meter writes it.

use crate::cpuset::CpuSet;
use crate::topology::{CoreType, Topology};
use serde::{Deserialize, Serialize};

/// A frequency domain as the power table and energy-qos's solver see it.
#[derive(Debug, Clone, PartialEq)]
pub struct Cluster {
    pub domain: u32,
    pub cpus: CpuSet,
    /// Capacity of one CPU at the top frequency (1024 = biggest CPU).
    pub cap_max: f64,
    /// Selectable frequencies, ascending; one entry (0) for a machine without cpufreq.
    pub freqs_khz: Vec<u64>,
    pub core_type: Option<CoreType>,
    /// False for the pseudo cluster of a machine without cpufreq.
    pub has_cpufreq: bool,
}

impl Cluster {
    pub fn cap_at(&self, khz: u64) -> f64 {
        let top = self.freqs_khz.last().copied().unwrap_or(0);
        if top == 0 {
            self.cap_max
        } else {
            self.cap_max * khz as f64 / top as f64
        }
    }
}

/// Pseudo-domain id of a machine without cpufreq.
pub const NO_CPUFREQ_DOMAIN: u32 = u32::MAX;

/// The clusters of a topology: its cpufreq domains (allowed online CPUs only), or one
/// pseudo cluster of all allowed CPUs when there is no cpufreq.
pub fn clusters_of(topo: &Topology) -> Vec<Cluster> {
    let allowed = topo.allowed();
    let cap_of = |cpus: &CpuSet| -> f64 {
        cpus.iter()
            .filter_map(|c| topo.cpu(c).and_then(|c| c.capacity))
            .max()
            .map_or(1024.0, f64::from)
    };
    let type_of = |cpus: &CpuSet| cpus.first().and_then(|c| topo.cpu(c)?.core_type);
    let mut v: Vec<Cluster> = topo
        .freq_domains
        .iter()
        .filter_map(|d| {
            let cpus = d.cpus.intersection(&allowed);
            if cpus.is_empty() {
                return None;
            }
            let mut freqs = d.available_khz.clone();
            if freqs.is_empty() {
                freqs.extend(d.min_khz);
                freqs.extend(d.max_khz);
            }
            freqs.sort_unstable();
            freqs.dedup();
            if freqs.is_empty() {
                return None;
            }
            Some(Cluster {
                domain: d.id,
                cap_max: cap_of(&cpus),
                core_type: type_of(&cpus),
                cpus,
                freqs_khz: freqs,
                has_cpufreq: true,
            })
        })
        .collect();
    if v.is_empty() && !allowed.is_empty() {
        v.push(Cluster {
            domain: NO_CPUFREQ_DOMAIN,
            cap_max: cap_of(&allowed),
            core_type: type_of(&allowed),
            cpus: allowed,
            freqs_khz: vec![0],
            has_cpufreq: false,
        });
    }
    v
}

/// Power of one cluster per frequency: W per fully busy CPU, and the cluster's leakage
/// while any CPU in it is active.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DomainPower {
    pub domain: u32,
    /// (kHz, W per busy CPU, W leakage of the active cluster), ascending kHz.
    pub points: Vec<PowerPoint>,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct PowerPoint {
    pub khz: u64,
    pub busy_cpu_w: f64,
    pub cluster_active_w: f64,
}

/// Predicted power per system state (per DVFS domain and frequency: a busy CPU, an active
/// cluster; plus the base), as energy-qos plans with it; not seed 001's whole-machine
/// `power_model::PowerModel`. Built from measurements (`placer power calibrate`
/// writes one as JSON) or from the machine's model ([`StatePowerTable::for_topology`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatePowerTable {
    /// Power of everything else (rest of the SoC, memory), W, always paid.
    pub base_w: f64,
    pub domains: Vec<DomainPower>,
    /// `measured:<file>`, `model:exynos5422`, `model:generic`.
    pub source: String,
}

/// A malformed power table, with its 1-based line.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct TableError {
    pub line: usize,
    pub message: String,
}

use crate::catalogue::{
    DvfsTable, EXYNOS5422_A15, EXYNOS5422_A7, EXYNOS5422_LEAK_A_PER_CLUSTER as LEAK_A_PER_CLUSTER,
    EXYNOS5422_SOC_BASE_W as SOC_BASE_W,
};

fn volts(table: &[(u64, f64)], mhz: u64) -> f64 {
    table
        .iter()
        .find(|(up_to, _)| mhz <= *up_to)
        .or(table.last())
        .map_or(1.0, |(_, v)| *v)
}

/// Busy-CPU watts at `mhz`: the IPA value where the table has it, else `C V^2 f` with `C`
/// fitted (least squares through the origin) to the table.
fn exynos_busy_w(ipa: &[(u64, f64)], vt: &[(u64, f64)], mhz: u64) -> f64 {
    if let Some((_, mw)) = ipa.iter().find(|(m, _)| *m == mhz) {
        return mw / 1000.0;
    }
    let x = |m: u64| volts(vt, m).powi(2) * m as f64;
    let (sxy, sxx) = ipa.iter().fold((0.0, 0.0), |(a, b), (m, mw)| {
        (a + x(*m) * mw, b + x(*m) * x(*m))
    });
    sxy / sxx * x(mhz) / 1000.0
}

impl StatePowerTable {
    /// The machine's model: Exynos 5422 tables for big/LITTLE domains whose top frequency
    /// is 2.0/1.4 GHz, else a generic `V^2 f` curve (1 W per busy CPU at the top frequency,
    /// V from 0.8 to 1.2 across the range). For a topology without cpufreq: one pseudo
    /// domain (id `u32::MAX`) at one frequency.
    pub fn for_topology(topo: &Topology) -> StatePowerTable {
        let clusters = clusters_of(topo);
        let mut exynos = !clusters.is_empty();
        let domains = clusters
            .iter()
            .map(|c| {
                let top_mhz = c.freqs_khz.last().copied().unwrap_or(0) / 1000;
                let table: Option<&DvfsTable> = match (c.core_type, top_mhz) {
                    (Some(CoreType::Big), 2000) => Some(&EXYNOS5422_A15),
                    (Some(CoreType::Little), 1400) => Some(&EXYNOS5422_A7),
                    _ => None,
                };
                exynos &= table.is_some();
                let points = c
                    .freqs_khz
                    .iter()
                    .map(|&khz| {
                        let mhz = khz / 1000;
                        match table {
                            Some(t) => PowerPoint {
                                khz,
                                busy_cpu_w: exynos_busy_w(t.ipa_mw, t.volts, mhz),
                                cluster_active_w: volts(t.volts, mhz) * LEAK_A_PER_CLUSTER,
                            },
                            None => {
                                let top = c.freqs_khz.last().copied().unwrap_or(1).max(1);
                                let lo = c.freqs_khz.first().copied().unwrap_or(top);
                                let frac = if top > lo {
                                    (khz - lo) as f64 / (top - lo) as f64
                                } else {
                                    1.0
                                };
                                let v = 0.8 + 0.4 * frac;
                                PowerPoint {
                                    khz,
                                    busy_cpu_w: (v / 1.2).powi(2) * khz as f64 / top as f64,
                                    cluster_active_w: v * LEAK_A_PER_CLUSTER,
                                }
                            }
                        }
                    })
                    .collect();
                DomainPower {
                    domain: c.domain,
                    points,
                }
            })
            .collect();
        StatePowerTable {
            base_w: SOC_BASE_W,
            domains,
            source: if exynos {
                "model:exynos5422 (CALIBRATION A1/A3/A7)".into()
            } else {
                "model:generic V^2 f".into()
            },
        }
    }

    /// The table as `placer power calibrate` writes it and `power_table` reads it: one
    /// `base_w W` line, an optional `source TEXT` line, then one row per cluster and
    /// frequency (`domain khz busy_cpu_w cluster_active_w`); `#` starts a comment.
    pub fn to_table(&self) -> String {
        use std::fmt::Write;
        let mut o = String::from(
            "# placer power table: watts per cluster (cpufreq policy) and frequency\n",
        );
        let _ = writeln!(o, "source {}", self.source);
        let _ = writeln!(o, "base_w {}", self.base_w);
        o.push_str("# domain khz busy_cpu_w cluster_active_w\n");
        for d in &self.domains {
            for p in &d.points {
                let _ = writeln!(
                    o,
                    "{} {} {} {}",
                    d.domain, p.khz, p.busy_cpu_w, p.cluster_active_w
                );
            }
        }
        o
    }

    /// Parses [`StatePowerTable::to_table`]'s format. Every error names its 1-based line.
    /// Watts must be finite and >= 0, frequencies ascending within a domain, and there
    /// must be a `base_w` line and at least one row.
    pub fn parse_table(text: &str, origin: &str) -> Result<StatePowerTable, TableError> {
        let err = |line: usize, message: String| TableError { line, message };
        let mut base_w = None;
        let mut source = None;
        let mut domains: Vec<DomainPower> = Vec::new();
        let mut last_line = 0;
        for (i, raw) in text.lines().enumerate() {
            let n = i + 1;
            last_line = n;
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let watts = |field: &str, v: &str| -> Result<f64, TableError> {
                match v.parse::<f64>() {
                    Ok(w) if w.is_finite() && w >= 0.0 => Ok(w),
                    _ => Err(err(
                        n,
                        format!("{field} {v:?} is not a number of watts >= 0"),
                    )),
                }
            };
            if let Some(rest) = line.strip_prefix("source") {
                source = Some(rest.trim().to_string());
                continue;
            }
            if let Some(rest) = line.strip_prefix("base_w") {
                if base_w.is_some() {
                    return Err(err(n, "base_w is given twice".into()));
                }
                base_w = Some(watts("base_w", rest.trim())?);
                continue;
            }
            let f: Vec<&str> = line.split_whitespace().collect();
            if f.len() != 4 {
                return Err(err(
                    n,
                    format!(
                        "expected `domain khz busy_cpu_w cluster_active_w`, found {} field(s)",
                        f.len()
                    ),
                ));
            }
            let domain: u32 = f[0].parse().map_err(|_| {
                err(
                    n,
                    format!("domain {:?} is not a cpufreq policy number", f[0]),
                )
            })?;
            // 0 kHz is the one state of a machine without cpufreq.
            let khz: u64 = f[1]
                .parse()
                .map_err(|_| err(n, format!("khz {:?} is not a frequency in kHz", f[1])))?;
            let point = PowerPoint {
                khz,
                busy_cpu_w: watts("busy_cpu_w", f[2])?,
                cluster_active_w: watts("cluster_active_w", f[3])?,
            };
            match domains.iter_mut().find(|d| d.domain == domain) {
                Some(d) => {
                    let prev = d.points.last().map_or(0, |p| p.khz);
                    if khz <= prev && !d.points.is_empty() {
                        return Err(err(
                            n,
                            format!(
                                "domain {domain}: {khz} kHz follows {prev} kHz (frequencies \
                                 must ascend)"
                            ),
                        ));
                    }
                    d.points.push(point);
                }
                None => domains.push(DomainPower {
                    domain,
                    points: vec![point],
                }),
            }
        }
        let base_w = base_w.ok_or_else(|| err(last_line.max(1), "no base_w line".into()))?;
        if domains.is_empty() {
            return Err(err(
                last_line.max(1),
                "no rows (domain khz busy_cpu_w cluster_active_w)".into(),
            ));
        }
        Ok(StatePowerTable {
            base_w,
            domains,
            source: format!(
                "measured:{origin}{}",
                source.map(|s| format!(" ({s})")).unwrap_or_default()
            ),
        })
    }

    pub fn point(&self, domain: u32, khz: u64) -> Option<&PowerPoint> {
        let d = self.domains.iter().find(|d| d.domain == domain)?;
        d.points
            .iter()
            .find(|p| p.khz == khz)
            .or_else(|| d.points.iter().find(|p| p.khz >= khz))
            .or(d.points.last())
    }

    /// Power of one cluster at `khz` with `busy_cpus` CPUs' worth of work (0 = idle and
    /// power-gated).
    pub fn cluster_w(&self, domain: u32, khz: u64, busy_cpus: f64) -> f64 {
        if busy_cpus <= 0.0 {
            return 0.0;
        }
        self.point(domain, khz)
            .map_or(0.0, |p| p.cluster_active_w + busy_cpus * p.busy_cpu_w)
    }
}

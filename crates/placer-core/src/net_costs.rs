//! Network costs learned on the running machine (seed 000's cost constants, measured instead
//! of guessed): receive softirq time per packet and per byte, and an app's own CPU time per
//! byte, all in nanoseconds of a CPU of capacity 1024 at its top frequency (the unit
//! energy-qos predicts in).
//!
//! # Derivation (pure: observations and the topology in, estimates out)
//! 1. **Receive sample.** For an interface, `y` = the softirq time of its receive CPUs over
//!    the interval, each CPU's share scaled by its capacity now (`capacity * cur_khz /
//!    top_khz / 1024`; a CPU without cpufreq counts at its top frequency), and `x` = the
//!    interface's received packets and bytes over the interval. Intervals with fewer than
//!    [`MIN_PACKETS`] packets are not samples (idle softirq time is timers and RCU, not
//!    reception).
//! 2. **App sample.** For a set of processes, `y` = their CPU time, each process's scaled by
//!    the capacity now of the CPU it last ran on, and `x` = the bytes they received and sent.
//! 3. **Fit.** Least squares through the origin over the last `window` samples. The receive
//!    cost has two regressors (packets, bytes); they can be separated only when the segment
//!    size varies: when the two columns are nearly parallel (cosine^2 above
//!    [`MAX_COLLINEARITY`]) or the two-regressor fit is not confident, the per-byte cost
//!    keeps its configured value (a negative per-byte estimate is constrained to 0 first:
//!    no cost is negative) and the per-packet
//!    cost is fitted to what is left -- or, when that is not positive, to all of it with a
//!    per-byte cost of 0. A prediction at the segment sizes seen is right either way.
//! 4. **Confidence** of an estimate: 0 below `min_samples` samples or when the estimate is
//!    not positive (negative costs are not costs), else `1 - error` clamped to 0..=1, the
//!    error being the larger of the estimate's relative standard error and the model's RMS
//!    residual relative to the mean (how far off one interval's prediction is: a ratio
//!    between unrelated series can be estimated precisely, but it predicts nothing). An estimate below the configured confidence falls back to the
//!    configured value, and says so ([`Estimate::learned`] false).
//!
//! Background softirq work on the receive CPUs (timers, other devices) counts into the
//! per-packet cost: the estimate errs on the expensive side, never the cheap one.

use crate::cpuset::CpuSet;
use crate::observation::{Observation, ProcObs};
use crate::stats::push_bounded;
use crate::topology::Topology;
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;

/// Fewest packets in an interval for it to be a receive sample.
pub const MIN_PACKETS: f64 = 100.0;
/// Above this squared cosine between the packet and byte columns the two costs are not
/// separated (segment sizes within a few percent of each other).
pub const MAX_COLLINEARITY: f64 = 0.999;

/// One interval of receive processing: seconds of a capacity-1024 CPU in softirq, and the
/// packets and bytes received.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RxSample {
    pub softirq_s: f64,
    pub packets: f64,
    pub bytes: f64,
}

/// One interval of an app: seconds of a capacity-1024 CPU, and bytes moved.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct AppSample {
    pub cpu_s: f64,
    pub bytes: f64,
}

/// One learned (or fallen-back) constant.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Estimate {
    /// The value used, ns at capacity 1024.
    pub ns: f64,
    /// True when `ns` was learned; false when it is the configured fallback.
    pub learned: bool,
    /// Confidence of the learned value, 0..=1 (see the module doc).
    pub confidence: f64,
    /// Samples it was fitted on.
    pub samples: usize,
    /// What the fit gave, used or not (None: no fit yet), ns at capacity 1024.
    #[serde(default)]
    pub fitted_ns: Option<f64>,
}

impl Estimate {
    fn configured(ns: f64, confidence: f64, samples: usize) -> Estimate {
        Estimate {
            ns,
            learned: false,
            confidence,
            samples,
            fitted_ns: None,
        }
    }

    fn with_fit(mut self, fitted_s: f64) -> Estimate {
        self.fitted_ns = Some(fitted_s * 1e9);
        self
    }

    /// "2310 ns (learned, confidence 0.93, 12 samples)".
    pub fn describe(&self) -> String {
        if self.learned {
            format!(
                "{:.1} ns (learned, confidence {:.2}, {} samples)",
                self.ns, self.confidence, self.samples
            )
        } else if let Some(f) = self.fitted_ns {
            format!(
                "{:.1} ns (configured; the fit gives {f:.1} ns at confidence {:.2} over {} \
                 samples)",
                self.ns, self.confidence, self.samples
            )
        } else {
            format!("{:.1} ns (configured; {} samples)", self.ns, self.samples)
        }
    }
}

/// The three constants energy-qos needs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Costs {
    pub softirq_ns_per_packet: Estimate,
    pub softirq_ns_per_byte: Estimate,
    pub app_ns_per_byte: Estimate,
}

/// Configured values and thresholds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Fallback {
    pub softirq_ns_per_packet: f64,
    pub softirq_ns_per_byte: f64,
    pub app_ns_per_byte: f64,
    pub min_samples: usize,
    pub min_confidence: f64,
}

/// Keeps the last `window` samples of each kind.
#[derive(Debug, Clone, Default)]
pub struct Learner {
    window: usize,
    rx: VecDeque<RxSample>,
    app: VecDeque<AppSample>,
}

/// `(estimate, error)` of `y = a x` through the origin; the error is the larger of the
/// estimate's relative standard error and the model's relative RMS residual per sample
/// (module doc, rule 4).
fn fit1(xy: impl Iterator<Item = (f64, f64)> + Clone) -> Option<(f64, f64)> {
    let (n, sxx, sxy, sy) = xy
        .clone()
        .fold((0usize, 0.0, 0.0, 0.0), |(n, a, b, c), (x, y)| {
            (n + 1, a + x * x, b + x * y, c + y)
        });
    if n == 0 || sxx <= 0.0 {
        return None;
    }
    let a = sxy / sxx;
    let rss: f64 = xy.map(|(x, y)| (y - a * x).powi(2)).sum();
    let var = if n > 1 {
        rss / (n - 1) as f64
    } else {
        f64::INFINITY
    };
    let err = rel_err((var / sxx).sqrt(), a).max(rel_rms(rss, n, sy));
    Some((a, err))
}

/// RMS residual relative to the mean of `y`: how far one interval's prediction is off.
fn rel_rms(rss: f64, n: usize, sum_y: f64) -> f64 {
    let mean = sum_y / n.max(1) as f64;
    if mean > 0.0 {
        (rss / n.max(1) as f64).sqrt() / mean
    } else {
        f64::INFINITY
    }
}

fn rel_err(se: f64, value: f64) -> f64 {
    if value.abs() > 0.0 && se.is_finite() {
        se / value.abs()
    } else {
        f64::INFINITY
    }
}

/// Confidence from a relative standard error (module doc, rule 4).
fn confidence(value: f64, rse: f64, samples: usize, min_samples: usize) -> f64 {
    if samples < min_samples.max(2) || value.is_nan() || value <= 0.0 || !rse.is_finite() {
        0.0
    } else {
        (1.0 - rse).clamp(0.0, 1.0)
    }
}

impl Learner {
    pub fn new(window: usize) -> Learner {
        Learner {
            window: window.max(2),
            ..Default::default()
        }
    }

    pub fn push_rx(&mut self, s: RxSample) {
        if s.packets >= MIN_PACKETS && s.softirq_s.is_finite() && s.bytes.is_finite() {
            push_bounded(&mut self.rx, s, self.window);
        }
    }

    pub fn push_app(&mut self, s: AppSample) {
        if s.bytes > 0.0 && s.cpu_s.is_finite() && s.bytes.is_finite() {
            push_bounded(&mut self.app, s, self.window);
        }
    }

    pub fn rx_samples(&self) -> usize {
        self.rx.len()
    }

    /// The constants to use now (module doc, rules 3 and 4).
    pub fn estimate(&self, fb: &Fallback) -> Costs {
        let (per_packet, per_byte) = self.fit_rx(fb);
        let n_app = self.app.len();
        let app = match fit1(self.app.iter().map(|s| (s.bytes, s.cpu_s))) {
            Some((a, rse)) => {
                let c = confidence(a, rse, n_app, fb.min_samples);
                if c >= fb.min_confidence {
                    Estimate {
                        ns: a * 1e9,
                        learned: true,
                        confidence: c,
                        samples: n_app,
                        fitted_ns: Some(a * 1e9),
                    }
                } else {
                    Estimate::configured(fb.app_ns_per_byte, c, n_app).with_fit(a)
                }
            }
            None => Estimate::configured(fb.app_ns_per_byte, 0.0, n_app),
        };
        Costs {
            softirq_ns_per_packet: per_packet,
            softirq_ns_per_byte: per_byte,
            app_ns_per_byte: app,
        }
    }

    fn fit_rx(&self, fb: &Fallback) -> (Estimate, Estimate) {
        let n = self.rx.len();
        let fallback = (
            Estimate::configured(fb.softirq_ns_per_packet, 0.0, n),
            Estimate::configured(fb.softirq_ns_per_byte, 0.0, n),
        );
        if n == 0 {
            return fallback;
        }
        let (spp, sbb, spb, spy, sby) = self.rx.iter().fold((0.0, 0.0, 0.0, 0.0, 0.0), |a, s| {
            (
                a.0 + s.packets * s.packets,
                a.1 + s.bytes * s.bytes,
                a.2 + s.packets * s.bytes,
                a.3 + s.packets * s.softirq_s,
                a.4 + s.bytes * s.softirq_s,
            )
        });
        let det = spp * sbb - spb * spb;
        let cos2 = if spp > 0.0 && sbb > 0.0 {
            spb * spb / (spp * sbb)
        } else {
            1.0
        };
        let learned = |v: f64, c: f64| Estimate {
            ns: v * 1e9,
            learned: true,
            confidence: c,
            samples: n,
            fitted_ns: Some(v * 1e9),
        };
        if cos2 < MAX_COLLINEARITY && det > 0.0 && n >= 3 {
            // Two regressors: (X'X)^-1 = [sbb -spb; -spb spp] / det.
            let a = (sbb * spy - spb * sby) / det;
            let b = (spp * sby - spb * spy) / det;
            let rss: f64 = self
                .rx
                .iter()
                .map(|s| (s.softirq_s - a * s.packets - b * s.bytes).powi(2))
                .sum();
            let var = rss / (n - 2) as f64;
            let sum_y: f64 = self.rx.iter().map(|s| s.softirq_s).sum();
            let fit_err = rel_rms(rss, n, sum_y);
            let ca = confidence(
                a,
                rel_err((var * sbb / det).sqrt(), a).max(fit_err),
                n,
                fb.min_samples,
            );
            // A per-byte cost of ~0 (checksum offloaded) has a large relative error by
            // nature: judge it by its share of the per-packet cost at the mean segment.
            let seg = sbb.sqrt() / spp.sqrt();
            let se_b = (var * spp / det).sqrt();
            let cb = if b >= 0.0 && a > 0.0 && n >= fb.min_samples.max(2) {
                (1.0 - (se_b * seg / a).max(fit_err)).clamp(0.0, 1.0)
            } else {
                0.0
            };
            if ca >= fb.min_confidence && cb >= fb.min_confidence {
                return (learned(a, ca), learned(b.max(0.0), cb));
            }
            if b < 0.0 {
                // No cost is negative: the constrained optimum has a per-byte cost of 0
                // and the packets carry it all (a true 0, checksums offloaded, comes out
                // slightly negative half the time).
                if let Some((a0, err)) = fit1(self.rx.iter().map(|s| (s.packets, s.softirq_s))) {
                    let c = confidence(a0, err, n, fb.min_samples);
                    if c >= fb.min_confidence {
                        return (learned(a0, c), learned(0.0, c));
                    }
                }
            }
            // Not separable with confidence (sizes vary, but not enough): fall through to
            // the one-regressor fit, which predicts the sizes seen.
        }
        // One regressor: per-byte held at its configured value, or at 0 when what is left
        // for the packets is not positive.
        let b_cfg = fb.softirq_ns_per_byte * 1e-9;
        let rest = |b: f64| {
            self.rx
                .iter()
                .map(move |s| (s.packets, s.softirq_s - b * s.bytes))
        };
        let (a, rse, b_used) = match fit1(rest(b_cfg)) {
            Some((a, rse)) if a > 0.0 => (a, rse, b_cfg),
            _ => match fit1(rest(0.0)) {
                Some((a, rse)) => (a, rse, 0.0),
                None => return fallback,
            },
        };
        let c = confidence(a, rse, n, fb.min_samples);
        if c < fb.min_confidence {
            return (
                Estimate::configured(fb.softirq_ns_per_packet, c, n).with_fit(a),
                Estimate::configured(fb.softirq_ns_per_byte, 0.0, n).with_fit(b_used),
            );
        }
        // Dropped to 0 because the configured per-byte cost alone exceeded what was
        // measured: that is learned (with the per-packet fit's confidence).
        let dropped = b_used == 0.0 && b_cfg > 0.0;
        let per_byte = Estimate {
            ns: b_used * 1e9,
            learned: dropped,
            confidence: if dropped { c } else { 0.0 },
            samples: n,
            fitted_ns: Some(b_used * 1e9),
        };
        (learned(a, c), per_byte)
    }
}

/// Capacity of `cpu` now as a fraction of 1024: its capacity at the top frequency scaled by
/// the current one (the top when unknown).
pub fn capacity_now(topo: &Topology, obs: &Observation, cpu: u32) -> f64 {
    let cap = topo.cpu(cpu).and_then(|c| c.capacity).unwrap_or(1024) as f64 / 1024.0;
    let top = topo
        .freq_domains
        .iter()
        .find(|d| d.cpus.contains(cpu))
        .and_then(|d| d.available_khz.iter().copied().max().or(d.max_khz));
    match (obs.cpu(cpu).and_then(|c| c.cur_khz), top) {
        (Some(now), Some(top)) if top > 0 => cap * (now as f64 / top as f64).min(1.0),
        _ => cap,
    }
}

/// The receive sample of interface `nic` whose receive processing runs on `rx_cpus`
/// (module doc, rule 1); None when the interface was not observed.
pub fn rx_sample(
    topo: &Topology,
    obs: &Observation,
    nic: &str,
    rx_cpus: &CpuSet,
) -> Option<RxSample> {
    let n = obs.nics.iter().find(|n| n.name == nic)?;
    let softirq_s = rx_cpus
        .iter()
        .filter_map(|c| Some(obs.cpu(c)?.softirq * capacity_now(topo, obs, c)))
        .sum::<f64>()
        * obs.interval_s;
    Some(RxSample {
        softirq_s,
        packets: n.rx_packets_per_s * obs.interval_s,
        bytes: n.rx_bytes_per_s * obs.interval_s,
    })
}

/// The app sample of `procs` (module doc, rule 2).
pub fn app_sample(topo: &Topology, obs: &Observation, procs: &[&ProcObs]) -> AppSample {
    let (cpu_s, bytes) = procs.iter().fold((0.0, 0.0), |(c, b), p| {
        let cap = p.last_cpu.map_or(1.0, |cpu| capacity_now(topo, obs, cpu));
        (
            c + p.cpu_share * cap * obs.interval_s,
            b + (p.rx_bytes_per_s + p.tx_bytes_per_s) * obs.interval_s,
        )
    });
    AppSample { cpu_s, bytes }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fb() -> Fallback {
        Fallback {
            softirq_ns_per_packet: 5000.0,
            softirq_ns_per_byte: 1.0,
            app_ns_per_byte: 2.0,
            min_samples: 5,
            min_confidence: 0.8,
        }
    }

    /// A synthetic counter stream: packets and segment sizes varying, 3% noise.
    fn stream(per_packet_ns: f64, per_byte_ns: f64, n: usize, vary_seg: bool) -> Learner {
        let mut l = Learner::new(60);
        let mut seed = crate::rng::Rng::new(7);
        for _ in 0..n {
            let packets = 2000.0 + 20000.0 * seed.unit();
            let seg = if vary_seg {
                200.0 + 1300.0 * seed.unit()
            } else {
                1448.0
            };
            let bytes = packets * seg;
            let noise = 1.0 + 0.06 * (seed.unit() - 0.5);
            let y = (packets * per_packet_ns + bytes * per_byte_ns) * 1e-9 * noise;
            l.push_rx(RxSample {
                softirq_s: y,
                packets,
                bytes,
            });
        }
        l
    }

    fn within(v: f64, want: f64, frac: f64) -> bool {
        (v - want).abs() <= frac * want.abs()
    }

    #[test]
    fn recovers_per_packet_and_per_byte_costs_within_ten_percent() {
        for (pp, pb) in [(2900.0, 0.0), (1200.0, 3.5), (8000.0, 1.0)] {
            let c = stream(pp, pb, 30, true).estimate(&fb());
            assert!(c.softirq_ns_per_packet.learned, "{pp} {pb}: {c:?}");
            assert!(within(c.softirq_ns_per_packet.ns, pp, 0.10), "{pp}: {c:?}");
            assert!(c.softirq_ns_per_byte.learned, "{pb}: {c:?}");
            // A zero per-byte cost is recovered as (nearly) zero: within 10% of the
            // per-packet cost spread over a 1448-byte segment.
            let tol = (0.10 * pb).max(0.10 * pp / 1448.0);
            assert!((c.softirq_ns_per_byte.ns - pb).abs() <= tol, "{pb}: {c:?}");
        }
    }

    #[test]
    fn constant_segments_keep_the_configured_per_byte_cost_and_predict_right() {
        let c = stream(2900.0, 0.0, 30, false).estimate(&fb());
        assert!(!c.softirq_ns_per_byte.learned);
        assert_eq!(c.softirq_ns_per_byte.ns, 1.0);
        // The total per 1448-byte packet is right.
        let total = c.softirq_ns_per_packet.ns + 1448.0 * c.softirq_ns_per_byte.ns;
        assert!(within(total, 2900.0, 0.10), "{c:?}");
        // Cheaper than the configured per-byte cost alone: it drops to 0 instead of going
        // negative.
        let c = stream(900.0, 0.0, 30, false).estimate(&fb());
        assert_eq!(c.softirq_ns_per_byte.ns, 0.0);
        assert!(within(c.softirq_ns_per_packet.ns, 900.0, 0.10), "{c:?}");
    }

    #[test]
    fn falls_back_below_the_confidence_threshold() {
        // Too few samples.
        let c = stream(2900.0, 0.0, 3, true).estimate(&fb());
        assert!(!c.softirq_ns_per_packet.learned);
        assert_eq!(c.softirq_ns_per_packet.ns, 5000.0);
        assert_eq!(c.app_ns_per_byte.ns, 2.0);
        // Pure noise: the softirq time has nothing to do with the packets.
        let mut l = Learner::new(60);
        let mut seed = crate::rng::Rng::new(3);
        for _ in 0..30 {
            l.push_rx(RxSample {
                softirq_s: 0.05 * seed.unit(),
                packets: 1000.0 + 20000.0 * seed.unit(),
                bytes: 1.5e6 * seed.unit(),
            });
        }
        let c = l.estimate(&fb());
        assert!(!c.softirq_ns_per_packet.learned, "{c:?}");
        assert_eq!(c.softirq_ns_per_packet.ns, 5000.0);
        assert!(c.softirq_ns_per_packet.confidence < 0.8);
        // Idle intervals are no samples at all.
        let mut l = Learner::new(60);
        l.push_rx(RxSample {
            softirq_s: 0.01,
            packets: 10.0,
            bytes: 1e4,
        });
        assert_eq!(l.rx_samples(), 0);
    }

    #[test]
    fn app_cost_is_learned_through_the_origin() {
        let mut l = Learner::new(10);
        let mut seed = crate::rng::Rng::new(11);
        for _ in 0..20 {
            let bytes = 1e6 + 5e6 * seed.unit();
            let noise = 1.0 + 0.04 * (seed.unit() - 0.5);
            l.push_app(AppSample {
                cpu_s: bytes * 3.2e-9 * noise,
                bytes,
            });
        }
        let c = l.estimate(&fb());
        assert!(c.app_ns_per_byte.learned);
        assert_eq!(c.app_ns_per_byte.samples, 10, "window bounds the samples");
        assert!(within(c.app_ns_per_byte.ns, 3.2, 0.10), "{c:?}");
    }

    #[test]
    fn samples_scale_softirq_time_by_capacity_now() {
        use crate::observation::{CpuObs, NicObs};
        let topo = crate::machines::machine("odroid-xu4").unwrap();
        let little = topo.cpu(0).unwrap().capacity.unwrap() as f64 / 1024.0;
        let dom = topo
            .freq_domains
            .iter()
            .find(|d| d.cpus.contains(0))
            .unwrap();
        let top = *dom.available_khz.iter().max().unwrap();
        let obs = Observation {
            interval_s: 2.0,
            cpus: vec![CpuObs {
                cpu: 0,
                softirq: 0.5,
                cur_khz: Some(top / 2),
                ..Default::default()
            }],
            nics: vec![NicObs {
                name: "eth0".into(),
                rx_packets_per_s: 1000.0,
                rx_bytes_per_s: 1.448e6,
                ..Default::default()
            }],
            ..Default::default()
        };
        let s = rx_sample(&topo, &obs, "eth0", &CpuSet::from_iter([0])).unwrap();
        assert!(
            (s.softirq_s - 0.5 * 2.0 * little * 0.5).abs() < 1e-12,
            "{s:?}"
        );
        assert_eq!(s.packets, 2000.0);
        assert!(rx_sample(&topo, &obs, "eth1", &CpuSet::from_iter([0])).is_none());
    }
}

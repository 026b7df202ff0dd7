//! Counter traces: per-process hardware counter data over time in a small, versioned
//! JSON-lines format, so that data recorded on real servers (with `perf stat -I`, a PMU
//! tool or `placer record`) can be replayed through the classifier and the `contention`
//! policy on any machine, including ones without a PMU.
//!
//! # Format, version 1
//!
//! One JSON object per line; blank lines and lines starting with `#` are ignored.
//!
//! - First line, the header:
//!   `{"placer_counter_trace": 1, "machine": "xeon-x5570x2", "interval_s": 10.0,
//!     "source": "how the data was made"}`.
//!   `machine` names a built-in machine model (or is empty); `interval_s` is the nominal
//!   sampling period; `source` must say whether the data was measured or built.
//! - Then one record per process per sample, in time order:
//!   `{"t_s": 10.0, "pid": 1001, "comm": "lbm", "cpu": 0, "cpu_share": 1.0, ...}` with
//!   either
//!   - `"rates": {"offcore_requests_buffer_full": 9.0e7, "llc_references": 1.0e8, ...}`:
//!     events per second over the interval ending at `t_s` (already scaled for
//!     multiplexing), or
//!   - `"counters": [{"event": "llc_references", "value": 123, "time_enabled_ns": 10,
//!     "time_running_ns": 5}, ...]`: raw cumulative values as read from perf
//!     (`read_format` TOTAL_TIME_ENABLED | TOTAL_TIME_RUNNING); rates are derived from
//!     consecutive records of the same pid, scaled by enabled/running as perf does. The
//!     first record of a pid gives no rates.
//!
//!   `cpu` (the CPU it last ran on), `cpu_share` (CPUs used, default 1.0) and `allowed`
//!   (a CPU list string, default: all) are optional.
//!
//! Event names are the rate-map names of [`crate::classify`] (`offcore_requests_buffer_full`,
//! `llc_references`, `l2_prefetch_requests`, `mem_bandwidth_bytes`, `cycles`,
//! `instructions`); other names are carried through unchanged.

use crate::cpuset::CpuSet;
use crate::observation::{CounterRates, Observation, ProcObs};
use crate::sample::{CounterEvent, CounterValue};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

pub const COUNTER_TRACE_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Header {
    pub placer_counter_trace: u32,
    #[serde(default)]
    pub machine: String,
    pub interval_s: f64,
    #[serde(default)]
    pub source: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RawCounter {
    pub event: String,
    pub value: u64,
    pub time_enabled_ns: u64,
    pub time_running_ns: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Record {
    pub t_s: f64,
    pub pid: u32,
    pub comm: String,
    #[serde(default)]
    pub cpu: Option<u32>,
    #[serde(default)]
    pub cpu_share: Option<f64>,
    #[serde(default)]
    pub allowed: Option<String>,
    #[serde(default)]
    pub rates: Option<BTreeMap<String, f64>>,
    #[serde(default)]
    pub counters: Option<Vec<RawCounter>>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    pub header: Header,
    pub records: Vec<Record>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TraceError {
    #[error("counter trace line {line}: {message}")]
    Line { line: usize, message: String },
    #[error("counter trace: empty (no header)")]
    Empty,
    #[error("counter trace version {0} is not supported (this build reads version {COUNTER_TRACE_VERSION})")]
    Version(u32),
}

/// Parses a trace. Pure.
pub fn parse(text: &str) -> Result<Trace, TraceError> {
    let mut header: Option<Header> = None;
    let mut records = Vec::new();
    let mut last_t = f64::NEG_INFINITY;
    for (i, line) in text.lines().enumerate() {
        let l = line.trim();
        if l.is_empty() || l.starts_with('#') {
            continue;
        }
        let err = |m: String| TraceError::Line {
            line: i + 1,
            message: m,
        };
        match &header {
            None => {
                let h: Header = serde_json::from_str(l).map_err(|e| err(e.to_string()))?;
                if h.placer_counter_trace != COUNTER_TRACE_VERSION {
                    return Err(TraceError::Version(h.placer_counter_trace));
                }
                if h.interval_s.is_nan() || h.interval_s <= 0.0 {
                    return Err(err("interval_s must be > 0".into()));
                }
                header = Some(h);
            }
            Some(_) => {
                let r: Record = serde_json::from_str(l).map_err(|e| err(e.to_string()))?;
                if r.rates.is_some() == r.counters.is_some() {
                    return Err(err(
                        "a record needs exactly one of `rates` or `counters`".into()
                    ));
                }
                if r.t_s < last_t {
                    return Err(err(format!("t_s {} goes back in time", r.t_s)));
                }
                if let Some(a) = &r.allowed {
                    CpuSet::parse_list(a).map_err(|e| err(e.to_string()))?;
                }
                last_t = r.t_s;
                records.push(r);
            }
        }
    }
    Ok(Trace {
        header: header.ok_or(TraceError::Empty)?,
        records,
    })
}

impl Trace {
    /// Serialises back to the text form (header first).
    pub fn to_jsonl(&self) -> String {
        let mut s = serde_json::to_string(&self.header).unwrap_or_default();
        s.push('\n');
        for r in &self.records {
            s.push_str(&serde_json::to_string(r).unwrap_or_default());
            s.push('\n');
        }
        s
    }

    /// One observation per distinct `t_s`, in order. `all_cpus` is the default allowed set.
    pub fn observations(&self, all_cpus: &CpuSet) -> Vec<Observation> {
        let mut out: Vec<Observation> = Vec::new();
        let mut prev_raw: BTreeMap<u32, (f64, &Vec<RawCounter>)> = BTreeMap::new();
        let mut i = 0;
        let mut last_t: Option<f64> = None;
        while i < self.records.len() {
            let t = self.records[i].t_s;
            let mut procs = Vec::new();
            while i < self.records.len() && self.records[i].t_s == t {
                let r = &self.records[i];
                i += 1;
                let counters = match (&r.rates, &r.counters) {
                    (Some(rates), _) => Some(CounterRates {
                        per_s: rates.clone(),
                        per_kinstr: per_kinstr(rates),
                        coverage: 1.0,
                    }),
                    (None, Some(raw)) => {
                        let rates = prev_raw
                            .get(&r.pid)
                            .and_then(|(pt, prev)| raw_rates(prev, raw, t - pt));
                        prev_raw.insert(r.pid, (t, raw));
                        rates
                    }
                    (None, None) => None,
                };
                let allowed = r
                    .allowed
                    .as_deref()
                    .and_then(|a| CpuSet::parse_list(a).ok())
                    .unwrap_or_else(|| all_cpus.clone());
                procs.push(trace_proc(
                    r.pid,
                    &r.comm,
                    r.cpu_share.unwrap_or(1.0),
                    allowed,
                    r.cpu,
                    counters,
                ));
            }
            let interval_s = last_t.map_or(self.header.interval_s, |l| t - l);
            last_t = Some(t);
            out.push(Observation {
                time_ns: (t * 1e9) as u64,
                interval_s,
                procs: procs.into_iter().map(std::sync::Arc::new).collect(),
                ..Default::default()
            });
        }
        out
    }
}

fn per_kinstr(per_s: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    match per_s.get("instructions") {
        Some(&i) if i > 0.0 => per_s
            .iter()
            .map(|(k, v)| (k.clone(), v / i * 1000.0))
            .collect(),
        _ => BTreeMap::new(),
    }
}

/// Rates from two cumulative readings, scaled for multiplexing: the interval's delta times
/// delta(enabled) / delta(running), per second (the same derivation as live samples; a
/// counter that went backwards gives 0 for the interval).
pub fn raw_rates(prev: &[RawCounter], cur: &[RawCounter], dt_s: f64) -> Option<CounterRates> {
    if dt_s <= 0.0 {
        return None;
    }
    let conv = |v: &[RawCounter]| -> Vec<CounterValue> {
        v.iter()
            .map(|c| CounterValue {
                event: CounterEvent::Raw {
                    name: c.event.clone(),
                    config: 0,
                },
                value: c.value,
                time_enabled_ns: c.time_enabled_ns,
                time_running_ns: c.time_running_ns,
            })
            .collect()
    };
    crate::observe::counter_rates(&conv(prev), &conv(cur), &|v| v / dt_s)
}

/// A running, CPU-bound process as traces describe it (no network, one thread); the
/// fields traces do not carry are neutral.
pub fn trace_proc(
    pid: u32,
    comm: &str,
    cpu_share: f64,
    allowed_cpus: CpuSet,
    last_cpu: Option<u32>,
    counters: Option<CounterRates>,
) -> ProcObs {
    ProcObs {
        pid,
        // Traces name processes by pid only; a fixed start time keeps keys stable.
        start_time_ticks: 1,
        comm: comm.into(),
        state: 'R',
        uid: None,
        cgroup: "".into(),
        kernel_thread: false,
        cpu_share,
        allowed_cpus,
        last_cpu,
        num_threads: 1,
        rx_bytes_per_s: 0.0,
        tx_bytes_per_s: 0.0,
        segs_in_per_s: 0.0,
        segs_out_per_s: 0.0,
        flows: vec![],
        threads: vec![],
        counters,
        numa_pages: BTreeMap::new(),
        new: false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::classify::{Classifier, ClassifyConfig, Group, Mode};
    use crate::machines::machine;
    use crate::policies::contention::Contention;
    use crate::policy::{Policy, PolicyState};

    const GROUPS: &str = include_str!("../../../traces/seed003-paper-groups.jsonl");
    const MIX: &str = include_str!("../../../traces/seed003-basic-mix-raw.jsonl");

    fn paper_group(comm: &str) -> Group {
        match comm {
            "lbm" | "libquantum" | "lu.B" => Group::Aggressive,
            "sphinx" | "omnetpp" | "streamcluster" => Group::Sensitive,
            _ => Group::Insensitive,
        }
    }

    #[test]
    fn parse_rejects_bad_input() {
        assert_eq!(parse(""), Err(TraceError::Empty));
        assert_eq!(
            parse("{\"placer_counter_trace\": 2, \"interval_s\": 1}"),
            Err(TraceError::Version(2))
        );
        let h = "{\"placer_counter_trace\": 1, \"interval_s\": 1}\n";
        let both = format!("{h}{{\"t_s\":1,\"pid\":1,\"comm\":\"a\"}}");
        assert!(matches!(
            parse(&both),
            Err(TraceError::Line { line: 2, .. })
        ));
        let back = format!(
            "{h}{{\"t_s\":2,\"pid\":1,\"comm\":\"a\",\"rates\":{{}}}}\n{{\"t_s\":1,\"pid\":1,\"comm\":\"a\",\"rates\":{{}}}}"
        );
        assert!(parse(&back).is_err());
    }

    #[test]
    fn raw_counters_are_scaled_for_multiplexing() {
        let c = |v, e, r| RawCounter {
            event: "llc_references".into(),
            value: v,
            time_enabled_ns: e,
            time_running_ns: r,
        };
        // 1,000 events counted while running half of a 10 s interval -> 2,000 over 10 s.
        let r = raw_rates(&[c(0, 0, 0)], &[c(1000, 10_000, 5_000)], 10.0).unwrap();
        assert_eq!(r.per_s["llc_references"], 200.0);
        assert_eq!(r.coverage, 0.5);
        // A counter that went backwards (reset) gives 0, not a huge rate.
        let r = raw_rates(&[c(5000, 0, 0)], &[c(10, 10, 10)], 1.0).unwrap();
        assert_eq!(r.per_s["llc_references"], 0.0);
    }

    #[test]
    fn round_trip() {
        let t = parse(GROUPS).unwrap();
        assert_eq!(parse(&t.to_jsonl()).unwrap(), t);
    }

    #[test]
    fn shipped_paper_trace_classifies_in_both_modes() {
        let t = parse(GROUPS).unwrap();
        assert!(t.header.source.contains("not measured"));
        let obs = t.observations(&CpuSet::first_n(8));
        assert!(obs.len() >= 5);
        for mode in [Mode::Threshold, Mode::Relative] {
            let cfg = ClassifyConfig {
                mode,
                ..Default::default()
            };
            let mut c = Classifier::new();
            for o in &obs {
                let out = c.update_obs(o, &cfg, Some(&t.header.machine));
                assert_eq!(out.len(), 11);
                for x in &out {
                    assert_eq!(x.class, paper_group(&x.comm), "{mode:?} {}", x.comm);
                }
            }
        }
    }

    #[test]
    fn shipped_raw_mix_replays_through_policy() {
        let t = parse(MIX).unwrap();
        let topo = machine(&t.header.machine).unwrap();
        let obs = t.observations(&topo.allowed());
        let pol = Contention::default();
        let mut st = PolicyState::default();
        let mut acted = 0;
        let mut spike_seen = false;
        for o in &obs {
            let plan = pol.plan(&topo, o, &mut st);
            acted += plan.actions.len();
            for c in Contention::last_classes(&mut st) {
                spike_seen |= c.raw != c.class;
                assert_eq!(c.class, paper_group(&c.comm), "{} at {}", c.comm, o.time_ns);
            }
        }
        assert!(
            spike_seen,
            "the trace's one-interval spike was seen and held"
        );
        assert!(acted > 0, "the mixed placement was contended and changed");
    }
}

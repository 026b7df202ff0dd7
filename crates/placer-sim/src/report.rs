//! Reports: one row per (variant, policy) with the scenario's metrics averaged over seeds
//! and the spread of the headline metric; the paper's figures beside the simulated ones;
//! the oracle's distance. As a text table or JSON.

use crate::scenario::{
    headline, paired_pct, Objective, PolicyResult, Scenario, Sensitivity, SensitivityRow,
};
use serde::{Deserialize, Serialize};
use std::fmt::Write;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PaperRow {
    pub variant: Option<String>,
    pub metric: String,
    pub policy: String,
    pub versus: String,
    pub paper_low_pct: f64,
    pub paper_high_pct: f64,
    /// Mean over seeds of the paired (same seed) comparison, percent.
    pub simulated_pct: Option<f64>,
    pub simulated_min_pct: Option<f64>,
    pub simulated_max_pct: Option<f64>,
    /// `within`, `below`, `above`, or `n/a`.
    pub verdict: String,
    pub source: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub scenario: String,
    pub description: String,
    pub machine: String,
    pub objective: Objective,
    pub seeds: Vec<u64>,
    pub rows: Vec<PolicyResult>,
    pub paper: Vec<PaperRow>,
    pub oracle: Vec<OracleResult>,
    /// The scenario's `[sensitivity]` re-runs (empty without one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sensitivity: Vec<SensitivityRow>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sensitivity_spec: Option<Sensitivity>,
    /// The scenario's `show_params`: (key, value, source).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub shown_params: Vec<(String, String, String)>,
}

impl Report {
    pub fn new(sc: &Scenario, rows: Vec<PolicyResult>, oracle: Vec<OracleResult>) -> Report {
        let paper = sc
            .paper
            .iter()
            .map(|f| {
                let vals = f.policies().map_or_else(Vec::new, |(p, v)| {
                    paired_pct(&rows, f.variant.as_deref(), &p, &v, &f.metric)
                });
                let mean = (!vals.is_empty()).then(|| vals.iter().sum::<f64>() / vals.len() as f64);
                let verdict = match mean {
                    None => "n/a",
                    Some(m) if m < f.low_pct => "below",
                    Some(m) if m > f.high_pct => "above",
                    Some(_) => "within",
                };
                PaperRow {
                    variant: f.variant.clone(),
                    metric: f.metric.clone(),
                    policy: f.policy.clone(),
                    versus: f.versus.clone(),
                    paper_low_pct: f.low_pct,
                    paper_high_pct: f.high_pct,
                    simulated_pct: mean,
                    simulated_min_pct: vals.iter().copied().reduce(f64::min),
                    simulated_max_pct: vals.iter().copied().reduce(f64::max),
                    verdict: verdict.into(),
                    source: f.source.clone(),
                }
            })
            .collect();
        Report {
            scenario: sc.name.clone(),
            description: sc.description.clone(),
            machine: sc.machine.to_string(),
            objective: sc.objective,
            seeds: sc.seeds.clone(),
            rows,
            paper,
            oracle,
            sensitivity: Vec::new(),
            sensitivity_spec: sc.sensitivity.clone(),
            shown_params: sc
                .topology_and_params(None)
                .map(|(_, p)| {
                    p.describe()
                        .into_iter()
                        .filter(|(k, _, _)| sc.show_params.contains(k))
                        .map(|(k, v, src)| (k, v, src.to_string()))
                        .collect()
                })
                .unwrap_or_default(),
        }
    }

    pub fn with_sensitivity(mut self, rows: Vec<SensitivityRow>) -> Report {
        self.sensitivity = rows;
        self
    }

    /// The text table.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "scenario {} on {} ({} seeds)",
            self.scenario,
            self.machine,
            self.seeds.len()
        );
        if !self.description.is_empty() {
            let _ = writeln!(s, "  {}", self.description);
        }
        let _ = writeln!(s);
        let head = [
            "variant", "policy", "net Gb/s", "work/s", "compl s", "makespan", "CPU %", "CPUs",
            "energy J", "power W", "perf/W", "QoS %", "QoS/W", "misses", "actions", "spread",
        ];
        let mut table: Vec<Vec<String>> = vec![head.iter().map(|h| h.to_string()).collect()];
        let opt = |v: Option<f64>, p: usize| v.map(|x| format!("{x:.p$}")).unwrap_or("-".into());
        for r in &self.rows {
            let m = &r.mean;
            if let Some(e) = &r.error {
                table.push(vec![
                    r.variant.clone().unwrap_or("-".into()),
                    r.policy.to_string(),
                    format!("error: {e}"),
                ]);
                continue;
            }
            table.push(vec![
                r.variant.clone().unwrap_or("-".into()),
                r.policy.to_string(),
                format!("{:.3}", m.net_gbps),
                format!("{:.3}", m.work_rate),
                opt(m.completion_mean_s, 2),
                opt(m.makespan_s, 2),
                format!("{:.1}", m.cpu_util_pct),
                format!("{:.2}", m.cpu_busy_cpus),
                format!("{:.0}", m.energy_j),
                format!("{:.1}", m.power_w),
                format!("{:.4}", m.perf_per_watt),
                opt(m.qos_satisfaction.map(|q| q * 100.0), 1),
                opt(m.qos_per_watt, 4),
                if m.periodic_jobs > 0 {
                    format!("{}/{}", m.deadline_misses, m.periodic_jobs)
                } else {
                    "-".into()
                },
                m.actions.to_string(),
                format!("{:.3}..{:.3}", r.spread.0, r.spread.1),
            ]);
        }
        s.push_str(&columns(&table));
        let _ = writeln!(
            s,
            "\nspread = min..max over seeds of the objective ({:?}); CPUs = busy CPUs (sum of \
             utilisation); perf/W = Gbit/s (or work/s) per watt; QoS % = mean over workloads with a QoS target \
             of min(achieved / target, 1); QoS/W = that (as a fraction) per watt; energy over the \
             measured window.",
            self.objective
        );
        if !self.paper.is_empty() {
            let _ = writeln!(
                s,
                "\nthe paper beside the simulation (policy vs baseline, same seeds):"
            );
            let mut t = vec![vec![
                "variant".to_string(),
                "metric".into(),
                "policy vs".into(),
                "paper %".into(),
                "simulated %".into(),
                "seeds min..max".into(),
                "".into(),
                "source".into(),
            ]];
            for p in &self.paper {
                t.push(vec![
                    p.variant.clone().unwrap_or("-".into()),
                    p.metric.clone(),
                    format!("{} vs {}", p.policy, p.versus),
                    format!("{:+.0}..{:+.0}", p.paper_low_pct, p.paper_high_pct),
                    opt(p.simulated_pct, 1),
                    match (p.simulated_min_pct, p.simulated_max_pct) {
                        (Some(a), Some(b)) => format!("{a:+.1}..{b:+.1}"),
                        _ => "-".into(),
                    },
                    p.verdict.clone(),
                    p.source.clone(),
                ]);
            }
            s.push_str(&columns(&t));
        }
        if !self.shown_params.is_empty() {
            let _ = writeln!(s, "\nmodel figures behind these metrics:");
            for (k, v, src) in &self.shown_params {
                let _ = writeln!(s, "  {k} = {v}  ({src})");
            }
        }
        if let (Some(spec), false) = (&self.sensitivity_spec, self.sensitivity.is_empty()) {
            let _ = writeln!(
                s,
                "\nsensitivity to {} (same seeds; simulated % of policy vs baseline){}:",
                spec.param,
                if spec.note.is_empty() {
                    String::new()
                } else {
                    format!("; {}", spec.note)
                }
            );
            let mut t = vec![vec![spec.param.clone()]];
            if let Some(first) = self.sensitivity.first() {
                for (m, p, v, _) in &first.comparisons {
                    t[0].push(format!("{m} {p} vs {v}"));
                }
            }
            for r in &self.sensitivity {
                let mut row = vec![format!("{}", r.value)];
                for (_, _, _, pct) in &r.comparisons {
                    row.push(pct.map_or("-".into(), |x| format!("{x:+.1}")));
                }
                t.push(row);
            }
            s.push_str(&columns(&t));
        }
        for o in &self.oracle {
            let _ = writeln!(s);
            s.push_str(&o.to_text(self.objective, &self.rows));
        }
        s
    }
}

/// Left-aligned columns separated by two spaces.
pub fn columns(rows: &[Vec<String>]) -> String {
    let ncol = rows.iter().map(|r| r.len()).max().unwrap_or(0);
    let mut w = vec![0; ncol];
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            if i + 1 < r.len() {
                w[i] = w[i].max(c.chars().count());
            }
        }
    }
    let mut s = String::new();
    for r in rows {
        let mut line = String::new();
        for (i, c) in r.iter().enumerate() {
            if i + 1 < r.len() {
                let _ = write!(line, "{c:<width$}  ", width = w[i]);
            } else {
                line.push_str(c);
            }
        }
        s.push_str(line.trim_end());
        s.push('\n');
    }
    s
}

/// The headline of a policy row (for oracle distances).
pub fn row_headline(obj: Objective, r: &PolicyResult) -> f64 {
    headline(obj, &r.mean)
}
/// The oracle's exhaustive search for one variant (`crate::oracle::search`); defined here,
/// where reports hold it, so that the oracle depends on the report and not the reverse.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OracleResult {
    pub variant: Option<String>,
    pub placements: u64,
    pub evaluated: u64,
    pub eval_duration_s: f64,
    /// The best placement: (process name, thread id, CPU id).
    pub best: Vec<(String, u32, u32)>,
    pub best_value: Option<f64>,
    pub worst_value: Option<f64>,
    pub skipped: Option<String>,
}

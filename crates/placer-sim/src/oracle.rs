//! The oracle: the best static placement of a small scenario (at most [`MAX_TASKS`]
//! threads on at most [`MAX_CPUS`] CPUs), found by simulating every placement, so a
//! report can say how far each policy is from the best possible.
//!
//! A placement pins every thread to one CPU for the whole run. Threads that are
//! interchangeable (single-thread processes of the same workload entry with the same
//! receive CPU; threads of one process with the same role) are enumerated as multisets,
//! which removes placements that differ only by swapping them. Each placement is simulated
//! for `[oracle] duration_s` (measured after `warmup_s`) with the scenario's first seed
//! and scored by the scenario's objective. Above `max_placements` the search is skipped
//! and says so.

use crate::baselines::Baseline;
use crate::report::{columns, row_headline};
use crate::scenario::{
    bigger_is_better, headline, metrics_of, Objective, OracleSpec, PolicyResult, Scenario, Variant,
};
use crate::workload::Kind;

pub const MAX_TASKS: usize = 8;
pub const MAX_CPUS: usize = 8;

pub use crate::report::OracleResult;

impl OracleResult {
    pub fn to_text(&self, obj: Objective, rows: &[PolicyResult]) -> String {
        let name = self.variant.clone().unwrap_or_else(|| "-".into());
        if let Some(why) = &self.skipped {
            return format!("oracle ({name}): skipped: {why}\n");
        }
        let Some(best) = self.best_value else {
            return format!("oracle ({name}): no placement evaluated\n");
        };
        let mut s = format!(
            "oracle ({name}): best static placement of {} evaluated ({} s each, first seed): \
             {:?} {:.4} (worst {:.4})\n  placement: {}\n",
            self.evaluated,
            self.eval_duration_s,
            obj,
            best,
            self.worst_value.unwrap_or(f64::NAN),
            self.best
                .iter()
                .map(|(n, t, c)| format!("{n}/{t}->cpu{c}"))
                .collect::<Vec<_>>()
                .join(" ")
        );
        let mut t = vec![vec![
            "policy".to_string(),
            "value".into(),
            "from best".into(),
        ]];
        for r in rows
            .iter()
            .filter(|r| r.variant == self.variant && r.error.is_none())
        {
            let v = row_headline(obj, r);
            let gap = if bigger_is_better(obj) {
                (1.0 - v / best) * 100.0
            } else {
                (v / best - 1.0) * 100.0
            };
            t.push(vec![
                r.policy.to_string(),
                format!("{v:.4}"),
                format!("{gap:.1}% worse"),
            ]);
        }
        s.push_str(&columns(&t));
        s
    }
}

fn multisets(n: usize, k: usize) -> Vec<Vec<usize>> {
    let mut out = Vec::new();
    let mut cur = Vec::with_capacity(k);
    fn rec(n: usize, k: usize, start: usize, cur: &mut Vec<usize>, out: &mut Vec<Vec<usize>>) {
        if cur.len() == k {
            out.push(cur.clone());
            return;
        }
        for i in start..n {
            cur.push(i);
            rec(n, k, i, cur, out);
            cur.pop();
        }
    }
    rec(n, k, 0, &mut cur, &mut out);
    out
}

fn binom_multiset(n: u64, k: u64) -> u64 {
    // C(n + k - 1, k), saturating.
    let mut r: u128 = 1;
    for i in 0..k {
        r = r * (n + i) as u128 / (i + 1) as u128;
        if r > u64::MAX as u128 {
            return u64::MAX;
        }
    }
    r as u64
}

/// Runs the exhaustive search for one variant.
pub fn search(sc: &Scenario, variant: Option<&Variant>, spec: &OracleSpec) -> OracleResult {
    let mut res = OracleResult {
        variant: variant.map(|v| v.name.clone()),
        placements: 0,
        evaluated: 0,
        eval_duration_s: spec.duration_s,
        best: Vec::new(),
        best_value: None,
        worst_value: None,
        skipped: None,
    };
    let seed = sc.seeds.first().copied().unwrap_or(1);
    let proto = match sc.host(variant, Baseline::LinuxDefault, seed) {
        Ok(h) => h,
        Err(e) => {
            res.skipped = Some(e.to_string());
            return res;
        }
    };
    let ncpu = proto.machine().cpus.len();
    let ntask = proto.tasks().len();
    if ntask > MAX_TASKS || ncpu > MAX_CPUS {
        res.skipped = Some(format!(
            "{ntask} threads on {ncpu} CPUs is beyond the oracle's {MAX_TASKS} threads on {MAX_CPUS} CPUs"
        ));
        return res;
    }
    // Groups of interchangeable threads.
    let mut groups: Vec<(String, Vec<usize>)> = Vec::new();
    for (ti, t) in proto.tasks().iter().enumerate() {
        let p = &proto.procs()[t.proc];
        let s = &proto.specs()[p.spec];
        let role = p.threads.iter().position(|&x| x == ti).unwrap_or(0);
        let key = if p.threads.len() == 1 {
            let rxc = p
                .flow
                .map(|f| crate::network::rx_cpu_of(&proto, f))
                .unwrap_or(usize::MAX);
            format!("spec{}:rx{}", p.spec, rxc)
        } else {
            let serial_role = s.kind == Kind::Cpu && s.serial_fraction > 0.0 && role == 0;
            format!("proc{}:{}", t.proc, serial_role)
        };
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, v)) => v.push(ti),
            None => groups.push((key, vec![ti])),
        }
    }
    let total = groups.iter().fold(1u64, |acc, (_, g)| {
        acc.saturating_mul(binom_multiset(ncpu as u64, g.len() as u64))
    });
    res.placements = total;
    if total > spec.max_placements {
        res.skipped = Some(format!(
            "{total} placements (after removing swaps of identical threads) exceed max_placements = {}",
            spec.max_placements
        ));
        return res;
    }
    let choices: Vec<Vec<Vec<usize>>> = groups
        .iter()
        .map(|(_, g)| multisets(ncpu, g.len()))
        .collect();
    let mut idx = vec![0usize; groups.len()];
    let obj = sc.objective;
    let better = |a: f64, b: f64| if bigger_is_better(obj) { a > b } else { a < b };
    let end_ns = (spec.duration_s * 1e9) as u64;
    let warm_ns = (spec.warmup_s.min(spec.duration_s * 0.5) * 1e9) as u64;
    loop {
        let mut host = match sc.host(variant, Baseline::LinuxDefault, seed) {
            Ok(h) => h,
            Err(e) => {
                res.skipped = Some(e.to_string());
                return res;
            }
        };
        let mut placement = Vec::new();
        for (gi, (_, g)) in groups.iter().enumerate() {
            for (k, &ti) in g.iter().enumerate() {
                let c = choices[gi][idx[gi]][k];
                let id = host.machine().cpus[c].id;
                host.pin_task(ti, id);
                let p = &host.procs()[host.tasks()[ti].proc];
                placement.push((p.comm.clone(), host.tasks()[ti].tid, id));
            }
        }
        if warm_ns > 0 {
            host.run_until(warm_ns, false);
        }
        host.open_window();
        host.run_until(end_ns, sc.stop_when_done);
        let v = headline(obj, &metrics_of(&host, 0));
        res.evaluated += 1;
        if res.best_value.is_none_or(|b| better(v, b)) {
            res.best_value = Some(v);
            placement.sort();
            res.best = placement;
        }
        if res.worst_value.is_none_or(|w| better(w, v)) {
            res.worst_value = Some(v);
        }
        // Odometer over the groups' choices.
        let mut gi = 0;
        loop {
            if gi == idx.len() {
                return res;
            }
            idx[gi] += 1;
            if idx[gi] < choices[gi].len() {
                break;
            }
            idx[gi] = 0;
            gi += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multiset_counts() {
        assert_eq!(multisets(3, 2).len(), 6);
        assert_eq!(binom_multiset(3, 2), 6);
        assert_eq!(multisets(8, 4).len() as u64, binom_multiset(8, 4));
        assert_eq!(binom_multiset(8, 4), 330);
    }
}

//! `placer report`: does placer pay on this machine? Per policy, the moves the running (or
//! last) daemon judged (a plan judged together is one move), kept / undone / inconclusive,
//! and the measured effect of each metric they were judged by, from the judge's paired
//! probes only (the median on/off ratio over moves, one value per move, and the 95% interval
//! of the geometric mean from a t on the logs), from the daemon's typed verdict log in its
//! state dir. Beside it, what the judge can see on this machine: the last staged-move
//! calibration (`placer bench verdicts --real --save`) with its date, so that "no effect"
//! and "cannot tell" read differently; and, when nothing was judged, why (the daemon's
//! last notes).

use anyhow::{Context, Result};
use placer_linux::verdict_log;
use serde::Serialize;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Only verdicts of the last DURATION (`1h`, `30m`; default: all the log holds).
    #[arg(long, value_parser = placer::common::duration_arg)]
    pub since: Option<std::time::Duration>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub state: crate::cmd::config::StateArgs,
}

#[derive(Serialize)]
struct Report {
    state_dir: String,
    /// Unix ms of the oldest verdict counted (the --since bound), if any.
    since_unix_ms: Option<u64>,
    verdicts: usize,
    /// Lines of the log that did not parse (a torn line after a crash).
    unreadable_lines: usize,
    policies: Vec<placer_core::verdict::PolicySummary>,
    /// The judge's power and placebo rate measured on this machine (the last
    /// `placer bench verdicts --real --save`), if any.
    calibration: Option<placer::bench::bench_verdicts_real::Saved>,
    /// When nothing was judged: why, from the daemon's last decisions (most frequent
    /// notes first).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    why_no_verdicts: Vec<String>,
}

/// The most frequent of the daemon's last notes (at most 5), "N processes: note".
fn why_nothing(dir: &std::path::Path) -> Vec<String> {
    let Some(d) = placer_agent::state::Decisions::read(dir) else {
        return vec![format!(
            "no decisions in {}: no daemon has run with this state dir",
            dir.display()
        )];
    };
    let mut counts: std::collections::BTreeMap<&str, usize> = Default::default();
    for p in d.procs.values() {
        for (_, n) in &p.notes {
            *counts.entry(n.as_str()).or_default() += 1;
        }
    }
    let held = d.procs.values().filter(|p| p.held_by.is_some()).count();
    let mut v: Vec<(&str, usize)> = counts.into_iter().collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let mut out = vec![format!(
        "the daemon's last decisions: {} process(es) seen, {held} held, no move judged",
        d.procs.len()
    )];
    out.extend(
        v.into_iter()
            .take(5)
            .map(|(n, c)| format!("{c} process(es): {n}")),
    );
    out
}

pub fn run(args: Args) -> Result<()> {
    let cfg = args.state.config_of_existing_state()?;
    let dir = std::path::PathBuf::from(&cfg.state_dir);
    let (records, bad) = verdict_log::read(&dir)
        .with_context(|| format!("reading the verdict log in {}", dir.display()))?;
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let since = args
        .since
        .map(|d| now_ms.saturating_sub(d.as_millis() as u64));
    let kept: Vec<&placer_core::verdict::Verdict> = records
        .iter()
        .filter(|r| since.is_none_or(|s| r.unix_ms >= s))
        .map(|r| &r.verdict)
        .collect();
    let report = Report {
        state_dir: dir.display().to_string(),
        since_unix_ms: since,
        verdicts: kept.len(),
        unreadable_lines: bad,
        policies: placer_core::verdict::summarize(kept.iter().copied()),
        calibration: placer::bench::bench_verdicts_real::Saved::read(&dir),
        why_no_verdicts: if kept.is_empty() {
            why_nothing(&dir)
        } else {
            Vec::new()
        },
    };
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(());
    }
    outln!(
        "{} verdicts in {}{}{}",
        report.verdicts,
        dir.join(verdict_log::VERDICT_LOG).display(),
        args.since.map_or_else(String::new, |d| format!(
            " over the last {}",
            placer_core::units::format_duration(d)
        )),
        if bad > 0 {
            format!(" ({bad} unreadable lines skipped)")
        } else {
            String::new()
        }
    );
    for line in &report.why_no_verdicts {
        outln!("  {line}");
    }
    for p in &report.policies {
        outln!(
            "{}: {} moves judged ({} processes): {} kept, {} undone, {} inconclusive{}",
            p.policy,
            p.moves,
            p.processes,
            p.kept,
            p.undone,
            p.inconclusive,
            if p.before_after > 0 {
                format!(
                    "; {} by the old before/after rule (effects left out: it credits a move with what triggered it)",
                    p.before_after
                )
            } else {
                String::new()
            }
        );
        if p.effects.is_empty() && p.moves > 0 {
            outln!("  no probed move measured an effect");
        }
        for e in &p.effects {
            outln!(
                "  {}: median on/off {:.3} over {} probed moves{}",
                e.metric.name(),
                e.median_ratio,
                e.n,
                e.ci95.map_or_else(String::new, |ci| format!(
                    ", geometric mean 95% interval {:.3}..{:.3}",
                    ci.0, ci.1
                ))
            );
        }
    }
    match &report.calibration {
        Some(c) => outln!("{}", c.summary_line()),
        None => outln!(
            "the judge's power on this machine: not measured (run `placer bench verdicts --real --save`)"
        ),
    }
    Ok(())
}

//! `placer report`: does placer pay on this machine? Per policy, the moves the running (or
//! last) daemon judged, kept / undone / inconclusive, and the measured effect of each metric
//! they were judged by (median after / before, and the 95% interval of the geometric mean
//! from a t on the logs), from the daemon's typed verdict log in its state dir.

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
    for p in &report.policies {
        outln!(
            "{}: {} moves judged: {} kept, {} undone, {} inconclusive",
            p.policy,
            p.moves,
            p.kept,
            p.undone,
            p.inconclusive
        );
        for e in &p.effects {
            outln!(
                "  {}: median after/before {:.3} over {} moves{}",
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
    Ok(())
}

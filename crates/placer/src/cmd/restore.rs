//! `placer restore`: puts back every knob the journal lists (what a daemon changed and did
//! not restore: after `--once`, a crash, or a SIGKILL). Knobs someone else changed since
//! are left as they are; knobs whose object is gone are dropped; failures stay journaled.

use crate::cmd::config::StateArgs;
use anyhow::{bail, Result};
use placer_agent::state;
use placer_core::host::Host;
use placer_core::journal::Restored;
use serde::Serialize;
use std::path::PathBuf;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub state: StateArgs,
    /// Restore even though a daemon is running on this state dir (it would keep
    /// re-applying its plans; stop it with SIGTERM instead, which restores too).
    #[arg(long)]
    pub force: bool,
    /// Print what happened to each knob as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Serialize)]
struct Line {
    knob: placer_linux::journal::Knob,
    label: String,
    previous: String,
    result: &'static str,
    detail: String,
}

pub fn run(args: Args) -> Result<()> {
    let cfg = args.state.config_of_existing_state()?;
    let dir = PathBuf::from(&cfg.state_dir);
    if let Some(pid) = state::lock_holder(&dir) {
        if !args.force {
            bail!(
                "a placer daemon (pid {pid}) is running on {}: stop it with SIGTERM (it restores everything), or pass --force",
                dir.display()
            );
        }
    }
    if !dir.join(placer_linux::journal::JOURNAL_FILE).exists() {
        if args.json {
            outln!("[]");
        } else {
            outln!("nothing to restore: no journal in {}", dir.display());
        }
        return Ok(());
    }
    let mut host = placer_linux::LinuxHost::new(&args.state.root, &dir);
    let res = host.restore_all()?;
    // Entries refused on read (not placer's form, a knob twice) stay in the journal and
    // are never acted on: say so, and fail, since what they name was not put back.
    let refused = placer_linux::journal::Journal::load(&dir).map_or(0, |j| j.refused().len());
    let mut failed = 0;
    let lines: Vec<Line> = res
        .iter()
        .map(|(e, r)| {
            let detail = match r {
                Restored::Restored => String::new(),
                Restored::Gone(s) | Restored::ChangedElsewhere(s) => s.clone(),
                Restored::Failed(s) => {
                    failed += 1;
                    s.clone()
                }
            };
            Line {
                knob: e.knob.clone(),
                label: e.label.clone(),
                previous: e.previous.clone(),
                result: r.kind(),
                detail,
            }
        })
        .collect();
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&lines)?);
    } else if lines.is_empty() && refused == 0 {
        outln!("nothing to restore: the journal is empty");
    } else {
        for l in &lines {
            let knob = format!("{} ({})", l.knob, l.label);
            match l.result {
                "restored" => outln!("restored {knob} to {}", l.previous),
                "failed" => outln!("FAILED {knob}: {}", l.detail),
                _ => outln!("{} {knob}: {}", l.result, l.detail),
            }
        }
    }
    if failed > 0 || refused > 0 {
        let mut why = Vec::new();
        if failed > 0 {
            why.push(format!("{failed} knob(s) could not be restored"));
        }
        if refused > 0 {
            why.push(format!(
                "{refused} journal entr{} refused as not placer's (see the log), never acted on",
                if refused == 1 { "y was" } else { "ies were" }
            ));
        }
        bail!("{}; they stay in the journal", why.join("; "));
    }
    Ok(())
}

//! What `--dry-run` and `--once` print for each cycle: a line per cycle, its actions and
//! notes indented below it, or one JSON object per cycle with `--json`.

use placer_agent::agent::action_line;
use placer_core::engine::CycleReport;

pub fn print_cycle(r: &CycleReport, dry_run: bool, json: bool) {
    if json {
        outln!("{}", placer_agent::agent::cycle_json(r, dry_run));
        return;
    }
    if let Some(e) = &r.error {
        outln!("cycle {}: error: {e}", r.cycle);
        return;
    }
    // One line names the cycle; its actions and notes follow, indented.
    let count = |n: usize, what: &str| format!("{n} {what}{}", if n == 1 { "" } else { "s" });
    let (actions, notes) = (r.reports.len(), r.plan.notes.len());
    outln!(
        "cycle {}: {}, {}",
        r.cycle,
        count(actions, "action"),
        count(notes, "note")
    );
    for a in &r.reports {
        outln!("  {}", action_line(a));
    }
    for n in &r.plan.notes {
        let who = n.proc.map_or(String::new(), |k| format!("pid {} ", k.pid));
        outln!("  [{}] note {who}{}", n.policy, n.text);
    }
}

//! `placer explain PID`: why the process is where it is: its affinity now, what placer
//! changed (the journal, with the original affinity), the latest action with its reason and
//! numbers, and what each policy thinks of it this interval. From the running daemon's
//! `decisions.json`; with no daemon running, from one observation over one interval and the
//! configured policies in dry-run.

use crate::cmd::config::StateArgs;
use anyhow::Result;
use placer_agent::explain::{self, Explanation};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The process to explain.
    pub pid: u32,
    #[command(flatten)]
    pub state: StateArgs,
    /// Observation length when no daemon runs (e.g. 500ms), default the config's interval.
    #[arg(long, value_parser = crate::common::duration_arg)]
    pub interval: Option<std::time::Duration>,
    /// Print the explanation as JSON (the same fields as the text).
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> Result<()> {
    let cfg = args.state.config()?;
    let interval = args
        .interval
        .unwrap_or(std::time::Duration::from_millis(cfg.interval_ms));
    let e = explain::gather(&args.state.root, &cfg, args.pid, interval)?;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&e)?);
        return Ok(());
    }
    out!("{}", render(&e));
    Ok(())
}

fn render(e: &Explanation) -> String {
    use std::fmt::Write as _;
    let mut o = String::new();
    let _ = writeln!(
        o,
        "pid {} ({}): allowed CPUs {}",
        e.pid, e.comm, e.allowed_cpus_now
    );
    match &e.journal {
        Some(j) => {
            let _ = writeln!(
                o,
                "  placer set its affinity to {} (originally {}); `placer restore` or stopping the daemon puts {} back",
                j.applied, j.previous, j.previous
            );
        }
        None => {
            let _ = writeln!(o, "  placer has not changed its affinity");
        }
    }
    if !e.numa_pages.is_empty() {
        let page = placer_bufpool::numa::page_bytes() as u64;
        let _ = writeln!(
            o,
            "  memory: {}",
            placer_core::policies::numa_local::format_pages(&e.numa_pages, page)
        );
    }
    if let Some(m) = &e.memory_journal {
        let _ = writeln!(
            o,
            "  placer moved its pages to nodes {} (pages per node before: {}); `placer restore` moves them back",
            m.applied, m.previous
        );
    }
    if let Some(c) = &e.container {
        use placer_nri::placement::Managed;
        let how = match &c.managed {
            Managed::Yes { policy, from } => format!("managed by {policy} ({from})"),
            Managed::No { why } => format!("left alone: {why}"),
        };
        let cpus = c
            .cpus
            .as_ref()
            .map_or(String::new(), |s| format!("; placer set its cpuset to {s}"));
        let _ = writeln!(
            o,
            "  Kubernetes: pod {}/{} container {} ({}): {how}{cpus}",
            c.namespace, c.pod, c.container, c.container_id
        );
    }
    let src = match e.source {
        "daemon" => "the running daemon's latest cycle",
        _ => "no daemon running: one observation now, policies in dry run",
    };
    let _ = writeln!(o, "  source: {src}");
    if !e.sockets_visible {
        let _ = writeln!(
            o,
            "  network: cannot see its sockets without root (/proc/{}/fd is not readable), so its traffic reads as none; run as root",
            e.pid
        );
    }
    match &e.decision {
        None => {
            let _ = writeln!(
                o,
                "  no policy has anything to say about it ({}, not in scope, or not seen)",
                if e.sockets_visible {
                    "no network traffic"
                } else {
                    "its network traffic is not visible"
                }
            );
        }
        Some(d) => {
            let _ = writeln!(
                o,
                "  observed: rx {} tx {}, CPU {:.0}% of one CPU, last ran on CPU {}",
                placer_core::policies::net_affinity::fmt_rate(d.rx_bytes_per_s),
                placer_core::policies::net_affinity::fmt_rate(d.tx_bytes_per_s),
                d.cpu_share * 100.0,
                d.last_cpu.map_or("?".into(), |c| c.to_string())
            );
            if let Some(v) = &d.last_verdict {
                let _ = writeln!(o, "  verdict on its last move: {v}");
            }
            if let (Some(p), Some(c)) = (&d.held_by, &d.held_cpus) {
                let _ = writeln!(
                    o,
                    "  held by policy {p} on CPUs {c} for {:.1} s",
                    d.held_for_s.unwrap_or(0.0)
                );
            }
            if let Some(a) = &d.last_action {
                let detail = if a.detail.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", a.detail)
                };
                let _ = writeln!(
                    o,
                    "  last action: [{}] {} => {}{detail}\n    because: {}",
                    a.policy, a.kind, a.outcome, a.reason
                );
            }
            for (p, n) in &d.notes {
                let _ = writeln!(o, "  [{p}] {n}");
            }
        }
    }
    for (p, why) in &e.disabled_policies {
        let _ = writeln!(o, "  policy {p} is disabled: {why}");
    }
    for l in &e.coexistence {
        let _ = writeln!(o, "  next to another agent: {l}");
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    use placer_nri::placement::{ContainerView, Managed};

    fn explanation(container: Option<ContainerView>) -> Explanation {
        Explanation {
            pid: 42,
            comm: "app".into(),
            start_time_ticks: 1,
            allowed_cpus_now: "0-3".into(),
            source: "daemon",
            journal: None,
            decision: None,
            disabled_policies: Vec::new(),
            sockets_visible: true,
            numa_pages: Default::default(),
            memory_journal: None,
            container,
            coexistence: Vec::new(),
        }
    }

    #[test]
    fn names_the_pod_and_container_of_a_process() {
        let view = |managed| ContainerView {
            namespace: "web".into(),
            pod: "front-0".into(),
            container: "app".into(),
            container_id: "c0ffee".into(),
            managed,
            cpus: Some("0-1".into()),
        };
        let text = render(&explanation(Some(view(Managed::Yes {
            policy: placer_core::policies::PolicyKind::SmtEnergy,
            from: "policy.placer.io/pod".into(),
        }))));
        assert!(
            text.contains("Kubernetes: pod web/front-0 container app (c0ffee): managed by smt-energy (policy.placer.io/pod); placer set its cpuset to 0-1"),
            "{text}"
        );
        let text = render(&explanation(Some(view(Managed::No {
            why: "preserve.placer.io/pod opts out".into(),
        }))));
        assert!(
            text.contains("left alone: preserve.placer.io/pod opts out"),
            "{text}"
        );
        assert!(!render(&explanation(None)).contains("Kubernetes"));
    }
}

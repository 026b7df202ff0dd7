//! `placer daemon`: arguments, signals and printing around `placer_agent::Agent`, which owns
//! the daemon's life (start and its restore of what a dead daemon left, the cycles, the
//! metrics, `decisions.json`, the recorder, `--nri`, stop and its restore; see its module
//! doc). SIGTERM/SIGINT (and the other stop signals, `signals`): restore every journaled
//! knob, then exit.
//!
//! `--once`: one plan (two samples one interval apart), applied and left journaled (undo
//! with `placer restore`); `--dry-run`: prints the plans and changes nothing (no journal,
//! no state files).

mod notify;
mod print;
pub mod signals;

use anyhow::{Context, Result};
use placer_agent::agent::{Ended, NriOptions, Options};
use placer_agent::Agent;
use placer_core::config::Config;
use placer_linux::LinuxHost;
use std::path::PathBuf;
use tracing::{info, warn};

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub state: crate::cmd::config::StateArgs,
    /// Run one cycle (two samples one interval apart), apply its plan, exit. The changes
    /// stay journaled: `placer restore` undoes them.
    #[arg(long)]
    pub once: bool,
    /// Print each plan; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Interval between cycles (250ms, 1s, 2m or seconds), overriding the config's interval.
    #[arg(long, value_parser = crate::common::duration_arg)]
    pub interval: Option<std::time::Duration>,
    /// Print the built-in default config (TOML) and exit.
    #[arg(long)]
    pub print_default_config: bool,
    /// With --print-default-config: every setting commented out, as the package installs it
    /// (defaults then follow upgrades).
    #[arg(long, requires = "print_default_config")]
    pub commented_out: bool,
    /// Print plans (with --once or --dry-run) as JSON lines.
    #[arg(long)]
    pub json: bool,
    /// Record every sample the engine decides on, with the topology and this config in the
    /// header, to FILE (`placer record --replay FILE --plans` plays it back through the
    /// same engine).
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
    /// Run as an NRI plugin of the container runtime too (Kubernetes node agent).
    #[arg(long, conflicts_with_all = ["once", "dry_run"])]
    pub nri: bool,
    /// The runtime's NRI socket.
    #[arg(long, value_name = "PATH", default_value = placer_nri::plugin::DEFAULT_SOCKET, requires = "nri")]
    pub nri_socket: PathBuf,
    /// The plugin's index: plugins are called in ascending order (00-99).
    #[arg(long, value_name = "N", default_value_t = placer_nri::plugin::DEFAULT_INDEX,
          value_parser = clap::value_parser!(u32).range(0..=99), requires = "nri")]
    pub nri_index: u32,
}

/// The effective config: file or default, with the command-line overrides, validated.
pub fn effective_config(args: &Args) -> Result<Config> {
    let mut cfg = args.state.config()?;
    if let Some(i) = args.interval {
        cfg.interval_ms = u64::try_from(i.as_millis()).context("--interval too large")?;
        cfg.validate().context("with --interval")?;
    }
    Ok(cfg)
}

/// SIGHUP: reads the config again (the same file, or the built-in default, with the same
/// command-line overrides) and applies it; a config that does not load is refused, said,
/// and the running one kept.
fn reload(agent: &mut Agent<LinuxHost>, args: &Args) {
    let source = args.state.source();
    let cfg = match effective_config(args) {
        Ok(c) => c,
        Err(e) => {
            warn!("SIGHUP: {source} refused, keeping the running config: {e:#}");
            return;
        }
    };
    match agent.reload(cfg) {
        Ok(r) => r.log(&source),
        Err(e) => warn!("SIGHUP: applying {source}: {e}"),
    }
}

pub fn run(args: Args) -> Result<()> {
    if args.print_default_config {
        out!(
            "{}",
            if args.commented_out {
                placer_core::config_doc::shipped_config_toml()
            } else {
                placer_core::config_doc::commented_default_toml()
            }
        );
        return Ok(());
    }
    let cfg = effective_config(&args)?;
    let state_dir = PathBuf::from(&cfg.state_dir);
    let (dry_run, once) = (args.dry_run, args.once);
    if !dry_run && !placer_linux::sys::is_root() {
        warn!(
            "not running as root: placer can change only this user's processes; IRQ, RPS, qdisc, \
             cpufreq and other users' knobs need root (run with sudo, or --dry-run to only print plans)"
        );
    }
    let mut host = LinuxHost::new(&args.state.root, &state_dir);
    host.sampler.set_kernel_events(cfg.kernel_events);
    // The eBPF CPU collector only while it costs less than reading /proc (issue 46).
    host.sampler
        .set_event_path_choice(Some(placer_core::event_path::ChooserConfig::default()));
    let opts = Options {
        root: args.state.root.clone(),
        state_dir: Some(state_dir.clone()),
        dry_run,
        once,
        record: args.record.clone(),
        nri: args.nri.then(|| NriOptions {
            socket: args.nri_socket.clone(),
            index: args.nri_index,
        }),
        config_source: args.state.source(),
    };
    // Before anything is touched (the lock, the start-up restore, the NRI registration): a
    // stop signal from now on ends in the restore of `agent.stop`, never in the default
    // action.
    signals::install().context("installing signal handlers")?;
    signals::install_reload().context("installing the SIGHUP handler")?;
    let mut systemd = notify::Systemd::from_env();
    let mut agent = Agent::start(host, cfg, opts)?;
    // A stop asked for during start-up: no cycle.
    let ended = if signals::stop_requested() {
        Ended::Stopped
    } else {
        agent.run(
            |agent, r| {
                if (dry_run || once) && !r.warming_up {
                    print::print_cycle(r, dry_run, args.json);
                }
                systemd.after_cycle(r);
                if signals::take_reload() {
                    systemd.reloading();
                    reload(agent, &args);
                    systemd.after_cycle(r);
                }
            },
            |deadline| {
                notify::sleep_feeding_watchdog(deadline);
                signals::stop_requested()
            },
        )
    };
    if ended == Ended::Stopped {
        info!(
            "{} received: restoring every journaled knob",
            signals::which().unwrap_or_else(|| "stop".into())
        );
    }
    systemd.stopping();
    agent.stop()?;
    match ended {
        Ended::Once(Some(e)) => Err(anyhow::anyhow!("{e}")),
        Ended::RuntimeGone => Err(anyhow::anyhow!(
            "--nri: the container runtime went away (shutdown or closed connection)"
        )),
        Ended::Once(None) | Ended::Stopped => Ok(()),
    }
}

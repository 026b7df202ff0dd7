//! placer: places processes, threads, memory and network queues for speed or energy.
//! A thin binary: argument parsing and output; the logic lives in the library crates. It
//! holds no unsafe code: system calls go through `placer_linux::sys`.
#![forbid(unsafe_code)]

#[macro_use]
extern crate placer;

mod cmd;
// The shared helpers live in the library half (`crate::common` everywhere in the binary).
use placer::common;

use anyhow::Result;
use clap::{CommandFactory, Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "placer",
    version = placer_agent::VERSION_LINE,
    about = "Places processes and threads on cores, memory nodes and network queues"
)]
struct Cli {
    /// Log filter (tracing env-filter syntax), also read from PLACER_LOG.
    #[arg(long, global = true)]
    log: Option<String>,
    /// Log line format on stderr: text (colour only on a terminal) or json.
    #[arg(long, global = true, value_enum, default_value_t = common::LogFormat::Text)]
    log_format: common::LogFormat,
    #[command(subcommand)]
    cmd: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show the machine's topology (CPUs, caches, NUMA nodes, frequency domains, NICs).
    Topo(cmd::topo::Args),
    /// Live view of CPUs and the busiest processes, or one observation with --once --json.
    ///
    /// CPU table, each over the interval: util (busy share: all but idle and iowait), user
    /// (share in user mode), sys (share in the kernel), softirq (share in softirq handlers),
    /// irq/s (device interrupts per second), net_rx/s (NET_RX softirqs per second). Process table: SHARE (CPU time over the
    /// interval; 1.00 is one whole CPU), ALLOWED (the CPUs its affinity allows; blank for a
    /// kernel thread), LASTCPU (the CPU it last ran on), RX/s and TX/s (bytes per second its
    /// TCP connections received and sent; k, M, G are powers of 1000), FLOWS (its TCP
    /// connections). The placer line: each placer process (the daemon, this top) with its
    /// own CPU and its eBPF programs' time in the kernel over the interval, each in % of
    /// one CPU (the kernel counts the latter only while sysctl kernel.bpf_stats_enabled=1;
    /// it is not in the process's own share).
    Top(cmd::top::Args),
    /// Record raw samples to a file for later replay.
    Record(cmd::record::Args),
    /// Run the placement daemon (the main job).
    Daemon(cmd::daemon::Args),
    /// Why a process is where it is.
    Explain(cmd::explain::Args),
    /// Put back every knob placer's journal lists.
    Restore(cmd::restore::Args),
    /// Does placer pay here? Per policy, the daemon's judged moves and their measured effect.
    Report(cmd::report::Args),
    /// Start a command on CPUs chosen by an allocation policy; its threads and child processes are spread over them for its lifetime.
    Run(cmd::run::Args),
    /// Print the CPU allocation order of a policy with expected speedup and power.
    Plan(cmd::plan::Args),
    /// Power model: fit from measurements, or calibrate on the hardware.
    Power(cmd::power::Args),
    /// Run a simulator scenario comparing policies on a modelled machine.
    Sim(cmd::sim::Args),
    /// Benchmarks of placer's own cost and of the seeds' effects.
    Bench(cmd::bench::Args),
    /// Does placer help here? Alternates daemon-off and daemon-on phases over a workload.
    Ab(placer::bench::ab::Args),
    /// Write the man pages (placer.1, placer-daemon.1, ...) into a directory.
    Man(cmd::install::ManArgs),
    /// Print a shell completion script (bash, zsh, fish, elvish, powershell).
    Completions(cmd::install::CompletionsArgs),
    /// Install the systemd unit (as the .deb does) and say how to start it.
    InstallUnit(cmd::install::InstallUnitArgs),
}

fn main() -> std::process::ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => return usage_error(e),
    };
    common::init_logging(cli.log.as_deref(), cli.log_format);
    let r: Result<()> = match cli.cmd {
        Command::Topo(a) => cmd::topo::run(a),
        Command::Top(a) => cmd::top::run(a),
        Command::Record(a) => cmd::record::run(a),
        Command::Daemon(a) => cmd::daemon::run(a),
        Command::Explain(a) => cmd::explain::run(a),
        Command::Restore(a) => cmd::restore::run(a),
        Command::Report(a) => cmd::report::run(a),
        Command::Run(a) => cmd::run::run(a),
        Command::Plan(a) => cmd::plan::run(a),
        Command::Power(a) => cmd::power::run(a),
        Command::Sim(a) => cmd::sim::run(a),
        Command::Bench(a) => cmd::bench::run(a),
        Command::Ab(a) => placer::bench::ab::run(a),
        Command::Man(a) => cmd::install::man(a, Cli::command()),
        Command::Completions(a) => cmd::install::completions(a, Cli::command()),
        Command::InstallUnit(a) => cmd::install::install_unit(a),
    };
    match r {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            common::report_error(&e, cli.log_format);
            std::process::ExitCode::FAILURE
        }
    }
}

/// An argument error (or --help, --version) from clap: as clap prints it, except that an
/// error goes through the log when that is JSON or the journal, like any other failure.
fn usage_error(e: clap::Error) -> std::process::ExitCode {
    let args: Vec<std::ffi::OsString> = std::env::args_os().collect();
    let format = common::log_format_of(&args);
    if !e.use_stderr()
        || (format == common::LogFormat::Text && !placer::systemd::stderr_is_journal())
    {
        e.exit()
    }
    common::init_logging(None, format);
    common::report_error(
        &anyhow::anyhow!("{}", e.render().to_string().trim_end()),
        format,
    );
    std::process::ExitCode::from(2)
}

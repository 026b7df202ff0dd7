//! Helpers shared by the subcommands: logging, the `--root`/`--machine` choice.

use anyhow::{Context, Result};
use placer_core::Topology;
use std::path::PathBuf;
use std::time::Duration;

/// Writes to stdout. A closed pipe (`placer ... | head -1`) ends the program quietly with
/// status 0, as Unix filters do, instead of the panic `println!` gives; any other write
/// error ends it with a message and status 1. Safe for every command: the daemon prints only
/// with --dry-run (nothing changed) or --once (changes stay journaled by design).
pub fn write_stdout(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        Err(e) => {
            eprintln!("placer: writing to stdout: {e}");
            std::process::exit(1)
        }
    }
}

/// `println!` through [`write_stdout`].
#[macro_export]
macro_rules! outln {
    () => { $crate::common::write_stdout("\n") };
    ($($t:tt)*) => { $crate::common::write_stdout(&format!("{}\n", format_args!($($t)*))) };
}

/// `print!` through [`write_stdout`].
#[macro_export]
macro_rules! out {
    ($($t:tt)*) => { $crate::common::write_stdout(&format!($($t)*)) };
}

/// The longest interval or period a flag accepts: beyond a day a "periodic" agent is not
/// periodic, and a huge value would overflow later arithmetic (ms counters, deadlines).
pub const MAX_INTERVAL: Duration = Duration::from_secs(24 * 3600);

/// clap value parser for every duration flag: placer's one grammar (`250ms`, `1s`, `2m`, or
/// a bare number of seconds), positive, at most [`MAX_INTERVAL`].
pub fn duration_arg(s: &str) -> Result<Duration, String> {
    let d = placer_core::units::parse_positive_duration(s).map_err(|e| e.to_string())?;
    if d > MAX_INTERVAL {
        return Err(format!("duration {s:?} is longer than the maximum of 24h"));
    }
    Ok(d)
}

/// The most bytes read from a file named on the command line (`--config`, `power fit FILE`,
/// a power model file): real ones are a few KiB to a few MiB; a bigger one (or an endless
/// device) is refused rather than read into memory.
pub const MAX_INPUT_FILE_BYTES: u64 = 64 << 20;

/// Reads a file named on the command line, at most [`MAX_INPUT_FILE_BYTES`], as UTF-8
/// text; a regular file only (a FIFO or a device is refused at once rather than waited on
/// or read without end: `placer_linux::sys::read_regular_file`).
pub fn read_input(path: &std::path::Path) -> Result<String> {
    let bytes = placer_linux::sys::read_regular_file(path, MAX_INPUT_FILE_BYTES).map_err(|e| {
        if e.kind() == std::io::ErrorKind::InvalidData {
            anyhow::anyhow!(
                "{}: larger than {} MiB, the most placer reads from a file argument",
                path.display(),
                MAX_INPUT_FILE_BYTES >> 20
            )
        } else {
            anyhow::Error::new(e).context(format!("reading {}", path.display()))
        }
    })?;
    String::from_utf8(bytes).with_context(|| format!("{}: not UTF-8 text", path.display()))
}

/// How log lines are written to stderr.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// Human-readable lines; colour only when stderr is a terminal.
    #[default]
    Text,
    /// One JSON object per line (for journald, ELK and the like).
    Json,
}

/// Sets up logging to stderr, or to the journal when stderr is the journal
/// (`crate::systemd`: one entry per event at its priority, whatever the format).
pub fn init_logging(filter: Option<&str>, format: LogFormat) {
    use std::io::IsTerminal;
    let filter = filter
        .map(str::to_string)
        .or_else(|| std::env::var("PLACER_LOG").ok())
        // The ttrpc crate (NRI) logs every connection step at info.
        .unwrap_or_else(|| "info,ttrpc=warn".into());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_writer(std::io::stderr);
    let journal = crate::systemd::stderr_is_journal()
        .then(crate::systemd::Journal::new)
        .and_then(Result::ok);
    let _ = match (format, journal) {
        (LogFormat::Json, Some(j)) => builder.json().with_writer(j).try_init(),
        (LogFormat::Json, None) => builder.json().try_init(),
        // journald keeps its own time stamp.
        (LogFormat::Text, Some(j)) => builder
            .without_time()
            .with_ansi(false)
            .with_writer(j)
            .try_init(),
        // Escape codes only where a terminal interprets them; a file gets plain text.
        (LogFormat::Text, None) => builder
            .with_ansi(std::io::stderr().is_terminal())
            .try_init(),
    };
}

/// Says why the command failed: `placer: <error>` on stderr, or, where the log goes as
/// JSON or to the journal, as an error event of that log (so `--log-format json` holds
/// from the first line to the last, and `journalctl -p err` shows why the unit failed).
pub fn report_error(e: &anyhow::Error, format: LogFormat) {
    let logged = format == LogFormat::Json || crate::systemd::stderr_is_journal();
    if logged && tracing::enabled!(target: "placer", tracing::Level::ERROR) {
        tracing::error!(target: "placer", "{e:#}");
    } else {
        eprintln!("placer: {e:#}");
    }
}

/// The `--log-format` the command line asks for, read before clap parses it (an argument
/// error is said in that format too).
pub fn log_format_of(args: &[std::ffi::OsString]) -> LogFormat {
    let mut json = false;
    let mut it = args.iter().map(|a| a.to_str().unwrap_or(""));
    while let Some(a) = it.next() {
        match a {
            "--" => break,
            "--log-format" => json = it.next() == Some("json"),
            _ => {
                if let Some(v) = a.strip_prefix("--log-format=") {
                    json = v == "json";
                }
            }
        }
    }
    if json {
        LogFormat::Json
    } else {
        LogFormat::Text
    }
}

/// A value parser that accepts `names` (for help and shell completions) and any other text
/// the command itself checks later: a built-in machine or a synthetic spec, a built-in
/// scenario or a file.
#[derive(Clone)]
pub struct Offered(pub fn() -> Vec<&'static str>);

impl clap::builder::TypedValueParser for Offered {
    type Value = String;
    fn parse_ref(
        &self,
        cmd: &clap::Command,
        arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<String, clap::Error> {
        clap::builder::StringValueParser::new().parse_ref(cmd, arg, value)
    }
    fn possible_values(
        &self,
    ) -> Option<Box<dyn Iterator<Item = clap::builder::PossibleValue> + '_>> {
        Some(Box::new(
            (self.0)()
                .into_iter()
                .map(clap::builder::PossibleValue::new),
        ))
    }
}

/// The built-in machine models, offered for `--machine`.
pub fn machine_names() -> Vec<&'static str> {
    placer_core::machines::Machine::ALL
        .map(|m| m.name())
        .to_vec()
}

/// clap value parser for an allocation order: its four names, completed by the shells.
pub fn alloc_policy_arg() -> impl clap::builder::TypedValueParser<Value = AllocPolicy> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(AllocPolicy::ALL.map(AllocPolicy::name))
        .try_map(|s| s.parse::<AllocPolicy>())
}

use placer_core::alloc::AllocPolicy;

/// Where the topology comes from: a filesystem root or a built-in machine model.
#[derive(clap::Args, Debug, Clone)]
pub struct MachineArgs {
    /// Filesystem root holding sys/ and proc/ (a snapshot, or / for this machine).
    #[arg(long, default_value = "/", conflicts_with = "machine")]
    pub root: PathBuf,
    /// A built-in machine model (see `placer topo --list-machines`) or a synthetic spec
    /// such as "pkg:2 node:1 core:4 pu:2".
    #[arg(long, value_parser = Offered(machine_names))]
    pub machine: Option<String>,
}

impl MachineArgs {
    pub fn topology(&self) -> Result<Topology> {
        match &self.machine {
            Some(m) => Ok(placer_core::machines::machine(m)?),
            None => {
                let t = placer_linux::topology::read(&self.root).with_context(|| {
                    format!("reading the topology under {}", self.root.display())
                })?;
                // The reader calls an empty tree "unknown"; for a command a root without CPUs
                // is a mistake (a typo, a snapshot not unpacked), not a 0-CPU machine.
                if t.cpus.is_empty() {
                    anyhow::bail!(
                        "no CPUs found under {} (expected sys/devices/system/cpu there)",
                        self.root.join("sys/devices/system/cpu").display()
                    );
                }
                Ok(t)
            }
        }
    }
}

/// A progress line on stderr, only where stderr is a terminal, for a command that may run
/// longer than a few seconds with nothing printed until done (`sim`, `plan --simulate`):
/// "placer: WHAT: PHASE (N s)", redrawn each second from the second second, erased when
/// dropped. A pipe or a file gets nothing, so scripts and tests see the same output.
pub struct Progress {
    state: Option<(Arc<ProgressShared>, std::thread::JoinHandle<()>)>,
}

/// The phase shown and whether to stop, with the drawing thread's wake-up.
type ProgressShared = (std::sync::Mutex<(String, bool)>, std::sync::Condvar);
use std::sync::Arc;

impl Progress {
    pub fn start(what: &str, phase: &str) -> Progress {
        use std::io::IsTerminal;
        if !std::io::stderr().is_terminal() {
            return Progress { state: None };
        }
        let shared = Arc::new((
            std::sync::Mutex::new((phase.to_string(), false)),
            std::sync::Condvar::new(),
        ));
        let (s, what) = (shared.clone(), what.to_string());
        let thread = std::thread::spawn(move || {
            let t0 = std::time::Instant::now();
            let (lock, cv) = &*s;
            let mut g = lock.lock().unwrap_or_else(|e| e.into_inner());
            let mut drawn = false;
            loop {
                let (next, _) = cv
                    .wait_timeout(g, std::time::Duration::from_secs(1))
                    .unwrap_or_else(|e| e.into_inner());
                g = next;
                if g.1 {
                    break;
                }
                let secs = t0.elapsed().as_secs();
                if secs >= 2 {
                    eprint!("\r\x1b[Kplacer: {what}: {} ({secs} s)", g.0);
                    drawn = true;
                }
            }
            if drawn {
                eprint!("\r\x1b[K");
            }
        });
        Progress {
            state: Some((shared, thread)),
        }
    }

    /// What the command does now.
    pub fn phase(&self, phase: &str) {
        if let Some((s, _)) = &self.state {
            s.0.lock().unwrap_or_else(|e| e.into_inner()).0 = phase.to_string();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        if let Some((s, thread)) = self.state.take() {
            s.0.lock().unwrap_or_else(|e| e.into_inner()).1 = true;
            s.1.notify_all();
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    /// Issue 36: a file argument larger than the bound is refused; issue 48: a device or
    /// a FIFO is refused at once, before any read (a FIFO without a writer would block).
    #[test]
    fn file_arguments_are_regular_files_and_capped() {
        let dir = placer_testkit::TempDir::new("read-input");
        let big = dir.path().join("big");
        std::fs::File::create(&big)
            .unwrap()
            .set_len(super::MAX_INPUT_FILE_BYTES + 1)
            .unwrap();
        let fifo = dir.path().join("fifo");
        let st = std::process::Command::new("mkfifo").arg(&fifo).status();
        assert!(st.is_ok_and(|s| s.success()), "mkfifo");
        for (p, want) in [
            (std::path::Path::new("/dev/zero"), "is a device"),
            (&big, "larger than 64 MiB"),
            (&fifo, "is a FIFO"),
        ] {
            // In a thread, so that a read that blocks fails the test instead of hanging it.
            let (tx, rx) = std::sync::mpsc::channel();
            let q = p.to_path_buf();
            std::thread::spawn(move || {
                let _ = tx.send(super::read_input(&q).map(|s| s.len()));
            });
            let r = rx
                .recv_timeout(std::time::Duration::from_secs(2))
                .unwrap_or_else(|_| panic!("{}: blocked", p.display()));
            let e = format!("{:#}", r.expect_err("refused"));
            assert!(e.contains(want), "{e}");
        }
    }

    use super::duration_arg;

    #[test]
    fn durations() {
        assert_eq!(duration_arg("250ms").expect("ms").as_millis(), 250);
        assert_eq!(duration_arg("1.5s").expect("s").as_millis(), 1500);
        assert_eq!(duration_arg("2m").expect("m").as_secs(), 120);
        // One grammar everywhere (issue 18): a bare number is seconds, for every command.
        assert_eq!(duration_arg("250").expect("bare").as_secs(), 250);
        assert!(duration_arg("0s").is_err());
        assert!(duration_arg("0").is_err());
        assert!(duration_arg("3 weeks").is_err());
        // Too large: an overflow error, and a representable but absurd value refused, never
        // wrapped to a small one.
        assert!(duration_arg("100000000000000000000s").is_err());
        let e = duration_arg("18446744073709551615ms").expect_err("absurd");
        assert!(e.contains("24h"), "{e}");
        assert!(duration_arg("24h").is_ok());
    }
}

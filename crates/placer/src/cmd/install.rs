//! Installation helpers: man pages and shell completions generated from the CLI definition,
//! and the systemd unit (the same file the .deb installs).

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

/// The unit file shipped in dist/ (and in the .deb).
pub const UNIT: &str = include_str!("../../../../dist/placer.service");

#[derive(clap::Args, Debug)]
pub struct ManArgs {
    /// Directory to write placer.1 and one page per subcommand (placer-daemon.1, ...) into.
    pub dir: PathBuf,
}

#[derive(clap::Args, Debug)]
pub struct CompletionsArgs {
    /// The shell.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(clap::Args, Debug)]
pub struct InstallUnitArgs {
    /// Install under this root instead of / (for packaging and tests).
    #[arg(long, default_value = "/")]
    pub root: PathBuf,
    /// Where units live, relative to --root.
    #[arg(long, default_value = "etc/systemd/system")]
    pub unit_dir: PathBuf,
    /// The binary the unit runs (default: this one). It must be where the unit's sandbox
    /// lets systemd see it: not under /home, /root, /run/user (ProtectHome=yes) or /tmp,
    /// /var/tmp (PrivateTmp=yes).
    #[arg(long, value_name = "PATH")]
    pub exec: Option<PathBuf>,
}

/// Why the unit cannot run `path`, if it cannot.
fn unusable_exec(path: &Path) -> Option<String> {
    let text = path.to_str()?;
    if !path.is_absolute() {
        return Some(format!("{text} is not an absolute path"));
    }
    if text
        .chars()
        .any(|c| c.is_whitespace() || c.is_control() || "\"'\\%$;".contains(c))
    {
        return Some(format!(
            "{text:?} holds a character systemd would split on or expand in ExecStart="
        ));
    }
    let hidden = [
        ("/home/", "ProtectHome=yes"),
        ("/root/", "ProtectHome=yes"),
        ("/run/user/", "ProtectHome=yes"),
        ("/tmp/", "PrivateTmp=yes"),
        ("/var/tmp/", "PrivateTmp=yes"),
    ];
    hidden
        .iter()
        .find(|(dir, _)| text.starts_with(dir))
        .map(|(dir, why)| {
            format!("{text} is under {dir}, which the unit's {why} hides from the service")
        })
}

/// The shipped unit, running `exec`.
fn unit_running(exec: &Path) -> String {
    UNIT.replace(
        "ExecStart=/usr/bin/placer ",
        &format!("ExecStart={} ", exec.display()),
    )
}

/// Writes the man pages of `cmd` and of each of its subcommands into `args.dir`, and the
/// config file's page, placer.toml(5).
pub fn man(args: ManArgs, cmd: clap::Command) -> Result<()> {
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("creating {}", args.dir.display()))?;
    let mut written = Vec::new();
    // clap's implicit `help` subcommand has no page of its own: listing it would send
    // readers to a placer-help(1) that does not exist.
    write_pages(&args.dir, &without_help(cmd), None, &mut written)?;
    let path = args.dir.join("placer.toml.5");
    std::fs::write(&path, config_page()).with_context(|| format!("writing {}", path.display()))?;
    written.push(path);
    for p in &written {
        outln!("{}", p.display());
    }
    Ok(())
}

fn without_help(cmd: clap::Command) -> clap::Command {
    cmd.disable_help_subcommand(true)
        .mut_subcommands(without_help)
}

/// Text for roff: backslashes and hyphens escaped, no line starting with a control character.
fn roff_text(s: &str) -> String {
    let escaped = s.replace('\\', "\\e").replace('-', "\\-");
    escaped
        .lines()
        .map(|l| {
            if l.starts_with('.') || l.starts_with('\'') {
                format!("\\&{l}")
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// `.TP` entries: a bold term, then its text.
fn roff_items(items: &[(&str, &str)]) -> String {
    let mut out = String::new();
    for (term, text) in items {
        out += &format!(".TP\n\\fB{}\\fR\n{}\n", roff_text(term), roff_text(text));
    }
    out
}

/// The sections every page ends with (ENVIRONMENT, EXIT STATUS, SEE ALSO), and for the pages
/// of commands that touch the state dir, FILES and SIGNALS.
fn common_sections(name: &str) -> String {
    let mut out = String::from(".SH ENVIRONMENT\n");
    out += &roff_items(&[
        (
            "PLACER_LOG",
            "Log filter in tracing's env-filter syntax (info, debug, placer_core=debug); --log overrides it. Default: info.",
        ),
        (
            "JOURNAL_STREAM",
            "Set by systemd when stderr is connected to the journal: each log event (the error that ends a command too) is then sent to the journal natively, one entry with its priority (3 error, 4 warning, 6 info, 7 debug) even when it spans lines; where the journal's socket refuses it, it goes to stderr with <N> before every line.",
        ),
        (
            "PLACER_JOURNAL_SOCKET",
            "The journal's socket for native logging (default /run/systemd/journal/socket).",
        ),
        (
            "NOTIFY_SOCKET, WATCHDOG_USEC, WATCHDOG_PID",
            "Set by systemd for a Type=notify unit: the daemon says READY=1 after its start-up restore and first cycle, STATUS= lines, STOPPING=1, and WATCHDOG=1 every half of WATCHDOG_USEC.",
        ),
    ]);
    out += ".SH EXIT STATUS\n";
    let status: Vec<(&str, &str)> = if name == "placer-run" {
        vec![
            (
                "N",
                "The command's own exit status (128+N when a signal N ended it).",
            ),
            ("126", "The command was found but could not be run."),
            ("127", "The command was not found."),
            (
                "1",
                "placer itself failed before starting the command (the reason on stderr).",
            ),
            ("2", "Invalid arguments."),
        ]
    } else {
        vec![
            ("0", "Success."),
            ("1", "An error; the reason is printed on stderr. The daemon exits 1 also when the container runtime goes away under --nri, after restoring."),
            ("2", "Invalid arguments (a usage message is printed)."),
        ]
    };
    out += &roff_items(&status);
    if matches!(
        name,
        "placer" | "placer-daemon" | "placer-restore" | "placer-explain"
    ) {
        out += ".SH FILES\n";
        out += &roff_items(&[
            ("/etc/placer/placer.toml", "The daemon's configuration, read when --config is not given and the file exists (placer.toml(5)); without it the built-in defaults apply."),
            ("/run/placer/journal.json", "Every knob the daemon changed, with the value it had before; what a stop, a restart after a crash and placer restore put back."),
            ("/run/placer/nri-journal.json", "Container cpusets changed through the runtime (--nri)."),
            ("/run/placer/decisions.json", "The latest decision per process, read by placer explain and placer top."),
            ("/run/placer/daemon.lock", "One daemon per state directory."),
            ("/lib/systemd/system/placer.service", "The systemd unit (not enabled by the package)."),
            ("/usr/share/doc/placer/", "The documentation: README.md and docs/*.md."),
        ]);
        out += ".SH SIGNALS\n";
        out += &roff_items(&[
            ("SIGHUP", "Re-read the configuration. A valid one is applied at once without restoring what stays valid (the knobs of a policy that was switched off are restored); an invalid one is refused with the reason and the daemon keeps running on its old one. systemctl reload placer sends it."),
            ("SIGTERM, SIGINT, SIGQUIT and every other signal whose default action ends a process and that can be caught", "Restore every knob the journal lists, then exit."),
            ("SIGKILL", "Cannot be caught: the journal stays, and the next daemon start, or placer restore, puts every knob back."),
        ]);
    }
    out += ".SH SEE ALSO\n";
    out += &roff_text(
        "placer(1), placer-daemon(1), placer-restore(1), placer-explain(1), placer.toml(5), systemd.exec(5); the documentation in /usr/share/doc/placer/ (README.md, docs/config.md, docs/daemon.md).",
    );
    out.push('\n');
    out
}

/// placer.toml(5): every field with its default and meaning, from docs/config.md (the same
/// source as the commented default config, so the page cannot drift from the code).
fn config_page() -> String {
    let version = env!("CARGO_PKG_VERSION");
    let mut out = format!(".TH placer.toml 5 \"\" \"placer {version}\" \"File Formats\"\n");
    out += ".SH NAME\nplacer.toml \\- configuration of the placer daemon\n";
    out += ".SH SYNOPSIS\n/etc/placer/placer.toml\n";
    out += ".SH DESCRIPTION\n";
    out += &roff_text(
        "TOML. Every field is optional: a missing field takes the default shown, and the file the package installs has every setting commented out, so that defaults follow upgrades. Durations take placer's grammar: \"250ms\", \"1s\", \"2m\" or a number of seconds. An unknown field is refused with the nearest known name. placer daemon --print-default-config prints the defaults; SIGHUP makes a running daemon read the file again.",
    );
    out.push('\n');
    let mut section = None;
    for f in placer_core::config_doc::field_table() {
        if section.as_deref() != Some(f.section.as_str()) {
            let title = if f.section.is_empty() {
                "TOP LEVEL".to_string()
            } else {
                format!("[{}]", f.section)
            };
            out += &format!(".SS {}\n", roff_text(&title));
            section = Some(f.section.clone());
        }
        out += &roff_items(&[(
            &format!("{} = {}", f.field, f.default),
            &f.meaning.replace('`', ""),
        )]);
    }
    out += ".SH SEE ALSO\nplacer(1), placer\\-daemon(1); /usr/share/doc/placer/docs/config.md\n";
    out
}

fn write_pages(
    dir: &Path,
    cmd: &clap::Command,
    parent: Option<&str>,
    written: &mut Vec<PathBuf>,
) -> Result<()> {
    let name = match parent {
        Some(p) => format!("{p}-{}", cmd.get_name()),
        None => cmd.get_name().to_string(),
    };
    let page_cmd = cmd.clone().name(name.clone());
    let path = dir.join(format!("{name}.1"));
    let mut buf = Vec::new();
    clap_mangen::Man::new(page_cmd)
        .render(&mut buf)
        .with_context(|| format!("rendering {name}.1"))?;
    let mut page = String::from_utf8(buf).context("man page text")?;
    // Our sections go before VERSION, which clap puts last.
    let at = page.find(".SH VERSION").unwrap_or(page.len());
    page.insert_str(at, &common_sections(&name));
    std::fs::write(&path, page).with_context(|| format!("writing {}", path.display()))?;
    written.push(path);
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_pages(dir, sub, Some(&name), written)?;
    }
    Ok(())
}

/// Prints the completion script for `args.shell`.
pub fn completions(args: CompletionsArgs, mut cmd: clap::Command) -> Result<()> {
    let mut buf = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "placer", &mut buf);
    crate::common::write_stdout(&String::from_utf8(buf).context("completion script")?);
    Ok(())
}

/// Writes the systemd unit, running this binary (or `--exec`), under `--root` and says how
/// to start it; refuses a binary the unit's sandbox would hide.
pub fn install_unit(args: InstallUnitArgs) -> Result<()> {
    let exec = match args.exec {
        Some(p) => p,
        None => std::env::current_exe().context("finding this binary's path")?,
    };
    if let Some(why) = unusable_exec(&exec) {
        anyhow::bail!(
            "the unit cannot run {}: {why}; copy it elsewhere first (sudo install -m 0755 {} /usr/local/bin/placer) and run that copy's install-unit, or pass --exec",
            exec.display(),
            exec.display()
        );
    }
    let dir = args.root.join(&args.unit_dir);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join("placer.service");
    std::fs::write(&path, unit_running(&exec))
        .with_context(|| format!("writing {}", path.display()))?;
    outln!("wrote {}", path.display());
    outln!("next: systemctl daemon-reload && systemctl enable --now placer");
    Ok(())
}

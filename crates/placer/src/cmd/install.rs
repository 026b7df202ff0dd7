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
}

/// Writes the man pages of `cmd` and of each of its subcommands into `args.dir`.
pub fn man(args: ManArgs, cmd: clap::Command) -> Result<()> {
    std::fs::create_dir_all(&args.dir)
        .with_context(|| format!("creating {}", args.dir.display()))?;
    let mut written = Vec::new();
    write_pages(&args.dir, &cmd.clone(), None, &mut written)?;
    for p in &written {
        outln!("{}", p.display());
    }
    Ok(())
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
    std::fs::write(&path, buf).with_context(|| format!("writing {}", path.display()))?;
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

/// Writes the systemd unit under `--root` and says how to start it.
pub fn install_unit(args: InstallUnitArgs) -> Result<()> {
    let dir = args.root.join(&args.unit_dir);
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join("placer.service");
    std::fs::write(&path, UNIT).with_context(|| format!("writing {}", path.display()))?;
    outln!("wrote {}", path.display());
    outln!("next: systemctl daemon-reload && systemctl enable --now placer");
    Ok(())
}

//! Where the config, the state and the machine are (`--config`, `--state-dir`, `--root`):
//! the arguments daemon, restore, explain, top and record share, and config loading.

use anyhow::{Context, Result};
use placer_core::config::Config;
use std::path::{Path, PathBuf};

/// The config read when no --config is given and the file exists (what the .deb installs).
pub const SYSTEM_CONFIG: &str = "/etc/placer/placer.toml";

/// Where the config, the state and the machine are: shared by daemon, restore, explain.
#[derive(clap::Args, Debug, Clone)]
pub struct StateArgs {
    /// TOML config (docs/config.md); default /etc/placer/placer.toml when it exists, else
    /// the built-in default.
    #[arg(long, conflicts_with = "no_config")]
    pub config: Option<PathBuf>,
    /// Use the built-in default config even when /etc/placer/placer.toml exists.
    #[arg(long)]
    pub no_config: bool,
    /// State directory (journal, lock, decisions), overriding the config's state_dir.
    #[arg(long)]
    pub state_dir: Option<PathBuf>,
    /// Filesystem root for /proc and /sys.
    #[arg(long, default_value = "/")]
    pub root: PathBuf,
}

impl StateArgs {
    /// The config file read: --config, else /etc/placer/placer.toml when it exists, else
    /// none (the built-in default).
    pub fn path(&self) -> Option<&Path> {
        let system = Path::new(SYSTEM_CONFIG);
        match &self.config {
            Some(p) => Some(p.as_path()),
            None if !self.no_config && system.exists() => Some(system),
            None => None,
        }
    }

    /// Where the config comes from, for the log: "config FILE" or "the built-in config".
    pub fn source(&self) -> String {
        match self.path() {
            Some(p) => format!("config {}", p.display()),
            None => "the built-in config".to_string(),
        }
    }

    /// The config (file or default) with --state-dir applied, validated.
    pub fn config(&self) -> Result<Config> {
        let mut cfg = load_config(self.path())?;
        if let Some(d) = &self.state_dir {
            cfg.state_dir = d.display().to_string();
        }
        cfg.validate().context("with the command-line overrides")?;
        Ok(cfg)
    }

    /// The config, for a command that reads a daemon's state dir (report, restore): a
    /// `--state-dir` that does not exist is an error naming it (a mistyped one would read
    /// as "nothing there"); the config's own, before any daemon ran, is not.
    pub fn config_of_existing_state(&self) -> Result<Config> {
        let cfg = self.config()?;
        if let Some(d) = &self.state_dir {
            if !d.is_dir() {
                anyhow::bail!("no such state dir: {} (--state-dir)", d.display());
            }
        }
        Ok(cfg)
    }
}

/// Reads the config file (or the built-in default), rejecting unknown keys and bad values
/// with the field's name.
pub fn load_config(path: Option<&Path>) -> Result<Config> {
    match path {
        None => Ok(Config::default()),
        Some(p) => {
            let text = crate::common::read_input(p)?;
            let (mut cfg, notes) = Config::from_toml_with_notes(&text)
                .with_context(|| format!("in {}", p.display()))?;
            for n in notes {
                tracing::warn!("{}: {n}", p.display());
            }
            if let Some(t) = cfg.energy_qos.power_table.clone() {
                // Relative to the config file, like every path a config names.
                let t = p.parent().unwrap_or(Path::new(".")).join(t);
                cfg.energy_qos.power_table_model = Some(load_power_table(&t)?);
            }
            Ok(cfg)
        }
    }
}

/// Reads a power table (`energy_qos.power_table`), naming the line at fault when it is
/// malformed.
pub fn load_power_table(path: &Path) -> Result<placer_core::power_table::StatePowerTable> {
    placer_linux::power_meter::read_table(path).map_err(|e| anyhow::anyhow!("power table {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_config_names_the_field() {
        let d = std::env::temp_dir().join(format!("placer-cfg-{}.toml", std::process::id()));
        std::fs::write(&d, "interval_ms = 5\n").expect("write");
        let e = format!("{:#}", load_config(Some(&d)).expect_err("too small"));
        assert!(e.contains("interval_ms"), "{e}");
        std::fs::write(&d, "[metrics]\nlisten_on = \"x\"\n").expect("write");
        let e = format!("{:#}", load_config(Some(&d)).expect_err("unknown"));
        assert!(e.contains("listen_on"), "{e}");
        let _ = std::fs::remove_file(&d);
    }
}

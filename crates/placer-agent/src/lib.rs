//! placer's agent: the daemon's whole life as a library, on any [`placer_core::host::Host`].
//! [`agent::Agent`] starts (takes the state dir's lock, restores what a dead agent left in
//! the host's journal), runs cycles of the shared `Engine` and feeds its sinks (metrics,
//! `decisions.json`, the recorder, the log), and stops (puts every knob back). The binary's
//! `placer daemon` is arguments, signals and printing around it; the simulator's and a
//! replay's hosts play the same start and stop in tests.
//!
//! Beside it, what the daemon's neighbours share: the state dir's lock and
//! `decisions.json` (`state`, read by `placer explain` and `placer top`), the Prometheus
//! metrics and their server (`metrics`), the explanation of one process (`explain`), and
//! the observer behind `placer top` and `placer ab` (`observer`).
#![forbid(unsafe_code)]

pub mod agent;
pub mod explain;
pub mod metrics;
pub mod observer;
pub mod state;

pub use agent::{Agent, NriOptions, Options};

/// placer's version (the workspace's).
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// The git commit placer was built from, or "unknown" (build.rs: no git, or not a
/// checkout; `PLACER_COMMIT` set at build time wins).
pub const COMMIT: &str = env!("PLACER_COMMIT");
/// What `placer --version` says after the name.
pub const VERSION_LINE: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("PLACER_COMMIT"),
    ")"
);

use std::path::PathBuf;

/// What can go wrong in the agent, with the file or the step it is about.
#[derive(Debug, thiserror::Error)]
pub enum AgentError {
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Linux(#[from] placer_linux::LinuxError),
    #[error(transparent)]
    Host(#[from] placer_core::host::HostError),
    #[error("sampling: {0}")]
    Sampling(placer_linux::LinuxError),
    #[error("observing: {0}")]
    Observing(String),
    #[error("no process {pid}")]
    NoProcess { pid: u32 },
    #[error("another placer daemon (pid {holder}) uses the state dir {}", state_dir.display())]
    Locked { holder: String, state_dir: PathBuf },
    #[error("reading {}: {message}", path.display())]
    Parse { path: PathBuf, message: String },
    #[error("--nri: {0}")]
    Nri(String),
    #[error("decisions: {0}")]
    Json(#[from] serde_json::Error),
    #[error("{failed} knob(s) could not be restored; they stay in the journal (`placer restore` retries)")]
    NotRestored { failed: usize },
}

impl AgentError {
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        AgentError::Io {
            context: context.into(),
            source,
        }
    }
}

pub type Result<T, E = AgentError> = std::result::Result<T, E>;

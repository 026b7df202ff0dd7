//! Typed errors that carry the file or the pid they are about.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum LinuxError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("pid {pid}: {message}")]
    Proc { pid: u32, message: String },
    #[error("{0}")]
    Other(String),
}

pub type Result<T, E = LinuxError> = std::result::Result<T, E>;

impl LinuxError {
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        LinuxError::Io {
            path: path.into(),
            source,
        }
    }
    pub fn parse(path: impl Into<PathBuf>, message: impl std::fmt::Display) -> Self {
        LinuxError::Parse {
            path: path.into(),
            message: message.to_string(),
        }
    }
}

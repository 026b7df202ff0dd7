//! Reads the machine's [`Topology`] from a filesystem root (`/` or a fixture tree holding
//! `sys/` and `proc/`). (Placeholder: the foundation issue fills it in.)

use crate::error::{LinuxError, Result};
use placer_core::Topology;
use std::path::Path;

/// Reads the topology under `root`.
pub fn read(root: &Path) -> Result<Topology> {
    Err(LinuxError::Other(format!(
        "topology reader not implemented yet ({})",
        root.display()
    )))
}

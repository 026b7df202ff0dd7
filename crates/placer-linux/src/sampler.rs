//! Takes raw [`Sample`]s of the machine under a root. (Placeholder: the observation issue
//! fills it in.)

use crate::error::{LinuxError, Result};
use placer_core::sample::{SampleRequest, SourceStatus};
use placer_core::Sample;
use std::path::{Path, PathBuf};

pub struct Sampler {
    pub root: PathBuf,
}

impl Sampler {
    pub fn new(root: &Path) -> Self {
        Sampler {
            root: root.to_path_buf(),
        }
    }
    pub fn sources(&mut self) -> SourceStatus {
        SourceStatus::default()
    }
    pub fn sample(&mut self, _req: SampleRequest) -> Result<Sample> {
        Err(LinuxError::Other("sampler not implemented yet".into()))
    }
}

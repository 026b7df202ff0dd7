//! What every reader of a sample is handed ([`Reads`]), and the helpers they share: a
//! machine-wide file through the files kept open, a process's sample taken to be changed.

use super::stats::SampleStats;
use crate::sys::{Dir, Pins};
use placer_core::sample::{ProcSample, SampleRequest};
use std::io;
use std::path::Path;
use std::sync::Arc;

/// What every reader of one sample uses: the open `proc` directory and the files kept open
/// in it, the text buffer, what was asked, and the counters of the work done.
pub(super) struct Reads<'a> {
    /// The root (`/` or a fixture tree).
    pub root: &'a Path,
    pub proc_: &'a Dir,
    pub proc_dir: &'a Path,
    /// This machine's root only: machine-wide files kept open.
    pub pins: Option<&'a mut Pins>,
    pub buf: &'a mut String,
    pub req: SampleRequest,
    pub stats: SampleStats,
    /// The kernel's count of cgroup moves at the start of this sample (`None`: unknown).
    pub cgroup_moves: Option<u64>,
    /// Time the stages ([`super::Sampler::set_stage_times`]).
    pub timed: bool,
}

/// A machine-wide file under the proc dir: through a file kept open on this machine's
/// root (`pins`), else opened and read.
pub(super) fn read_system(
    pins: Option<&mut Pins>,
    proc_: &Dir,
    rel: &'static str,
    buf: &mut String,
) -> io::Result<()> {
    match pins {
        Some(p) => p.read(proc_, rel, buf),
        None => proc_.read(rel, buf),
    }
}

impl Reads<'_> {
    /// [`read_system`] into `buf`.
    pub fn system(&mut self, rel: &'static str) -> io::Result<()> {
        read_system(self.pins.as_deref_mut(), self.proc_, rel, self.buf)
    }
}

/// `p`, to be changed: copied when another holds it (the cache, the previous sample), and
/// marked (`i`, its index) for the cache to take back.
pub(super) fn edit<'a>(
    p: &'a mut Arc<ProcSample>,
    i: usize,
    touched: &mut Vec<usize>,
) -> &'a mut ProcSample {
    touched.push(i);
    Arc::make_mut(p)
}

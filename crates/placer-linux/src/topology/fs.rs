//! File access under a root: a missing file is `None` (unknown), any other read error or
//! unparsable content is a [`LinuxError`] naming the file.

use super::parse;
use crate::error::{LinuxError, Result};
use placer_core::CpuSet;
use std::io::ErrorKind;
use std::path::{Path, PathBuf};

pub struct Files {
    pub root: PathBuf,
    /// A snapshot root (not `/`): its files are opened without blocking and must be
    /// regular files, so a FIFO or a device planted in it errors out instead of hanging or
    /// reading forever.
    untrusted: bool,
}

use crate::sys::MAX_FILE_BYTES;

/// Errors that mean "this file is not there" rather than "it is broken".
fn is_missing(e: &std::io::Error) -> bool {
    matches!(e.kind(), ErrorKind::NotFound | ErrorKind::NotADirectory)
}

impl Files {
    pub fn new(root: &Path) -> Files {
        Files {
            root: root.to_path_buf(),
            untrusted: root != Path::new("/"),
        }
    }

    /// The path of `rel` (written without a leading `/`) under the root.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel.trim_start_matches('/'))
    }

    /// The file's text; trailing NUL bytes (some snapshot tools write them) are dropped.
    pub fn text_at(&self, path: &Path) -> Result<Option<String>> {
        self.read_text(path, false)
    }

    /// `one_shot`: a read shorter than the buffer is the whole file. True of sysfs
    /// attributes (at most a page, returned by the first read) and of regular files in
    /// a snapshot; not assumed for procfs, whose seq files come in pieces.
    fn read_text(&self, path: &Path, one_shot: bool) -> Result<Option<String>> {
        // open+read without fs::read's size query: sysfs sizes are meaningless and the
        // extra statx per file is a third of the syscalls of a 256-CPU read.
        let untrusted = self.untrusted;
        let read = |p: &Path| -> std::io::Result<Vec<u8>> {
            use std::io::Read;
            use std::os::unix::fs::OpenOptionsExt;
            let mut f = std::fs::OpenOptions::new()
                .read(true)
                .custom_flags(if untrusted { libc::O_NONBLOCK } else { 0 })
                .open(p)?;
            if untrusted && !f.metadata()?.is_file() {
                return Err(std::io::Error::new(
                    ErrorKind::InvalidInput,
                    "not a regular file (a FIFO, socket or device in the snapshot)",
                ));
            }
            let mut b = Vec::new();
            let mut buf = [0u8; 4096];
            loop {
                match f.read(&mut buf) {
                    Ok(0) => return Ok(b),
                    Ok(n) => {
                        if b.len() + n > MAX_FILE_BYTES {
                            return Err(std::io::Error::new(
                                ErrorKind::InvalidData,
                                format!("larger than {MAX_FILE_BYTES} bytes"),
                            ));
                        }
                        b.extend_from_slice(&buf[..n]);
                        if one_shot && n < buf.len() {
                            return Ok(b);
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(e) => return Err(e),
                }
            }
        };
        match read(path) {
            Ok(mut b) => {
                while b.last() == Some(&0) {
                    b.pop();
                }
                String::from_utf8(b)
                    .map(Some)
                    .map_err(|_| LinuxError::parse(path, "not UTF-8 text"))
            }
            Err(e) if is_missing(&e) => Ok(None),
            Err(e) => Err(LinuxError::io(path, e)),
        }
    }

    pub fn text(&self, rel: &str) -> Result<Option<String>> {
        self.text_at(&self.path(rel))
    }

    /// Reads and parses `rel`; `None` when the file is missing.
    pub fn parse<T>(
        &self,
        rel: &str,
        f: impl FnOnce(&str) -> std::result::Result<T, String>,
    ) -> Result<Option<T>> {
        let path = self.path(rel);
        match self.read_text(&path, rel.starts_with("sys/"))? {
            None => Ok(None),
            Some(t) => f(&t).map(Some).map_err(|m| LinuxError::parse(&path, m)),
        }
    }

    /// A CPU set from a mask file (`thread_siblings`, `shared_cpu_map`, `cpumap`) or
    /// else its list twin (`thread_siblings_list`, ...). The mask is preferred, as hwloc
    /// and lscpu do: both come from the same kernel cpumask, and where old snapshots
    /// disagree (an AMD Bulldozer dump whose `shared_cpu_list` omits the module sibling
    /// that `shared_cpu_map` has) the mask is the one the tools were checked against.
    pub fn cpuset_pair(&self, list: &str, mask: &str) -> Result<Option<CpuSet>> {
        if let Some(s) = self.parse(mask, parse::cpuset_mask)? {
            return Ok(Some(s));
        }
        self.parse(list, parse::cpuset_list)
    }

    pub fn exists(&self, rel: &str) -> bool {
        self.path(rel).exists()
    }

    /// Names of the entries of directory `rel` that are `prefix` followed by a number,
    /// with that number, sorted by number. A missing directory gives an empty list.
    pub fn numbered(&self, rel: &str, prefix: &str) -> Result<Vec<u32>> {
        let mut out: Vec<u32> = self
            .entries(rel)?
            .iter()
            .filter_map(|name| name.strip_prefix(prefix))
            .filter(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            .filter_map(|n| n.parse().ok())
            .collect();
        out.sort_unstable();
        Ok(out)
    }

    /// Entry names of directory `rel`, sorted; empty when missing.
    pub fn entries(&self, rel: &str) -> Result<Vec<String>> {
        let dir = self.path(rel);
        let rd = match std::fs::read_dir(&dir) {
            Ok(rd) => rd,
            Err(e) if is_missing(&e) => return Ok(Vec::new()),
            Err(e) => return Err(LinuxError::io(&dir, e)),
        };
        let mut out = Vec::new();
        for ent in rd {
            let ent = ent.map_err(|e| LinuxError::io(&dir, e))?;
            if let Some(n) = ent.file_name().to_str() {
                out.push(n.to_string());
            }
        }
        out.sort();
        Ok(out)
    }
}

//! The `placer record` file format, its writer and its reader (for replays): pure, over any
//! `Write` / `BufRead`. `placer_linux::record` makes the header of a real machine (hostname,
//! topology) and opens files; [`crate::replay::ReplayHost`] plays a recording back through
//! the engine.
//!
//! JSON lines, versioned:
//! ```text
//! {"format":"placer-record","version":1,"sample_format_version":1,"interval_ms":1000,
//!  "started_unix_ms":...,"host":"...","sources":{"sources":[...]},
//!  "topology":{...},"placer_pid":123,"config":{...}}                   <- header, line 1
//! {"time_ns":...,"clk_tck":100,"cpus":[...],"procs":[...],...}          <- one Sample per line
//! ```
//! Each sample line is a serialized [`Sample`] exactly as the sampler produced it (raw
//! counters, no rates), so a replay derives observations with the same pure
//! `Observation::new` the daemon uses. Empty per-process vectors (threads, sockets,
//! counters) are left out of the line. A recording cut short (killed) ends with a partial
//! line: the reader stops there and reports it through [`RecordReader::truncated`], keeping
//! every complete sample before it.

use crate::config::Config;
use crate::sample::{SourceStatus, SAMPLE_FORMAT_VERSION};
use crate::{Sample, Topology};
use serde::{Deserialize, Serialize};
use std::io::{self, BufRead, Write};

pub const RECORD_FORMAT: &str = "placer-record";
pub const RECORD_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordHeader {
    pub format: String,
    pub version: u32,
    pub sample_format_version: u32,
    pub interval_ms: u64,
    #[serde(default)]
    pub started_unix_ms: u64,
    #[serde(default)]
    pub host: String,
    #[serde(default)]
    pub sources: SourceStatus,
    /// The machine's topology when the recording started (a replay's host needs it;
    /// recordings made before it was recorded have none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology: Option<Topology>,
    /// The recording placer's own pid (the scope never admits it; a replay must not either).
    #[serde(default)]
    pub placer_pid: u32,
    /// The daemon's configuration, when the daemon recorded (`placer daemon --record`): a
    /// replay runs the same engine with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config: Option<Config>,
}

impl RecordHeader {
    /// A header for samples taken every `interval_ms` on `host` (the caller reads the
    /// machine's name and clock: this crate does no I/O).
    pub fn new(host: &str, started_unix_ms: u64, interval_ms: u64, sources: SourceStatus) -> Self {
        RecordHeader {
            format: RECORD_FORMAT.into(),
            version: RECORD_VERSION,
            sample_format_version: SAMPLE_FORMAT_VERSION,
            interval_ms,
            started_unix_ms,
            host: host.into(),
            sources,
            topology: None,
            placer_pid: 0,
            config: None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    // The io error is the source: callers print the chain, so it is not repeated here.
    #[error("reading the record")]
    Io(#[from] io::Error),
    #[error("not a placer record (line 1: {0})")]
    NotARecord(String),
    #[error("record version {0} is newer than this placer reads ({RECORD_VERSION})")]
    TooNew(u32),
    #[error("line {line}: {message}")]
    BadLine { line: usize, message: String },
}

pub struct RecordWriter<W: Write> {
    out: W,
}

impl<W: Write> RecordWriter<W> {
    pub fn new(mut out: W, header: &RecordHeader) -> io::Result<Self> {
        serde_json::to_writer(&mut out, header)?;
        out.write_all(b"\n")?;
        out.flush()?;
        Ok(RecordWriter { out })
    }

    /// Appends one sample and flushes, so a killed recording loses at most this line.
    pub fn write(&mut self, s: &Sample) -> io::Result<()> {
        serde_json::to_writer(&mut self.out, s)?;
        self.out.write_all(b"\n")?;
        self.out.flush()
    }
}

/// The longest line read from a recording: a sample of tens of thousands of processes is
/// a few tens of MiB; a file of zeros or of one endless line must not fill the memory.
pub const MAX_RECORD_LINE_BYTES: u64 = 64 << 20;

/// One line of `input` into `buf`, at most [`MAX_RECORD_LINE_BYTES`]; a longer one is an
/// `InvalidData` error.
fn read_line_capped<R: BufRead>(input: &mut R, buf: &mut String) -> std::io::Result<usize> {
    let n = io::Read::take(&mut *input, MAX_RECORD_LINE_BYTES + 1).read_line(buf)?;
    if n as u64 > MAX_RECORD_LINE_BYTES {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("a line longer than {} MiB", MAX_RECORD_LINE_BYTES >> 20),
        ));
    }
    Ok(n)
}

pub struct RecordReader<R: BufRead> {
    input: R,
    pub header: RecordHeader,
    line_no: usize,
    buf: String,
    /// Set when the input ended in a partial (unparseable, unterminated) line.
    pub truncated: bool,
}

impl<R: BufRead> RecordReader<R> {
    pub fn new(mut input: R) -> Result<Self, RecordError> {
        let mut first = String::new();
        read_line_capped(&mut input, &mut first)?;
        let header: RecordHeader = serde_json::from_str(first.trim_end())
            .map_err(|e| RecordError::NotARecord(e.to_string()))?;
        if header.format != RECORD_FORMAT {
            return Err(RecordError::NotARecord(header.format));
        }
        if header.version > RECORD_VERSION {
            return Err(RecordError::TooNew(header.version));
        }
        Ok(RecordReader {
            input,
            header,
            line_no: 1,
            buf: String::new(),
            truncated: false,
        })
    }

    /// The next sample; `None` at the end (or at a truncated last line).
    pub fn next_sample(&mut self) -> Result<Option<Sample>, RecordError> {
        loop {
            self.buf.clear();
            if read_line_capped(&mut self.input, &mut self.buf)? == 0 {
                return Ok(None);
            }
            self.line_no += 1;
            let line = self.buf.trim_end();
            if line.is_empty() {
                continue;
            }
            return match serde_json::from_str(line) {
                Ok(s) => Ok(Some(s)),
                Err(_) if !self.buf.ends_with('\n') => {
                    self.truncated = true;
                    Ok(None)
                }
                Err(e) => Err(RecordError::BadLine {
                    line: self.line_no,
                    message: e.to_string(),
                }),
            };
        }
    }

    /// Every remaining sample.
    pub fn read_all(&mut self) -> Result<Vec<Sample>, RecordError> {
        let mut v = Vec::new();
        while let Some(s) = self.next_sample()? {
            v.push(s);
        }
        Ok(v)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sample::{CpuTimes, ProcSample, Source, SourceKind};
    use crate::CpuSet;

    fn s(t: u64) -> Sample {
        Sample {
            time_ns: t,
            clk_tck: 100,
            cpus: vec![CpuTimes {
                cpu: 0,
                user: t,
                ..Default::default()
            }],
            procs: vec![std::sync::Arc::new(ProcSample {
                ppid: 0,
                utime_ticks: t,
                last_cpu: Some(0),
                ..ProcSample::bare(1, 2, "a \"quoted\" (x)", CpuSet::first_n(2))
            })],
            ..Default::default()
        }
    }

    fn header() -> RecordHeader {
        RecordHeader::new(
            "host",
            0,
            1000,
            SourceStatus {
                sources: vec![Source {
                    name: SourceKind::PerfHw,
                    available: false,
                    detail: "no hardware counters: ENOENT".into(),
                }],
            },
        )
    }

    #[test]
    fn round_trip() {
        let mut buf = Vec::new();
        let mut w = RecordWriter::new(&mut buf, &header()).unwrap();
        w.write(&s(1)).unwrap();
        w.write(&s(2)).unwrap();
        let text = String::from_utf8(buf.clone()).unwrap();
        assert_eq!(text.lines().count(), 3);
        assert!(!text.contains("socket_inodes"), "empty vectors left out");
        let mut r = RecordReader::new(&buf[..]).unwrap();
        assert_eq!(r.header.interval_ms, 1000);
        assert_eq!(
            r.header.sources.why_missing(SourceKind::PerfHw),
            Some("no hardware counters: ENOENT")
        );
        assert_eq!(r.read_all().unwrap(), vec![s(1), s(2)]);
        assert!(!r.truncated);
    }

    #[test]
    fn truncated_last_line_keeps_the_rest() {
        let mut buf = Vec::new();
        let mut w = RecordWriter::new(&mut buf, &header()).unwrap();
        w.write(&s(1)).unwrap();
        w.write(&s(2)).unwrap();
        buf.truncate(buf.len() - 20);
        let mut r = RecordReader::new(&buf[..]).unwrap();
        assert_eq!(r.read_all().unwrap(), vec![s(1)]);
        assert!(r.truncated);
    }

    #[test]
    fn rejects_other_files_and_newer_versions() {
        assert!(matches!(
            RecordReader::new(&b"hello\n"[..]),
            Err(RecordError::NotARecord(_))
        ));
        let mut h = header();
        h.version = RECORD_VERSION + 1;
        let line = serde_json::to_string(&h).unwrap() + "\n";
        assert!(matches!(
            RecordReader::new(line.as_bytes()),
            Err(RecordError::TooNew(_))
        ));
        // A corrupt line in the middle is an error with its line number.
        let mut buf = serde_json::to_string(&header()).unwrap() + "\n";
        buf += "{not json}\n";
        let mut r = RecordReader::new(buf.as_bytes()).unwrap();
        assert!(matches!(
            r.next_sample(),
            Err(RecordError::BadLine { line: 2, .. })
        ));
    }
}

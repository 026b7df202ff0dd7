//! What the daemon says to systemd, written here rather than pulled in as a crate because
//! both protocols are a datagram to a Unix socket (`std` has the socket, abstract names
//! included):
//!
//! - the journal's native protocol (`systemd.journal-fields(7)`, "Native protocol"): when
//!   `JOURNAL_STREAM` says stderr is the journal, each log event is one datagram with its
//!   `PRIORITY`, so a multi-line message stays one entry at its priority (over the stream,
//!   each line would be an entry and a continuation line would lose its priority). When the
//!   socket refuses (no journald, a message over the datagram limit), the event goes to
//!   stderr with every line prefixed `<N>`, which journald's stream reader understands;
//! - `sd_notify(3)`: `READY=1`, `STATUS=`, `WATCHDOG=1`, `RELOADING=1`, `STOPPING=1` to
//!   `NOTIFY_SOCKET` (a path, or an abstract name written `@name`). Without the variable
//!   every call does nothing, so non-systemd hosts are unaffected.

use std::io::Write;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

/// journald's socket for the native protocol.
pub const JOURNAL_SOCKET: &str = "/run/systemd/journal/socket";

/// Overrides [`JOURNAL_SOCKET`] (tests; a container with the journal's socket mounted
/// elsewhere).
pub const JOURNAL_SOCKET_ENV: &str = "PLACER_JOURNAL_SOCKET";

/// The identifier journald files placer's entries under (`journalctl -t placer`).
const IDENTIFIER: &str = "placer";

/// The syslog priority of a tracing level (`<3>` error .. `<7>` debug).
pub fn priority(level: &tracing::Level) -> u8 {
    match *level {
        tracing::Level::ERROR => 3,
        tracing::Level::WARN => 4,
        tracing::Level::INFO => 6,
        tracing::Level::DEBUG | tracing::Level::TRACE => 7,
    }
}

/// One entry in the native protocol: `KEY=value\n` per field, except that a value holding
/// a newline is written `KEY\n`, its length as a little-endian u64, the bytes, `\n`.
pub fn journal_entry(fields: &[(&str, &[u8])]) -> Vec<u8> {
    let mut out = Vec::new();
    for (key, value) in fields {
        out.extend_from_slice(key.as_bytes());
        if value.contains(&b'\n') {
            out.push(b'\n');
            out.extend_from_slice(&(value.len() as u64).to_le_bytes());
        } else {
            out.push(b'=');
        }
        out.extend_from_slice(value);
        out.push(b'\n');
    }
    out
}

/// The stream form of one event: every line of `text` starts with `<priority>`, so a
/// continuation line is not filed at the stream's default priority.
pub fn stream_lines(priority: u8, text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 4);
    for line in text.trim_end_matches('\n').split('\n') {
        out.push_str(&format!("<{priority}>{line}\n"));
    }
    out
}

/// Whether stderr is the journal: systemd sets `JOURNAL_STREAM` to the `DEV:INODE` of the
/// stream it connects (a child that inherited the variable but writes elsewhere is not).
pub fn stderr_is_journal() -> bool {
    use std::os::unix::fs::MetadataExt;
    let Some((dev, ino)) = std::env::var("JOURNAL_STREAM")
        .ok()
        .as_deref()
        .and_then(parse_journal_stream)
    else {
        return false;
    };
    // The magic link resolves to the open file (or socket) itself.
    std::fs::metadata("/proc/self/fd/2").is_ok_and(|m| m.dev() == dev && m.ino() == ino)
}

/// `JOURNAL_STREAM`'s `DEV:INODE`.
pub fn parse_journal_stream(v: &str) -> Option<(u64, u64)> {
    let (dev, ino) = v.split_once(':')?;
    Some((dev.parse().ok()?, ino.parse().ok()?))
}

/// A `tracing_subscriber` writer that sends each formatted event to the journal as one
/// entry at the event's priority (stderr with `<N>` lines when the journal refuses it).
#[derive(Clone)]
pub struct Journal {
    socket: Arc<UnixDatagram>,
    path: Arc<Path>,
}

impl Journal {
    /// The writer for the journal's socket ([`JOURNAL_SOCKET_ENV`] or [`JOURNAL_SOCKET`]).
    pub fn new() -> std::io::Result<Journal> {
        let path = std::env::var_os(JOURNAL_SOCKET_ENV)
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(JOURNAL_SOCKET));
        Journal::at(&path)
    }

    /// The writer for the socket at `path`.
    pub fn at(path: &Path) -> std::io::Result<Journal> {
        Ok(Journal {
            socket: Arc::new(UnixDatagram::unbound()?),
            path: path.into(),
        })
    }

    /// Sends `text` (one event, formatted) at `priority`; stderr when the socket refuses.
    pub fn send(&self, priority: u8, text: &str) {
        let text = text.trim_end_matches('\n');
        let entry = journal_entry(&[
            ("PRIORITY", priority.to_string().as_bytes()),
            ("SYSLOG_IDENTIFIER", IDENTIFIER.as_bytes()),
            ("MESSAGE", text.as_bytes()),
        ]);
        if self.socket.send_to(&entry, &*self.path).is_err() {
            let _ = std::io::stderr().write_all(stream_lines(priority, text).as_bytes());
        }
    }
}

/// One event being formatted: its bytes are sent when the formatter drops it.
pub struct JournalEvent {
    journal: Journal,
    priority: u8,
    buf: Vec<u8>,
}

impl Write for JournalEvent {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Drop for JournalEvent {
    fn drop(&mut self) {
        if !self.buf.is_empty() {
            self.journal
                .send(self.priority, &String::from_utf8_lossy(&self.buf));
        }
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Journal {
    type Writer = JournalEvent;
    fn make_writer(&'a self) -> JournalEvent {
        self.make_for(6)
    }
    fn make_writer_for(&'a self, meta: &tracing::Metadata<'_>) -> JournalEvent {
        self.make_for(priority(meta.level()))
    }
}

impl Journal {
    fn make_for(&self, priority: u8) -> JournalEvent {
        JournalEvent {
            journal: self.clone(),
            priority,
            buf: Vec::new(),
        }
    }
}

/// Where `NOTIFY_SOCKET` points: a path, or a name in the abstract namespace (`@name`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotifyTarget {
    Path(PathBuf),
    Abstract(Vec<u8>),
}

/// `NOTIFY_SOCKET`'s value; `None` for an empty or relative one (sd_notify ignores those).
pub fn parse_notify_socket(v: &std::ffi::OsStr) -> Option<NotifyTarget> {
    use std::os::unix::ffi::OsStrExt;
    let b = v.as_bytes();
    match b.first()? {
        b'@' => Some(NotifyTarget::Abstract(b[1..].to_vec())),
        b'/' => Some(NotifyTarget::Path(PathBuf::from(v))),
        _ => None,
    }
}

/// How often to send `WATCHDOG=1`: half of `WATCHDOG_USEC` (sd_watchdog_enabled(3)'s
/// advice), when the variable is set, positive, and `WATCHDOG_PID` is unset or `my_pid`.
pub fn watchdog_interval(usec: Option<&str>, pid: Option<&str>, my_pid: u32) -> Option<Duration> {
    let usec: u64 = usec?.trim().parse().ok().filter(|&u| u > 0)?;
    if let Some(p) = pid {
        if p.trim().parse::<u32>().ok()? != my_pid {
            return None;
        }
    }
    Some(Duration::from_micros(usec / 2))
}

/// sd_notify's messages. Built once from the environment; does nothing without
/// `NOTIFY_SOCKET`. A send that fails is ignored, as sd_notify's callers do: systemd not
/// listening must never stop placer.
pub struct Notifier {
    target: Option<(UnixDatagram, NotifyTarget)>,
    watchdog: Option<Duration>,
}

impl Notifier {
    pub fn from_env() -> Notifier {
        let target = std::env::var_os("NOTIFY_SOCKET")
            .as_deref()
            .and_then(parse_notify_socket)
            .and_then(|t| {
                let s = UnixDatagram::unbound().ok()?;
                // A manager that does not read (its queue full) must never stall a cycle
                // or the stop's restore: a notification is dropped instead.
                s.set_nonblocking(true).ok()?;
                Some((s, t))
            });
        let watchdog = watchdog_interval(
            std::env::var("WATCHDOG_USEC").ok().as_deref(),
            std::env::var("WATCHDOG_PID").ok().as_deref(),
            std::process::id(),
        );
        Notifier {
            watchdog: target.as_ref().and(watchdog),
            target,
        }
    }

    /// Sends `msg` (newline-separated `KEY=value` assignments).
    pub fn send(&self, msg: &str) {
        let Some((socket, target)) = &self.target else {
            return;
        };
        let _ = match target {
            NotifyTarget::Path(p) => socket.send_to(msg.as_bytes(), p),
            NotifyTarget::Abstract(name) => {
                use std::os::linux::net::SocketAddrExt;
                std::os::unix::net::SocketAddr::from_abstract_name(name)
                    .and_then(|a| socket.send_to_addr(msg.as_bytes(), &a))
            }
        };
    }

    /// `STATUS=` (one line: a newline would end the assignment).
    pub fn status(&self, text: &str) {
        self.send(&format!("STATUS={}", text.replace('\n', " ")));
    }

    pub fn ready(&self, status: &str) {
        self.send(&format!("READY=1\nSTATUS={}", status.replace('\n', " ")));
    }

    pub fn stopping(&self, status: &str) {
        self.send(&format!("STOPPING=1\nSTATUS={}", status.replace('\n', " ")));
    }

    /// How often [`Notifier::watchdog`] must be called; `None`: no watchdog asked for.
    pub fn watchdog_interval(&self) -> Option<Duration> {
        self.watchdog
    }

    pub fn watchdog(&self) {
        if self.watchdog.is_some() {
            self.send("WATCHDOG=1");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_single_line_value_is_key_equals_value() {
        let e = journal_entry(&[("PRIORITY", b"3"), ("MESSAGE", b"config refused")]);
        assert_eq!(e, b"PRIORITY=3\nMESSAGE=config refused\n");
    }

    #[test]
    fn a_multi_line_value_is_length_prefixed_so_it_stays_one_entry() {
        let e = journal_entry(&[("MESSAGE", b"a\nb")]);
        let mut want = b"MESSAGE\n".to_vec();
        want.extend_from_slice(&3u64.to_le_bytes());
        want.extend_from_slice(b"a\nb\n");
        assert_eq!(e, want);
    }

    #[test]
    fn every_line_of_a_stream_event_carries_its_priority() {
        assert_eq!(
            stream_lines(3, "bad\n  at line 2\n"),
            "<3>bad\n<3>  at line 2\n"
        );
        assert_eq!(stream_lines(6, "one"), "<6>one\n");
    }

    #[test]
    fn levels_map_to_syslog_priorities() {
        use tracing::Level;
        let p: Vec<u8> = [
            Level::ERROR,
            Level::WARN,
            Level::INFO,
            Level::DEBUG,
            Level::TRACE,
        ]
        .iter()
        .map(priority)
        .collect();
        assert_eq!(p, [3, 4, 6, 7, 7]);
    }

    #[test]
    fn journal_stream_is_dev_colon_inode() {
        assert_eq!(parse_journal_stream("8:1234"), Some((8, 1234)));
        assert_eq!(parse_journal_stream("8"), None);
        assert_eq!(parse_journal_stream("x:1"), None);
    }

    #[test]
    fn notify_socket_is_a_path_or_an_abstract_name() {
        use std::ffi::OsStr;
        assert_eq!(
            parse_notify_socket(OsStr::new("/run/systemd/notify")),
            Some(NotifyTarget::Path("/run/systemd/notify".into()))
        );
        assert_eq!(
            parse_notify_socket(OsStr::new("@/org/freedesktop/systemd1/notify/1")),
            Some(NotifyTarget::Abstract(
                b"/org/freedesktop/systemd1/notify/1".to_vec()
            ))
        );
        assert_eq!(parse_notify_socket(OsStr::new("")), None);
        assert_eq!(parse_notify_socket(OsStr::new("relative")), None);
    }

    #[test]
    fn the_watchdog_is_half_its_period_and_only_for_the_named_pid() {
        let half = Some(Duration::from_secs(15));
        assert_eq!(watchdog_interval(Some("30000000"), None, 7), half);
        assert_eq!(watchdog_interval(Some("30000000"), Some("7"), 7), half);
        assert_eq!(watchdog_interval(Some("30000000"), Some("8"), 7), None);
        assert_eq!(watchdog_interval(Some("0"), None, 7), None);
        assert_eq!(watchdog_interval(None, None, 7), None);
        assert_eq!(watchdog_interval(Some("x"), None, 7), None);
    }

    /// The writer on a socket this test binds: a multi-line event arrives as one datagram
    /// with its priority; a socket that is gone is not an error.
    #[test]
    fn an_event_is_one_datagram_with_its_priority() {
        let dir = placer_testkit::TempDir::new("journal-socket");
        let path = dir.path().join("socket");
        let rx = UnixDatagram::bind(&path).unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let journal = Journal::at(&path).unwrap();
        {
            let mut ev = journal.make_for(4);
            ev.write_all(b"first line\nsecond line\n").unwrap();
        }
        let mut buf = [0u8; 4096];
        let n = rx.recv(&mut buf).unwrap();
        let want = journal_entry(&[
            ("PRIORITY", b"4"),
            ("SYSLOG_IDENTIFIER", b"placer"),
            ("MESSAGE", b"first line\nsecond line"),
        ]);
        assert_eq!(&buf[..n], &want[..]);
    }
}

//! NRI's connection multiplexer (upstream `pkg/net/multiplex`, tag v0.8.0), written from its
//! description: one unix stream (the trunk) to the runtime carries several logical
//! connections as frames.
//!
//! Wire rules (each tested):
//! - A frame is an 8-byte header, the connection id then the payload length, both u32
//!   big-endian, then the payload. Connection 0 is reserved; 1 carries the plugin service
//!   (the runtime calls the plugin), 2 the runtime service (the plugin calls the runtime).
//! - A payload is at most [`MAX_PAYLOAD_BYTES`] (one ttrpc message header plus ttrpc's 4 MiB
//!   limit); a longer write goes out as several frames, and a longer frame read is refused
//!   and ends the mux (the runtime never sends one; a corrupt stream must not make placer
//!   allocate gigabytes).
//! - Frames may be split or merged across reads in any way; frames of different
//!   connections interleave.
//! - The protocol has no close frame: a logical connection ends when the trunk ends. When
//!   the trunk reaches EOF or fails, every local end sees EOF.
//! - Frames for a connection nobody opened are dropped, as upstream does.
//!
//! The I/O half ([`Mux::start`]) bridges each logical connection to a local unix stream so
//! that the `ttrpc` crate, which wants file descriptors, can serve and call on them.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};

/// The reserved connection id.
pub const RESERVED_CONN: u32 = 0;
/// The plugin service: placer is the ttrpc server.
pub const PLUGIN_SERVICE_CONN: u32 = 1;
/// The runtime service: placer is the ttrpc client.
pub const RUNTIME_SERVICE_CONN: u32 = 2;
/// Frame header: connection id, payload length.
pub const HEADER_BYTES: usize = 8;
/// ttrpc's message header (10 bytes) plus its 4 MiB message limit.
pub const MAX_PAYLOAD_BYTES: usize = 10 + (4 << 20);

#[derive(Debug, thiserror::Error)]
pub enum MuxError {
    #[error("mux frame for connection {conn} announces {len} bytes (limit {MAX_PAYLOAD_BYTES})")]
    Oversized { conn: u32, len: usize },
    #[error("mux connection id {RESERVED_CONN} is reserved")]
    ReservedConn,
    #[error("mux: {0}")]
    Io(#[from] std::io::Error),
}

/// Appends `data` for connection `conn` to `out` as frames of at most [`MAX_PAYLOAD_BYTES`].
pub fn encode(conn: u32, data: &[u8], out: &mut Vec<u8>) {
    for chunk in data.chunks(MAX_PAYLOAD_BYTES) {
        out.extend_from_slice(&conn.to_be_bytes());
        // A chunk is at most MAX_PAYLOAD_BYTES, far below u32::MAX.
        out.extend_from_slice(&(chunk.len() as u32).to_be_bytes());
        out.extend_from_slice(chunk);
    }
}

/// Reassembles frames from the bytes of the trunk, however they were split.
#[derive(Debug, Default)]
pub struct Decoder {
    buf: Vec<u8>,
}

impl Decoder {
    pub fn push(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The next whole frame, None when more bytes are needed.
    pub fn next_frame(&mut self) -> Result<Option<(u32, Vec<u8>)>, MuxError> {
        if self.buf.len() < HEADER_BYTES {
            return Ok(None);
        }
        let word = |i: usize| u32::from_be_bytes([0, 1, 2, 3].map(|k| self.buf[i + k]));
        let conn = word(0);
        let len = word(4) as usize;
        if len > MAX_PAYLOAD_BYTES {
            return Err(MuxError::Oversized { conn, len });
        }
        if self.buf.len() < HEADER_BYTES + len {
            return Ok(None);
        }
        let payload = self.buf[HEADER_BYTES..HEADER_BYTES + len].to_vec();
        self.buf.drain(..HEADER_BYTES + len);
        Ok(Some((conn, payload)))
    }
}

/// A running multiplexer: a reader thread for the trunk and a pump thread per connection.
pub struct Mux {
    trunk: UnixStream,
    ended: Arc<std::sync::atomic::AtomicBool>,
}

impl Mux {
    /// Bridges each `(connection id, local stream)` to the trunk: bytes written by the other
    /// end of a local stream go out as that connection's frames; frames arriving for it are
    /// written to it. Runs until the trunk ends.
    pub fn start(trunk: UnixStream, conns: Vec<(u32, UnixStream)>) -> Result<Mux, MuxError> {
        if conns.iter().any(|(id, _)| *id == RESERVED_CONN) {
            return Err(MuxError::ReservedConn);
        }
        let writer = Arc::new(Mutex::new(trunk.try_clone()?));
        let mut locals: HashMap<u32, UnixStream> = HashMap::new();
        for (id, local) in conns {
            let mut from_local = local.try_clone()?;
            let writer = Arc::clone(&writer);
            let trunk_reader = trunk.try_clone()?;
            std::thread::Builder::new()
                .name(format!("nri-mux-{id}"))
                .spawn(move || {
                    let mut buf = vec![0u8; 64 * 1024];
                    let mut frames = Vec::new();
                    loop {
                        let n = match from_local.read(&mut buf) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => n,
                        };
                        frames.clear();
                        encode(id, &buf[..n], &mut frames);
                        let mut w = writer.lock().unwrap_or_else(|p| p.into_inner());
                        if w.write_all(&frames).is_err() {
                            // The trunk is gone: end the reader too.
                            let _ = trunk_reader.shutdown(std::net::Shutdown::Both);
                            return;
                        }
                    }
                })?;
            locals.insert(id, local);
        }
        let mut reader = trunk.try_clone()?;
        let ended = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let ended_r = Arc::clone(&ended);
        std::thread::Builder::new()
            .name("nri-mux-reader".into())
            .spawn(move || {
                let end = read_trunk(&mut reader, &mut locals);
                if let Err(e) = end {
                    tracing::warn!("NRI connection: {e}");
                }
                // No close frame exists: the end of the trunk is the end of every connection.
                for l in locals.values() {
                    let _ = l.shutdown(std::net::Shutdown::Both);
                }
                ended_r.store(true, std::sync::atomic::Ordering::SeqCst);
            })?;
        Ok(Mux { trunk, ended })
    }

    /// Whether the trunk ended (the runtime went away or the stream broke).
    pub fn ended(&self) -> bool {
        self.ended.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Ends the trunk (and with it every connection).
    pub fn close(&self) {
        let _ = self.trunk.shutdown(std::net::Shutdown::Both);
    }
}

impl Drop for Mux {
    fn drop(&mut self) {
        self.close();
    }
}

/// A listening socket with one connection already made to it, for a ttrpc server that wants
/// a listener (`Server::add_listener`) while its peer comes through the mux. The socket's
/// path (in `dir`, which should be private) is unlinked at once: nothing else can connect.
pub fn bridged_listener(
    dir: &std::path::Path,
) -> std::io::Result<(std::os::unix::net::UnixListener, UnixStream)> {
    static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    std::fs::create_dir_all(dir)?;
    let n = SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = dir.join(format!("nri-bridge-{}-{n}.sock", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let listener = std::os::unix::net::UnixListener::bind(&path)?;
    let conn = UnixStream::connect(&path);
    let _ = std::fs::remove_file(&path);
    Ok((listener, conn?))
}

fn read_trunk(
    trunk: &mut UnixStream,
    locals: &mut HashMap<u32, UnixStream>,
) -> Result<(), MuxError> {
    let mut dec = Decoder::default();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = trunk.read(&mut buf)?;
        if n == 0 {
            return Ok(());
        }
        dec.push(&buf[..n]);
        while let Some((id, payload)) = dec.next_frame()? {
            if let Some(l) = locals.get_mut(&id) {
                if l.write_all(&payload).is_err() {
                    // That local end is closed; the others may still talk.
                    locals.remove(&id);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn frames_of(bytes: &[u8], step: usize) -> Vec<(u32, Vec<u8>)> {
        let mut d = Decoder::default();
        let mut out = Vec::new();
        for chunk in bytes.chunks(step) {
            d.push(chunk);
            while let Some(f) = d.next_frame().unwrap() {
                out.push(f);
            }
        }
        out
    }

    #[test]
    fn header_is_conn_then_length_big_endian() {
        let mut out = Vec::new();
        encode(2, b"abc", &mut out);
        assert_eq!(out, [0, 0, 0, 2, 0, 0, 0, 3, b'a', b'b', b'c']);
    }

    #[test]
    fn frames_split_or_merged_across_reads_and_interleaved() {
        let mut wire = Vec::new();
        encode(1, b"hello", &mut wire);
        // An empty frame (encode writes none, the runtime might).
        wire.extend_from_slice(&[0, 0, 0, 2, 0, 0, 0, 0]);
        encode(2, b"world!", &mut wire);
        encode(1, &[7u8; 300], &mut wire);
        let want = vec![
            (1, b"hello".to_vec()),
            (2, vec![]),
            (2, b"world!".to_vec()),
            (1, vec![7u8; 300]),
        ];
        // Byte by byte, odd sizes, all at once.
        for step in [1, 3, 7, 13, wire.len()] {
            assert_eq!(frames_of(&wire, step), want, "step {step}");
        }
    }

    #[test]
    fn long_writes_split_at_the_payload_limit_and_oversized_frames_are_refused() {
        let data = vec![1u8; MAX_PAYLOAD_BYTES + 5];
        let mut wire = Vec::new();
        encode(1, &data, &mut wire);
        let got = frames_of(&wire, 1 << 20);
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].1.len(), MAX_PAYLOAD_BYTES);
        assert_eq!(got[1].1.len(), 5);
        let mut d = Decoder::default();
        let mut bad = 1u32.to_be_bytes().to_vec();
        bad.extend_from_slice(&((MAX_PAYLOAD_BYTES + 1) as u32).to_be_bytes());
        d.push(&bad);
        assert!(matches!(
            d.next_frame(),
            Err(MuxError::Oversized { conn: 1, .. })
        ));
    }

    fn read_exact_timeout(s: &mut UnixStream, n: usize) -> Vec<u8> {
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut buf = vec![0u8; n];
        s.read_exact(&mut buf).expect("read within 5 s");
        buf
    }

    #[test]
    fn bridges_two_connections_both_ways_and_propagates_eof() {
        let (trunk_plugin, mut trunk_runtime) = UnixStream::pair().unwrap();
        let (l1, mut u1) = UnixStream::pair().unwrap();
        let (l2, mut u2) = UnixStream::pair().unwrap();
        let mux = Mux::start(trunk_plugin, vec![(1, l1), (2, l2)]).unwrap();
        // Runtime -> plugin, interleaved, one frame for an unknown conn dropped.
        let mut wire = Vec::new();
        encode(2, b"to-two", &mut wire);
        encode(9, b"nobody", &mut wire);
        encode(1, b"to-one", &mut wire);
        trunk_runtime.write_all(&wire).unwrap();
        assert_eq!(read_exact_timeout(&mut u1, 6), b"to-one");
        assert_eq!(read_exact_timeout(&mut u2, 6), b"to-two");
        // Plugin -> runtime: framed with the right ids.
        u2.write_all(b"reply").unwrap();
        let got = read_exact_timeout(&mut trunk_runtime, HEADER_BYTES + 5);
        assert_eq!(frames_of(&got, got.len()), vec![(2, b"reply".to_vec())]);
        // The runtime hangs up: both local ends see EOF.
        drop(trunk_runtime);
        for u in [&mut u1, &mut u2] {
            u.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut b = [0u8; 1];
            assert_eq!(u.read(&mut b).expect("EOF, not a timeout"), 0);
        }
        let t0 = std::time::Instant::now();
        while !mux.ended() && t0.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(mux.ended());
    }

    #[test]
    fn a_closed_local_end_does_not_end_the_other_connection() {
        let (trunk_plugin, mut trunk_runtime) = UnixStream::pair().unwrap();
        let (l1, mut u1) = UnixStream::pair().unwrap();
        let (l2, u2) = UnixStream::pair().unwrap();
        let mux = Mux::start(trunk_plugin, vec![(1, l1), (2, l2)]).unwrap();
        drop(u2);
        let mut wire = Vec::new();
        encode(2, b"lost", &mut wire);
        encode(1, b"kept", &mut wire);
        trunk_runtime.write_all(&wire).unwrap();
        assert_eq!(read_exact_timeout(&mut u1, 4), b"kept");
        assert!(!mux.ended());
    }

    #[test]
    fn an_oversized_frame_ends_the_mux() {
        let (trunk_plugin, mut trunk_runtime) = UnixStream::pair().unwrap();
        let (l1, mut u1) = UnixStream::pair().unwrap();
        let _mux = Mux::start(trunk_plugin, vec![(1, l1)]).unwrap();
        let mut bad = 1u32.to_be_bytes().to_vec();
        bad.extend_from_slice(&u32::MAX.to_be_bytes());
        trunk_runtime.write_all(&bad).unwrap();
        u1.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut b = [0u8; 1];
        assert_eq!(u1.read(&mut b).expect("EOF, not a timeout"), 0);
    }

    #[test]
    fn connection_zero_is_reserved() {
        let (a, _b) = UnixStream::pair().unwrap();
        let (l, _u) = UnixStream::pair().unwrap();
        assert!(matches!(
            Mux::start(a, vec![(0, l)]),
            Err(MuxError::ReservedConn)
        ));
    }
}

//! ttrpc's message layer on one stream, as the plugin service's server reads and writes it
//! (and as tests playing the runtime do): a message is a 10-byte header (payload length and
//! stream id, both u32 big-endian, then the message type and flags, one byte each) followed
//! by the payload. A request's payload is a `ttrpc.Request` (service, method, the method's
//! own message), a response's a `ttrpc.Response` (a status and the method's reply).
//!
//! Rules (each tested):
//! - A header announcing more than ttrpc's 4 MiB limit is a broken stream
//!   ([`WireError::Oversized`]): nothing is allocated for it, and no later byte of the stream
//!   can be trusted to start a message.
//! - The end of the stream between messages is [`WireError::Closed`]; inside a message it is
//!   an I/O error (`UnexpectedEof`).

use protobuf::Message;
use std::io::{Read, Write};
use ttrpc::proto::{
    MessageHeader, Response, Status, MESSAGE_HEADER_LENGTH, MESSAGE_LENGTH_MAX,
    MESSAGE_TYPE_REQUEST, MESSAGE_TYPE_RESPONSE,
};
/// A response's status code, its status, a request's envelope, and the status constructor.
pub use ttrpc::{get_status, proto::Request, Code};

#[derive(Debug, thiserror::Error)]
pub enum WireError {
    #[error("the peer closed the connection")]
    Closed,
    #[error(
        "a ttrpc header announces {len} bytes (limit {MESSAGE_LENGTH_MAX}): the stream is broken"
    )]
    Oversized { len: usize },
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Reads one whole message.
pub fn read_message(r: &mut impl Read) -> Result<(MessageHeader, Vec<u8>), WireError> {
    let mut head = [0u8; MESSAGE_HEADER_LENGTH];
    let mut got = 0;
    while got < head.len() {
        match r.read(&mut head[got..]) {
            Ok(0) if got == 0 => return Err(WireError::Closed),
            Ok(0) => return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof).into()),
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    let mh = MessageHeader::from(head);
    let len = mh.length as usize;
    if len > MESSAGE_LENGTH_MAX {
        return Err(WireError::Oversized { len });
    }
    let mut payload = vec![0u8; len];
    r.read_exact(&mut payload)?;
    Ok((mh, payload))
}

/// Writes one message (header and payload in one write, so that a message is never
/// interleaved with another writer's on the same stream).
pub fn write_message(w: &mut impl Write, mh: MessageHeader, payload: &[u8]) -> std::io::Result<()> {
    let mut buf: Vec<u8> = mh.into();
    buf.extend_from_slice(payload);
    w.write_all(&buf)
}

/// A request message: `method` of `service` with `body` (an encoded request message).
pub fn request(stream_id: u32, service: &str, method: &str, body: Vec<u8>) -> Vec<u8> {
    let req = Request {
        service: service.into(),
        method: method.into(),
        payload: body,
        ..Default::default()
    };
    let payload = encode(&req);
    let mut out: Vec<u8> = MessageHeader::new_request(stream_id, payload.len() as u32).into();
    out.extend_from_slice(&payload);
    out
}

/// The response to stream `stream_id`: `reply` (an encoded reply message) or an error status.
pub fn response(stream_id: u32, reply: Result<Vec<u8>, Status>) -> (MessageHeader, Vec<u8>) {
    let mut rsp = Response::new();
    match reply {
        Ok(body) => {
            rsp.status = Some(ttrpc::get_status(ttrpc::Code::OK, "")).into();
            rsp.payload = body;
        }
        Err(s) => rsp.status = Some(s).into(),
    }
    let payload = encode(&rsp);
    (
        MessageHeader::new_response(stream_id, payload.len() as u32),
        payload,
    )
}

/// The decoded response `(status code, message, reply)` of a response message, None when
/// `mh` is not a response or its payload does not decode.
pub fn decode_response(
    mh: &MessageHeader,
    payload: &[u8],
) -> Option<(ttrpc::Code, String, Vec<u8>)> {
    if mh.type_ != MESSAGE_TYPE_RESPONSE {
        return None;
    }
    let rsp = Response::parse_from_bytes(payload).ok()?;
    let (code, message) = match rsp.status.as_ref() {
        Some(s) => (
            s.code.enum_value_or(ttrpc::Code::UNKNOWN),
            s.message.clone(),
        ),
        None => (ttrpc::Code::OK, String::new()),
    };
    Some((code, message, rsp.payload))
}

/// A protobuf message (a request's or a reply's body) encoded; empty only for a message
/// over protobuf's 2 GiB, which nothing here builds.
pub fn encode<M: Message>(m: &M) -> Vec<u8> {
    m.write_to_bytes().unwrap_or_default()
}

/// A protobuf message decoded, None when the bytes are not one.
pub fn decode<M: Message>(bytes: &[u8]) -> Option<M> {
    M::parse_from_bytes(bytes).ok()
}

/// Whether a message is a request.
pub fn is_request(mh: &MessageHeader) -> bool {
    mh.type_ == MESSAGE_TYPE_REQUEST
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_reads_back_and_a_response_decodes() {
        let wire = request(3, "svc", "M", vec![1, 2, 3]);
        let (mh, payload) = read_message(&mut wire.as_slice()).unwrap();
        assert_eq!((mh.stream_id, mh.length as usize), (3, wire.len() - 10));
        assert!(is_request(&mh));
        let req = Request::parse_from_bytes(&payload).unwrap();
        assert_eq!((req.service.as_str(), req.method.as_str()), ("svc", "M"));
        let (mh, p) = response(
            3,
            Err(ttrpc::get_status(ttrpc::Code::INVALID_ARGUMENT, "no")),
        );
        let (code, msg, _) = decode_response(&mh, &p).unwrap();
        assert_eq!((code, msg.as_str()), (ttrpc::Code::INVALID_ARGUMENT, "no"));
        let (mh, p) = response(5, Ok(vec![9]));
        assert_eq!(
            decode_response(&mh, &p).unwrap(),
            (ttrpc::Code::OK, String::new(), vec![9])
        );
    }

    #[test]
    fn an_oversized_header_is_refused_without_allocating_and_eof_is_told_apart() {
        let mut head: Vec<u8> = MessageHeader::new_request(1, u32::MAX).into();
        head.extend_from_slice(&[0; 16]);
        assert!(matches!(
            read_message(&mut head.as_slice()),
            Err(WireError::Oversized { len }) if len == u32::MAX as usize
        ));
        assert!(matches!(
            read_message(&mut [].as_slice()),
            Err(WireError::Closed)
        ));
        let cut = &request(1, "s", "m", vec![7; 20])[..15];
        assert!(matches!(read_message(&mut &cut[..]), Err(WireError::Io(_))));
        assert!(matches!(
            read_message(&mut &cut[..4]),
            Err(WireError::Io(_))
        ));
    }
}

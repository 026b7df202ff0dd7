//! Where a member of a kernel structure lies, from the kernel's own type information
//! (`/sys/kernel/btf/vmlinux`, BTF): what an eBPF program that reads a kernel structure
//! needs, since the layout moves between kernel versions and configurations.
//!
//! The parse is a pure function of the bytes ([`member_offset`]), tested on built blobs;
//! only [`vmlinux`] reads the file. It walks the type section once and
//! understands every kind the format defines up to `ENUM64` (kind 19): a kind it does not
//! know stops the walk with an error, since the size of what follows would be a guess.
//! Only a direct member is found (not one inside an anonymous union or structure), and
//! not a bitfield.

use std::path::Path;

const MAGIC: u16 = 0xeb9f;
const TYPE_LEN: usize = 12;
const KIND_STRUCT: u32 = 4;

/// Why a member's offset is not known.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum BtfError {
    #[error("not BTF (magic {0:#06x})")]
    Magic(u16),
    #[error("BTF truncated at byte {0}")]
    Truncated(usize),
    #[error("BTF type kind {kind} (type {id}) is unknown to placer")]
    UnknownKind { kind: u32, id: u32 },
    #[error("no struct {0} in BTF")]
    NoStruct(String),
    #[error("struct {strukt} has no direct member {member}")]
    NoMember { strukt: String, member: String },
    #[error("{strukt}.{member} is a bitfield")]
    Bitfield { strukt: String, member: String },
    #[error("{0}")]
    Read(String),
}

fn u16_at(b: &[u8], at: usize) -> Result<u16, BtfError> {
    b.get(at..at + 2)
        .map(|s| u16::from_ne_bytes([s[0], s[1]]))
        .ok_or(BtfError::Truncated(at))
}

fn u32_at(b: &[u8], at: usize) -> Result<u32, BtfError> {
    b.get(at..at + 4)
        .map(|s| u32::from_ne_bytes([s[0], s[1], s[2], s[3]]))
        .ok_or(BtfError::Truncated(at))
}

/// The NUL-terminated name at `off` in the string section.
fn name(strings: &[u8], off: u32) -> &[u8] {
    let s = strings.get(off as usize..).unwrap_or(&[]);
    &s[..s.iter().position(|&c| c == 0).unwrap_or(s.len())]
}

/// Bytes that follow a type's 12-byte header for its kind (include/uapi/linux/btf.h).
fn extra_len(kind: u32, vlen: usize, id: u32) -> Result<usize, BtfError> {
    Ok(match kind {
        // INT, VAR, DECL_TAG: one u32.
        1 | 14 | 17 => 4,
        // PTR, FWD, TYPEDEF, VOLATILE, CONST, RESTRICT, FUNC, FLOAT, TYPE_TAG: nothing.
        2 | 7..=12 | 16 | 18 => 0,
        // ARRAY: struct btf_array.
        3 => 12,
        // STRUCT, UNION, DATASEC, ENUM64: 12 bytes per member.
        4 | 5 | 15 | 19 => 12 * vlen,
        // ENUM, FUNC_PROTO: 8 bytes per entry.
        6 | 13 => 8 * vlen,
        _ => return Err(BtfError::UnknownKind { kind, id }),
    })
}

/// The byte offset of direct member `member` in `struct strukt`, from raw BTF.
pub fn member_offset(btf: &[u8], strukt: &str, member: &str) -> Result<u32, BtfError> {
    let magic = u16_at(btf, 0)?;
    if magic != MAGIC {
        return Err(BtfError::Magic(magic));
    }
    let hdr_len = u32_at(btf, 4)? as usize;
    let (type_off, type_len) = (u32_at(btf, 8)? as usize, u32_at(btf, 12)? as usize);
    let (str_off, str_len) = (u32_at(btf, 16)? as usize, u32_at(btf, 20)? as usize);
    let types = btf
        .get(hdr_len + type_off..hdr_len + type_off + type_len)
        .ok_or(BtfError::Truncated(hdr_len + type_off + type_len))?;
    let strings = btf
        .get(hdr_len + str_off..hdr_len + str_off + str_len)
        .ok_or(BtfError::Truncated(hdr_len + str_off + str_len))?;
    let mut at = 0;
    let mut id = 1u32;
    while at < types.len() {
        let name_off = u32_at(types, at)?;
        let info = u32_at(types, at + 4)?;
        let (kind, vlen, kind_flag) = ((info >> 24) & 0x1f, (info & 0xffff) as usize, info >> 31);
        let extra = extra_len(kind, vlen, id)?;
        if kind == KIND_STRUCT && name(strings, name_off) == strukt.as_bytes() {
            for m in 0..vlen {
                let base = at + TYPE_LEN + m * 12;
                if name(strings, u32_at(types, base)?) != member.as_bytes() {
                    continue;
                }
                let raw = u32_at(types, base + 8)?;
                // With the kind flag, the top 8 bits are a bitfield's size in bits.
                let (bits, size) = if kind_flag == 1 {
                    (raw & 0xff_ffff, raw >> 24)
                } else {
                    (raw, 0)
                };
                if size != 0 || bits % 8 != 0 {
                    return Err(BtfError::Bitfield {
                        strukt: strukt.into(),
                        member: member.into(),
                    });
                }
                return Ok(bits / 8);
            }
            return Err(BtfError::NoMember {
                strukt: strukt.into(),
                member: member.into(),
            });
        }
        at += TYPE_LEN + extra;
        id += 1;
    }
    Err(BtfError::NoStruct(strukt.into()))
}

/// The running kernel's BTF (about 5 MiB: read it once for all the members wanted).
pub fn vmlinux() -> Result<Vec<u8>, BtfError> {
    let path = Path::new("/sys/kernel/btf/vmlinux");
    std::fs::read(path).map_err(|e| BtfError::Read(format!("{}: {e}", path.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A BTF blob of `types`, each (name, kind, kind flag, size, the words after its
    /// header); a word given as a string is that string's offset in the built string
    /// section.
    /// One type of a built blob: name, kind, kind flag, size, the words after its header.
    type Built<'a> = (&'a str, u32, u32, u32, Vec<(String, u32)>);

    fn blob(types: &[Built]) -> Vec<u8> {
        let mut strings = vec![0u8];
        let mut intern = |s: &str| -> u32 {
            if s.is_empty() {
                return 0;
            }
            let at = strings.len() as u32;
            strings.extend_from_slice(s.as_bytes());
            strings.push(0);
            at
        };
        let mut t = Vec::new();
        for (n, kind, flag, size, extra) in types {
            let vlen = match kind {
                1 | 3 => 0,
                4 | 5 => extra.len() as u32 / 3,
                6 | 13 => extra.len() as u32 / 2,
                _ => extra.len() as u32,
            };
            t.extend_from_slice(&intern(n).to_ne_bytes());
            t.extend_from_slice(&((flag << 31) | (kind << 24) | vlen).to_ne_bytes());
            t.extend_from_slice(&size.to_ne_bytes());
            for (s, w) in extra {
                // A word naming a string is interned; the others are written as they are.
                let w = if s.is_empty() { *w } else { intern(s) };
                t.extend_from_slice(&w.to_ne_bytes());
            }
        }
        let mut b = Vec::new();
        b.extend_from_slice(&MAGIC.to_ne_bytes());
        b.extend_from_slice(&[1, 0]);
        b.extend_from_slice(&24u32.to_ne_bytes());
        b.extend_from_slice(&0u32.to_ne_bytes());
        b.extend_from_slice(&(t.len() as u32).to_ne_bytes());
        b.extend_from_slice(&(t.len() as u32).to_ne_bytes());
        b.extend_from_slice(&(strings.len() as u32).to_ne_bytes());
        b.extend(t);
        b.extend(strings);
        b
    }

    fn w(v: u32) -> (String, u32) {
        (String::new(), v)
    }
    fn s(v: &str) -> (String, u32) {
        (v.to_string(), 0)
    }

    /// An int, an enum of one value, a function prototype of two parameters, an array,
    /// then the structure: every variable-length kind before it must be stepped over
    /// right for it to be found.
    fn sample() -> Vec<u8> {
        blob(&[
            ("int", 1, 0, 4, vec![w(32)]),
            ("e", 6, 0, 4, vec![s("A"), w(1)]),
            ("", 13, 0, 1, vec![s("x"), w(1), s("y"), w(1)]),
            ("", 3, 0, 0, vec![w(1), w(1), w(4)]),
            (
                "sock_common",
                4,
                0,
                24,
                vec![s("skc_family"), w(1), w(0), s("skc_cookie"), w(1), w(128)],
            ),
            ("bits", 4, 1, 4, vec![s("b"), w(1), w((3 << 24) | 8)]),
        ])
    }

    #[test]
    fn finds_a_member_after_every_kind_of_type() {
        let b = sample();
        assert_eq!(member_offset(&b, "sock_common", "skc_cookie"), Ok(16));
        assert_eq!(member_offset(&b, "sock_common", "skc_family"), Ok(0));
        assert!(matches!(
            member_offset(&b, "sock_common", "nope"),
            Err(BtfError::NoMember { .. })
        ));
        assert_eq!(
            member_offset(&b, "sock", "skc_cookie"),
            Err(BtfError::NoStruct("sock".into()))
        );
        assert!(matches!(
            member_offset(&b, "bits", "b"),
            Err(BtfError::Bitfield { .. })
        ));
    }

    #[test]
    fn a_bad_blob_is_an_error_not_a_guess() {
        let b = sample();
        assert!(matches!(
            member_offset(&b[..30], "sock_common", "skc_cookie"),
            Err(BtfError::Truncated(_))
        ));
        let mut bad = b.clone();
        bad[0] = 0;
        assert!(matches!(
            member_offset(&bad, "x", "y"),
            Err(BtfError::Magic(_))
        ));
        // An unknown kind stops the walk before the structure.
        let unknown = blob(&[
            ("", 31, 0, 0, vec![]),
            ("sock_common", 4, 0, 8, vec![s("skc_cookie"), w(1), w(0)]),
        ]);
        assert_eq!(
            member_offset(&unknown, "sock_common", "skc_cookie"),
            Err(BtfError::UnknownKind { kind: 31, id: 1 })
        );
    }

    #[test]
    fn real_the_running_kernel_has_the_socket_cookie() {
        match vmlinux().and_then(|b| member_offset(&b, "sock_common", "skc_cookie")) {
            // The cookie is 8-byte aligned, after the addresses and the hash.
            Ok(off) => assert!(off >= 16 && off % 8 == 0 && off < 256, "{off}"),
            Err(BtfError::Read(e)) => placer_testkit::skip(&format!("no kernel BTF: {e}")),
            Err(e) => panic!("{e}"),
        }
    }
}

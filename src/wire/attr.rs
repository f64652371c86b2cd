//! `struct rtattr` (include/uapi/linux/rtnetlink.h): the type-length-value records that follow
//! `inet_diag_msg`, and the `INET_DIAG_*` attribute numbers (include/uapi/linux/inet_diag.h).

use super::{DecodeError, NeField, align4};

pub use netlink_packet_sock_diag::constants::{
    INET_DIAG_BBRINFO, INET_DIAG_CLASS_ID, INET_DIAG_CONG, INET_DIAG_DCTCPINFO, INET_DIAG_INFO,
    INET_DIAG_MARK, INET_DIAG_MEMINFO, INET_DIAG_PROTOCOL, INET_DIAG_SHUTDOWN, INET_DIAG_SKMEMINFO,
    INET_DIAG_SKV6ONLY, INET_DIAG_TCLASS, INET_DIAG_TOS, INET_DIAG_VEGASINFO,
};

/// `INET_DIAG_CGROUP_ID`: u64 id (the cgroup2 directory inode) of the socket's cgroup.
/// The crate's constants stop at MD5SIG (18).
pub const INET_DIAG_CGROUP_ID: u16 = 21;
/// `INET_DIAG_SOCKOPT`: a u16 bit field of socket options (recverr, nodelay, ...).
pub const INET_DIAG_SOCKOPT: u16 = 22;
/// `INET_DIAG_REQ_BYTECODE`: the filter program attached to a request.
pub const INET_DIAG_REQ_BYTECODE: u16 = 1;

/// Size of `struct rtattr`.
pub const RTA_HDRLEN: usize = 4;
// The top two bits of `rta_type` are NLA_F_NESTED / NLA_F_NET_BYTEORDER, not the type.
/// `NLA_TYPE_MASK`: the type bits of `rta_type`.
pub const NLA_TYPE_MASK: u16 = 0x3fff;

/// One attribute: its type and value, with the value's offset in the buffer walked.
#[derive(Debug, Clone, Copy)]
pub struct Attr<'a> {
    /// `rta_type` without the flag bits.
    pub kind: u16,
    /// Offset of the value within the buffer given to [`AttrIter::new`].
    pub value_offset: usize,
    /// `rta_len - 4` bytes of value.
    pub value: &'a [u8],
}

/// Iterates over consecutive attributes; stops (once, with an error) at the first bad length.
pub struct AttrIter<'a> {
    buf: &'a [u8],
    pos: usize,
    failed: bool,
}

impl<'a> AttrIter<'a> {
    /// Walks `buf[start..]`; offsets are reported relative to `buf`.
    pub fn new(buf: &'a [u8], start: usize) -> Self {
        Self { buf, pos: start, failed: false }
    }
}

impl<'a> Iterator for AttrIter<'a> {
    type Item = Result<Attr<'a>, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.pos >= self.buf.len() {
            return None;
        }
        let rest = &self.buf[self.pos..];
        let len = u16::read(rest, 0).map(usize::from);
        let kind = u16::read(rest, 2);
        match (len, kind) {
            (Some(len), Some(kind)) if len >= RTA_HDRLEN && len <= rest.len() => {
                let attr = Attr {
                    kind: kind & NLA_TYPE_MASK,
                    value_offset: self.pos + RTA_HDRLEN,
                    value: &rest[RTA_HDRLEN..len],
                };
                self.pos += align4(len).min(rest.len());
                Some(Ok(attr))
            }
            (Some(len), Some(_)) => {
                self.failed = true;
                Some(Err(DecodeError::BadLength { what: "rtattr", len, avail: rest.len() }))
            }
            _ => {
                self.failed = true;
                Some(Err(DecodeError::TooShort {
                    what: "rtattr",
                    need: RTA_HDRLEN,
                    got: rest.len(),
                }))
            }
        }
    }
}

/// Appends one attribute (header, value, padding to 4 bytes) to `out`.
pub fn emit(out: &mut Vec<u8>, kind: u16, value: &[u8]) {
    let len = u16::try_from(RTA_HDRLEN + value.len()).expect("attribute values fit in u16");
    out.extend_from_slice(&len.to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(value);
    out.resize(align4(out.len()), 0);
}

#[cfg(all(test, target_endian = "little"))]
mod tests {
    use super::*;

    #[test]
    fn emit_then_walk() {
        let mut buf = Vec::new();
        emit(&mut buf, INET_DIAG_CONG, b"bbr\0");
        emit(&mut buf, INET_DIAG_SHUTDOWN, &[3]);
        assert_eq!(buf.len(), 8 + 8); // the 1-byte value is padded to 4
        let attrs: Vec<_> = AttrIter::new(&buf, 0).collect::<Result<_, _>>().unwrap();
        assert_eq!(attrs[0].kind, INET_DIAG_CONG);
        assert_eq!(attrs[0].value, b"bbr\0");
        assert_eq!(attrs[1].kind, INET_DIAG_SHUTDOWN);
        assert_eq!(attrs[1].value, &[3]);
        assert_eq!(attrs[1].value_offset, 12);
    }

    #[test]
    fn zero_length_attribute_is_an_error_not_a_loop() {
        let buf = [0u8, 0, 2, 0, 0, 0, 0, 0];
        let items: Vec<_> = AttrIter::new(&buf, 0).collect();
        assert_eq!(items.len(), 1);
        assert!(items[0].is_err());
    }
}

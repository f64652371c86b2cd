//! `struct nlmsghdr` (include/uapi/linux/netlink.h) and the walk over the messages of one
//! datagram. Pure; the sampler decides what each message type means for a dump.

use super::{DecodeError, NeField, align4};

/// Size of `struct nlmsghdr`.
pub const NLMSG_HDRLEN: usize = 16;
/// `NLMSG_NOOP`: nothing; skipped.
pub const NLMSG_NOOP: u16 = 1;
/// `NLMSG_ERROR`: a `struct nlmsgerr` whose `error` is a negative errno, or 0 for an ACK.
pub const NLMSG_ERROR: u16 = 2;
/// `NLMSG_DONE`: the end of a multipart (dump) reply.
pub const NLMSG_DONE: u16 = 3;
/// `NLMSG_OVERRUN`: data lost.
pub const NLMSG_OVERRUN: u16 = 4;

/// `NLM_F_REQUEST`.
pub const NLM_F_REQUEST: u16 = 0x01;
/// `NLM_F_MULTI`: part of a multipart reply.
pub const NLM_F_MULTI: u16 = 0x02;
/// `NLM_F_DUMP_INTR`: the dump changed under the walk and may have skipped or repeated entries.
pub const NLM_F_DUMP_INTR: u16 = 0x10;
/// `NLM_F_ROOT | NLM_F_MATCH`.
pub const NLM_F_DUMP: u16 = 0x300;

const LEN: usize = 0; // nlmsg_len: u32
const TYPE: usize = 4; // nlmsg_type: u16
const FLAGS: usize = 6; // nlmsg_flags: u16
const SEQ: usize = 8; // nlmsg_seq: u32
const PID: usize = 12; // nlmsg_pid: u32

/// One netlink message inside a datagram: header fields plus the payload after the header.
#[derive(Debug, Clone, Copy)]
pub struct NlMsg<'a> {
    /// `nlmsg_type`.
    pub kind: u16,
    /// `nlmsg_flags`.
    pub flags: u16,
    /// `nlmsg_seq`.
    pub seq: u32,
    /// `nlmsg_pid`.
    pub pid: u32,
    /// Byte offset of the payload within the datagram.
    pub payload_offset: usize,
    /// The bytes after the header, `nlmsg_len - 16` of them.
    pub payload: &'a [u8],
}

impl NlMsg<'_> {
    /// For `NLMSG_ERROR`, the errno the kernel reported (positive), or 0 for an ACK.
    ///
    /// # Errors
    /// A payload too short to hold `nlmsgerr.error`.
    pub fn error_code(&self) -> Result<i32, DecodeError> {
        let err = i32::read(self.payload, 0).ok_or(DecodeError::TooShort {
            what: "nlmsgerr",
            need: 4,
            got: self.payload.len(),
        })?;
        Ok(err.saturating_neg())
    }
}

/// Iterates over the messages of one datagram.
///
/// Stops after the first malformed header, yielding its error once: a bad length means the
/// rest of the datagram cannot be framed, so nothing after it is trusted.
pub struct NlMsgIter<'a> {
    buf: &'a [u8],
    pos: usize,
    failed: bool,
}

impl<'a> NlMsgIter<'a> {
    /// Walks `datagram` from its start.
    pub fn new(datagram: &'a [u8]) -> Self {
        Self { buf: datagram, pos: 0, failed: false }
    }
}

impl<'a> Iterator for NlMsgIter<'a> {
    type Item = Result<NlMsg<'a>, DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.pos >= self.buf.len() {
            return None;
        }
        let rest = &self.buf[self.pos..];
        if rest.len() < NLMSG_HDRLEN {
            self.failed = true;
            return Some(Err(DecodeError::TooShort {
                what: "nlmsghdr",
                need: NLMSG_HDRLEN,
                got: rest.len(),
            }));
        }
        // The fixed 16 bytes are present, so these reads cannot fail.
        let len = u32::read(rest, LEN).unwrap_or(0) as usize;
        if len < NLMSG_HDRLEN || len > rest.len() {
            self.failed = true;
            return Some(Err(DecodeError::BadLength { what: "nlmsghdr", len, avail: rest.len() }));
        }
        let msg = NlMsg {
            kind: u16::read(rest, TYPE).unwrap_or(0),
            flags: u16::read(rest, FLAGS).unwrap_or(0),
            seq: u32::read(rest, SEQ).unwrap_or(0),
            pid: u32::read(rest, PID).unwrap_or(0),
            payload_offset: self.pos + NLMSG_HDRLEN,
            payload: &rest[NLMSG_HDRLEN..len],
        };
        // The last message of a datagram may omit its alignment padding.
        self.pos += align4(len).min(rest.len());
        Some(Ok(msg))
    }
}

/// Writes a `nlmsghdr` for a message of `total_len` bytes into the first 16 bytes of `out`.
pub fn emit_header(out: &mut [u8], total_len: usize, kind: u16, flags: u16, seq: u32) {
    let len = u32::try_from(total_len).expect("requests are a few hundred bytes");
    out[LEN..LEN + 4].copy_from_slice(&len.to_ne_bytes());
    out[TYPE..TYPE + 2].copy_from_slice(&kind.to_ne_bytes());
    out[FLAGS..FLAGS + 2].copy_from_slice(&flags.to_ne_bytes());
    out[SEQ..SEQ + 4].copy_from_slice(&seq.to_ne_bytes());
    out[PID..PID + 4].copy_from_slice(&0u32.to_ne_bytes());
}

/// An `NLMSG_DONE` (status 0) or `NLMSG_ERROR` (`errno` > 0) message, as the kernel
/// ends a dump or refuses a request; replayed sources end their dumps with one.
pub fn control_msg(seq: u32, kind: u16, errno: i32) -> Vec<u8> {
    let mut out = vec![0u8; NLMSG_HDRLEN];
    out.extend_from_slice(&(-errno).to_ne_bytes());
    if kind == NLMSG_ERROR {
        out.extend_from_slice(&[0u8; 16]); // the echoed request header
    }
    let len = out.len();
    emit_header(&mut out, len, kind, NLM_F_MULTI, seq);
    out
}

#[cfg(all(test, target_endian = "little"))]
mod tests {
    use super::*;

    #[test]
    fn walks_two_messages_and_done() {
        let mut dg = Vec::new();
        // message 1: type 20, 4 payload bytes
        dg.extend_from_slice(&[20, 0, 0, 0]); // nlmsg_len = 20
        dg.extend_from_slice(&[20, 0]); // type 20
        dg.extend_from_slice(&[2, 0]); // NLM_F_MULTI
        dg.extend_from_slice(&[7, 0, 0, 0]); // seq 7
        dg.extend_from_slice(&[0, 0, 0, 0]); // pid
        dg.extend_from_slice(&[1, 2, 3, 4]);
        // message 2: NLMSG_DONE with a 4-byte payload
        dg.extend_from_slice(&[20, 0, 0, 0, 3, 0, 2, 0, 7, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        let msgs: Vec<_> = NlMsgIter::new(&dg).collect::<Result<_, _>>().unwrap();
        assert_eq!(msgs.len(), 2);
        assert_eq!(msgs[0].kind, 20);
        assert_eq!(msgs[0].seq, 7);
        assert_eq!(msgs[0].payload, &[1, 2, 3, 4]);
        assert_eq!(msgs[0].payload_offset, 16);
        assert_eq!(msgs[1].kind, NLMSG_DONE);
    }

    #[test]
    fn bad_length_stops_the_walk() {
        let dg = [8u8, 0, 0, 0, 20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 99, 99];
        let mut it = NlMsgIter::new(&dg);
        assert_eq!(
            it.next().unwrap().unwrap_err(),
            DecodeError::BadLength { what: "nlmsghdr", len: 8, avail: 18 }
        );
        assert!(it.next().is_none());
    }

    #[test]
    fn error_code_is_positive_errno() {
        let mut dg = vec![36, 0, 0, 0, 2, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0];
        dg.extend_from_slice(&(-22i32).to_ne_bytes()); // -EINVAL
        dg.extend_from_slice(&[0; 16]); // the echoed request header
        let msg = NlMsgIter::new(&dg).next().unwrap().unwrap();
        assert_eq!(msg.kind, NLMSG_ERROR);
        assert_eq!(msg.error_code().unwrap(), 22);
    }
}

//! `struct inet_diag_msg` (the fixed head of every reply and destroy event) and the dump
//! requests we send: `struct inet_diag_req_v2` (type 20, one family) and the legacy
//! `struct inet_diag_req` (type 18, both families in one hash walk), each optionally followed
//! by an `INET_DIAG_REQ_BYTECODE` attribute (include/uapi/linux/inet_diag.h).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use netlink_packet_core::Emitable;
use netlink_packet_sock_diag::inet::{ExtensionFlags, InetRequest, SocketId, StateFlags};

use super::{DecodeError, NeField, attr, nlmsg};

pub use netlink_packet_sock_diag::constants::{
    AF_INET, AF_INET6, AF_UNSPEC, IPPROTO_TCP, SOCK_DIAG_BY_FAMILY,
};

/// `TCPDIAG_GETSOCK`: the pre-sock_diag request type. The kernel still serves it, and with
/// `sdiag_family = AF_UNSPEC` it returns IPv4 and IPv6 sockets from a single walk of the
/// hash tables.
pub const TCPDIAG_GETSOCK: u16 = 18;

/// `sizeof(struct inet_diag_msg)`.
pub const INET_DIAG_MSG_LEN: usize = 72;
/// `sizeof(struct inet_diag_req_v2)`.
pub const INET_DIAG_REQ_V2_LEN: usize = 56;
/// `sizeof(struct inet_diag_req)`.
pub const INET_DIAG_REQ_LEN: usize = 60;

const FAMILY: usize = 0; // idiag_family: u8
const STATE: usize = 1; // idiag_state: u8
const TIMER: usize = 2; // idiag_timer: u8
const RETRANS: usize = 3; // idiag_retrans: u8
const SPORT: usize = 4; // id.idiag_sport: __be16
const DPORT: usize = 6; // id.idiag_dport: __be16
const SRC: usize = 8; // id.idiag_src: __be32[4]
const DST: usize = 24; // id.idiag_dst: __be32[4]
const IF: usize = 40; // id.idiag_if: u32
const COOKIE: usize = 44; // id.idiag_cookie: u32[2], low word first
const EXPIRES: usize = 52; // idiag_expires: u32 (ms)
const RQUEUE: usize = 56; // idiag_rqueue: u32
const WQUEUE: usize = 60; // idiag_wqueue: u32
const UID: usize = 64; // idiag_uid: u32
const INODE: usize = 68; // idiag_inode: u32

/// A checked view of the 72-byte head of an inet_diag reply.
#[derive(Debug, Clone, Copy)]
pub struct InetDiagMsg<'a> {
    buf: &'a [u8],
}

impl<'a> InetDiagMsg<'a> {
    /// Checks the length once; every getter after that is infallible.
    ///
    /// # Errors
    /// `payload` shorter than 72 bytes.
    pub fn new_checked(payload: &'a [u8]) -> Result<Self, DecodeError> {
        if payload.len() < INET_DIAG_MSG_LEN {
            return Err(DecodeError::TooShort {
                what: "inet_diag_msg",
                need: INET_DIAG_MSG_LEN,
                got: payload.len(),
            });
        }
        Ok(Self { buf: payload })
    }

    #[inline(always)]
    fn u8_at(&self, off: usize) -> u8 {
        self.buf[off]
    }

    #[inline(always)]
    fn u32_at(&self, off: usize) -> u32 {
        u32::read(self.buf, off).expect("length checked in new_checked")
    }

    /// `idiag_family`: AF_INET or AF_INET6 (v4-mapped sockets are AF_INET6).
    pub fn family(&self) -> u8 {
        self.u8_at(FAMILY)
    }
    /// `idiag_state`: TCP_ESTABLISHED = 1 … TCP_CLOSING = 11.
    pub fn state(&self) -> u8 {
        self.u8_at(STATE)
    }
    /// `idiag_timer`: 0 none, 1 retransmit, 2 keepalive, 3 TIME_WAIT, 4 zero-window probe.
    pub fn timer(&self) -> u8 {
        self.u8_at(TIMER)
    }
    /// `idiag_retrans`: retransmits or probes of the running timer.
    pub fn retrans(&self) -> u8 {
        self.u8_at(RETRANS)
    }
    /// Local port (`idiag_sport`, network order on the wire).
    pub fn sport(&self) -> u16 {
        u16::from_be_bytes([self.buf[SPORT], self.buf[SPORT + 1]])
    }
    /// Remote port.
    pub fn dport(&self) -> u16 {
        u16::from_be_bytes([self.buf[DPORT], self.buf[DPORT + 1]])
    }
    /// The 16 raw bytes of the local address; IPv4 uses the first 4.
    pub fn src_raw(&self) -> &'a [u8; 16] {
        self.buf[SRC..SRC + 16].try_into().expect("16-byte slice")
    }
    /// The 16 raw bytes of the remote address.
    pub fn dst_raw(&self) -> &'a [u8; 16] {
        self.buf[DST..DST + 16].try_into().expect("16-byte slice")
    }
    /// Local address, by family. An unknown family reads as IPv6.
    pub fn src(&self) -> IpAddr {
        to_ip(self.family(), self.src_raw())
    }
    /// Remote address.
    pub fn dst(&self) -> IpAddr {
        to_ip(self.family(), self.dst_raw())
    }
    /// `idiag_if`: bound or incoming interface index.
    pub fn ifindex(&self) -> u32 {
        self.u32_at(IF)
    }
    /// The socket cookie, unique per socket for the life of the network namespace.
    pub fn cookie(&self) -> u64 {
        u64::from(self.u32_at(COOKIE)) | u64::from(self.u32_at(COOKIE + 4)) << 32
    }
    /// `idiag_expires`: ms until the timer fires.
    pub fn expires(&self) -> u32 {
        self.u32_at(EXPIRES)
    }
    /// `idiag_rqueue`: bytes in the receive queue (for LISTEN: pending connections).
    pub fn rqueue(&self) -> u32 {
        self.u32_at(RQUEUE)
    }
    /// `idiag_wqueue`: bytes not yet acknowledged.
    pub fn wqueue(&self) -> u32 {
        self.u32_at(WQUEUE)
    }
    /// `idiag_uid`.
    pub fn uid(&self) -> u32 {
        self.u32_at(UID)
    }
    /// `idiag_inode` (0 for a socket no longer attached to a file, e.g. in destroy events).
    pub fn inode(&self) -> u32 {
        self.u32_at(INODE)
    }
}

fn to_ip(family: u8, raw: &[u8; 16]) -> IpAddr {
    if family == AF_INET {
        IpAddr::V4(Ipv4Addr::new(raw[0], raw[1], raw[2], raw[3]))
    } else {
        IpAddr::V6(Ipv6Addr::from(*raw))
    }
}

/// Which request shape a dump uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestKind {
    /// `SOCK_DIAG_BY_FAMILY` + `inet_diag_req_v2` for one family.
    ByFamily(u8),
    /// `TCPDIAG_GETSOCK` + `inet_diag_req`: both families in one hash walk.
    SingleWalk,
}

/// The default extensions: INFO (tcp_info), CONG (algorithm name), VEGASINFO (which also
/// brings BBRINFO/DCTCPINFO for those algorithms) and SKMEMINFO (buffer sizes, for the
/// send-buffer diagnosis). TOS and TCLASS are decoded when present but not asked for: each
/// costs an attribute per socket in every dump, and tcp_info's ECN flags already say what a
/// flow negotiated and saw.
pub fn default_extensions() -> u8 {
    (ExtensionFlags::INFO
        | ExtensionFlags::CONG
        | ExtensionFlags::VEGASINFO
        | ExtensionFlags::SKMEMINFO)
        .bits()
}

/// The default extensions plus TOS and TCLASS.
pub fn all_extensions() -> u8 {
    default_extensions() | (ExtensionFlags::TOS | ExtensionFlags::TCLASS).bits()
}

/// A dump request: netlink-packet-sock-diag's `InetRequest` cannot carry attributes, so this
/// wraps it and appends `INET_DIAG_REQ_BYTECODE` when a filter is given. It also emits the
/// legacy single-walk request, which that crate does not model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DumpRequest {
    /// Request shape.
    pub kind: RequestKind,
    /// `idiag_states`: bit `1 << TCP_state` for each state wanted.
    pub states: u32,
    /// `idiag_ext`: bit `1 << (INET_DIAG_x - 1)` for each attribute wanted.
    pub ext: u8,
    /// Compiled filter program, if any.
    pub bytecode: Option<Vec<u8>>,
}

impl DumpRequest {
    /// The whole netlink message, header included, ready for `send`.
    pub fn emit(&self, seq: u32) -> Vec<u8> {
        let mut out = vec![0u8; nlmsg::NLMSG_HDRLEN];
        let kind = match self.kind {
            RequestKind::ByFamily(family) => {
                let req = InetRequest {
                    family,
                    protocol: IPPROTO_TCP,
                    extensions: ExtensionFlags::from_bits_retain(self.ext),
                    states: StateFlags::from_bits_retain(self.states),
                    socket_id: if family == AF_INET6 {
                        SocketId::new_v6()
                    } else {
                        SocketId::new_v4()
                    },
                };
                let start = out.len();
                out.resize(start + req.buffer_len(), 0);
                req.emit(&mut out[start..]);
                SOCK_DIAG_BY_FAMILY
            }
            RequestKind::SingleWalk => {
                // struct inet_diag_req: family, src_len, dst_len, ext, id (48 bytes of zero:
                // match any), states, dbs.
                out.extend_from_slice(&[AF_UNSPEC, 0, 0, self.ext]);
                out.extend_from_slice(&[0u8; 48]);
                out.extend_from_slice(&self.states.to_ne_bytes());
                out.extend_from_slice(&0u32.to_ne_bytes());
                TCPDIAG_GETSOCK
            }
        };
        if let Some(bc) = &self.bytecode {
            attr::emit(&mut out, attr::INET_DIAG_REQ_BYTECODE, bc);
        }
        let len = out.len();
        nlmsg::emit_header(&mut out, len, kind, nlmsg::NLM_F_REQUEST | nlmsg::NLM_F_DUMP, seq);
        out
    }
}

/// One socket to ask about by its identity: the `inet_diag_sockid` (48 bytes, as the dump
/// sent it: ports, addresses, interface, cookie) and its family.
///
/// The kernel looks such a socket up in its hash tables by the 4-tuple and interface, then
/// checks the cookie: a 4-tuple reused by a newer socket is refused with `ESTALE`, a socket
/// that is gone with `ENOENT` (docs/kernel.md, "Asking for one socket").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SocketTarget {
    /// AF_INET or AF_INET6, as the dump reported it.
    pub family: u8,
    /// The raw `inet_diag_sockid`.
    pub id: [u8; SOCKID_LEN],
}

/// `sizeof(struct inet_diag_sockid)`.
pub const SOCKID_LEN: usize = 48;

/// Bytes one exact request takes: `nlmsghdr` and `inet_diag_req_v2`.
pub const EXACT_REQUEST_LEN: usize = nlmsg::NLMSG_HDRLEN + INET_DIAG_REQ_V2_LEN;

impl SocketTarget {
    /// The target for the socket `msg` describes.
    pub fn of(msg: &InetDiagMsg<'_>) -> Self {
        let mut id = [0u8; SOCKID_LEN];
        id.copy_from_slice(&msg.buf[SPORT..SPORT + SOCKID_LEN]);
        Self { family: msg.family(), id }
    }

    /// The cookie the request checks.
    pub fn cookie(&self) -> u64 {
        let w = |at: usize| {
            u64::from(u32::from_ne_bytes(self.id[at..at + 4].try_into().unwrap_or([0; 4])))
        };
        w(COOKIE - SPORT) | w(COOKIE - SPORT + 4) << 32
    }

    /// Appends the request for this one socket (`SOCK_DIAG_BY_FAMILY` without `NLM_F_DUMP`,
    /// `ext` extensions, sequence number `seq`) to `out`: [`EXACT_REQUEST_LEN`] bytes, no
    /// allocation once `out` has room. Many such requests go in one `send`; the kernel
    /// answers each with one message, the socket or an `NLMSG_ERROR`.
    ///
    /// `idiag_states` is left 0: the kernel ignores it for a lookup by identity, so the
    /// caller must check the state of what comes back.
    pub fn emit(&self, ext: u8, seq: u32, out: &mut Vec<u8>) {
        let start = out.len();
        out.resize(start + nlmsg::NLMSG_HDRLEN, 0);
        out.extend_from_slice(&[self.family, IPPROTO_TCP, ext, 0]);
        out.extend_from_slice(&0u32.to_ne_bytes());
        out.extend_from_slice(&self.id);
        nlmsg::emit_header(
            &mut out[start..],
            EXACT_REQUEST_LEN,
            SOCK_DIAG_BY_FAMILY,
            nlmsg::NLM_F_REQUEST,
            seq,
        );
    }
}

#[cfg(all(test, target_endian = "little"))]
mod tests {
    use super::*;

    /// An exact request is the crate's own `InetRequest` for that socket id (the oracle),
    /// behind a header without `NLM_F_DUMP`; several append back to back.
    #[test]
    fn exact_request_matches_the_crates_encoding() {
        let mut head = vec![0u8; INET_DIAG_MSG_LEN];
        head[FAMILY] = AF_INET6;
        head[SPORT..SPORT + 2].copy_from_slice(&5201u16.to_be_bytes());
        head[DPORT..DPORT + 2].copy_from_slice(&40000u16.to_be_bytes());
        head[SRC..SRC + 16].copy_from_slice(&Ipv6Addr::LOCALHOST.octets());
        head[DST + 10..DST + 16].copy_from_slice(&[0xff, 0xff, 127, 0, 0, 1]);
        head[IF..IF + 4].copy_from_slice(&3u32.to_ne_bytes());
        let cookie = 0x0123_4567_89ab_cdefu64;
        head[COOKIE..COOKIE + 4].copy_from_slice(&(cookie as u32).to_ne_bytes());
        head[COOKIE + 4..COOKIE + 8].copy_from_slice(&((cookie >> 32) as u32).to_ne_bytes());
        let t = SocketTarget::of(&InetDiagMsg::new_checked(&head).unwrap());
        assert_eq!(t.cookie(), cookie);
        let mut out = vec![0xee; 3]; // appends after what is there
        t.emit(default_extensions(), 7, &mut out);
        t.emit(default_extensions(), 8, &mut out);
        assert_eq!(out.len(), 3 + 2 * EXACT_REQUEST_LEN);
        let one = &out[3..3 + EXACT_REQUEST_LEN];
        let m = nlmsg::NlMsgIter::new(one).next().unwrap().unwrap();
        assert_eq!((m.kind, m.flags, m.seq), (SOCK_DIAG_BY_FAMILY, nlmsg::NLM_F_REQUEST, 7));
        let oracle = InetRequest {
            family: AF_INET6,
            protocol: IPPROTO_TCP,
            extensions: ExtensionFlags::from_bits_retain(default_extensions()),
            states: StateFlags::empty(),
            socket_id: SocketId {
                source_port: 5201,
                destination_port: 40000,
                source_address: IpAddr::V6(Ipv6Addr::LOCALHOST),
                destination_address: IpAddr::V6("::ffff:127.0.0.1".parse().unwrap()),
                interface_id: 3,
                cookie: cookie.to_le_bytes(),
            },
        };
        let mut want = vec![0u8; oracle.buffer_len()];
        oracle.emit(&mut want);
        assert_eq!(m.payload, &want[..]);
        let second = nlmsg::NlMsgIter::new(&out[3 + EXACT_REQUEST_LEN..]).next().unwrap().unwrap();
        assert_eq!((second.seq, second.payload), (8, &want[..]));
    }

    /// cgmon's request for `-netlink-dport 5201` (docs/cgmon.md, "Port filters"), extended with
    /// our extensions and states, checked byte by byte.
    #[test]
    fn by_family_request_with_bytecode() {
        let req = DumpRequest {
            kind: RequestKind::ByFamily(AF_INET),
            states: 1 << 1, // ESTABLISHED
            ext: 1 << 1,    // INFO
            bytecode: Some(vec![0x0c, 0x08, 0x0c, 0x00, 0x00, 0x00, 0x51, 0x14]),
        };
        let b = req.emit(9);
        assert_eq!(b.len(), 16 + 56 + 4 + 8);
        assert_eq!(&b[0..4], &84u32.to_ne_bytes()); // nlmsg_len
        assert_eq!(&b[4..6], &20u16.to_ne_bytes()); // SOCK_DIAG_BY_FAMILY
        assert_eq!(&b[6..8], &0x301u16.to_ne_bytes()); // NLM_F_REQUEST | NLM_F_DUMP
        assert_eq!(&b[8..12], &9u32.to_ne_bytes()); // seq
        assert_eq!(&b[16..20], &[2, 6, 2, 0]); // AF_INET, TCP, ext, pad
        assert_eq!(&b[20..24], &2u32.to_ne_bytes()); // states
        assert!(b[24..72].iter().all(|&x| x == 0)); // socket id: any
        assert_eq!(&b[72..76], &[12, 0, 1, 0]); // rtattr len 12, INET_DIAG_REQ_BYTECODE
        assert_eq!(&b[76..84], &[0x0c, 0x08, 0x0c, 0x00, 0x00, 0x00, 0x51, 0x14]);
    }

    #[test]
    fn single_walk_request_layout() {
        let req = DumpRequest {
            kind: RequestKind::SingleWalk,
            states: 0xffe,
            ext: default_extensions(),
            bytecode: None,
        };
        let b = req.emit(1);
        assert_eq!(b.len(), 16 + INET_DIAG_REQ_LEN);
        assert_eq!(&b[4..6], &18u16.to_ne_bytes());
        assert_eq!(b[16], AF_UNSPEC);
        assert_eq!(b[19], 0b0100_1110); // INFO, VEGASINFO, CONG, SKMEMINFO
        assert_eq!(&b[68..72], &0xffeu32.to_ne_bytes());
    }

    #[test]
    fn msg_fields() {
        let mut p = vec![0u8; 72];
        p[0] = AF_INET6;
        p[1] = 1;
        p[4..6].copy_from_slice(&8080u16.to_be_bytes());
        p[6..8].copy_from_slice(&443u16.to_be_bytes());
        p[8..24].copy_from_slice(&"::ffff:127.0.0.1".parse::<Ipv6Addr>().unwrap().octets());
        p[44..48].copy_from_slice(&0xdead_beefu32.to_ne_bytes()); // cookie low
        p[48..52].copy_from_slice(&1u32.to_ne_bytes()); // cookie high
        p[68..72].copy_from_slice(&777u32.to_ne_bytes());
        let m = InetDiagMsg::new_checked(&p).unwrap();
        assert_eq!(m.sport(), 8080);
        assert_eq!(m.dport(), 443);
        assert_eq!(m.src().to_string(), "::ffff:127.0.0.1");
        assert_eq!(m.cookie(), 0x1_dead_beef);
        assert_eq!(m.inode(), 777);
        assert!(InetDiagMsg::new_checked(&p[..71]).is_err());
    }
}

/// Bytecode opcodes (`INET_DIAG_BC_*`, the enum in include/uapi/linux/inet_diag.h;
/// docs/kernel.md, "Bytecode filters").
pub mod bytecode {
    #[allow(missing_docs)]
    pub const NOP: u8 = 0;
    #[allow(missing_docs)]
    pub const JMP: u8 = 1;
    #[allow(missing_docs)]
    pub const S_GE: u8 = 2;
    #[allow(missing_docs)]
    pub const S_LE: u8 = 3;
    #[allow(missing_docs)]
    pub const D_GE: u8 = 4;
    #[allow(missing_docs)]
    pub const D_LE: u8 = 5;
    #[allow(missing_docs)]
    pub const AUTO: u8 = 6;
    #[allow(missing_docs)]
    pub const S_COND: u8 = 7;
    #[allow(missing_docs)]
    pub const D_COND: u8 = 8;
    #[allow(missing_docs)]
    pub const S_EQ: u8 = 11;
    #[allow(missing_docs)]
    pub const D_EQ: u8 = 12;
}

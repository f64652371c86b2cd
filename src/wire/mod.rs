//! Kernel wire formats over `&[u8]`: netlink headers, route attributes, `inet_diag_msg`,
//! `struct tcp_info` and the congestion-control info structs.
//!
//! Everything here is pure: no I/O, no tokio, no clock. Decoding is zero-copy: a view borrows
//! the datagram and reads each field on demand, so a socket costs no heap allocation. Every
//! read is bounds-checked; a field the kernel did not send reads as `None`, never as zero.
//!
//! We decode by hand instead of with netlink-packet-sock-diag because its parser allocates
//! about eight times per socket and costs ~0.9 µs per socket (docs/kernel.md, "The Rust crates"),
//! and because it rejects `tcp_info` shorter than 232 bytes and stops at `snd_wnd`. Its parser
//! remains the oracle our differential tests compare against.

pub mod attr;
/// Message builders for tests and benches (the `testkit` feature, which the crate's own
/// tests, benches and examples turn on): not part of the library.
#[cfg(any(test, feature = "testkit"))]
pub mod build;
pub mod cc;
pub mod inet_diag;
pub mod nlmsg;
pub mod sock;
pub mod tcp_info;

/// Errors from decoding one netlink message or attribute.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// A structure is shorter than its fixed part.
    #[error("{what}: need {need} bytes, got {got}")]
    TooShort {
        /// Which structure.
        what: &'static str,
        /// Bytes required.
        need: usize,
        /// Bytes available.
        got: usize,
    },
    /// A length field points outside its container or below its own header.
    #[error("{what}: length {len} invalid with {avail} bytes available")]
    BadLength {
        /// Which structure.
        what: &'static str,
        /// The length the field claims.
        len: usize,
        /// Bytes actually available.
        avail: usize,
    },
}

/// Reads a host-order integer at a fixed offset, `None` when the buffer ends first.
///
/// Kernel structs in sock_diag replies are host-endian except ports and addresses.
pub(crate) trait NeField: Sized + Copy {
    const SIZE: usize;
    fn read(buf: &[u8], off: usize) -> Option<Self>;
}

macro_rules! ne_field {
    ($($t:ty),*) => {$(
        impl NeField for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            #[inline(always)]
            fn read(buf: &[u8], off: usize) -> Option<Self> {
                let bytes = buf.get(off..off + Self::SIZE)?;
                Some(<$t>::from_ne_bytes(bytes.try_into().ok()?))
            }
        }
    )*};
}
ne_field!(u8, u16, u32, u64, i32);

/// Rounds a netlink length up to the 4-byte alignment both `NLMSG_ALIGN` and `RTA_ALIGN` use.
#[inline(always)]
pub(crate) const fn align4(len: usize) -> usize {
    (len + 3) & !3
}

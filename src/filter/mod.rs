//! Socket filters: an expression ([`Expr`]) parsed from the user's text, evaluated in
//! userspace ([`Expr::matches`]) and compiled to the kernel's `INET_DIAG_REQ_BYTECODE`
//! ([`compile`]) so that the kernel drops unwanted sockets before it formats them.
//!
//! Both evaluations follow the kernel's rules (`inet_diag_bc_run`), including the one that
//! surprises: an IPv4 prefix also matches an IPv4 client of a dual-stack listener, whose
//! socket is AF_INET6 with a v4-mapped address. The userspace evaluation is needed anyway:
//! destroy events arrive by multicast, where no bytecode applies.
//!
//! Pure: no I/O.

mod audit;
mod compile;
#[cfg(test)]
mod interp;
mod parse;

pub use audit::{AuditError, audit};
pub use compile::{CompileError, compile};
pub use parse::{FilterError, parse, parse_port_list};

use crate::wire::inet_diag::{AF_INET, AF_INET6};
use crate::wire::sock::SockKey;

/// Which end of the socket a condition looks at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// Local address / source port (`sport`, `src`).
    Local,
    /// Remote address / destination port (`dport`, `dst`).
    Remote,
}

/// An address prefix: family, address bytes (network order; IPv4 uses 4) and length in bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prefix {
    /// AF_INET or AF_INET6.
    pub family: u8,
    /// Address bytes.
    pub addr: [u8; 16],
    /// Prefix length in bits: at most 32 for IPv4, 128 for IPv6.
    pub len: u8,
}

impl Prefix {
    /// Address length in bytes for the family.
    pub fn addr_len(&self) -> usize {
        if self.family == AF_INET { 4 } else { 16 }
    }
}

/// A filter expression.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expr {
    /// Port in `lo..=hi`.
    Port {
        /// Which port.
        side: Side,
        /// Lowest port matched.
        lo: u16,
        /// Highest port matched.
        hi: u16,
    },
    /// Address within a prefix.
    Addr {
        /// Which address.
        side: Side,
        /// The prefix.
        prefix: Prefix,
    },
    /// Both.
    And(Box<Expr>, Box<Expr>),
    /// Either.
    Or(Box<Expr>, Box<Expr>),
    /// Not.
    Not(Box<Expr>),
}

impl Expr {
    /// This filter, or any listener (remote port 0: no other socket a dump returns has
    /// none). The monitor's dumps ask with it: which ports listen tells the accepted side
    /// of a connection from the connecting one (how it closed, its service's port), and a
    /// filter such as `src 10.0.0.5` would otherwise hide a listener bound to 0.0.0.0 from
    /// the connections it accepted. Listeners start no flow.
    pub fn or_listeners(self) -> Expr {
        Expr::Or(Box::new(self), Box::new(Expr::Port { side: Side::Remote, lo: 0, hi: 0 }))
    }

    /// `a and b`.
    pub fn and(a: Expr, b: Expr) -> Expr {
        Expr::And(Box::new(a), Box::new(b))
    }

    /// `a or b`.
    pub fn or(a: Expr, b: Expr) -> Expr {
        Expr::Or(Box::new(a), Box::new(b))
    }

    /// `not a`.
    #[allow(clippy::should_implement_trait)]
    pub fn not(a: Expr) -> Expr {
        Expr::Not(Box::new(a))
    }

    /// Joins alternatives with `or`; `None` for an empty list.
    ///
    /// The tree is balanced, so a list of thousands of ports nests only a dozen levels deep
    /// and the recursive compiler, evaluator and drop never exhaust the stack. The bytecode
    /// is the same as for a left fold: every alternative's success jumps to the list's end.
    pub fn any_of(items: impl IntoIterator<Item = Expr>) -> Option<Expr> {
        balanced(items.into_iter().collect(), Expr::or)
    }

    /// Joins terms with `and`, balanced like [`any_of`](Self::any_of).
    pub fn all_of(items: impl IntoIterator<Item = Expr>) -> Option<Expr> {
        balanced(items.into_iter().collect(), Expr::and)
    }

    /// cgmon's `-netlink-sport`/`-netlink-dport` pair: items within a list are OR'd, the two
    /// lists AND'ed. `None` when neither is given.
    ///
    /// # Errors
    /// A malformed list; the error names the bad item.
    pub fn from_port_lists(sport: &str, dport: &str) -> Result<Option<Expr>, FilterError> {
        let mut parts = Vec::new();
        for (list, side) in [(sport, Side::Local), (dport, Side::Remote)] {
            if list.trim().is_empty() {
                continue;
            }
            let ranges = parse_port_list(list)?;
            let items = ranges.into_iter().map(|(lo, hi)| Expr::Port { side, lo, hi });
            parts.extend(Expr::any_of(items));
        }
        Ok(Expr::all_of(parts))
    }

    /// Evaluates the expression on one socket exactly as the kernel's bytecode would.
    pub fn matches(&self, k: &SockKey) -> bool {
        match self {
            Expr::Port { side, lo, hi } => {
                let p = match side {
                    Side::Local => k.sport,
                    Side::Remote => k.dport,
                };
                (*lo..=*hi).contains(&p)
            }
            Expr::Addr { side, prefix } => {
                let addr = match side {
                    Side::Local => &k.src,
                    Side::Remote => &k.dst,
                };
                prefix_matches(prefix, k.family, addr)
            }
            Expr::And(a, b) => a.matches(k) && b.matches(k),
            Expr::Or(a, b) => a.matches(k) || b.matches(k),
            Expr::Not(a) => !a.matches(k),
        }
    }
}

fn balanced(mut items: Vec<Expr>, join: fn(Expr, Expr) -> Expr) -> Option<Expr> {
    match items.len() {
        0 => None,
        1 => items.pop(),
        n => {
            let right = items.split_off(n / 2);
            Some(join(balanced(items, join)?, balanced(right, join)?))
        }
    }
}

/// The kernel's host-condition test: same family and the first `len` bits equal, or an IPv4
/// prefix against a v4-mapped IPv6 address. `len == 0` matches any address of the family.
pub(crate) fn prefix_matches(p: &Prefix, family: u8, addr: &[u8; 16]) -> bool {
    if p.family != family {
        return family == AF_INET6
            && p.family == AF_INET
            && addr[..10] == [0; 10]
            && addr[10..12] == [0xff, 0xff]
            && bits_equal(&addr[12..16], &p.addr[..4], p.len);
    }
    p.len == 0 || bits_equal(addr, &p.addr, p.len)
}

/// The first `bits` bits of `a` and `b` agree (`bitstring_match` in inet_diag.c).
fn bits_equal(a: &[u8], b: &[u8], bits: u8) -> bool {
    let whole = usize::from(bits / 8);
    let rest = bits % 8;
    if a.len() < whole || b.len() < whole || a[..whole] != b[..whole] {
        return false;
    }
    if rest == 0 {
        return true;
    }
    let mask = 0xffu8 << (8 - rest);
    match (a.get(whole), b.get(whole)) {
        (Some(x), Some(y)) => x & mask == y & mask,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    fn key(l: &str, r: &str) -> SockKey {
        SockKey::from_addrs(l.parse::<SocketAddr>().unwrap(), r.parse::<SocketAddr>().unwrap())
    }

    #[test]
    fn ipv4_prefix_matches_v4_mapped_sockets() {
        let e = parse("src 127.0.0.0/8").unwrap();
        assert!(e.matches(&key("127.0.0.1:80", "127.0.0.1:5000")));
        assert!(e.matches(&key("[::ffff:127.0.0.1]:80", "[::ffff:127.0.0.1]:5000")));
        assert!(!e.matches(&key("[::1]:80", "[::1]:5000")));
        let e = parse("src ::/0").unwrap();
        assert!(!e.matches(&key("127.0.0.1:80", "127.0.0.1:5000")));
        assert!(e.matches(&key("[::1]:80", "[::1]:5000")));
    }

    #[test]
    fn cgmon_port_lists_or_within_and_between() {
        let e = Expr::from_port_lists("80,443", "2000-3000").unwrap().unwrap();
        assert!(e.matches(&key("10.0.0.1:443", "10.0.0.2:2500")));
        assert!(!e.matches(&key("10.0.0.1:443", "10.0.0.2:3001")));
        assert!(!e.matches(&key("10.0.0.1:81", "10.0.0.2:2500")));
        assert!(Expr::from_port_lists("", " ").unwrap().is_none());
    }

    #[test]
    fn partial_byte_prefix() {
        let e = parse("dst 192.0.2.128/25").unwrap();
        assert!(e.matches(&key("10.0.0.1:1", "192.0.2.200:2")));
        assert!(!e.matches(&key("10.0.0.1:1", "192.0.2.100:2")));
    }
}

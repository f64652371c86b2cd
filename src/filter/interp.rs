//! Test-only replica of the kernel's `inet_diag_bc_run`: runs bytecode on one socket.
//! proptest drives it against [`Expr::matches`](super::Expr::matches) so that the compiler
//! and the userspace evaluation cannot drift apart.

use super::{Prefix, prefix_matches};
use crate::wire::inet_diag::bytecode as op;
use crate::wire::sock::SockKey;

/// Runs an audited program; `true` = the kernel would report the socket.
pub fn run(bc: &[u8], k: &SockKey) -> bool {
    let mut pos = 0usize;
    let mut len = bc.len() as isize;
    while len > 0 {
        let code = bc[pos];
        let data = |i: usize| u16::from_ne_bytes([bc[pos + 4 + i + 2], bc[pos + 4 + i + 3]]);
        let matched = match code {
            op::NOP => true,
            op::JMP => false,
            op::S_GE => k.sport >= data(0),
            op::S_LE => k.sport <= data(0),
            op::D_GE => k.dport >= data(0),
            op::D_LE => k.dport <= data(0),
            op::S_EQ => k.sport == data(0),
            op::D_EQ => k.dport == data(0),
            op::S_COND | op::D_COND => {
                let family = bc[pos + 4];
                let plen = bc[pos + 5];
                let port = i32::from_ne_bytes(bc[pos + 8..pos + 12].try_into().unwrap());
                let (addr, sock_port) =
                    if code == op::S_COND { (&k.src, k.sport) } else { (&k.dst, k.dport) };
                let alen = match family {
                    2 => 4,
                    10 => 16,
                    _ => 0,
                };
                let mut a = [0u8; 16];
                a[..alen].copy_from_slice(&bc[pos + 12..pos + 12 + alen]);
                let cond = Prefix { family, addr: a, len: plen };
                (port == -1 || port == i32::from(sock_port))
                    && (family == 0 || prefix_matches(&cond, k.family, addr))
            }
            other => panic!("interpreter given an op the compiler never emits: {other}"),
        };
        let step = if matched {
            usize::from(bc[pos + 1])
        } else {
            usize::from(u16::from_ne_bytes([bc[pos + 2], bc[pos + 3]]))
        };
        len -= step as isize;
        pos += step;
    }
    len == 0
}

#[cfg(all(test, target_endian = "little"))]
mod tests {
    use super::*;
    use crate::filter::{Expr, Side, compile};
    use crate::wire::inet_diag::{AF_INET, AF_INET6};
    use proptest::prelude::*;

    fn addr(pool: u8, family: u8) -> [u8; 16] {
        let mut a = [0u8; 16];
        match (family, pool) {
            (AF_INET, p) => a[..4].copy_from_slice(&[192, 0, 2, p]),
            (_, 0..=3) => {
                // v4-mapped ::ffff:192.0.2.p
                a[10] = 0xff;
                a[11] = 0xff;
                a[12..].copy_from_slice(&[192, 0, 2, pool]);
            }
            (_, p) => {
                a[..4].copy_from_slice(&[0x20, 0x01, 0x0d, 0xb8]);
                a[15] = p;
            }
        }
        a
    }

    // Small pools so that random conditions hit random sockets often.
    fn sock() -> impl Strategy<Value = SockKey> {
        (prop_oneof![Just(AF_INET), Just(AF_INET6)], 0u8..8, 0u8..8, 0u16..8, 0u16..8).prop_map(
            |(family, s, d, sp, dp)| SockKey {
                family,
                src: addr(s, family),
                dst: addr(d, family),
                sport: [0, 1, 79, 80, 443, 8080, 65534, 65535][sp as usize],
                dport: [0, 1, 79, 80, 443, 8080, 65534, 65535][dp as usize],
                cookie: 0,
            },
        )
    }

    fn leaf() -> impl Strategy<Value = Expr> {
        let side = prop_oneof![Just(Side::Local), Just(Side::Remote)];
        let port = prop_oneof![
            Just(0u16),
            Just(1),
            Just(80),
            Just(443),
            Just(8080),
            Just(65535),
            any::<u16>()
        ];
        let ports = (side.clone(), port.clone(), port).prop_map(|(side, a, b)| Expr::Port {
            side,
            lo: a.min(b),
            hi: a.max(b),
        });
        let prefix = (side, prop_oneof![Just(AF_INET), Just(AF_INET6)], 0u8..8, 0u8..=128)
            .prop_map(|(side, family, pool, len)| {
                let max = if family == AF_INET { 32 } else { 128 };
                Expr::Addr {
                    side,
                    prefix: Prefix { family, addr: addr(pool, family), len: len % (max + 1) },
                }
            });
        prop_oneof![ports, prefix]
    }

    fn expr() -> impl Strategy<Value = Expr> {
        leaf().prop_recursive(5, 32, 2, |inner| {
            prop_oneof![
                (inner.clone(), inner.clone()).prop_map(|(a, b)| Expr::and(a, b)),
                (inner.clone(), inner.clone()).prop_map(|(a, b)| Expr::or(a, b)),
                inner.prop_map(Expr::not),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(4000))]

        /// The kernel, given `compile(e)`, accepts exactly the sockets `e` matches.
        #[test]
        fn compiled_program_agrees_with_expression(e in expr(), socks in prop::collection::vec(sock(), 16)) {
            let bc = compile(&e).unwrap();
            for k in &socks {
                prop_assert_eq!(run(&bc, k), e.matches(k), "expr {:?} sock {:?}", e, k);
            }
        }
    }
}

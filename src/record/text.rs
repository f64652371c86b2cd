//! Addresses, endpoints and rates as text, as records and pages show them.

use std::net::IpAddr;

use super::FlowId;
use crate::wire::inet_diag::AF_INET;

/// A rate in bytes/s as Mbit/s.
pub fn mbps(bytes_per_s: u64) -> f64 {
    bytes_per_s as f64 * 8.0 / 1e6
}

/// `addr:port`, an IPv6 address in brackets.
pub fn endpoint_text(ip: &str, port: u16) -> String {
    if ip.contains(':') { format!("[{ip}]:{port}") } else { format!("{ip}:{port}") }
}

/// The lowest port of Linux's default ephemeral range (`net.ipv4.ip_local_port_range` is
/// 32768–60999): a port at or above it is a client's. Pages and reports group by it, so
/// that clients' ports do not make a row per connection.
pub const EPHEMERAL_FROM: u16 = 32_768;

/// Which side of a connection `(local, remote)` ports are: `Some(local)` for the server
/// side (the side on the lower port, below [`EPHEMERAL_FROM`]), `None` for a client.
pub fn served_port(local: u16, remote: u16) -> Option<u16> {
    (local < EPHEMERAL_FROM && (local <= remote || remote >= EPHEMERAL_FROM)).then_some(local)
}

/// `src:port → dst:port`, IPv6 addresses in brackets.
pub fn tuple_text(id: &FlowId) -> String {
    let (src, dst) =
        (endpoint_text(&id.src_ip, id.src_port), endpoint_text(&id.dst_ip, id.dst_port));
    format!("{src} → {dst}")
}

/// An address as text: IPv4 from the first four bytes, else IPv6.
pub fn ip(family: u8, raw: &[u8; 16]) -> String {
    if family == AF_INET {
        ipv4([raw[0], raw[1], raw[2], raw[3]])
    } else {
        IpAddr::from(*raw).to_string()
    }
}

/// Dotted-quad text, written digit by digit: `Ipv4Addr`'s `Display` goes through the
/// formatting machinery, and each record and each ended flow's page entry names two
/// addresses (thousands a second under churn). Tested against `Display`.
fn ipv4(o: [u8; 4]) -> String {
    let mut s = String::with_capacity(15);
    for (i, b) in o.into_iter().enumerate() {
        if i > 0 {
            s.push('.');
        }
        if b >= 100 {
            s.push(char::from(b'0' + b / 100));
        }
        if b >= 10 {
            s.push(char::from(b'0' + b / 10 % 10));
        }
        s.push(char::from(b'0' + b % 10));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_text_is_displays() {
        let mut x: u32 = 0x9e37_79b9;
        let mut cases = vec![[0, 0, 0, 0], [255, 255, 255, 255], [10, 0, 99, 100], [127, 0, 0, 1]];
        for _ in 0..10_000 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            cases.push(x.to_be_bytes());
        }
        for o in cases {
            assert_eq!(ipv4(o), std::net::Ipv4Addr::from(o).to_string());
            let mut raw = [0u8; 16];
            raw[..4].copy_from_slice(&o);
            assert_eq!(ip(AF_INET, &raw), std::net::Ipv4Addr::from(o).to_string());
        }
    }
}

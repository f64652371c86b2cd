//! Addresses, endpoints and rates as text, as records and pages show them.

use std::fmt::Write as _;
use std::net::IpAddr;

use arrayvec::ArrayString;

use super::FlowId;
use crate::wire::inet_diag::AF_INET;

/// An address as text, held in place: the longest IPv6 text is 45 bytes (INET6_ADDRSTRLEN
/// less its NUL). A record's texts are held in place, not on the heap, because each was an
/// allocation on the analysis thread freed on the writer's, thousands of times a second
/// under churn (benches/RESULTS.md, D34).
pub type IpText = ArrayString<46>;

/// A wall time as RFC 3339 text with ns, held in place: chrono's longest is 38 bytes
/// (`+262143-12-31T23:59:59.999999999+23:59`).
pub type TimeText = ArrayString<40>;

/// A congestion-control name, held in place: the kernel's are under 16 bytes
/// (TCP_CA_NAME_MAX, its NUL included).
pub type CcText = ArrayString<16>;

/// `s` in a text of capacity `N`, cut at a character boundary when longer. Every caller
/// gives text its type's capacity holds (see each type): the cut is never reached.
pub fn text_in<const N: usize>(s: &str) -> ArrayString<N> {
    let mut t = ArrayString::new();
    for c in s.chars() {
        if t.try_push(c).is_err() {
            break;
        }
    }
    t
}

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
pub fn ip(family: u8, raw: &[u8; 16]) -> IpText {
    if family == AF_INET {
        ipv4([raw[0], raw[1], raw[2], raw[3]])
    } else {
        let mut t = IpText::new();
        // At most 45 bytes (the type's note): the write cannot fail.
        let _ = write!(t, "{}", IpAddr::from(*raw));
        t
    }
}

/// Dotted-quad text, written digit by digit: `Ipv4Addr`'s `Display` goes through the
/// formatting machinery, and each record and each ended flow's page entry names two
/// addresses (thousands a second under churn). Tested against `Display`.
fn ipv4(o: [u8; 4]) -> IpText {
    let mut s = IpText::new();
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
            assert_eq!(ipv4(o).as_str(), std::net::Ipv4Addr::from(o).to_string());
            let mut raw = [0u8; 16];
            raw[..4].copy_from_slice(&o);
            assert_eq!(ip(AF_INET, &raw).as_str(), std::net::Ipv4Addr::from(o).to_string());
        }
    }

    #[test]
    fn the_longest_texts_fit_whole() {
        let v6: std::net::Ipv6Addr = "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff".parse().unwrap();
        assert_eq!(ip(10, &v6.octets()).as_str(), v6.to_string());
        let mapped: std::net::Ipv6Addr = "::ffff:255.255.255.255".parse().unwrap();
        assert_eq!(ip(10, &mapped.octets()).as_str(), mapped.to_string());
        let t = chrono::DateTime::<chrono::Utc>::MAX_UTC
            .with_timezone(&chrono::FixedOffset::west_opt(23 * 3600 + 59 * 60).unwrap())
            .to_rfc3339_opts(chrono::SecondsFormat::Nanos, true);
        assert_eq!(text_in::<40>(&t).as_str(), t);
        assert_eq!(text_in::<3>("aéb").as_str(), "aé", "cut at a character boundary");
    }
}

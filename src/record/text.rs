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

/// RFC 3339 with nanoseconds, `Z` for UTC: what chrono's
/// `to_rfc3339_opts(SecondsFormat::Nanos, true)` writes, digit by digit. Each record has two
/// (`StartTime`, `EndTime`), and chrono's formatting machinery was a twentieth of the
/// poll loop's CPU at 2,000 connections a second (benches/RESULTS.md, issue 34). Years
/// outside 0–9999, a leap second and an offset with seconds go to chrono. Tested against
/// chrono.
pub fn rfc3339_nanos(t: &chrono::DateTime<chrono::FixedOffset>) -> String {
    use chrono::{Datelike, Timelike};
    let off = t.offset().local_minus_utc();
    let l = t.naive_local();
    let (year, nanos) = (l.year(), l.nanosecond());
    if !(0..=9999).contains(&year) || nanos >= 1_000_000_000 || off % 60 != 0 {
        return t.to_rfc3339_opts(chrono::SecondsFormat::Nanos, true);
    }
    let mut b = [0u8; 35];
    let mut n = 0;
    let mut put = |v: u32, digits: u32, after: u8| {
        for k in (0..digits).rev() {
            b[n] = b'0' + (v / 10u32.pow(k) % 10) as u8;
            n += 1;
        }
        if after != 0 {
            b[n] = after;
            n += 1;
        }
    };
    put(year as u32, 4, b'-');
    put(l.month(), 2, b'-');
    put(l.day(), 2, b'T');
    put(l.hour(), 2, b':');
    put(l.minute(), 2, b':');
    put(l.second(), 2, b'.');
    put(nanos, 9, 0);
    if off == 0 {
        put(0, 0, b'Z');
    } else {
        put(0, 0, if off < 0 { b'-' } else { b'+' });
        let m = off.unsigned_abs() / 60;
        put(m / 60, 2, b':');
        put(m % 60, 2, 0);
    }
    String::from_utf8_lossy(&b[..n]).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_text_is_chronos() {
        use chrono::{DateTime, FixedOffset, SecondsFormat};
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut secs =
            vec![0i64, -1, 1_764_187_765, 253_402_300_799, 253_402_300_800, -62_167_219_200];
        for _ in 0..5_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            secs.push((x % 4_000_000_000) as i64 - 100_000_000);
        }
        let offsets = [0, 3600, -3600, 19_800, -34_200, 50_400, -43_200, 45, -3599];
        for (i, &s) in secs.iter().enumerate() {
            let nanos = [0, 1, 999_999_999, 559_115_064][i % 4];
            let t = DateTime::from_timestamp(s, nanos).unwrap();
            for &o in &offsets {
                let t = t.with_timezone(&FixedOffset::east_opt(o).unwrap());
                assert_eq!(rfc3339_nanos(&t), t.to_rfc3339_opts(SecondsFormat::Nanos, true));
            }
        }
    }

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

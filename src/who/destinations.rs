//! Names for the remote end of a flow (`DestService`): a map of address prefixes and port
//! ranges to names (`--dest-map FILE`), then built-in fallbacks: `local` (loopback and the
//! host's own addresses), `private` (RFC 1918, IPv6 ULA, the CGNAT range) and `external`.
//!
//! The file has one entry a line, `CIDR[:PORT[-PORT]] NAME`, `#` starting a comment:
//!
//! ```text
//! 10.96.0.0/12        kubernetes-services
//! 10.1.2.3/32:5432    postgres
//! [fd00::/8]:443      mesh-gateway
//! 2001:db8::/32       partner
//! ```
//!
//! An IPv6 prefix with a port is written in brackets, as an address with a port is. The
//! longest prefix that holds the address wins; among entries of that prefix, the narrowest
//! port range that holds the port. An IPv4 address seen as IPv4-mapped IPv6 (a dual-stack
//! socket) is looked up as IPv4. Pure: the caller reads the file and the host's addresses.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

/// A line of the map that cannot be used; the message names the line and the bad value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {why}")]
pub struct MapError {
    /// 1-based line number.
    pub line: usize,
    /// What is wrong, with the value.
    pub why: String,
}

/// The entries of one prefix length: the masked address (IPv4 in the low 32 bits) → its
/// port ranges and names.
type Nets = HashMap<u128, Ports>;

/// One prefix's port ranges. Lines are gathered as they are read and indexed once, when
/// the whole file is in ([`Ports::index`]): inserting each line into a sorted list made
/// 100,000 ranges on one prefix take 27.7 s to load (quadratic). The index cuts the ports
/// into stretches over which the narrowest holding range does not change, so a lookup is a
/// binary search over at most twice as many stretches as ranges.
#[derive(Debug, Clone, Default)]
struct Ports {
    /// (lo, hi, name) in the file's order.
    lines: Vec<(u16, u16, Arc<str>)>,
    /// The first port of each stretch, ascending, from 0.
    starts: Vec<u16>,
    /// Each stretch's name (an index into `lines`), if a range holds it.
    names: Vec<Option<u32>>,
}

impl Ports {
    /// Builds the stretches: ranges narrowest first (the earlier line first among equal
    /// widths; of two lines with the same range, only the later counts), each taking the
    /// stretches no narrower range took. A "next free stretch" forest makes every stretch
    /// taken once, so the build is near-linear in ranges and stretches.
    fn index(&mut self) {
        let mut last: HashMap<(u16, u16), usize> = HashMap::new();
        for (i, (lo, hi, _)) in self.lines.iter().enumerate() {
            last.insert((*lo, *hi), i);
        }
        let mut order: Vec<usize> = last.into_values().collect();
        order.sort_by_key(|&i| (self.lines[i].1 - self.lines[i].0, i));
        let mut points: Vec<u32> = vec![0];
        for &i in &order {
            points.push(u32::from(self.lines[i].0));
            points.push(u32::from(self.lines[i].1) + 1);
        }
        points.sort_unstable();
        points.dedup();
        if points.last() == Some(&65_536) {
            points.pop();
        }
        let n = points.len();
        let mut names = vec![None; n];
        let mut next: Vec<usize> = (0..=n).collect();
        fn find(next: &mut [usize], mut i: usize) -> usize {
            while next[i] != i {
                next[i] = next[next[i]];
                i = next[i];
            }
            i
        }
        let at = |p: u32| points.partition_point(|&q| q < p);
        for &i in &order {
            let (lo, hi, _) = &self.lines[i];
            let (from, to) = (at(u32::from(*lo)), at(u32::from(*hi) + 1));
            let mut j = find(&mut next, from);
            while j < to {
                names[j] = Some(i as u32);
                next[j] = j + 1;
                j = find(&mut next, j + 1);
            }
        }
        self.starts = points.into_iter().map(|p| p as u16).collect();
        self.names = names;
    }

    /// The narrowest range's name that holds `port`.
    fn get(&self, port: u16) -> Option<&Arc<str>> {
        let i = self.starts.partition_point(|&s| s <= port).checked_sub(1)?;
        self.names[i].map(|k| &self.lines[k as usize].2)
    }
}

/// The names of destinations.
#[derive(Debug, Clone, Default)]
pub struct DestMap {
    /// Entries by prefix length and family (IPv4 or not), longest first.
    by_len: Vec<(u8, bool, Nets)>,
    /// The host's own addresses (for `local`).
    own: Vec<IpAddr>,
    entries: usize,
}

/// The names the fallbacks give.
pub const LOCAL: &str = "local";
/// RFC 1918, IPv6 unique-local and CGNAT (RFC 6598) addresses.
pub const PRIVATE: &str = "private";
/// Everything else.
pub const EXTERNAL: &str = "external";

impl DestMap {
    /// Parses a map's text; `own` are the host's addresses (named `local` unless an entry
    /// names them).
    ///
    /// # Errors
    /// The first line that is not `CIDR[:PORT[-PORT]] NAME`.
    pub fn parse(text: &str, own: Vec<IpAddr>) -> Result<Self, MapError> {
        let mut m = DestMap { own, ..DestMap::default() };
        for (i, raw) in text.lines().enumerate() {
            let line = raw.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let bad = |why: String| MapError { line: i + 1, why };
            let mut words = line.split_whitespace();
            let (Some(target), Some(name), None) = (words.next(), words.next(), words.next())
            else {
                return Err(bad(format!("{:?}: want CIDR[:PORT[-PORT]] NAME", clip(line))));
            };
            let (net, len, v4, lo, hi) = parse_target(target).map_err(bad)?;
            let valid = name.bytes().all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\\');
            if !valid || name.len() > 128 {
                return Err(bad(format!(
                    "name {:?}: printable, no quotes, at most 128",
                    clip(name)
                )));
            }
            m.insert(net, len, v4, lo, hi, Arc::from(name));
        }
        for (_, _, nets) in &mut m.by_len {
            for ports in nets.values_mut() {
                ports.index();
            }
        }
        Ok(m)
    }

    /// Only the fallbacks.
    pub fn fallbacks(own: Vec<IpAddr>) -> Self {
        DestMap { own, ..DestMap::default() }
    }

    /// Entries read from the file.
    pub fn len(&self) -> usize {
        self.entries
    }

    /// True when the file gave no entry.
    pub fn is_empty(&self) -> bool {
        self.entries == 0
    }

    fn insert(&mut self, net: u128, len: u8, v4: bool, lo: u16, hi: u16, name: Arc<str>) {
        let i = match self.by_len.iter().position(|(l, f, _)| *l == len && *f == v4) {
            Some(i) => i,
            None => {
                self.by_len.push((len, v4, HashMap::new()));
                // Longest first (an IPv4 length counts as its mapped IPv6 length).
                self.by_len.sort_by_key(|(l, f, _)| std::cmp::Reverse(full_len(*l, *f)));
                self.by_len.iter().position(|(l, f, _)| *l == len && *f == v4).expect("inserted")
            }
        };
        // Indexed once the file is read ([`Ports::index`]); a repeated entry's later line
        // wins there, as a reader of the file would expect.
        self.by_len[i].2.entry(net).or_default().lines.push((lo, hi, name));
        self.entries += 1;
    }

    /// The name of the remote end `addr:port`.
    pub fn name(&self, addr: IpAddr, port: u16) -> Arc<str> {
        let addr = unmapped(addr);
        self.entry(addr, port).cloned().unwrap_or_else(|| Arc::from(fallback(addr, &self.own)))
    }

    /// As [`name`](Self::name), borrowed: no `Arc` made for a built-in name (the writer
    /// names every record, thousands a second under churn).
    pub fn name_str(&self, addr: IpAddr, port: u16) -> &str {
        let addr = unmapped(addr);
        match self.entry(addr, port) {
            Some(n) => n,
            None => fallback(addr, &self.own),
        }
    }

    /// The file's entry for `addr:port` (`addr` unmapped), longest prefix first.
    fn entry(&self, addr: IpAddr, port: u16) -> Option<&Arc<str>> {
        let (bits, v4) = match addr {
            IpAddr::V4(a) => (u128::from(u32::from(a)), true),
            IpAddr::V6(a) => (u128::from(a), false),
        };
        for (len, fam, nets) in &self.by_len {
            if *fam != v4 {
                continue;
            }
            if let Some(name) = nets.get(&mask(bits, *len, v4)).and_then(|p| p.get(port)) {
                return Some(name);
            }
        }
        None
    }
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is; others as they are.
fn unmapped(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V6(a) => a.to_ipv4_mapped().map_or(addr, IpAddr::V4),
        a => a,
    }
}

/// The built-in name of `addr` (already unmapped from IPv4-mapped IPv6).
fn fallback(addr: IpAddr, own: &[IpAddr]) -> &'static str {
    if addr.is_loopback() || addr.is_unspecified() || own.contains(&addr) {
        return LOCAL;
    }
    let private = match addr {
        IpAddr::V4(a) => {
            let o = a.octets();
            a.is_private() || (o[0] == 100 && (o[1] & 0xc0) == 64)
        }
        IpAddr::V6(a) => (a.segments()[0] & 0xfe00) == 0xfc00,
    };
    if private { PRIVATE } else { EXTERNAL }
}

fn full_len(len: u8, v4: bool) -> u8 {
    if v4 { len + 96 } else { len }
}

fn mask(bits: u128, len: u8, v4: bool) -> u128 {
    let width = if v4 { 32 } else { 128 };
    if len == 0 {
        return 0;
    }
    let keep = u32::from(width - len);
    let m = if v4 { (u128::from(u32::MAX) >> keep) << keep } else { (u128::MAX >> keep) << keep };
    bits & m
}

/// `CIDR[:PORT[-PORT]]` (IPv6 with a port in brackets) → masked network, prefix length,
/// IPv4 or not, and the port range (all ports when none is given).
fn parse_target(t: &str) -> Result<(u128, u8, bool, u16, u16), String> {
    let (cidr, ports) = if let Some(rest) = t.strip_prefix('[') {
        let (c, after) =
            rest.split_once(']').ok_or_else(|| format!("{:?}: a '[' without ']'", clip(t)))?;
        match after {
            "" => (c, None),
            p => {
                (c, Some(p.strip_prefix(':').ok_or_else(|| format!("{:?}: want ]:PORT", clip(t)))?))
            }
        }
    } else if t.matches(':').count() == 1 {
        let (c, p) = t.split_once(':').expect("one colon");
        (c, Some(p))
    } else {
        (t, None)
    };
    let (addr, len) = match cidr.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (cidr, None),
    };
    let ip: IpAddr = addr.parse().map_err(|_| format!("{:?}: not an IP address", clip(addr)))?;
    let (bits, v4, width) = match ip {
        IpAddr::V4(a) => (u128::from(u32::from(a)), true, 32),
        IpAddr::V6(a) => (u128::from(a), false, 128),
    };
    let len = match len {
        None => width,
        Some(l) => l
            .parse::<u8>()
            .ok()
            .filter(|l| *l <= width)
            .ok_or_else(|| format!("{:?}: a prefix length of 0 to {width}", clip(l)))?,
    };
    let (lo, hi) = match ports {
        None => (0, u16::MAX),
        Some(p) => {
            let port = |s: &str| {
                s.parse::<u16>().map_err(|_| format!("{:?}: not a port (0-65535)", clip(s)))
            };
            let (a, b) = match p.split_once('-') {
                Some((a, b)) => (port(a)?, port(b)?),
                None => (port(p)?, port(p)?),
            };
            if a > b {
                return Err(format!("{:?}: the range runs backwards", clip(p)));
            }
            (a, b)
        }
    };
    Ok((mask(bits, len, v4), len, v4, lo, hi))
}

fn clip(s: &str) -> std::borrow::Cow<'_, str> {
    crate::units::clip(s)
}

/// The host's own addresses, from `getifaddrs(3)` (empty when it fails: those addresses
/// then fall to `private` or `external`).
pub fn own_addresses() -> Vec<IpAddr> {
    let mut out = Vec::new();
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills `head` with a list that freeifaddrs releases; each entry's
    // address, when not null, points to a sockaddr of the family it names.
    unsafe {
        if libc::getifaddrs(&raw mut head) != 0 {
            return out;
        }
        let mut p = head;
        while !p.is_null() {
            let a = (*p).ifa_addr;
            if !a.is_null() {
                match i32::from((*a).sa_family) {
                    libc::AF_INET => {
                        let s = &*a.cast::<libc::sockaddr_in>();
                        out.push(IpAddr::from(u32::from_be(s.sin_addr.s_addr).to_be_bytes()));
                    }
                    libc::AF_INET6 => {
                        let s = &*a.cast::<libc::sockaddr_in6>();
                        out.push(IpAddr::from(s.sin6_addr.s6_addr));
                    }
                    _ => {}
                }
            }
            p = (*p).ifa_next;
        }
        libc::freeifaddrs(head);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    const MAP: &str = "\
# the fleet
10.0.0.0/8            corp
10.1.0.0/16           db-net
10.1.2.3/32:5432      postgres
10.1.2.3/32:5000-5999 app
10.1.2.3/32:5400-5499 narrower
[fd00::/8]:443        mesh
2001:db8::/32         partner   # a comment
192.0.2.7             one-host
";

    #[test]
    fn the_longest_prefix_then_the_narrowest_range_wins() {
        let m = DestMap::parse(MAP, vec![ip("192.0.2.50")]).unwrap();
        assert_eq!(m.len(), 8);
        // Owned and borrowed, the same name.
        let n = |a: &str, p: u16| {
            let owned = m.name(ip(a), p).to_string();
            assert_eq!(m.name_str(ip(a), p), owned, "{a}:{p}");
            owned
        };
        assert_eq!(n("10.9.9.9", 80), "corp");
        assert_eq!(n("10.1.7.7", 80), "db-net");
        assert_eq!(n("10.1.2.3", 5432), "postgres");
        assert_eq!(n("10.1.2.3", 5450), "narrower");
        assert_eq!(n("10.1.2.3", 5100), "app");
        assert_eq!(n("10.1.2.3", 22), "db-net", "no range holds 22: the next prefix");
        assert_eq!(n("fd12::1", 443), "mesh");
        assert_eq!(n("fd12::1", 80), "private");
        assert_eq!(n("2001:db8:1::9", 1), "partner");
        assert_eq!(n("192.0.2.7", 9), "one-host");
        // A dual-stack socket's IPv4 peer.
        assert_eq!(n("::ffff:10.1.2.3", 5432), "postgres");
        // The fallbacks.
        assert_eq!(n("127.0.0.1", 1), "local");
        assert_eq!(n("::1", 1), "local");
        assert_eq!(n("192.0.2.50", 1), "local", "the host's own address");
        assert_eq!(n("172.20.0.1", 1), "private");
        assert_eq!(n("192.168.1.1", 1), "private");
        assert_eq!(n("100.100.0.1", 1), "private", "CGNAT");
        assert_eq!(n("100.128.0.1", 1), "external");
        assert_eq!(n("8.8.8.8", 53), "external");
        assert_eq!(n("2a00::1", 443), "external");
    }

    #[test]
    fn a_bad_line_is_named_with_its_value() {
        for (text, says) in [
            ("10.0.0.0/8", "line 1: \"10.0.0.0/8\": want CIDR[:PORT[-PORT]] NAME"),
            ("# c\n10.0.0.0/33 x", "line 2: \"33\": a prefix length of 0 to 32"),
            ("10.0.0.300 x", "line 1: \"10.0.0.300\": not an IP address"),
            ("10.0.0.1:70000 x", "line 1: \"70000\": not a port (0-65535)"),
            ("10.0.0.1:90-80 x", "line 1: \"90-80\": the range runs backwards"),
            ("[fd00::/8 x", "line 1: \"[fd00::/8\": a '[' without ']'"),
            ("10.0.0.1 a\"b", "line 1: name \"a\\\"b\": printable, no quotes, at most 128"),
            ("10.0.0.1 a b", "line 1: \"10.0.0.1 a b\": want CIDR[:PORT[-PORT]] NAME"),
        ] {
            assert_eq!(DestMap::parse(text, vec![]).unwrap_err().to_string(), says, "{text}");
        }
    }

    /// The index gives what the rule says: of the ranges that hold the port, the
    /// narrowest; the earlier line among equal widths; the later of two equal lines.
    #[test]
    fn the_port_index_agrees_with_the_rule_for_any_ranges() {
        use proptest::prelude::*;
        let range = (0u16..70, 0u16..40, 0usize..4).prop_map(|(lo, w, n)| {
            let lo = if lo >= 60 { 65_535 - (lo - 60) * 3 } else { lo };
            (lo, lo.saturating_add(w), n)
        });
        proptest!(|(rs in proptest::collection::vec(range, 0..30), port in 0u16..120)| {
            let port = if port >= 100 { 65_535 - (port - 100) } else { port };
            let text: String =
                rs.iter().map(|(lo, hi, n)| format!("10.0.0.1/32:{lo}-{hi} n{n}\n")).collect();
            let m = DestMap::parse(&text, vec![]).unwrap();
            // The rule, by brute force: the last line of each distinct range, narrowest
            // first, earlier first among equals.
            let mut lines: Vec<(usize, u16, u16, usize)> = Vec::new();
            for (i, &(lo, hi, n)) in rs.iter().enumerate() {
                lines.retain(|l| (l.1, l.2) != (lo, hi));
                lines.push((i, lo, hi, n));
            }
            lines.sort_by_key(|l| (l.2 - l.1, l.0));
            let want = lines.iter().find(|l| (l.1..=l.2).contains(&port)).map(|l| format!("n{}", l.3));
            let got = m.entry(ip("10.0.0.1"), port).map(|n| n.to_string());
            prop_assert_eq!(got, want);
        });
    }

    #[test]
    fn host_addresses_include_loopback() {
        assert!(own_addresses().contains(&ip("127.0.0.1")));
    }
}

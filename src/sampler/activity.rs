//! Whether anything happened in a network namespace's TCP since a point in time: its
//! segment counters, and whether it shares the host's TCP hash table.
//!
//! Why: with the default kernel settings every namespace's sockets live in one TCP hash
//! table, and a namespace's dump walks all of it, skipping other namespaces' sockets. A
//! full dump of N namespaces walks the host's table N times (docs/kernel.md, "Network
//! namespaces"), whatever the monitor does. A namespace in which no TCP segment was sent or
//! received since its last walk holds nothing new to find: no socket can have opened or
//! changed what it would record. Its TCP MIB (`InSegs`, `OutSegs`, both families) tells,
//! for the price of reading one small file, so the sampling task walks only namespaces that
//! moved (`poll/spaces.rs`).
//!
//! The counters come from `/proc/thread-self/net/snmp` opened by a thread inside the
//! namespace: the file stays bound to that namespace after the thread leaves, and is read
//! again from offset 0 each time.

use crate::units::ValueError;
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// A namespace's TCP segment counters: `InSegs` and `OutSegs`. Any segment, sent or
/// received, by any socket of the namespace (or answering none, as a reset does), moves one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Segments {
    /// `Tcp: InSegs`.
    pub received: u64,
    /// `Tcp: OutSegs` (retransmissions and resets included).
    pub sent: u64,
}

/// Where a namespace's segment counters are read from.
#[derive(Debug)]
pub enum Activity {
    /// The namespace's `/proc/net/snmp`, opened inside it.
    Snmp {
        /// The open file.
        file: File,
        /// Read buffer, kept between reads.
        buf: Vec<u8>,
    },
    /// A counter set by hand: simulations and tests, which have no namespace.
    Counter(Arc<AtomicU64>),
}

impl Activity {
    /// The segment counters of the calling thread's network namespace (call it from a thread
    /// that entered the namespace; the file keeps to it afterwards).
    ///
    /// # Errors
    /// The file cannot be opened (no procfs), or its first read does not parse.
    pub fn open_here() -> io::Result<Self> {
        // Not /proc/self/net: that is the thread-group leader's namespace, not this thread's.
        let file = File::open("/proc/thread-self/net/snmp")?;
        let mut a = Self::Snmp { file, buf: Vec::with_capacity(4096) };
        a.read()?;
        Ok(a)
    }

    /// The counters now.
    ///
    /// # Errors
    /// The read failed, or the text has no `Tcp:` lines with `InSegs` and `OutSegs`.
    pub fn read(&mut self) -> io::Result<Segments> {
        match self {
            Self::Counter(c) => Ok(Segments { received: c.load(Ordering::Relaxed), sent: 0 }),
            Self::Snmp { file, buf } => {
                buf.clear();
                let mut chunk = [0u8; 4096];
                loop {
                    let n = file.read_at(&mut chunk, buf.len() as u64)?;
                    if n == 0 {
                        break;
                    }
                    buf.extend_from_slice(&chunk[..n]);
                }
                parse_snmp(buf).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.0))
            }
        }
    }
}

/// `InSegs` and `OutSegs` from the text of `/proc/net/snmp`: a `Tcp:` line of names, then a
/// `Tcp:` line of values in the same order.
///
/// # Errors
/// No such pair of lines, a missing name, or a value that is not a number; the message
/// names what was wrong.
pub fn parse_snmp(text: &[u8]) -> Result<Segments, ValueError> {
    let bad = ValueError;
    let text = std::str::from_utf8(text).map_err(|e| bad(format!("snmp: not UTF-8: {e}")))?;
    let mut tcp = text.lines().filter_map(|l| l.strip_prefix("Tcp:"));
    let (Some(names), Some(values)) = (tcp.next(), tcp.next()) else {
        return Err(bad("snmp: no Tcp: lines".into()));
    };
    let field = |want: &str| -> Result<u64, ValueError> {
        let i = names
            .split_whitespace()
            .position(|n| n == want)
            .ok_or_else(|| bad(format!("snmp: no Tcp {want}")))?;
        let v = values
            .split_whitespace()
            .nth(i)
            .ok_or_else(|| bad(format!("snmp: no value for {want}")))?;
        v.parse().map_err(|_| bad(format!("snmp: Tcp {want} is {v:?}, not a count")))
    };
    Ok(Segments { received: field("InSegs")?, sent: field("OutSegs")? })
}

/// Whether the calling thread's namespace shares its TCP hash table with others (Linux
/// 6.1+ tells through `net.ipv4.tcp_ehash_entries`, negative when shared); `None` when the
/// kernel does not say.
pub fn tcp_hash_shared_here() -> Option<bool> {
    let s = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_ehash_entries").ok()?;
    s.trim().parse::<i64>().ok().map(|v| v < 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The file's shape on Linux 6.18 (this machine), abridged to the lines around `Tcp:`.
    const SNMP: &str = "Ip: Forwarding DefaultTTL InReceives InHdrErrors\n\
        Ip: 1 64 55620581 0\n\
        Tcp: RtoAlgorithm RtoMin RtoMax MaxConn ActiveOpens PassiveOpens AttemptFails EstabResets CurrEstab InSegs OutSegs RetransSegs InErrs OutRsts InCsumErrors\n\
        Tcp: 1 200 120000 -1 2405385 2405255 48 2478323 20000 55517785 55521389 6236 0 1245254 0\n\
        Udp: InDatagrams NoPorts\n\
        Udp: 10 0\n";

    #[test]
    fn segments_are_read_by_name() {
        assert_eq!(
            parse_snmp(SNMP.as_bytes()),
            Ok(Segments { received: 55517785, sent: 55521389 })
        );
        // Columns found by name, not by place.
        let moved = "Tcp: OutSegs Other InSegs\nTcp: 7 1 9\n";
        assert_eq!(parse_snmp(moved.as_bytes()), Ok(Segments { received: 9, sent: 7 }));
    }

    #[test]
    fn a_bad_file_says_what_is_wrong() {
        assert_eq!(parse_snmp(b"Ip: a\nIp: 1\n").unwrap_err().0, "snmp: no Tcp: lines");
        let e = parse_snmp(b"Tcp: InSegs\nTcp: 5\n").unwrap_err().0;
        assert_eq!(e, "snmp: no Tcp OutSegs");
        let e = parse_snmp(b"Tcp: InSegs OutSegs\nTcp: 5 x\n").unwrap_err().0;
        assert_eq!(e, "snmp: Tcp OutSegs is \"x\", not a count");
        let e = parse_snmp(b"Tcp: InSegs OutSegs\nTcp: 5\n").unwrap_err().0;
        assert_eq!(e, "snmp: no value for OutSegs");
    }

    /// A connection on `at` that carries one message; the segment counters before and after.
    fn exchange_on(a: &mut Activity, at: &str) -> Option<(Segments, Segments)> {
        use std::io::{Read, Write};
        let before = a.read().unwrap();
        let l = std::net::TcpListener::bind(at).ok()?;
        let mut c = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (mut s, _) = l.accept().unwrap();
        c.write_all(b"ping").unwrap();
        let mut got = [0u8; 4];
        s.read_exact(&mut got).unwrap();
        Some((before, a.read().unwrap()))
    }

    #[test]
    fn this_namespace_counts_its_loopback_segments_of_both_families() {
        // The kernel for real: a loopback exchange (handshake and data, at least three
        // segments each way) moves this namespace's counters, IPv6 as well as IPv4.
        let mut a = Activity::open_here().expect("procfs");
        let (before, after) = exchange_on(&mut a, "127.0.0.1:0").unwrap();
        assert!(after.received >= before.received + 3, "{before:?} -> {after:?}");
        assert!(after.sent >= before.sent + 3, "{before:?} -> {after:?}");
        match exchange_on(&mut a, "[::1]:0") {
            Some((before, after)) => {
                assert!(after.received >= before.received + 3, "IPv6: {before:?} -> {after:?}");
                assert!(after.sent >= before.sent + 3, "IPv6: {before:?} -> {after:?}");
            }
            None => eprintln!("skipped the IPv6 part: no ::1 here"),
        }
    }
}

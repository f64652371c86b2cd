//! Connects that never established: told from a socket's final counters in its destroy
//! event (docs/diagnosis.md, "Connections that never establish").
//!
//! Measured on Linux 6.18 (a connect to a closed loopback port, to a listener whose accept
//! queue was full, and a connection closed with `SO_LINGER` 0 for contrast):
//! - a socket whose handshake never completed has `tcpi_bytes_acked` 0 and no negotiated
//!   option (`tcpi_options` 0); one that completed it has the SYN acknowledged (1 or more)
//!   and, from any Linux peer, options. An abortive close keeps the port and the counters.
//! - a **blocking** `connect()` that fails is disconnected by the kernel before it is
//!   destroyed: the remote port reads 0 and the counters are cleared, all but
//!   `tcpi_retransmits` (the SYNs sent again). A refusal then reads as 0 retransmits; a
//!   time-out as the SYN retries and one.
//! - a **non-blocking** connect keeps its port and counters: a RST that refused it shows
//!   as one segment in (`tcpi_segs_in`); an attempt the application closed while the SYN
//!   went unanswered shows its retransmits and nothing in.

use crate::wire::sock::Sample;
use crate::wire::tcp_info::TcpInfo;

/// How an attempt ended, as far as the kernel lets us tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Answered at once with a refusal (a RST; an ICMP error reads the same when the port
    /// was cleared), or refused after SYNs sent again.
    Refused,
    /// The kernel gave up after its SYN retries, unanswered.
    SynTimeout,
    /// The application closed it while its SYN went unanswered.
    Abandoned,
}

impl Outcome {
    /// The record's `Cause` (and the `outcome` label).
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Refused => "refused",
            Outcome::SynTimeout => "syn-timeout",
            Outcome::Abandoned => "abandoned",
        }
    }
}

/// The outcomes' names, in the order the metrics list them.
pub const OUTCOMES: [&str; 3] = ["refused", "syn-timeout", "abandoned"];

/// A connect that never established.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Attempt {
    /// How it ended.
    pub outcome: Outcome,
    /// SYNs sent again before it ended.
    pub syn_retransmits: u8,
    /// Whether the remote port is known: the kernel clears it for a blocking connect that
    /// failed, and then only a dump that saw the attempt connecting supplies it.
    pub port_known: bool,
}

/// The attempt a destroy event's socket was, if its handshake never completed.
/// `syn_retries`: the SYN retries after which the kernel gives up
/// (`net.ipv4.tcp_syn_retries`, 6 by default).
pub fn classify(s: &Sample<'_>, t: &TcpInfo<'_>, syn_retries: u8) -> Option<Attempt> {
    let never_set_up = t.bytes_acked() == Some(0)
        && t.bytes_received().unwrap_or(0) == 0
        && t.options().unwrap_or(0) == 0;
    // A listener's destroy event has no peer address at all.
    if !never_set_up || s.msg().dst().is_unspecified() {
        return None;
    }
    let port_known = s.msg().dport() != 0;
    // The total is a u32; more than 255 SYNs (a raised tcp_syn_retries) stays 255 rather
    // than wrapping to a small count.
    let total = u8::try_from(t.total_retrans().unwrap_or(0)).unwrap_or(u8::MAX);
    let retransmits = t.retransmits().unwrap_or(0).max(total);
    let outcome = if port_known && t.segs_in().unwrap_or(0) > 0 {
        Outcome::Refused
    } else if retransmits >= syn_retries {
        Outcome::SynTimeout
    } else if port_known {
        Outcome::Abandoned
    } else {
        // Cleared by a failed blocking connect before its retries ran out: an answer
        // (RST or ICMP) ended it.
        Outcome::Refused
    };
    Some(Attempt { outcome, syn_retransmits: retransmits, port_known })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::build::SockBuilder;
    use crate::wire::sock::batch;

    /// A destroy event of a socket that never set up: state CLOSE, no options, nothing
    /// acked; `port` its remote port, `retransmits`, `segs_in`.
    fn event(port: u16, retransmits: u8, segs_in: u32) -> Option<Attempt> {
        let b = SockBuilder::new(1, 40000, port)
            .state(7)
            .bytes_acked(0)
            .retransmits(retransmits)
            .segs_in(segs_in);
        let b = batch(&[(0, b.build())]);
        let s = b.get(0).unwrap();
        classify(&s, &s.tcp_info().unwrap(), 6)
    }

    #[test]
    fn each_ending_is_told_apart_as_the_kernel_leaves_it() {
        let a = |o, n, k| Some(Attempt { outcome: o, syn_retransmits: n, port_known: k });
        // Blocking, port cleared: at once is refused, past the retries a time-out.
        assert_eq!(event(0, 0, 0), a(Outcome::Refused, 0, false));
        assert_eq!(event(0, 7, 0), a(Outcome::SynTimeout, 7, false));
        // Non-blocking, port kept: the RST came in; or the application gave up.
        assert_eq!(event(443, 0, 1), a(Outcome::Refused, 0, true));
        assert_eq!(event(443, 1, 0), a(Outcome::Abandoned, 1, true));
        assert_eq!(event(443, 6, 0), a(Outcome::SynTimeout, 6, true));
    }

    #[test]
    fn a_retransmit_total_past_255_saturates_and_does_not_wrap() {
        let b = SockBuilder::new(1, 40000, 0).state(7).bytes_acked(0).total_retrans(300);
        let b = batch(&[(0, b.build())]);
        let s = b.get(0).unwrap();
        let got = classify(&s, &s.tcp_info().unwrap(), 6).unwrap();
        assert_eq!((got.outcome, got.syn_retransmits), (Outcome::SynTimeout, 255));
    }

    #[test]
    fn the_metrics_know_every_outcome() {
        assert_eq!(OUTCOMES, crate::metrics::verdicts::CONNECT_OUTCOMES);
        for o in [Outcome::Refused, Outcome::SynTimeout, Outcome::Abandoned] {
            assert!(OUTCOMES.contains(&o.as_str()));
        }
    }

    #[test]
    fn a_connection_that_was_set_up_is_no_attempt() {
        let b = SockBuilder::new(1, 40000, 443).state(7).bytes_acked(1).options(7);
        let b = batch(&[(0, b.build())]);
        let s = b.get(0).unwrap();
        assert_eq!(classify(&s, &s.tcp_info().unwrap(), 6), None);
    }
}

//! The TCP states: their numbers as the kernel gives them in `idiag_state` and
//! `tcpi_state`, the names `ss` prints and parses, and state sets for `idiag_states`. The
//! one place that knows them (docs/kernel.md).

use std::fmt;

/// The kernel's TCP states, numbered as in include/net/tcp_states.h.
pub mod tcp {
    /// TCP_ESTABLISHED.
    pub const ESTABLISHED: u8 = 1;
    /// TCP_SYN_SENT.
    pub const SYN_SENT: u8 = 2;
    /// TCP_SYN_RECV.
    pub const SYN_RECV: u8 = 3;
    /// TCP_FIN_WAIT1.
    pub const FIN_WAIT1: u8 = 4;
    /// TCP_FIN_WAIT2.
    pub const FIN_WAIT2: u8 = 5;
    /// TCP_TIME_WAIT.
    pub const TIME_WAIT: u8 = 6;
    /// TCP_CLOSE.
    pub const CLOSE: u8 = 7;
    /// TCP_CLOSE_WAIT.
    pub const CLOSE_WAIT: u8 = 8;
    /// TCP_LAST_ACK.
    pub const LAST_ACK: u8 = 9;
    /// TCP_LISTEN.
    pub const LISTEN: u8 = 10;
    /// TCP_CLOSING.
    pub const CLOSING: u8 = 11;
    /// TCP_NEW_SYN_RECV (request sockets).
    pub const NEW_SYN_RECV: u8 = 12;
}

/// The states by the names `ss` parses (`--states`).
pub const STATE_NAMES: [(&str, u8); 11] = [
    ("established", tcp::ESTABLISHED),
    ("syn-sent", tcp::SYN_SENT),
    ("syn-recv", tcp::SYN_RECV),
    ("fin-wait-1", tcp::FIN_WAIT1),
    ("fin-wait-2", tcp::FIN_WAIT2),
    ("time-wait", tcp::TIME_WAIT),
    ("closed", tcp::CLOSE),
    ("close-wait", tcp::CLOSE_WAIT),
    ("last-ack", tcp::LAST_ACK),
    ("listening", tcp::LISTEN),
    ("closing", tcp::CLOSING),
];

/// A state as `ss` prints it (`ESTAB`, `TIME-WAIT`, …), as records and views name it.
pub fn name(state: u8) -> &'static str {
    match state {
        tcp::ESTABLISHED => "ESTAB",
        tcp::SYN_SENT => "SYN-SENT",
        tcp::SYN_RECV => "SYN-RECV",
        tcp::FIN_WAIT1 => "FIN-WAIT-1",
        tcp::FIN_WAIT2 => "FIN-WAIT-2",
        tcp::TIME_WAIT => "TIME-WAIT",
        tcp::CLOSE => "CLOSE",
        tcp::CLOSE_WAIT => "CLOSE-WAIT",
        tcp::LAST_ACK => "LAST-ACK",
        tcp::LISTEN => "LISTEN",
        tcp::CLOSING => "CLOSING",
        tcp::NEW_SYN_RECV => "NEW-SYN-RECV",
        _ => "UNKNOWN",
    }
}

const LISTEN: u8 = tcp::LISTEN;
const ALL: u32 = 0xffe; // bits 1..=11

/// A set of TCP states as the `idiag_states` bit mask (`1 << state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StateSet(pub u32);

impl Default for StateSet {
    /// Every state but LISTEN, as `ss` does: listeners carry no flow, and cgmon's
    /// ESTABLISHED-only request missed the end of every flow.
    fn default() -> Self {
        StateSet(ALL & !(1 << LISTEN))
    }
}

/// A state name we do not know.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown TCP state {0:?} (want a list of: all, connected, {names})", names = names())]
pub struct UnknownState(pub String);

fn names() -> String {
    STATE_NAMES.iter().map(|(n, _)| *n).collect::<Vec<_>>().join(", ")
}

impl StateSet {
    /// The set with LISTEN added: listeners start no flow, but name the listening ports
    /// (per-service metrics, the accepting side of short flows).
    pub fn with_listeners(self) -> Self {
        StateSet(self.0 | 1 << LISTEN)
    }

    /// True when `state` is in the set.
    pub fn contains(&self, state: u8) -> bool {
        state < 32 && self.0 & (1 << state) != 0
    }

    /// Parses a comma-separated list of `ss` state names, `all`, or `connected` (all but
    /// listening and closed). `listen` and `estab` are accepted as `ss` accepts them.
    ///
    /// # Errors
    /// An empty item or an unknown name, which the error names.
    pub fn parse(s: &str) -> Result<Self, UnknownState> {
        let mut mask = 0u32;
        for item in s.split(',') {
            let item = item.trim().to_ascii_lowercase();
            mask |= match item.as_str() {
                "all" => ALL,
                "connected" => ALL & !(1 << LISTEN) & !(1 << 7),
                "listen" => 1 << LISTEN,
                "estab" => 1 << 1,
                name => match STATE_NAMES.iter().find(|(n, _)| *n == name) {
                    Some((_, bit)) => 1 << bit,
                    None => return Err(UnknownState(item)),
                },
            };
        }
        Ok(StateSet(mask))
    }
}

impl fmt::Display for StateSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v: Vec<_> =
            STATE_NAMES.iter().filter(|(_, b)| self.contains(*b)).map(|(n, _)| *n).collect();
        f.write_str(&v.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_all_but_listen() {
        let d = StateSet::default();
        assert!(d.contains(1) && d.contains(6) && d.contains(11));
        assert!(!d.contains(LISTEN));
        assert_eq!(d.0, 0xffe & !(1 << 10));
    }

    #[test]
    fn parse_names() {
        assert_eq!(StateSet::parse("established").unwrap().0, 2);
        assert_eq!(StateSet::parse(" established , fin-wait-1").unwrap().0, 2 | 16);
        assert_eq!(StateSet::parse("all").unwrap().0, 0xffe);
        let e = StateSet::parse("established,bogus").unwrap_err();
        assert!(e.to_string().contains("\"bogus\""), "{e}");
        assert!(StateSet::parse("").is_err());
    }
}

//! TCP state sets for `idiag_states`, parsed from the names `ss` uses.

use std::fmt;

/// The TCP states, numbered as in include/net/tcp_states.h.
pub const STATE_NAMES: [(&str, u8); 11] = [
    ("established", 1),
    ("syn-sent", 2),
    ("syn-recv", 3),
    ("fin-wait-1", 4),
    ("fin-wait-2", 5),
    ("time-wait", 6),
    ("closed", 7),
    ("close-wait", 8),
    ("last-ack", 9),
    ("listening", 10),
    ("closing", 11),
];

const LISTEN: u8 = 10;
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

//! Filter text → [`Expr`].
//!
//! Grammar, close to `ss`'s:
//!
//! ```text
//! expr   := and ( ("or" | "||") and )*
//! and    := unary ( ("and" | "&&")? unary )*        adjacent terms are AND'ed, as in ss
//! unary  := ("not" | "!") unary | "(" expr ")" | cond
//! cond   := ("sport" | "dport") [op] ports | ("src" | "dst") [op] prefix
//! op     := = | == | eq | in | != | ne | >= | ge | <= | le | > | gt | < | lt
//! ports  := cgmon's list: item ("," item)*, item := port | port "-" port ; ":80" is allowed
//! prefix := address [ "/" bits ], IPv4 or IPv6, optionally in brackets
//! ```
//!
//! Unlike cgmon, a port above 65535, an empty item, a range whose low end exceeds its high
//! end, and trailing junk are errors that name the offending text; whitespace around list
//! items is fine.

use std::net::IpAddr;

use super::{Expr, Prefix, Side};
use crate::wire::inet_diag::{AF_INET, AF_INET6};

/// A filter that does not parse. Each variant names the text at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FilterError {
    /// A port number above 65535.
    #[error("port {0:?} is out of range (0-65535)")]
    PortRange(String),
    /// Not a number.
    #[error("invalid port {0:?}")]
    BadPort(String),
    /// `80,,443`, a trailing comma, or an empty list.
    #[error("empty item in port list {0:?}")]
    EmptyItem(String),
    /// `3000-2000`.
    #[error("port range {0:?} has its low end above its high end")]
    Reversed(String),
    /// A comparison that can match nothing, such as `> 65535`.
    #[error("port comparison {0:?} can match no port")]
    Empty(String),
    /// Not an address or prefix.
    #[error("invalid address or prefix {0:?}")]
    BadAddr(String),
    /// A prefix length beyond the address size.
    #[error("prefix length in {0:?} exceeds the address size")]
    BadPrefixLen(String),
    /// A token where something else was expected.
    #[error("unexpected {found:?} in filter; expected {expected}")]
    Unexpected {
        /// The token found.
        found: String,
        /// What would have been valid.
        expected: &'static str,
    },
    /// Parentheses or `not` nested too deeply.
    #[error("filter nests parentheses or not more than {0} deep")]
    TooDeep(usize),
    /// The text ended early.
    #[error("filter ends early; expected {0}")]
    UnexpectedEnd(&'static str),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Tok {
    LParen,
    RParen,
    Bang,
    AndAnd,
    OrOr,
    Op(&'static str),
    Word(String),
}

impl Tok {
    fn text(&self) -> String {
        match self {
            Tok::LParen => "(".into(),
            Tok::RParen => ")".into(),
            Tok::Bang => "!".into(),
            Tok::AndAnd => "&&".into(),
            Tok::OrOr => "||".into(),
            Tok::Op(o) => (*o).into(),
            Tok::Word(w) => w.clone(),
        }
    }
}

fn lex(s: &str) -> Result<Vec<Tok>, FilterError> {
    let mut out = Vec::new();
    let b = s.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let two = s.get(i..i + 2).unwrap_or("");
        let (tok, n) = match c {
            _ if c.is_ascii_whitespace() => {
                i += 1;
                continue;
            }
            b'(' => (Tok::LParen, 1),
            b')' => (Tok::RParen, 1),
            _ if two == "&&" => (Tok::AndAnd, 2),
            _ if two == "||" => (Tok::OrOr, 2),
            _ if two == "==" => (Tok::Op("="), 2),
            _ if two == "!=" => (Tok::Op("!="), 2),
            _ if two == ">=" => (Tok::Op(">="), 2),
            _ if two == "<=" => (Tok::Op("<="), 2),
            b'!' => (Tok::Bang, 1),
            b'=' => (Tok::Op("="), 1),
            b'>' => (Tok::Op(">"), 1),
            b'<' => (Tok::Op("<"), 1),
            b'&' | b'|' => {
                return Err(FilterError::Unexpected {
                    found: (c as char).to_string(),
                    expected: "&& or ||",
                });
            }
            _ => {
                let end = s[i..]
                    .find(|ch: char| ch.is_ascii_whitespace() || "()!=<>&|".contains(ch))
                    .map_or(s.len(), |n| i + n);
                (Tok::Word(s[i..end].to_string()), end - i)
            }
        };
        out.push(tok);
        i += n;
    }
    Ok(out)
}

/// Parses a filter expression.
///
/// # Errors
/// Any syntax error, naming the offending token.
pub fn parse(s: &str) -> Result<Expr, FilterError> {
    let toks = lex(s)?;
    let mut p = Parser { toks, pos: 0, depth: 0 };
    let e = p.expr()?;
    match p.peek() {
        None => Ok(e),
        Some(t) => {
            Err(FilterError::Unexpected { found: t.text(), expected: "and, or, or the end" })
        }
    }
}

struct Parser {
    toks: Vec<Tok>,
    pos: usize,
    depth: usize,
}

/// Nesting of parentheses and `not` beyond this is refused: the parser, compiler and
/// evaluator recurse, and no real filter needs more.
const MAX_DEPTH: usize = 64;

fn is_word(t: Option<&Tok>, w: &str) -> bool {
    matches!(t, Some(Tok::Word(x)) if x.eq_ignore_ascii_case(w))
}

impl Parser {
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos)
    }

    fn next(&mut self) -> Option<Tok> {
        let t = self.toks.get(self.pos).cloned();
        self.pos += 1;
        t
    }

    fn expr(&mut self) -> Result<Expr, FilterError> {
        let mut terms = vec![self.and()?];
        while matches!(self.peek(), Some(Tok::OrOr)) || is_word(self.peek(), "or") {
            self.pos += 1;
            terms.push(self.and()?);
        }
        Ok(Expr::any_of(terms).expect("at least one term"))
    }

    fn and(&mut self) -> Result<Expr, FilterError> {
        let mut terms = vec![self.unary()?];
        loop {
            if matches!(self.peek(), Some(Tok::AndAnd)) || is_word(self.peek(), "and") {
                self.pos += 1;
            } else if !self.starts_unary() {
                return Ok(Expr::all_of(terms).expect("at least one term"));
            }
            terms.push(self.unary()?);
        }
    }

    fn starts_unary(&self) -> bool {
        match self.peek() {
            Some(Tok::LParen | Tok::Bang) => true,
            Some(Tok::Word(w)) => {
                ["not", "sport", "dport", "src", "dst"].iter().any(|k| w.eq_ignore_ascii_case(k))
            }
            _ => false,
        }
    }

    fn unary(&mut self) -> Result<Expr, FilterError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(FilterError::TooDeep(MAX_DEPTH));
        }
        let e = self.unary_inner();
        self.depth -= 1;
        e
    }

    fn unary_inner(&mut self) -> Result<Expr, FilterError> {
        const WANT: &str = "sport, dport, src, dst, not or (";
        match self.next() {
            None => Err(FilterError::UnexpectedEnd(WANT)),
            Some(Tok::Bang) => Ok(Expr::not(self.unary()?)),
            Some(Tok::LParen) => {
                let e = self.expr()?;
                match self.next() {
                    Some(Tok::RParen) => Ok(e),
                    Some(t) => Err(FilterError::Unexpected { found: t.text(), expected: ")" }),
                    None => Err(FilterError::UnexpectedEnd(")")),
                }
            }
            Some(Tok::Word(w)) => match w.to_ascii_lowercase().as_str() {
                "not" => Ok(Expr::not(self.unary()?)),
                "sport" => self.port_cond(Side::Local),
                "dport" => self.port_cond(Side::Remote),
                "src" => self.addr_cond(Side::Local),
                "dst" => self.addr_cond(Side::Remote),
                _ => Err(FilterError::Unexpected { found: w, expected: WANT }),
            },
            Some(t) => Err(FilterError::Unexpected { found: t.text(), expected: WANT }),
        }
    }

    /// An optional comparison operator, normalised to its symbol.
    fn op(&mut self) -> &'static str {
        let op = match self.peek() {
            Some(Tok::Op(o)) => Some(*o),
            Some(Tok::Word(w)) => match w.to_ascii_lowercase().as_str() {
                "eq" | "in" => Some("="),
                "ne" => Some("!="),
                "ge" => Some(">="),
                "le" => Some("<="),
                "gt" => Some(">"),
                "lt" => Some("<"),
                _ => None,
            },
            _ => None,
        };
        if op.is_some() {
            self.pos += 1;
        }
        op.unwrap_or("=")
    }

    /// Joins the words of a port list that whitespace split (`80, 443` or `80 ,443`).
    fn list_text(&mut self) -> Result<String, FilterError> {
        let mut text = match self.next() {
            Some(Tok::Word(w)) => w,
            Some(t) => return Err(FilterError::Unexpected { found: t.text(), expected: "a port" }),
            None => return Err(FilterError::UnexpectedEnd("a port")),
        };
        while let Some(Tok::Word(next)) = self.peek() {
            // `-90` continues a range; `-run-duration` (a flag after `--`) does not.
            let hyphen_word = next.trim_start_matches('-').starts_with(char::is_alphabetic);
            let joins = text.ends_with([',', '-'])
                || next.starts_with(',')
                || (next.starts_with('-') && !hyphen_word);
            if !joins {
                break;
            }
            text.push_str(next);
            self.pos += 1;
        }
        Ok(text)
    }

    fn port_cond(&mut self, side: Side) -> Result<Expr, FilterError> {
        let op = self.op();
        let text = self.list_text()?;
        match op {
            "=" | "!=" => {
                let ranges = parse_port_list(&text)?;
                let e =
                    Expr::any_of(ranges.into_iter().map(|(lo, hi)| Expr::Port { side, lo, hi }))
                        .expect("parse_port_list never returns an empty list");
                Ok(if op == "=" { e } else { Expr::not(e) })
            }
            _ => {
                let p = single_port(&text)?;
                let (lo, hi) = match op {
                    ">=" => (Some(p), Some(u16::MAX)),
                    "<=" => (Some(0), Some(p)),
                    ">" => (p.checked_add(1), Some(u16::MAX)),
                    _ => (Some(0), p.checked_sub(1)),
                };
                match (lo, hi) {
                    (Some(lo), Some(hi)) => Ok(Expr::Port { side, lo, hi }),
                    _ => Err(FilterError::Empty(format!("{op} {text}"))),
                }
            }
        }
    }

    fn addr_cond(&mut self, side: Side) -> Result<Expr, FilterError> {
        let op = self.op();
        let text = match self.next() {
            Some(Tok::Word(w)) => w,
            Some(t) => {
                return Err(FilterError::Unexpected { found: t.text(), expected: "an address" });
            }
            None => return Err(FilterError::UnexpectedEnd("an address")),
        };
        let e = Expr::Addr { side, prefix: parse_prefix(&text)? };
        match op {
            "=" => Ok(e),
            "!=" => Ok(Expr::not(e)),
            _ => Err(FilterError::Unexpected {
                found: op.into(),
                expected: "= or != before an address",
            }),
        }
    }
}

fn single_port(text: &str) -> Result<u16, FilterError> {
    match parse_port_list(text)?.as_slice() {
        [(lo, hi)] if lo == hi => Ok(*lo),
        _ => Err(FilterError::BadPort(text.to_string())),
    }
}

fn port_number(item: &str) -> Result<u16, FilterError> {
    let t = item.trim();
    let t = t.strip_prefix(':').unwrap_or(t);
    if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
        return Err(FilterError::BadPort(item.trim().to_string()));
    }
    // All digits, so the only failure left is overflow.
    t.parse::<u16>().map_err(|_| FilterError::PortRange(t.to_string()))
}

/// Parses cgmon's port list, `80,443,2000-3000`, into inclusive ranges.
///
/// # Errors
/// An empty list or item, a port above 65535, a non-number, `a-b-c`, or `lo > hi`.
pub fn parse_port_list(s: &str) -> Result<Vec<(u16, u16)>, FilterError> {
    let mut out = Vec::new();
    for item in s.split(',') {
        let item_t = item.trim();
        if item_t.is_empty() {
            return Err(FilterError::EmptyItem(s.to_string()));
        }
        let range = match item_t.split_once('-') {
            None => {
                let p = port_number(item_t)?;
                (p, p)
            }
            Some((a, b)) => {
                if a.trim().is_empty() || b.trim().is_empty() || b.contains('-') {
                    return Err(FilterError::BadPort(item_t.to_string()));
                }
                let (lo, hi) = (port_number(a)?, port_number(b)?);
                if lo > hi {
                    return Err(FilterError::Reversed(item_t.to_string()));
                }
                (lo, hi)
            }
        };
        out.push(range);
    }
    Ok(out)
}

fn parse_prefix(text: &str) -> Result<Prefix, FilterError> {
    let bad = || FilterError::BadAddr(text.to_string());
    let (addr, len) = match text.rsplit_once('/') {
        Some((a, l)) => {
            let l: u8 = l.parse().map_err(|_| FilterError::BadPrefixLen(text.to_string()))?;
            (a, Some(l))
        }
        None => (text, None),
    };
    let addr = addr.strip_prefix('[').and_then(|a| a.strip_suffix(']')).unwrap_or(addr);
    let ip: IpAddr = addr.parse().map_err(|_| bad())?;
    let (family, bytes, max) = match ip {
        IpAddr::V4(v4) => {
            let mut b = [0u8; 16];
            b[..4].copy_from_slice(&v4.octets());
            (AF_INET, b, 32)
        }
        IpAddr::V6(v6) => (AF_INET6, v6.octets(), 128),
    };
    let len = len.unwrap_or(max);
    if len > max {
        return Err(FilterError::BadPrefixLen(text.to_string()));
    }
    Ok(Prefix { family, addr: bytes, len })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn port(side: Side, lo: u16, hi: u16) -> Expr {
        Expr::Port { side, lo, hi }
    }

    #[test]
    fn port_lists_as_cgmon_accepts_them() {
        assert_eq!(
            parse_port_list("80,443,2000-3000").unwrap(),
            vec![(80, 80), (443, 443), (2000, 3000)]
        );
        assert_eq!(parse_port_list(" 80 , 443 ").unwrap(), vec![(80, 80), (443, 443)]);
        assert_eq!(parse_port_list("0,65535").unwrap(), vec![(0, 0), (65535, 65535)]);
    }

    #[test]
    fn port_list_errors_name_the_bad_item() {
        assert_eq!(
            parse_port_list("80,70000").unwrap_err(),
            FilterError::PortRange("70000".into())
        );
        assert_eq!(
            parse_port_list("80,,443").unwrap_err(),
            FilterError::EmptyItem("80,,443".into())
        );
        assert_eq!(parse_port_list("80,").unwrap_err(), FilterError::EmptyItem("80,".into()));
        assert_eq!(parse_port_list("").unwrap_err(), FilterError::EmptyItem("".into()));
        assert_eq!(
            parse_port_list("3000-2000").unwrap_err(),
            FilterError::Reversed("3000-2000".into())
        );
        assert_eq!(parse_port_list("80,http").unwrap_err(), FilterError::BadPort("http".into()));
        assert_eq!(parse_port_list("1-2-3").unwrap_err(), FilterError::BadPort("1-2-3".into()));
        assert_eq!(parse_port_list("-5").unwrap_err(), FilterError::BadPort("-5".into()));
        assert_eq!(parse_port_list("+5").unwrap_err(), FilterError::BadPort("+5".into()));
        let msg = parse_port_list("80,70000").unwrap_err().to_string();
        assert!(msg.contains("70000"), "{msg}");
    }

    #[test]
    fn expressions() {
        use Side::*;
        assert_eq!(parse("sport 80").unwrap(), port(Local, 80, 80));
        assert_eq!(parse("dport = :443").unwrap(), port(Remote, 443, 443));
        assert_eq!(
            parse("dport in 80, 443").unwrap(),
            Expr::or(port(Remote, 80, 80), port(Remote, 443, 443))
        );
        assert_eq!(parse("sport 80 -90").unwrap(), port(Local, 80, 90));
        assert_eq!(parse("sport >= 1024").unwrap(), port(Local, 1024, 65535));
        assert_eq!(parse("sport < 1024").unwrap(), port(Local, 0, 1023));
        assert_eq!(parse("sport gt 1023").unwrap(), port(Local, 1024, 65535));
        assert_eq!(parse("dport != 22").unwrap(), Expr::not(port(Remote, 22, 22)));
        assert_eq!(
            parse("sport 80 dport 90").unwrap(),
            Expr::and(port(Local, 80, 80), port(Remote, 90, 90)),
            "adjacent terms are AND'ed as in ss"
        );
        assert_eq!(
            parse("sport 1 or sport 2 and sport 3").unwrap(),
            Expr::or(port(Local, 1, 1), Expr::and(port(Local, 2, 2), port(Local, 3, 3))),
            "and binds tighter than or"
        );
        assert_eq!(
            parse("!(sport 1 || dport 2) && src 10.0.0.0/8").unwrap(),
            Expr::and(
                Expr::not(Expr::or(port(Local, 1, 1), port(Remote, 2, 2))),
                Expr::Addr { side: Local, prefix: parse_prefix("10.0.0.0/8").unwrap() }
            )
        );
        let p = parse_prefix("[2001:db8::]/32").unwrap();
        assert_eq!((p.family, p.len, p.addr[0], p.addr[1]), (AF_INET6, 32, 0x20, 0x01));
        assert_eq!(parse_prefix("192.0.2.1").unwrap().len, 32);
    }

    #[test]
    fn expression_errors_name_the_token() {
        let deep = "(".repeat(100);
        let cases = [
            ("sport 70000", "70000"),
            ("sport", "a port"),
            ("sport 80 bogus", "bogus"),
            ("src 10.0.0.0/33", "10.0.0.0/33"),
            ("dst 300.1.1.1", "300.1.1.1"),
            ("(sport 1", ")"),
            ("sport > 65535", "> 65535"),
            ("sport < 0", "< 0"),
            ("sport 1 & dport 2", "&"),
            ("sport >= 1,2", "1,2"),
            ("src > 10.0.0.1", ">"),
            ("frobnicate", "frobnicate"),
            // A flag-like word is not glued onto a port list (as `-90` is).
            ("dport 443 -run-interval", "\"-run-interval\""),
            ("dport 443 --run-interval", "\"--run-interval\""),
            (deep.as_str(), "64 deep"),
        ];
        for (text, token) in cases {
            let err = parse(text).unwrap_err().to_string();
            assert!(err.contains(token), "{text:?} gave {err:?}, which does not name {token:?}");
        }
    }
}

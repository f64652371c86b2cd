//! `--clickhouse URL` and `--clickhouse-table`: where the rows go, checked before anything
//! starts, so that a value that can never work is a usage error (exit 2) and not a sink
//! that fails every request until the stop.
//!
//! The URL may hold a user, never a password (in the authority or as `?password=`): a
//! command line sits in `ps` and in unit files. The password comes from a file or the
//! environment and travels in a header. No error message prints what stood before the
//! `@`, so a password pasted into the URL by mistake is not echoed to the log either.

use crate::units::{ValueError, clip};

/// Where the rows go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// `http[s]://host:port/PATH/`, with the trailing slash (a proxy's prefix is kept).
    pub base: String,
    /// `https://`: the server's certificate is verified against [`roots`](Self::roots).
    pub tls: bool,
    /// The CA certificates (DER) a TLS server's chain must lead to: `--clickhouse-ca`'s,
    /// else the system's bundle (filled in by the flags' checks).
    pub roots: Vec<Vec<u8>>,
    /// The database.
    pub db: String,
    /// The table.
    pub table: String,
    /// The user (`default` when none is given), percent-decoded.
    pub user: Option<String>,
    /// The password (from a file or the environment; never the command line).
    pub password: Option<crate::units::Secret>,
}

/// The query parameters the URL may carry.
const PARAMS: &str = "database=, user=";

impl Target {
    /// Parses `--clickhouse URL` and `--clickhouse-table [DB.]TABLE`: the database comes
    /// from the table flag, else the URL's `?database=`, else `cgmon`.
    ///
    /// # Errors
    /// Not an `http[s]://[user@]host[:port][/path][?database=NAME&user=NAME]` URL: another
    /// scheme, a password (in the authority or `?password=`), a host that is not a name,
    /// an IPv4 address or a bracketed IPv6 one, a port outside 1-65535, a user with a
    /// control character, another parameter, or a bad database or table name.
    pub fn parse(url: &str, table: &str) -> Result<Self, ValueError> {
        let bad = |why: String| ValueError(format!("{:?}: {why}", clip(&redacted(url))));
        let (tls, rest) = match url.split_once("://") {
            Some(("http", rest)) => (false, rest),
            Some(("https", rest)) => (true, rest),
            Some((scheme, _)) => {
                return Err(bad(format!(
                    "unknown scheme {:?} (http:// or https://)",
                    clip(scheme)
                )));
            }
            None => return Err(bad("not a URL (http://host:8123/)".into())),
        };
        // The user part ends at the last '@': a password may hold '/', '?' or '@' itself,
        // so it is not looked for after the path starts.
        let (userinfo, after) = match rest.rfind('@') {
            Some(i) => (Some(&rest[..i]), &rest[i + 1..]),
            None => (None, rest),
        };
        let (hostport, tail) = match after.find(['/', '?', '#']) {
            Some(i) => after.split_at(i),
            None => (after, ""),
        };
        let password_error = || {
            bad("a password in the URL; give it in --clickhouse-password-file or \
                 CGMON_CLICKHOUSE_PASSWORD"
                .into())
        };
        let mut user = match userinfo {
            Some(u) if u.contains(':') => return Err(password_error()),
            Some("") | None => None,
            Some(u) => Some(decode_name(u, "user").map_err(bad)?),
        };
        let (host, port) = split_host_port(hostport).map_err(bad)?;
        let (path, query) = match tail.split_once('?') {
            Some((p, q)) => (p, q),
            None => (tail, ""),
        };
        if path.contains('#') || query.contains('#') {
            return Err(bad("a fragment ('#') has no meaning here".into()));
        }
        let mut url_db = None;
        for kv in query.split('&').filter(|kv| !kv.is_empty()) {
            let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
            match k {
                "password" => return Err(password_error()),
                "database" => url_db = Some(decode_name(v, "database").map_err(bad)?),
                "user" if user.is_none() => user = Some(decode_name(v, "user").map_err(bad)?),
                "user" => return Err(bad("two users (before '@' and in ?user=)".into())),
                _ => {
                    return Err(bad(format!(
                        "unknown parameter {:?} (the URL takes {PARAMS})",
                        clip(k)
                    )));
                }
            }
        }
        let (db, table) = names(table, url_db)?;
        let path = path.trim_end_matches('/');
        if path.bytes().any(|b| b <= b' ' || b == 0x7f) {
            return Err(bad("a space or control character in the path".into()));
        }
        let port = port.map_or(String::new(), |p| format!(":{p}"));
        let scheme = if tls { "https" } else { "http" };
        Ok(Self {
            base: format!("{scheme}://{host}{port}{path}/"),
            tls,
            roots: Vec::new(),
            db,
            table,
            user,
            password: None,
        })
    }
}

/// The database and table `--clickhouse-table` names (`db.table`, or `table` in the URL's
/// `?database=` or `cgmon`), each checked to need no quoting.
fn names(table: &str, url_db: Option<String>) -> Result<(String, String), ValueError> {
    let (db, table) = match table.split_once('.') {
        Some((d, t)) => (d.to_string(), t.to_string()),
        None => (url_db.unwrap_or_else(|| "cgmon".into()), table.to_string()),
    };
    for (what, name) in [("database", &db), ("table", &table)] {
        let ok = !name.is_empty()
            && name.len() <= 200
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !ok {
            return Err(ValueError(format!(
                "invalid {what} name {:?}: letters, digits and _",
                clip(name)
            )));
        }
    }
    Ok((db, table))
}

/// `url` with whatever stands before the last `@` of its authority replaced by `…`, and
/// the value of a `password=` parameter likewise: what an error may print of a URL that
/// may carry a password.
pub fn redacted(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    let mut out = match rest.rfind('@') {
        Some(i) if scheme.is_empty() => format!("…@{}", &rest[i + 1..]),
        Some(i) => format!("{scheme}://…@{}", &rest[i + 1..]),
        None => url.to_string(),
    };
    if let Some(i) = out.find("password=") {
        let from = i + "password=".len();
        let to = out[from..].find('&').map_or(out.len(), |j| from + j);
        out.replace_range(from..to, "…");
    }
    out
}

/// A percent-decoded user or database name: UTF-8 without control characters.
fn decode_name(raw: &str, what: &str) -> Result<String, String> {
    let s = percent_encoding::percent_decode_str(raw)
        .decode_utf8()
        .map_err(|_| format!("the {what} is not UTF-8 once decoded"))?;
    if s.is_empty() || s.chars().any(char::is_control) {
        return Err(format!("the {what} is empty or holds a control character"));
    }
    Ok(s.into_owned())
}

/// `host[:port]`: a DNS name, an IPv4 address, or an IPv6 address in brackets; a port
/// from 1 to 65535 when one is given.
fn split_host_port(hp: &str) -> Result<(&str, Option<u16>), String> {
    let (host, port) = if let Some(inner) = hp.strip_prefix('[') {
        let Some((addr, after)) = inner.split_once(']') else {
            return Err("an IPv6 address without its closing ']'".into());
        };
        if addr.parse::<std::net::Ipv6Addr>().is_err() {
            return Err(format!("{:?} is not an IPv6 address", clip(addr)));
        }
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':').ok_or("text after the IPv6 address's ']'")?),
        };
        (&hp[..addr.len() + 2], port)
    } else {
        if hp.matches(':').count() > 1 {
            return Err("an IPv6 address must be in brackets: http://[::1]:8123/".into());
        }
        let (h, p) = match hp.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (hp, None),
        };
        let name_ok = !h.is_empty()
            && h.len() <= 253
            && h.split('.').all(|l| {
                !l.is_empty()
                    && l.len() <= 63
                    && !l.starts_with('-')
                    && !l.ends_with('-')
                    && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            });
        if !name_ok {
            return Err(format!("no host, or a bad host name {:?}", clip(h)));
        }
        (h, p)
    };
    let port = match port {
        None => None,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 => Some(n),
            _ => return Err(format!("a bad port {:?} (1 to 65535)", clip(p))),
        },
    };
    Ok((host, port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_and_tables_parse_or_say_why_not() {
        let t = Target::parse("http://ch.example:8123/", "flows").unwrap();
        assert_eq!(
            (t.base.as_str(), t.db.as_str(), t.table.as_str()),
            ("http://ch.example:8123/", "cgmon", "flows")
        );
        let t = Target::parse("http://10.0.0.1:8123/?database=fleet", "flows").unwrap();
        assert_eq!(t.db, "fleet");
        let t = Target::parse("http://10.0.0.1:8123/?database=fleet", "other.t").unwrap();
        assert_eq!((t.db.as_str(), t.table.as_str()), ("other", "t"));
        let t = Target::parse("http://writer@[::1]:8123", "flows").unwrap();
        assert_eq!((t.base.as_str(), t.user.as_deref()), ("http://[::1]:8123/", Some("writer")));
        // A proxy's prefix is kept; a user that needs percent-encoding is decoded.
        let t = Target::parse("http://ops%40eu@proxy:80/clickhouse/?database=d", "t").unwrap();
        assert_eq!(
            (t.base.as_str(), t.user.as_deref()),
            ("http://proxy:80/clickhouse/", Some("ops@eu"))
        );
        let t = Target::parse("https://ch.example:8443/", "flows").unwrap();
        assert!(t.tls && t.base == "https://ch.example:8443/");
        let t = Target::parse("http://proxy/ch?user=a%20b", "t").unwrap();
        assert_eq!((t.base.as_str(), t.user.as_deref()), ("http://proxy/ch/", Some("a b")));
        for (bad, says) in [
            ("ftp://ch/", "unknown scheme"),
            ("ch:8123", "not a URL"),
            ("http://", "no host"),
            ("http://ch:99999/", "bad port"),
            ("http://host:0/", "bad port"),
            ("http://::1:18123/", "must be in brackets"),
            ("http://[::1:18123/", "closing ']'"),
            ("http://[zz]:1/", "not an IPv6 address"),
            ("http://a b:18123/", "bad host name"),
            ("http://u%01@ch/", "control character"),
            ("http://ch/?database=x&async_insert=1", "unknown parameter \"async_insert\""),
            ("http://a@ch/?user=b", "two users"),
        ] {
            let e = Target::parse(bad, "flows").unwrap_err().0;
            assert!(e.contains(says), "{bad}: {e}");
        }
        assert!(Target::parse("http://ch/", "a;b").unwrap_err().0.contains("invalid table name"));
        assert!(
            Target::parse("http://ch/", "d-b.t").unwrap_err().0.contains("invalid database name")
        );
    }

    /// A password is refused wherever it stands, and never echoed: not when it holds '/',
    /// '?' or '@' (which once cut the URL before its '@' and printed it), nor as a
    /// parameter.
    #[test]
    fn a_password_in_the_url_is_refused_and_never_printed() {
        for url in [
            "http://u:secret@ch:8123/",
            "http://u:S3c/r3t@host:8123/",
            "http://u:se?cr@et@host:8123/",
            "http://u:1234/x@host/",
            "http://ch:8123/?password=secret",
            "http://ch:8123/?user=u&password=S3c%2Fr3t",
        ] {
            let e = Target::parse(url, "flows").unwrap_err().0;
            assert!(e.contains("a password in the URL"), "{url}: {e}");
            for secret in ["secret", "S3c", "r3t", "se?cr", "1234"] {
                assert!(!e.contains(secret), "{url}: {e}");
            }
        }
        assert_eq!(redacted("http://u:p/w@h:1/x"), "http://…@h:1/x");
        assert_eq!(redacted("http://h:1/"), "http://h:1/");
        assert_eq!(redacted("http://h/?password=x&database=d"), "http://h/?password=…&database=d");
    }
}

//! The ClickHouse server over HTTP: the table's set-up at first contact, inserts, and the
//! question whether a batch landed (docs/clickhouse.md).
//!
//! Credentials go in ClickHouse's `X-ClickHouse-User` and `X-ClickHouse-Key` headers, never
//! in the URL, so no log line or error that names the URL carries them.

use crate::units::ValueError;
use std::time::Duration;

use super::batch::Batch;
use super::ddl::{self, Version};
use super::delivery::{Failure, Store};

/// Where the rows go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    /// `http://host:port/`, with the trailing slash.
    pub base: String,
    /// The database.
    pub db: String,
    /// The table.
    pub table: String,
    /// The user (`default` when none is given).
    pub user: Option<String>,
    /// The password (from a file or the environment; never the command line).
    pub password: Option<String>,
}

impl Target {
    /// Parses `--clickhouse URL` and `--clickhouse-table [DB.]TABLE`: the database comes
    /// from the table flag, else the URL's `?database=`, else `cgmon`.
    ///
    /// # Errors
    /// Not an `http://host[:port][/][?database=NAME]` URL (https needs TLS, which this
    /// build does not carry), a password in the URL (it would sit in the process list and
    /// in unit files: use the file or the variable), or a bad name.
    pub fn parse(url: &str, table: &str) -> Result<Self, ValueError> {
        let clipped = crate::units::clip(url);
        let rest = match url.split_once("://") {
            Some(("http", rest)) => rest,
            Some((scheme, _)) => {
                return Err(ValueError(format!(
                    "{clipped:?}: unknown scheme {:?} (only http:// is supported)",
                    crate::units::clip(scheme)
                )));
            }
            None => return Err(ValueError(format!("{clipped:?}: not a URL (http://host:8123/)"))),
        };
        let (authority, tail) = match rest.find(['/', '?']) {
            Some(i) => rest.split_at(i),
            None => (rest, ""),
        };
        let (userinfo, hostport) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        let user = match userinfo {
            Some(u) if u.contains(':') => {
                return Err(ValueError(format!(
                    "{:?}: a password in the URL; give it in --clickhouse-password-file or \
                     CGMON_CLICKHOUSE_PASSWORD",
                    crate::units::clip(&format!("http://…@{hostport}{tail}"))
                )));
            }
            Some(u) if !u.is_empty() => Some(u.to_string()),
            _ => None,
        };
        let host_ok = !hostport.is_empty()
            && match hostport.rsplit_once(':') {
                Some((h, p)) if !h.ends_with(']') || h.starts_with('[') => {
                    !h.is_empty()
                        && (p.parse::<u16>().is_ok()
                            || h.starts_with('[') && hostport.ends_with(']'))
                }
                _ => true,
            };
        if !host_ok {
            return Err(ValueError(format!("{clipped:?}: no host, or a bad port")));
        }
        let query = tail.split_once('?').map_or("", |(_, q)| q);
        let url_db = query.split('&').find_map(|kv| kv.strip_prefix("database="));
        let (db, table) = match table.split_once('.') {
            Some((d, t)) => (d.to_string(), t.to_string()),
            None => (url_db.unwrap_or("cgmon").to_string(), table.to_string()),
        };
        for (what, name) in [("database", &db), ("table", &table)] {
            let ok = !name.is_empty()
                && name.len() <= 200
                && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
            if !ok {
                return Err(ValueError(format!(
                    "invalid {what} name {:?}: letters, digits and _",
                    crate::units::clip(name)
                )));
            }
        }
        Ok(Self { base: format!("http://{hostport}/"), db, table, user, password: None })
    }
}

/// The HTTP client and what first contact learned.
pub struct Client {
    agent: ureq::Agent,
    target: Target,
    /// Set up (database, table, columns) and the server's version.
    ready: Option<Version>,
    /// The table has `BatchId`: exactly-once; else at-least-once (a table the user made).
    exactly_once: bool,
}

/// How long one request may take; a batch of 8 MiB takes well under a second on loopback.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

impl Client {
    /// A client; nothing is sent until the first batch.
    pub fn new(target: Target) -> Self {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(REQUEST_TIMEOUT))
            .http_status_as_error(false)
            .build()
            .into();
        Self { agent, target, ready: None, exactly_once: true }
    }

    /// The server's version, once contacted.
    pub fn version(&self) -> Option<Version> {
        self.ready
    }

    /// False when the table lacks `BatchId` (the user's own): retries may then store a
    /// batch twice.
    pub fn exactly_once(&self) -> bool {
        self.exactly_once
    }

    fn post(&self, query: &str, body: &[u8], gz: bool) -> Result<String, Failure> {
        let mut url = self.target.base.clone();
        if !query.is_empty() {
            url.push_str("?query=");
            url.push_str(&encode(query));
            url.push_str(
                "&input_format_skip_unknown_fields=1&date_time_input_format=best_effort\
                 &insert_distributed_sync=1",
            );
        }
        let mut req = self.agent.post(&url);
        if let Some(u) = &self.target.user {
            req = req.header("X-ClickHouse-User", u);
        }
        if let Some(p) = &self.target.password {
            req = req.header("X-ClickHouse-Key", p);
        }
        if gz {
            req = req.header("Content-Encoding", "gzip");
        }
        let mut resp = req.send(body).map_err(classify)?;
        let status = resp.status().as_u16();
        let text = resp
            .body_mut()
            .with_config()
            .limit(1 << 20)
            .read_to_string()
            .map_err(|e| Failure::Uncertain(format!("reading the reply: {e}")))?;
        match status {
            200 => Ok(text),
            // The server refused the request before doing it (a bad query, a table that
            // does not fit, authentication): nothing was stored.
            400..=499 => Err(Failure::NotStored(format!("HTTP {status}: {}", first_line(&text)))),
            _ => Err(Failure::Uncertain(format!("HTTP {status}: {}", first_line(&text)))),
        }
    }

    fn sql(&self, q: &str) -> Result<String, Failure> {
        self.post("", q.as_bytes(), false)
    }

    /// First contact: the version, the database and the table (created when missing, in
    /// the DDL the version takes), and the columns this monitor writes added to a table
    /// an earlier one created. A table without `BatchId` is the user's: left as it is.
    fn set_up(&mut self) -> Result<Version, Failure> {
        if let Some(v) = self.ready {
            return Ok(v);
        }
        let v =
            Version::parse(&self.sql("SELECT version()")?).map_err(|e| Failure::NotStored(e.0))?;
        let (db, t) = (&self.target.db, &self.target.table);
        self.sql(&format!("CREATE DATABASE IF NOT EXISTS `{db}`"))?;
        self.sql(&ddl::create_table(v, db, t))?;
        let cols = self.sql(&format!(
            "SELECT name FROM system.columns WHERE database = '{db}' AND table = '{t}' FORMAT TSV"
        ))?;
        let have: Vec<&str> = cols.lines().collect();
        self.exactly_once = have.contains(&"BatchId");
        if self.exactly_once {
            for alter in ddl::add_columns(v, db, t, &have) {
                self.sql(&alter)?;
            }
        } else {
            tracing::warn!(target: "cgmon_rs::sink", table = %format!("{db}.{t}"),
                "the table has no BatchId column: delivery is at-least-once (a retry after a \
                 lost reply may store a batch twice)");
        }
        self.ready = Some(v);
        tracing::info!(target: "cgmon_rs::sink", version = %format!("{}.{}", v.0, v.1),
            table = %format!("{db}.{t}"), "ClickHouse table ready");
        Ok(v)
    }
}

impl Store for Client {
    fn insert(&mut self, b: &Batch) -> Result<(), Failure> {
        self.set_up()?;
        let q =
            format!("INSERT INTO `{}`.`{}` FORMAT JSONEachRow", self.target.db, self.target.table);
        // A gzip body (the default; `--clickhouse-compress=false` sends plain rows) is told
        // by its magic bytes, so spooled batches of either kind are sent right.
        let gz = b.rows.starts_with(&[0x1f, 0x8b]);
        self.post(&q, &b.rows, gz).map(drop)
    }

    fn landed(&mut self, batch_id: &str) -> Result<u64, Failure> {
        self.set_up()?;
        if !self.exactly_once {
            return Ok(0); // at-least-once: send again
        }
        let id = batch_id.replace('\\', "\\\\").replace('\'', "\\'");
        let text = self.sql(&format!(
            "SELECT count() FROM `{}`.`{}` WHERE BatchId = '{id}' FORMAT TSV",
            self.target.db, self.target.table
        ))?;
        text.trim()
            .parse()
            .map_err(|_| Failure::Uncertain(format!("count: {:?}", first_line(&text))))
    }
}

fn first_line(s: &str) -> String {
    crate::units::clip(s.lines().next().unwrap_or("").trim()).into_owned()
}

/// Percent-encodes a query for the URL.
fn encode(q: &str) -> String {
    let mut out = String::with_capacity(q.len() * 3 / 2);
    for b in q.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// A failure that happened before anything reached the server is `NotStored`; anything
/// after the request may have gone out is `Uncertain`.
fn classify(e: ureq::Error) -> Failure {
    let text = e.to_string();
    match &e {
        ureq::Error::ConnectionFailed | ureq::Error::HostNotFound | ureq::Error::BadUri(_) => {
            Failure::NotStored(text)
        }
        ureq::Error::Io(io)
            if matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::AddrNotAvailable
            ) =>
        {
            Failure::NotStored(text)
        }
        _ => Failure::Uncertain(text),
    }
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
        for (bad, says) in [
            ("https://ch:8443/", "unknown scheme"),
            ("ftp://ch/", "unknown scheme"),
            ("ch:8123", "not a URL"),
            ("http://", "no host"),
            ("http://ch:99999/", "bad port"),
            ("http://u:secret@ch:8123/", "password in the URL"),
        ] {
            let e = Target::parse(bad, "flows").unwrap_err().0;
            assert!(e.contains(says), "{bad}: {e}");
            assert!(!e.contains("secret"), "{e}");
        }
        assert!(Target::parse("http://ch/", "a;b").unwrap_err().0.contains("invalid table name"));
        assert!(
            Target::parse("http://ch/", "d-b.t").unwrap_err().0.contains("invalid database name")
        );
    }

    #[test]
    fn queries_are_percent_encoded() {
        assert_eq!(
            encode("INSERT INTO `a`.`b` FORMAT JSONEachRow"),
            "INSERT%20INTO%20%60a%60.%60b%60%20FORMAT%20JSONEachRow"
        );
    }
}

//! The ClickHouse server over HTTP: the table's set-up at first contact, inserts, and the
//! question whether a batch landed (docs/clickhouse.md).
//!
//! Credentials go in ClickHouse's `X-ClickHouse-User` and `X-ClickHouse-Key` headers, never
//! in the URL, so no log line or error that names the URL carries them; with `https://`
//! they cross the network encrypted, to a server whose certificate chains to the roots
//! (`--clickhouse-ca`, else the system's).

use std::time::Duration;

use super::batch::Batch;
use super::ddl::{self, Version};
use super::delivery::{Failure, Store};
use crate::units::url_escape;

pub use super::target::Target;

/// The HTTP client and what first contact learned.
pub struct Client {
    agent: ureq::Agent,
    target: Target,
    /// Set up (database, table, columns) and the server's version.
    ready: Option<Version>,
    /// The table has `BatchId`: exactly-once; else at-least-once (a table the user made).
    exactly_once: bool,
}

impl Client {
    /// A client; nothing is sent until the first batch.
    /// `timeout`: how long one request may take (`--clickhouse-timeout`; a batch of 8 MiB
    /// takes well under a second on loopback).
    pub fn new(target: Target, timeout: Duration) -> Self {
        use ureq::tls::{Certificate, RootCerts, TlsConfig, TlsProvider};
        let roots: Vec<Certificate<'static>> =
            target.roots.iter().map(|d| Certificate::from_der(d).to_owned()).collect();
        // The server's certificate is verified against these roots (never switched off);
        // the crypto is graviola's, so TLS brings no C into the build.
        let tls = TlsConfig::builder()
            .provider(TlsProvider::Rustls)
            .root_certs(RootCerts::new_with_certs(&roots))
            .unversioned_rustls_crypto_provider(std::sync::Arc::new(
                rustls_graviola::default_provider(),
            ))
            .build();
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .tls_config(tls)
            .timeout_global(Some(timeout))
            .http_status_as_error(false)
            // A redirect is never followed: ureq would turn the POST into a GET without
            // its body (nothing stored, yet a 200) and carry the credential headers to
            // whatever host the Location names. A 3xx is a failure, retried and reported.
            .max_redirects(0)
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

    /// POSTs `body` with `query` (none: the body is the query) and, for an insert, its
    /// `query_id`.
    fn post(
        &self,
        query: &str,
        body: &[u8],
        gz: bool,
        id: Option<&str>,
    ) -> Result<String, Failure> {
        let mut params = Vec::new();
        if let Some(id) = id {
            params.push(format!("query_id={}", url_escape(id)));
        }
        if !query.is_empty() {
            params.push(format!("query={}", url_escape(query)));
            params.push(
                "input_format_skip_unknown_fields=1&date_time_input_format=best_effort\
                 &insert_distributed_sync=1"
                    .into(),
            );
        }
        let mut url = self.target.base.clone();
        if !params.is_empty() {
            url.push('?');
            url.push_str(&params.join("&"));
        }
        let mut req = self.agent.post(&url);
        if let Some(u) = &self.target.user {
            req = req.header("X-ClickHouse-User", u);
        }
        if let Some(p) = &self.target.password {
            req = req.header("X-ClickHouse-Key", &p.0);
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
            300..=399 => {
                let to = resp.headers().get("location").and_then(|l| l.to_str().ok());
                Err(Failure::NotStored(format!(
                    "HTTP {status}: a redirect{}, not followed (point --clickhouse at the \
                     server itself)",
                    to.map_or(String::new(), |l| format!(
                        " to {:?}",
                        crate::units::clip(&super::target::redacted(l))
                    ))
                )))
            }
            // The server refused the request before doing it (a bad query, a table that
            // does not fit, authentication): nothing was stored.
            400..=499 => Err(Failure::NotStored(format!("HTTP {status}: {}", first_line(&text)))),
            // The body does not inflate: sending it again cannot help.
            _ if text.starts_with("Code: 354,") => {
                Err(Failure::Malformed(format!("HTTP {status}: {}", first_line(&text))))
            }
            _ => Err(Failure::Uncertain(format!("HTTP {status}: {}", first_line(&text)))),
        }
    }

    fn sql(&self, q: &str) -> Result<String, Failure> {
        self.post("", q.as_bytes(), false, None)
    }

    /// First contact: the version, the database and the table (created when missing, in
    /// the DDL the version takes), and the columns this monitor writes added to a table
    /// an earlier one created (logged once, by name). A table without `BatchId` is the
    /// user's: left as it is, delivered at least once. A table without the columns that
    /// say which flow a row is ([`REQUIRED`]) is not written to at all: a typo in
    /// `--clickhouse-table` that names another application's table would otherwise take
    /// every record as a row of defaults. Nothing is kept of a failed set-up, so it is
    /// checked again at each retry.
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
        let missing: Vec<&str> = REQUIRED.iter().copied().filter(|c| !have.contains(c)).collect();
        if !missing.is_empty() {
            return Err(Failure::NotStored(format!(
                "table {db}.{t} lacks the columns {}: not written to (is --clickhouse-table \
                 right? `cgmon-rs clickhouse-ddl` prints the table the monitor makes)",
                missing.join(", ")
            )));
        }
        self.exactly_once = have.contains(&"BatchId");
        if self.exactly_once {
            let alters = ddl::add_columns(v, db, t, &have);
            for (_, alter) in &alters {
                self.sql(alter)?;
            }
            if !alters.is_empty() {
                let names: Vec<&str> = alters.iter().map(|(n, _)| *n).collect();
                tracing::info!(target: "cgmon_rs::sink", table = %format!("{db}.{t}"),
                    added = %names.join(","), "columns this release writes added to the table");
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

/// The columns a table must have to be written to: which host and flow a row is, and when.
pub const REQUIRED: [&str; 7] =
    ["EndTime", "Host", "SrcIP", "SrcPort", "DstIP", "DstPort", "Cookie"];

/// The `query_id` of a batch's inserts: the server refuses a second query with the same id
/// while the first runs, and the lookup after a lost reply waits until none runs.
pub fn query_id(b: &Batch) -> String {
    format!("cgmon:{}", b.id)
}

/// The count of batch `b`'s rows in `db.table`, read from the batch's host's rows within
/// its `EndTime` range (with a second's slack each way for the DateTime of 18.16), which
/// the sort key `(Host, Service, EndTime)` and the day partitions narrow to a few granules.
/// A batch an earlier release spooled has no range: its host's rows alone.
pub fn lookup_sql(db: &str, table: &str, b: &Batch) -> String {
    // HOST/RUN/SEQ: the host is all before the last two parts.
    let host = b.id.rsplitn(3, '/').nth(2).unwrap_or(&b.id);
    let within = match b.ends {
        Some((lo, hi)) => format!(
            " AND EndTime >= toDateTime({}) AND EndTime < toDateTime({})",
            lo.saturating_sub(1).max(0),
            hi.saturating_add(2).max(0)
        ),
        None => String::new(),
    };
    format!(
        "SELECT count() FROM `{db}`.`{table}` WHERE Host = '{}'{within} AND BatchId = '{}' \
         FORMAT TSV",
        quote(host),
        quote(&b.id)
    )
}

/// `s` as the inside of a ClickHouse string literal.
fn quote(s: &str) -> String {
    s.replace('\\', "\\\\").replace('\'', "\\'")
}

impl Store for Client {
    fn insert(&mut self, b: &Batch) -> Result<(), Failure> {
        self.set_up()?;
        let q =
            format!("INSERT INTO `{}`.`{}` FORMAT JSONEachRow", self.target.db, self.target.table);
        // A gzip body (the default; `--clickhouse-compress=false` sends plain rows) is told
        // by its magic bytes, so spooled batches of either kind are sent right.
        let gz = b.rows.starts_with(&[0x1f, 0x8b]);
        self.post(&q, &b.rows, gz, Some(&query_id(b))).map(drop)
    }

    /// Whether the batch landed, asked only once no insert of it runs on the server: a
    /// request that timed out on our side may still be running there (a slow disk, or a
    /// server that stores late), and a count taken meanwhile would say 0 and have it sent
    /// twice. The count reads only this host's rows within the batch's `EndTime` range,
    /// which the table's sort key (host first, then time) and its day partitions find
    /// without reading the whole `BatchId` column.
    fn landed(&mut self, b: &Batch) -> Result<u64, Failure> {
        self.set_up()?;
        if !self.exactly_once {
            return Ok(0); // at-least-once: send again
        }
        let running = self.sql(&format!(
            "SELECT count() FROM system.processes WHERE query_id = '{}' FORMAT TSV",
            quote(&query_id(b))
        ))?;
        if running.trim() != "0" {
            return Err(Failure::Uncertain(format!(
                "an insert of batch {} still runs on the server; it is waited for before \
                 the batch is looked up",
                b.id
            )));
        }
        let text = self.sql(&lookup_sql(&self.target.db, &self.target.table, b))?;
        text.trim()
            .parse()
            .map_err(|_| Failure::Uncertain(format!("count: {:?}", first_line(&text))))
    }
}

fn first_line(s: &str) -> String {
    crate::units::clip(s.lines().next().unwrap_or("").trim()).into_owned()
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
    fn queries_are_percent_encoded() {
        assert_eq!(
            url_escape("INSERT INTO `a`.`b` FORMAT JSONEachRow"),
            "INSERT%20INTO%20%60a%60.%60b%60%20FORMAT%20JSONEachRow"
        );
    }
}

//! The table the sink creates, in the DDL the server's version takes (docs/clickhouse.md).
//!
//! ClickHouse 18.16 (Debian's package) has no `DateTime64`, no `TTL` and no
//! `LowCardinality` without an experimental setting, and skips nested objects on insert;
//! current servers map the nested record onto named tuples. So the table always has the
//! flat columns ([`super::row::FLAT_COLUMNS`]) and the record's top-level scalars, and, on
//! servers that take them, the time in nanoseconds, low-cardinality strings and a TTL.

/// A server version, `major.minor` (`SELECT version()` gives e.g. `18.16.1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version(pub u32, pub u32);

impl Version {
    /// Parses `SELECT version()`'s answer.
    ///
    /// # Errors
    /// Not `N.N…`.
    pub fn parse(s: &str) -> Result<Self, crate::units::ValueError> {
        let mut it = s.trim().split('.');
        let mut num = || it.next().and_then(|p| p.parse::<u32>().ok());
        match (num(), num()) {
            (Some(a), Some(b)) => Ok(Self(a, b)),
            _ => Err(crate::units::ValueError(format!(
                "not a ClickHouse version: {:?}",
                crate::units::clip(s.trim())
            ))),
        }
    }

    /// `DateTime64`, `LowCardinality` and `TTL` (ClickHouse 20.1 and later).
    pub fn is_current(self) -> bool {
        self >= Version(20, 1)
    }
}

/// The record's top-level scalar fields, as columns: (name, type on a current server,
/// type on 18.16). The times are cgmon's RFC 3339 strings, parsed with
/// `date_time_input_format=best_effort`.
const SCALARS: &[(&str, &str, &str)] = &[
    ("StartTime", "DateTime64(9, 'UTC')", "DateTime"),
    ("EndTime", "DateTime64(9, 'UTC')", "DateTime"),
    ("Duration", "Int64", "Int64"),
    ("Samples", "UInt32", "UInt32"),
    ("Partial", "UInt8", "UInt8"),
    ("MinRTTKernelms", "Nullable(Float64)", "Nullable(Float64)"),
    ("MinRTTObservedms", "Nullable(Float64)", "Nullable(Float64)"),
    ("TotalRetransmits", "UInt32", "UInt32"),
    ("BytesAcked", "UInt64", "UInt64"),
    ("SendThroughputMbps", "Float64", "Float64"),
    ("RecvThroughputMbps", "Float64", "Float64"),
    ("BytesSent", "UInt64", "UInt64"),
    ("BytesRetrans", "UInt64", "UInt64"),
    ("BytesReceived", "UInt64", "UInt64"),
    ("EndReason", "LowCardinality(String)", "String"),
    ("Close", "LowCardinality(String)", "String"),
    ("CongestionControl", "LowCardinality(String)", "String"),
    ("Family", "LowCardinality(String)", "String"),
    ("Cookie", "UInt64", "UInt64"),
    ("Service", "LowCardinality(String)", "String"),
    ("DestService", "LowCardinality(String)", "String"),
    ("Comm", "LowCardinality(String)", "String"),
    ("Pid", "UInt32", "UInt32"),
];

/// The flat columns' types: (current, 18.16).
const FLATS: &[(&str, &str, &str)] = &[
    ("Host", "LowCardinality(String)", "String"),
    ("BatchId", "String", "String"),
    ("Verdict", "LowCardinality(String)", "String"),
    ("Cause", "LowCardinality(String)", "String"),
    ("Finding", "String", "String"),
    ("ReceiverWindowPct", "Float64", "Float64"),
    ("SendBufferPct", "Float64", "Float64"),
    ("NetworkPct", "Float64", "Float64"),
    ("ApplicationPct", "Float64", "Float64"),
    ("SrcIP", "String", "String"),
    ("SrcPort", "UInt16", "UInt16"),
    ("DstIP", "String", "String"),
    ("DstPort", "UInt16", "UInt16"),
];

/// How long a current server keeps rows (`TTL`); 18.16 keeps them until dropped by hand.
pub const TTL_DAYS: u32 = 30;

/// Every column the sink's table has on a server of version `v`: (name, type).
pub fn columns(v: Version) -> Vec<(&'static str, &'static str)> {
    SCALARS
        .iter()
        .chain(FLATS)
        .map(|&(n, cur, old)| (n, if v.is_current() { cur } else { old }))
        .collect()
}

/// `CREATE TABLE IF NOT EXISTS db.table` for a server of version `v`: a `MergeTree`
/// partitioned by day and ordered for the fleet's questions (by host, then service, then
/// time), with a TTL where the server takes one.
pub fn create_table(v: Version, db: &str, table: &str) -> String {
    let cols: Vec<String> = columns(v).iter().map(|(n, t)| format!("    `{n}` {t}")).collect();
    let ttl = if v.is_current() {
        format!("\nTTL toDateTime(EndTime) + INTERVAL {TTL_DAYS} DAY")
    } else {
        String::new()
    };
    format!(
        "CREATE TABLE IF NOT EXISTS `{db}`.`{table}`\n(\n{}\n)\nENGINE = MergeTree\n\
         PARTITION BY toDate(EndTime)\nORDER BY (Host, Service, EndTime){ttl}",
        cols.join(",\n")
    )
}

/// `ALTER TABLE … ADD COLUMN` for each column the table lacks (`existing`: the names in
/// `system.columns`), so that a table an earlier version created gains the columns this
/// one writes. 18.16 refuses `ADD COLUMN IF NOT EXISTS` (a syntax error, measured), so the
/// sink asks which columns exist and adds only the others, on every server alike.
pub fn add_columns(v: Version, db: &str, table: &str, existing: &[&str]) -> Vec<String> {
    columns(v)
        .iter()
        .filter(|(n, _)| !existing.contains(n))
        .map(|(n, t)| format!("ALTER TABLE `{db}`.`{table}` ADD COLUMN `{n}` {t}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_parse_and_choose_the_ddl() {
        assert_eq!(Version::parse("18.16.1\n"), Ok(Version(18, 16)));
        assert_eq!(Version::parse("26.9.2.1"), Ok(Version(26, 9)));
        assert!(Version::parse("").is_err() && Version::parse("x.1").is_err());
        let old = create_table(Version(18, 16), "cgmon", "flows");
        assert!(
            !old.contains("DateTime64") && !old.contains("LowCardinality") && !old.contains("TTL"),
            "{old}"
        );
        let new = create_table(Version(26, 9), "cgmon", "flows");
        assert!(
            new.contains("DateTime64(9, 'UTC')") && new.contains("TTL toDateTime(EndTime)"),
            "{new}"
        );
        // Every flat column a row carries has a column.
        for c in crate::sink::row::FLAT_COLUMNS {
            assert!(old.contains(&format!("`{c}`")) && new.contains(&format!("`{c}`")), "{c}");
        }
        let all = columns(Version(18, 16)).len();
        assert_eq!(add_columns(Version(18, 16), "d", "t", &[]).len(), all);
        let two = add_columns(Version(18, 16), "d", "t", &["Host", "BatchId"]);
        assert_eq!(two.len(), all - 2);
        assert!(two.iter().all(|s| !s.contains("IF NOT EXISTS") && !s.contains("`Host`")));
    }
}

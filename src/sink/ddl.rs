//! The fleet's table: one set of columns, in the DDL each server generation takes
//! (docs/clickhouse.md). The monitor creates it at first contact, and
//! `cgmon-rs clickhouse-ddl` prints it for the people who create it by hand; the files in
//! `examples/clickhouse/` are that command's output, and a test keeps them so.
//!
//! ClickHouse 18.16 (Debian's package) has no `DateTime64`, no `TTL`, no data-skipping
//! indexes and no `LowCardinality` without an experimental setting, and skips nested
//! objects on insert; it does take arrays of numbers. So every column is one a row carries
//! at its top level (the record's scalars and summaries, and the flat columns
//! [`super::row`] appends), with the same name on every server; only the types differ.
//! The sort key and partitioning are the same everywhere: by host first, so that the
//! lookup after a lost reply reads one host's rows (client.rs), then service and time.

/// A server version, `major.minor` (`SELECT version()` gives e.g. `18.16.1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version(pub u32, pub u32);

impl Version {
    /// Parses `SELECT version()`'s answer, or `--server-version`.
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

    /// `DateTime64`, `LowCardinality`, skip indexes and `TTL` (ClickHouse 20.1 and later).
    pub fn is_current(self) -> bool {
        self >= Version(20, 1)
    }
}

/// Every column: (name, type on a current server, type on 18.16, what it holds). The times
/// are cgmon's RFC 3339 strings, parsed with `date_time_input_format=best_effort`.
const COLUMNS: &[(&str, &str, &str, &str)] = &[
    ("StartTime", "DateTime64(9, 'UTC')", "DateTime('UTC')", "the flow's first sample"),
    ("EndTime", "DateTime64(9, 'UTC')", "DateTime('UTC')", "its end, as the monitor saw it"),
    ("Duration", "Int64", "Int64", "ns"),
    ("Samples", "UInt32", "UInt32", ""),
    ("Partial", "UInt8", "UInt8", "1: an interim record of a flow still open"),
    ("MinRTTKernelms", "Nullable(Float64)", "Nullable(Float64)", ""),
    ("MinRTTObservedms", "Nullable(Float64)", "Nullable(Float64)", ""),
    (
        "RTTSummary",
        "Array(Float64)",
        "Array(Float64)",
        "ms at 2, 9, 25, 50, 75, 91, 98 % ([4] is the median)",
    ),
    ("RTTVarSummary", "Array(Float64)", "Array(Float64)", "ms, the same seven"),
    ("CwndSummary", "Array(Float64)", "Array(Float64)", "bytes (cwnd x mss), the same seven"),
    ("TotalRetransmits", "UInt32", "UInt32", ""),
    ("BytesAcked", "UInt64", "UInt64", ""),
    ("SendThroughputMbps", "Float64", "Float64", ""),
    ("RecvThroughputMbps", "Float64", "Float64", ""),
    ("BytesSent", "UInt64", "UInt64", ""),
    ("BytesRetrans", "UInt64", "UInt64", ""),
    ("BytesReceived", "UInt64", "UInt64", ""),
    ("EndReason", "LowCardinality(String)", "String", ""),
    ("Close", "LowCardinality(String)", "String", "clean, reset, or '' when not told"),
    ("CongestionControl", "LowCardinality(String)", "String", ""),
    ("Family", "LowCardinality(String)", "String", ""),
    ("FinalState", "LowCardinality(String)", "String", ""),
    ("Cookie", "UInt64", "UInt64", "the kernel's socket cookie"),
    ("CgroupID", "Nullable(UInt64)", "Nullable(UInt64)", ""),
    ("Service", "LowCardinality(String)", "String", "'unknown' when not named"),
    ("DestService", "LowCardinality(String)", "String", "'unknown' when not named"),
    ("Comm", "LowCardinality(String)", "String", "the program; 'unknown' when not found"),
    ("Pid", "UInt32", "UInt32", "0 when not found"),
    (
        "NotNamed",
        "LowCardinality(String)",
        "String",
        "'connecting side' when no program can be named",
    ),
    ("Host", "LowCardinality(String)", "String", "--host-name"),
    ("BatchId", "String", "String", "HOST/RUN/SEQ: exactly-once delivery"),
    ("Verdict", "LowCardinality(String)", "String", "what limited the flow"),
    ("Cause", "LowCardinality(String)", "String", "why; 'none' when no rule fired"),
    ("Finding", "String", "String", ""),
    ("ReceiverWindowPct", "Float64", "Float64", "% of the time"),
    ("SendBufferPct", "Float64", "Float64", "% of the time"),
    ("NetworkPct", "Float64", "Float64", "% of the time"),
    ("ApplicationPct", "Float64", "Float64", "% of the time"),
    ("SrcIP", "String", "String", "the local end"),
    ("SrcPort", "UInt16", "UInt16", ""),
    ("DstIP", "String", "String", "the peer"),
    ("DstPort", "UInt16", "UInt16", ""),
    ("ZeroWindowStalls", "UInt32", "UInt32", "times the peer's window closed after being open"),
    ("ZeroWindowms", "Float64", "Float64", "how long it stayed closed, ms"),
];

/// The columns a table must have to be written to: which host and flow a row is, and when
/// (a table without them is another application's: the sink does not write to it).
pub const REQUIRED: [&str; 7] =
    ["EndTime", "Host", "SrcIP", "SrcPort", "DstIP", "DstPort", "Cookie"];

/// How long a current server keeps rows (`TTL`); 18.16 keeps them until dropped by hand.
pub const TTL_DAYS: u32 = 30;

/// The sort key: by host first (the lookup after a lost reply reads one host's rows),
/// then service and time.
pub const ORDER_BY: &str = "(Host, Service, EndTime)";

/// Every column the sink's table has on a server of version `v`: (name, type).
pub fn columns(v: Version) -> Vec<(&'static str, &'static str)> {
    COLUMNS.iter().map(|&(n, cur, old, _)| (n, if v.is_current() { cur } else { old })).collect()
}

/// The column names, in order.
pub fn names() -> impl Iterator<Item = &'static str> {
    COLUMNS.iter().map(|c| c.0)
}

/// `CREATE TABLE IF NOT EXISTS db.table` for a server of version `v`: a `MergeTree`
/// partitioned by day and ordered by [`ORDER_BY`], with a skip index on `BatchId` and a
/// TTL where the server takes them.
pub fn create_table(v: Version, db: &str, table: &str) -> String {
    let last = COLUMNS.len() - 1;
    let mut cols: Vec<String> = COLUMNS
        .iter()
        .enumerate()
        .map(|(i, &(n, cur, old, _))| {
            let t = if v.is_current() { cur } else { old };
            // A comma after every column but the last, which an index follows only on
            // servers that take one. (No comments inside: 18.16 refuses a `--` comment
            // within the column list as unmatched parentheses, measured.)
            let comma = if i < last || v.is_current() { "," } else { "" };
            format!("    `{n}` {t}{comma}")
        })
        .collect();
    if v.is_current() {
        cols.push("    INDEX batch_id BatchId TYPE bloom_filter GRANULARITY 4".into());
    }
    let ttl = if v.is_current() {
        format!("\nTTL toDateTime(EndTime) + INTERVAL {TTL_DAYS} DAY")
    } else {
        String::new()
    };
    format!(
        "CREATE TABLE IF NOT EXISTS `{db}`.`{table}`\n(\n{}\n)\nENGINE = MergeTree\n\
         PARTITION BY toDate(EndTime)\nORDER BY {ORDER_BY}{ttl}",
        cols.join("\n")
    )
}

/// `ALTER TABLE … ADD COLUMN` for each column the table lacks (`existing`: the names in
/// `system.columns`), with the column's name, so that a table an earlier release created
/// (or the old `flows.sql`) gains the columns this one writes. 18.16 refuses
/// `ADD COLUMN IF NOT EXISTS` (a syntax error, measured), so the sink asks which columns
/// exist and adds only the others, on every server alike. A sort key cannot be changed in
/// place: docs/clickhouse.md says how to move an old table.
pub fn add_columns(
    v: Version,
    db: &str,
    table: &str,
    existing: &[&str],
) -> Vec<(&'static str, String)> {
    columns(v)
        .iter()
        .filter(|(n, _)| !existing.contains(n))
        .map(|&(n, t)| (n, format!("ALTER TABLE `{db}`.`{table}` ADD COLUMN `{n}` {t}")))
        .collect()
}

/// What `cgmon-rs clickhouse-ddl` prints: the database and the table for a server of
/// version `v`, or with `cluster`, a shard's `TABLE_local` and the `Distributed` table over
/// them, as statements separated by `;` that `clickhouse-client --multiquery` takes.
pub fn script(v: Version, db: &str, table: &str, cluster: Option<&str>) -> String {
    let generation = if v.is_current() {
        "current ClickHouse (20.1 and later)"
    } else {
        "ClickHouse 18.16 to 19.x"
    };
    let mut out = format!(
        "-- Made by `cgmon-rs clickhouse-ddl{}{}`: the fleet's table for {generation}.\n\
         -- The monitors create the same table themselves at first contact (src/sink/ddl.rs):\n\
         -- create it by hand to choose its place, its user, or a cluster. docs/clickhouse.md\n\
         -- says what each column holds and how to move a table an earlier release made.\n",
        if v.is_current() { String::new() } else { format!(" --server-version {}.{}", v.0, v.1) },
        cluster.map_or(String::new(), |c| format!(" --cluster {c}")),
    );
    out.push_str("--\n-- Columns that need a word (the rest are the record's fields of the same name,\n-- docs/records.md):\n");
    for &(n, _, _, what) in COLUMNS.iter().filter(|c| !c.3.is_empty()) {
        out.push_str(&format!("--   {n}: {what}\n"));
    }
    out.push_str(&format!("CREATE DATABASE IF NOT EXISTS `{db}`;\n\n"));
    match cluster {
        None => out.push_str(&create_table(v, db, table)),
        Some(c) => {
            let local = format!("{table}_local");
            out.push_str(
                "-- A sharded fleet: run this on every server (ON CLUSTER would need ZooKeeper or\n\
                 -- ClickHouse Keeper). Each shard holds its part in the _local table; the\n\
                 -- Distributed table over them is what the monitors insert into (synchronously:\n\
                 -- they set insert_distributed_sync=1) and what queries read. The shard key is\n\
                 -- the batch id, so a batch lands whole on one shard and the lookup after a lost\n\
                 -- reply sees all of it or none. The cluster is named in each server's\n\
                 -- <remote_servers>. For replication, make the _local table a\n\
                 -- ReplicatedMergeTree('/clickhouse/tables/{shard}/DB/TABLE_local', '{replica}')\n\
                 -- with {shard} and {replica} macros on each server, give each shard several\n\
                 -- <replica>s with <internal_replication>true</internal_replication>, and run a\n\
                 -- Keeper ensemble.\n",
            );
            out.push_str(&create_table(v, db, &local));
            out.push_str(&format!(
                ";\n\nCREATE TABLE IF NOT EXISTS `{db}`.`{table}` AS `{db}`.`{local}`\n\
                 ENGINE = Distributed({c}, {db}, {local}, cityHash64(BatchId))"
            ));
        }
    }
    out.push_str(";\n");
    out
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
            !old.contains("DateTime64")
                && !old.contains("LowCardinality")
                && !old.contains("TTL")
                && !old.contains("INDEX"),
            "{old}"
        );
        let new = create_table(Version(26, 9), "cgmon", "flows");
        assert!(
            new.contains("DateTime64(9, 'UTC')") && new.contains("TTL toDateTime(EndTime)"),
            "{new}"
        );
        // The same names on both, in the same order: only the types differ.
        let name_of =
            |l: &str| l.trim().strip_prefix('`').map(|r| r.split('`').next().unwrap().to_string());
        let a: Vec<_> = old.lines().filter_map(name_of).collect();
        let b: Vec<_> = new.lines().filter_map(name_of).collect();
        assert_eq!(a, b);
        assert_eq!(a.len(), COLUMNS.len());
        // Every flat column a row carries, and every column a flow's identity needs.
        for c in crate::sink::row::FLAT_COLUMNS.iter().chain(&REQUIRED) {
            assert!(a.iter().any(|n| n == c), "{c}");
        }
        for c in ["RTTSummary", "FinalState", "Comm", "DestService"] {
            assert!(a.iter().any(|n| n == c), "{c}");
        }
        let all = columns(Version(18, 16)).len();
        assert_eq!(add_columns(Version(18, 16), "d", "t", &[]).len(), all);
        let two = add_columns(Version(18, 16), "d", "t", &["Host", "BatchId"]);
        assert_eq!(two.len(), all - 2);
        assert!(two.iter().all(|(n, s)| !s.contains("IF NOT EXISTS") && *n != "Host"));
    }

    #[test]
    fn the_cluster_script_makes_the_local_table_and_the_distributed_one() {
        let s = script(Version(18, 16), "cgmon", "flows", Some("cgmon_fleet"));
        assert!(s.contains("CREATE TABLE IF NOT EXISTS `cgmon`.`flows_local`\n"), "{s}");
        assert!(s.contains(
            "ENGINE = Distributed(cgmon_fleet, cgmon, flows_local, cityHash64(BatchId));"
        ));
        assert_eq!(s.matches(";\n").count(), 3, "database, shard table, distributed: {s}");
    }
}

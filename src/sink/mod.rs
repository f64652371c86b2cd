//! The fleet sink (issue 35, in progress): flow records into a ClickHouse table, exactly
//! once. This part is the pure core, testable without a network or a server:
//! - [`row`]: a record as a `JSONEachRow` row: the record as the writer serialises it,
//!   plus the flat columns a fleet queries (on ClickHouse 18.16, which skips nested
//!   objects, the diagnosis would otherwise be lost);
//! - [`ddl`]: the `CREATE TABLE` a server of a given version takes;
//! - [`batch`]: rows cut into batches by count, bytes and age, each with its `BatchId`;
//! - [`delivery`]: a bounded queue of batches, retried with backoff and jitter, where a
//!   batch whose insert's reply was lost is looked up by its id before it is sent again,
//!   so that a retry never stores it twice.
//!
//! Not yet here (the note says what remains): the HTTP client, the on-disk spool,
//! the stage thread, the flags and the metrics. The facts it relies on are in
//! docs/clickhouse.md.

pub mod batch;
pub mod ddl;
pub mod delivery;
pub mod row;

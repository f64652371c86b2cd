-- The fleet's table for current ClickHouse (20.1 and later; tried on 26.9), created once
-- before the hosts' monitors point at it (they create a flat one themselves when it is
-- missing: src/sink/ddl.rs). Rows are cgmon-rs records as JSONEachRow: the nested parts map
-- onto the named tuples below as they are; the flat columns after them are what the fleet
-- filters and groups by, and what ClickHouse 18.16 (which skips nested objects) keeps.
CREATE DATABASE IF NOT EXISTS cgmon;

CREATE TABLE IF NOT EXISTS cgmon.flows
(
    -- The record (docs/records.md; schema/flow-record.schema.json).
    `ID` Tuple(SrcIP String, SrcPort UInt16, DstIP String, DstPort UInt16, TstampStartNs UInt64),
    `StartTime` DateTime64(9, 'UTC'),
    `EndTime` DateTime64(9, 'UTC'),
    `Duration` Int64,
    `Samples` UInt32,
    `Partial` Bool,
    `MinRTTKernelms` Nullable(Float64),
    `MinRTTObservedms` Nullable(Float64),
    `RTTSummary` Array(Float64),
    `RTTVarSummary` Array(Float64),
    `CwndSummary` Array(Float64),
    `TotalRetransmits` UInt32,
    `BytesAcked` UInt64,
    `SendThroughputMbps` Float64,
    `RecvThroughputMbps` Float64,
    `BytesSent` UInt64,
    `BytesRetrans` UInt64,
    `BytesReceived` UInt64,
    `EndReason` LowCardinality(String),
    `Close` LowCardinality(String),
    `CongestionControl` LowCardinality(String),
    `Family` LowCardinality(String),
    `FinalState` LowCardinality(String),
    `Cookie` UInt64,
    `CgroupID` Nullable(UInt64),
    `Service` LowCardinality(String),
    `DestService` LowCardinality(String),
    `Comm` LowCardinality(String),
    `Pid` UInt32,
    `Sampling` Tuple(FromDumps UInt32, FromExact UInt32, FromDestroyEvent Bool, MaxGapms Float64),
    `Diagnosis` Tuple(
        TimeShares Tuple(ReceiverWindowPct Float64, SendBufferPct Float64, NetworkPct Float64,
                         ApplicationPct Float64, Basis String),
        Caps Tuple(PeerWindowBytes UInt32, TypicalWindowBytes Nullable(UInt32),
                   WindowCapMbps Nullable(Float64),
                   SendBufferBytes Nullable(UInt32), SendBufferCapMbps Nullable(Float64),
                   LossCapMbps Nullable(Float64), BDPBytes Nullable(Float64), CwndBytes Float64),
        Signals Tuple(LossPct Float64, WindowClosedPct Nullable(Float64),
                      ReorderingEvents UInt32, SpuriousRetransmits UInt32,
                      CEMarkedPct Nullable(Float64), RTOs UInt32),
        AchievedMbps Float64,
        Verdict String,
        Cause Nullable(String),
        Finding String),
    -- The flat columns every row carries (src/sink/row.rs).
    `Host` LowCardinality(String),
    `BatchId` String,
    `Verdict` LowCardinality(String),
    `Cause` LowCardinality(String),
    `Finding` String,
    `ReceiverWindowPct` Float64,
    `SendBufferPct` Float64,
    `NetworkPct` Float64,
    `ApplicationPct` Float64,
    `SrcIP` String,
    `SrcPort` UInt16,
    `DstIP` String,
    `DstPort` UInt16,
    -- The lost-reply check looks batches up by id.
    INDEX batch_id BatchId TYPE bloom_filter GRANULARITY 4
)
ENGINE = MergeTree
PARTITION BY toDate(EndTime)
ORDER BY (Service, Host, EndTime)
TTL toDateTime(EndTime) + INTERVAL 30 DAY;

-- Made by `cgmon-rs clickhouse-ddl --server-version 18.16`: the fleet's table for ClickHouse 18.16 to 19.x.
-- The monitors create the same table themselves at first contact (src/sink/ddl.rs):
-- create it by hand to choose its place, its user, or a cluster. docs/clickhouse.md
-- says what each column holds and how to move a table an earlier release made.
--
-- Columns that need a word (the rest are the record's fields of the same name,
-- docs/records.md):
--   StartTime: the flow's first sample
--   EndTime: its end, as the monitor saw it
--   Duration: ns
--   Partial: 1: an interim record of a flow still open
--   RTTSummary: ms at 2, 9, 25, 50, 75, 91, 98 % ([4] is the median)
--   RTTVarSummary: ms, the same seven
--   CwndSummary: bytes (cwnd x mss), the same seven
--   Close: clean, reset, or '' when not told
--   Cookie: the kernel's socket cookie
--   Service: 'unknown' when not named
--   DestService: 'unknown' when not named
--   Comm: the program; 'unknown' when not found
--   Pid: 0 when not found
--   NotNamed: 'connecting side' when no program can be named
--   Host: --host-name
--   BatchId: HOST/RUN/SEQ: exactly-once delivery
--   Verdict: what limited the flow
--   Cause: why; 'none' when no rule fired
--   ReceiverWindowPct: % of the time
--   SendBufferPct: % of the time
--   NetworkPct: % of the time
--   ApplicationPct: % of the time
--   SrcIP: the local end
--   DstIP: the peer
--   ZeroWindowStalls: times the peer's window closed after being open
--   ZeroWindowms: how long it stayed closed, ms
CREATE DATABASE IF NOT EXISTS `cgmon`;

CREATE TABLE IF NOT EXISTS `cgmon`.`flows`
(
    `StartTime` DateTime('UTC'),
    `EndTime` DateTime('UTC'),
    `Duration` Int64,
    `Samples` UInt32,
    `Partial` UInt8,
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
    `EndReason` String,
    `Close` String,
    `CongestionControl` String,
    `Family` String,
    `FinalState` String,
    `Cookie` UInt64,
    `CgroupID` Nullable(UInt64),
    `Service` String,
    `DestService` String,
    `Comm` String,
    `Pid` UInt32,
    `NotNamed` String,
    `Host` String,
    `BatchId` String,
    `Verdict` String,
    `Cause` String,
    `Finding` String,
    `ReceiverWindowPct` Float64,
    `SendBufferPct` Float64,
    `NetworkPct` Float64,
    `ApplicationPct` Float64,
    `SrcIP` String,
    `SrcPort` UInt16,
    `DstIP` String,
    `DstPort` UInt16,
    `ZeroWindowStalls` UInt32,
    `ZeroWindowms` Float64
)
ENGINE = MergeTree
PARTITION BY toDate(EndTime)
ORDER BY (Host, Service, EndTime);

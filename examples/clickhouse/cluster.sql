-- A sharded fleet: each shard holds its part in cgmon.flows_local, and cgmon.flows over
-- them is what the monitors insert into and what queries read. Run on every server (ON
-- CLUSTER would need ZooKeeper or ClickHouse Keeper):
--   1. flows.sql with the table renamed: sed 's/cgmon\.flows\b/cgmon.flows_local/' flows.sql
--   2. this file.
-- The cluster, cgmon_fleet, is named in each server's <remote_servers> (README.md).
-- The shard key is the batch id: a batch lands whole on one shard, so the insert stays
-- atomic and the monitors' lost-reply check (count by BatchId) sees all of it or none.
-- The monitors must insert synchronously (they set insert_distributed_sync=1).
-- For replication, make flows_local a ReplicatedMergeTree
-- ('/clickhouse/tables/{shard}/cgmon/flows_local', '{replica}') with {shard} and {replica}
-- macros on each server, give each shard several <replica>s in <remote_servers> with
-- <internal_replication>true</internal_replication>, and run a Keeper ensemble.
CREATE TABLE IF NOT EXISTS cgmon.flows AS cgmon.flows_local
ENGINE = Distributed(cgmon_fleet, cgmon, flows_local, cityHash64(BatchId));

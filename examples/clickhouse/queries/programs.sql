-- Which program talks to which service, how much, and what limits it, over the last day:
-- for each host, program and destination (DestService), the flows, bytes each way, the
-- median of the flows' median RTTs (ms), retransmitted bytes and how many flows the network
-- limited. The program is Comm, the process that owned the socket ('unknown' when none was
-- found); the connecting end of a connection that lived and died between two dumps cannot
-- be named (its destroy event carries no inode: NotNamed) and is grouped apart as
-- 'connecting side, not named', not as a program called 'unknown'.
SELECT
    Host,
    if(NotNamed = 'connecting side', 'connecting side, not named', Comm) AS Program,
    DestService,
    count() AS flows,
    sum(BytesAcked) AS bytes_sent,
    sum(BytesReceived) AS bytes_received,
    quantileExactIf(0.5)(RTTSummary[4], notEmpty(RTTSummary)) AS p50_ms,
    sum(BytesRetrans) AS bytes_retrans,
    countIf(Verdict = 'network') AS network_limited
FROM cgmon.flows
WHERE EndTime > now() - INTERVAL 1 DAY
GROUP BY Host, Program, DestService
ORDER BY bytes_sent DESC, Host, Program, DestService

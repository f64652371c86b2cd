-- Which program talks to which service, how much, and what limits it, over the last day:
-- for each host, program (Comm: the process that owned the socket; 'unknown' when none was
-- found) and destination (DestService), the flows, bytes each way, the median of the
-- flows' median RTTs (ms), retransmitted bytes and how many flows the network limited.
SELECT
    Host,
    Comm,
    DestService,
    count() AS flows,
    sum(BytesAcked) AS bytes_sent,
    sum(BytesReceived) AS bytes_received,
    quantileExactIf(0.5)(RTTSummary[4], notEmpty(RTTSummary)) AS p50_ms,
    sum(BytesRetrans) AS bytes_retrans,
    countIf(Verdict = 'network') AS network_limited
FROM cgmon.flows
WHERE EndTime > now() - INTERVAL 1 DAY
GROUP BY Host, Comm, DestService
ORDER BY bytes_sent DESC, Host, Comm, DestService

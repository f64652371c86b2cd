-- Who talks to whom over the last day: for each pair of a service and the destination it
-- talked to (DestService, from --dest-map or local/private/external), the flows, the bytes
-- acknowledged, the median of the flows' median RTTs (ms) and the retransmitted share.
SELECT
    Service,
    DestService,
    count() AS flows,
    sum(BytesAcked) AS bytes_acked,
    quantileExactIf(0.5)(RTTSummary[4], notEmpty(RTTSummary)) AS p50_ms,
    round(100 * sum(BytesRetrans) / greatest(sum(BytesSent), 1), 3) AS retrans_pct
FROM cgmon.flows
WHERE EndTime > now() - INTERVAL 1 DAY
GROUP BY Service, DestService
ORDER BY bytes_acked DESC, Service, DestService

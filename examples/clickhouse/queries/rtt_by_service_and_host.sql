-- RTT quantiles by service and host over the last day: the median and the 98th percentile
-- of each flow's median RTT (ms).
SELECT
    Service,
    Host,
    count() AS flows,
    quantileExact(0.5)(RTTSummary[4]) AS p50_ms,
    quantileExact(0.98)(RTTSummary[4]) AS p98_ms
FROM cgmon.flows
WHERE EndTime > now() - INTERVAL 1 DAY AND notEmpty(RTTSummary)
GROUP BY Service, Host
ORDER BY p98_ms DESC, Service, Host

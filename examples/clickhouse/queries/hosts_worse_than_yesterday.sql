-- Hosts whose flows got slower than yesterday: the median of the flows' median RTT over
-- the last hour against the same hour a day earlier, where it rose by half or more.
SELECT
    Host,
    quantileExactIf(0.5)(RTTSummary[4], EndTime > now() - INTERVAL 1 HOUR) AS now_ms,
    quantileExactIf(0.5)(RTTSummary[4], EndTime <= now() - INTERVAL 1 DAY) AS yesterday_ms,
    round(now_ms / yesterday_ms, 2) AS ratio
FROM cgmon.flows
WHERE notEmpty(RTTSummary)
    AND (EndTime > now() - INTERVAL 1 HOUR
         OR EndTime BETWEEN now() - INTERVAL 25 HOUR AND now() - INTERVAL 1 DAY)
GROUP BY Host
HAVING yesterday_ms > 0 AND ratio >= 1.5
ORDER BY ratio DESC, Host

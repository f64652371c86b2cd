-- Bytes each service sent and received, by hour, over the last day.
SELECT
    toStartOfHour(EndTime) AS hour,
    Service,
    count() AS flows,
    sum(BytesAcked) AS bytes_sent,
    sum(BytesReceived) AS bytes_received
FROM cgmon.flows
WHERE EndTime > now() - INTERVAL 1 DAY
GROUP BY hour, Service
ORDER BY hour, Service

-- How each service's connections ended over the last day: clean closes, resets, and
-- those whose close could not be told (docs/records.md).
SELECT
    Service,
    count() AS flows,
    countIf(Close = 'clean') AS clean,
    countIf(Close = 'reset') AS reset,
    countIf(Close = '') AS unknown,
    round(100 * reset / flows, 1) AS reset_pct
FROM cgmon.flows
WHERE EndTime > now() - INTERVAL 1 DAY
GROUP BY Service
ORDER BY reset_pct DESC, Service

-- What limited the flows, by service and host over the last day: each verdict's share of
-- the flows (percent).
SELECT
    Service,
    Host,
    Verdict,
    count() AS flows,
    round(100 * count() / sum(count()) OVER (PARTITION BY Service, Host), 1) AS pct
FROM cgmon.flows
WHERE EndTime > now() - INTERVAL 1 DAY
GROUP BY Service, Host, Verdict
ORDER BY Service, Host, flows DESC, Verdict

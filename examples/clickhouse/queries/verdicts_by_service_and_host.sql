-- What limited the flows, by service and host over the last day: each verdict's share of
-- the flows (percent). A join of two groupings rather than a window function, which
-- ClickHouse 18.16 lacks: the same answer on every server.
SELECT
    Service,
    Host,
    Verdict,
    flows,
    round(100 * flows / total, 1) AS pct
FROM
(
    SELECT Service, Host, Verdict, count() AS flows
    FROM cgmon.flows
    WHERE EndTime > now() - INTERVAL 1 DAY
    GROUP BY Service, Host, Verdict
) AS v
ANY LEFT JOIN
(
    SELECT Service, Host, count() AS total
    FROM cgmon.flows
    WHERE EndTime > now() - INTERVAL 1 DAY
    GROUP BY Service, Host
) AS t USING (Service, Host)
ORDER BY Service, Host, flows DESC, Verdict

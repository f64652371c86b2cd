-- Which hosts' flows were receiver-window-limited today (since midnight, the server's
-- time zone), and toward whom.
SELECT
    Host,
    Service,
    DstIP,
    count() AS flows,
    round(avg(ReceiverWindowPct), 1) AS avg_limited_pct
FROM cgmon.flows
WHERE EndTime >= toStartOfDay(now()) AND Verdict = 'receiver-window'
GROUP BY Host, Service, DstIP
ORDER BY flows DESC, Host, Service, DstIP

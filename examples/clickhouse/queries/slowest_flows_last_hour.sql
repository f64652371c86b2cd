-- The slowest flows of the last hour that something other than the application limited,
-- with their findings. Flows under 64 KiB cannot be judged (their verdict is unknown), and
-- transfers over within slow start's round trips (Cause slow-start: a 200 KB response on
-- a 50 ms path) were held by the round trips, not a rate: neither fills this list.
SELECT
    EndTime,
    Host,
    Service,
    SrcIP,
    SrcPort,
    DstIP,
    DstPort,
    Verdict,
    round(SendThroughputMbps, 3) AS mbps,
    Finding
FROM cgmon.flows
WHERE EndTime > now() - INTERVAL 1 HOUR
    AND Verdict IN ('receiver-window', 'send-buffer', 'network')
    AND BytesAcked >= 65536
    AND Cause != 'slow-start'
ORDER BY SendThroughputMbps ASC, Cookie
LIMIT 20

-- Retransmits by destination address over the last day, the worst first.
SELECT
    DstIP,
    count() AS flows,
    sum(TotalRetransmits) AS retransmits,
    sum(BytesRetrans) AS bytes_retrans,
    sum(BytesSent) AS bytes_sent,
    round(100 * sum(BytesRetrans) / greatest(sum(BytesSent), 1), 3) AS retrans_pct
FROM cgmon.flows
WHERE EndTime > now() - INTERVAL 1 DAY
GROUP BY DstIP
ORDER BY retransmits DESC, DstIP
LIMIT 50

-- Where each service's sending time went over the last day, weighted by how long each
-- flow lived: limited by the receiver's window, the send buffer, the network, or the
-- application (percent). Flows seen once (Duration 0) do not weigh.
SELECT
    Service,
    sum(Duration) / 1e9 AS flow_seconds,
    round(sum(Duration * ReceiverWindowPct) / sum(Duration), 2) AS receiver_window_pct,
    round(sum(Duration * SendBufferPct) / sum(Duration), 2) AS send_buffer_pct,
    round(sum(Duration * NetworkPct) / sum(Duration), 2) AS network_pct,
    round(sum(Duration * ApplicationPct) / sum(Duration), 2) AS application_pct
FROM cgmon.flows
WHERE EndTime > now() - INTERVAL 1 DAY AND Duration > 0
GROUP BY Service
ORDER BY flow_seconds DESC, Service

-- Connects that never established over the last day, by host, destination and how they
-- ended: refused (an RST or ICMP answered the SYN), syn-timeout (every SYN retry went
-- unanswered) or abandoned (the program gave up first). DstPort 0: the kernel cleared
-- the port of a failed blocking connect that no dump saw connecting (docs/diagnosis.md).
SELECT
    Host,
    DestService,
    DstIP,
    DstPort,
    Cause AS outcome,
    count() AS attempts
FROM cgmon.flows
WHERE EndTime > now() - INTERVAL 1 DAY
    AND Cause IN ('refused', 'syn-timeout', 'abandoned')
GROUP BY Host, DestService, DstIP, DstPort, outcome
ORDER BY attempts DESC, Host, DstIP, DstPort, outcome

//! The tracker's settings ([`TrackerConfig`]) and the bounds the program checks them
//! against.

/// How many cookies of flows ended as `gone` while destroy events were awaited are kept, so
/// that a destroy event arriving after the grace period is counted as late rather than
/// written as a second, one-sample flow: 8 bytes a cookie in the set and 8 in the queue,
/// plus the set's table. Past that the oldest are forgotten (docs/records.md).
pub const LATE_COOKIES: usize = 65_536;

/// The program's grace period unless told otherwise (`-tracker-destroy-grace`; why 5 s:
/// docs/records.md).
pub const DEFAULT_DESTROY_GRACE: std::time::Duration = std::time::Duration::from_secs(5);

/// The longest grace period accepted: waiting flows hold their samples and count against
/// `max_flows`, so the wait is capped.
pub const MAX_DESTROY_GRACE: std::time::Duration = std::time::Duration::from_secs(600);

/// Tracker settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrackerConfig {
    /// Most flows recorded at once; 0 = no limit (cgmon's `-tracker-max-flows`).
    pub max_flows: usize,
    /// Fewest retained samples for a flow to be passed on; 0 = no minimum
    /// (`-tracker-min-samples`).
    pub min_samples: usize,
    /// Retained samples per window before an interim record; at least 2.
    pub window_samples: usize,
    /// How long a flow absent from a complete dump waits for its destroy event, ns; 0 ends
    /// it at once (what the program uses when no destroy listener runs).
    pub destroy_grace_ns: u64,
    /// Most retained samples held by the flows being tracked (and those waiting for their
    /// destroy event); past it the longest windows are cut early, as interim records. 0 =
    /// no bound.
    pub max_samples: u64,
    /// Keep the hot set (flows whose samples move) for exact polls between full dumps
    /// (`--cpu-budget` above 0); off, every tick is a full dump and nothing extra is kept.
    pub tiers: bool,
    /// How long a flow stays hot after its samples last moved, ns.
    pub hot_linger_ns: u64,
    /// No sample of a flow for longer than this is a pause: the next retained sample says
    /// so ([`crate::record::Retained::after_pause`]; docs/web.md, "Charts"). The least
    /// pause: the poller raises it to 1.5 × the full-dump interval its budget allows
    /// ([`super::Tracker::set_pause_ns`]), the longest a still flow waits to be sampled.
    pub pause_ns: u64,
    /// SYNs sent again after which the kernel gives up a connect
    /// (`net.ipv4.tcp_syn_retries`): what tells a time-out from an attempt abandoned.
    pub syn_retries: u8,
    /// Record connects that failed with their remote port cleared and that no dump saw
    /// (a blocking `connect()`): only without a filter, which could not be applied to
    /// them.
    pub unported_attempts: bool,
}

impl TrackerConfig {
    /// Windows of about an hour of samples at the given sampling interval.
    pub fn window_for_interval(interval: std::time::Duration) -> usize {
        let per_hour = 3600.0 / interval.as_secs_f64().max(1e-3);
        (per_hour.ceil() as usize).clamp(2, 100_000_000)
    }
}

impl Default for TrackerConfig {
    fn default() -> Self {
        Self {
            max_flows: 0,
            min_samples: 0,
            window_samples: 3600,
            destroy_grace_ns: 0,
            max_samples: 0,
            tiers: false,
            hot_linger_ns: 1_000_000_000,
            pause_ns: 15_000_000_000,
            syn_retries: 6,
            unported_attempts: true,
        }
    }
}

//! Traffic per service: counters the tracker keeps per (network namespace, cgroup, local
//! listening port), for the Prometheus flow aggregates.
//!
//! Each flow is assigned an account slot when it opens. Bytes are counted as deltas of the
//! kernel's cumulative counters each time a sample is retained (deduped samples carry no
//! byte changes), and once more from the destroy event, so a flow that lived and died
//! between two polls is counted in full. A flow born after the monitor started counts from
//! its first byte; one already open at start counts from the first sample (its history
//! before that is not the monitor's to report). Counters only ever grow.
//!
//! An account is also per remote end's name (`--dest-map`) and per program (the
//! process that owns the socket, `processes`). A flow whose program is being looked for
//! counts no bytes until it is known ([`Counted::pending`]): its bytes then go to its
//! program at once, or to `unknown` when none is found or the flow ends first.
//!
//! Cardinality is bounded here by [`MAX_ACCOUNTS`] slots; what comes after goes to an
//! overflow slot. (Service names, and the top-K cap on them, are resolved at scrape time.)

use std::sync::Arc;

use rustc_hash::FxHashMap;

/// Upper bounds of the RTT histogram buckets, whole µs: a sample's RTT (µs) is sorted into
/// its bucket with integer compares, on every retained sample. From 10 µs: loopback and a
/// data centre's RTTs are tens to hundreds of µs, which a first bucket of 100 µs lumped
/// together. At most one bound between two powers of two (checked below).
const RTT_BUCKETS_US: [u32; 18] = [
    10, 25, 50, 100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000,
    500_000, 1_000_000, 2_500_000, 5_000_000,
];

/// For each power of two 2^k (k = 0..=31), how many bounds lie below it.
const BELOW_POW2: [u8; 32] = {
    let mut t = [0u8; 32];
    let mut k = 0;
    while k < 32 {
        let mut i = 0;
        while i < RTT_BUCKETS_US.len() {
            if (RTT_BUCKETS_US[i] as u64) < 1u64 << k {
                t[k] += 1;
            }
            i += 1;
        }
        k += 1;
    }
    t
};

// `rtt_bucket` relies on at most one bound in each [2^k, 2^(k+1)).
const _: () = {
    let mut k = 0;
    while k < 31 {
        assert!(BELOW_POW2[k + 1] - BELOW_POW2[k] <= 1);
        k += 1;
    }
    assert!(BELOW_POW2[31] as usize == RTT_BUCKETS_US.len()); // none at or above 2^31
};

/// The bounds, then one no RTT exceeds.
const BOUNDS_THEN_MAX: [u32; RTT_BUCKETS_US.len() + 1] = {
    let mut b = [u32::MAX; RTT_BUCKETS_US.len() + 1];
    let mut i = 0;
    while i < RTT_BUCKETS_US.len() {
        b[i] = RTT_BUCKETS_US[i];
        i += 1;
    }
    b
};

/// The bucket of a non-zero RTT (µs): the number of bounds below it. With k the RTT's
/// highest set bit, the bounds below 2^k are below it and those from 2^(k+1) above; the one
/// bound that can lie between is compared. (Counted with 14 compares, this was 58
/// instructions per retained sample; a binary search was slower still, its branches
/// mispredicted as RTTs vary from flow to flow.)
fn rtt_bucket(rtt_us: u32) -> usize {
    let k = 31 - rtt_us.max(1).leading_zeros() as usize;
    let i = usize::from(BELOW_POW2[k]);
    i + usize::from(rtt_us > BOUNDS_THEN_MAX[i])
}

/// The same bounds in seconds, as the metrics publish them.
pub const RTT_BUCKETS_S: [f64; RTT_BUCKETS_US.len()] = {
    let mut s = [0.0; RTT_BUCKETS_US.len()];
    let mut i = 0;
    while i < s.len() {
        s[i] = RTT_BUCKETS_US[i] as f64 / 1e6;
        i += 1;
    }
    s
};

/// Most distinct (cgroup, port) accounts before the overflow slot takes the rest.
pub const MAX_ACCOUNTS: usize = 4096;

/// The cgroup id of the overflow account.
pub const OVERFLOW_CGROUP: u64 = u64::MAX;

/// The uid of an account that goes by its cgroup.
pub const NO_UID: u32 = u32::MAX;

/// One account's counters.
#[derive(Debug, Clone, PartialEq)]
pub struct Account {
    /// The network namespace's index in the tracker's table (0: the first sampled, the
    /// monitor's own unless `--netns` names others only).
    pub netns: u32,
    /// cgroup2 id of the sockets (0: the kernel sent none; [`OVERFLOW_CGROUP`]: overflow).
    pub cgroup_id: u64,
    /// Local port when it is a listening port (server side), else 0.
    pub port: u16,
    /// The remote end's name (`--dest-map` and its fallbacks); None when not named.
    pub dest_service: Option<Arc<str>>,
    /// The program that owns the sockets; None when unknown.
    pub comm: Option<Arc<str>>,
    /// The ids that key `dest_service` and `comm`.
    key_names: (u32, u32),
    /// The sockets' uid when no cgroup is known (a flow seen only in its destroy event,
    /// whose port does not listen); [`NO_UID`] otherwise.
    pub uid: u32,
    /// Flows opened.
    pub opened: u64,
    /// Flows closed (their socket is gone).
    pub closed: u64,
    /// tcpi_bytes_acked deltas.
    pub bytes_acked: u64,
    /// tcpi_bytes_received deltas.
    pub bytes_received: u64,
    /// tcpi_bytes_retrans deltas.
    pub bytes_retrans: u64,
    /// Retained samples per RTT bucket ([`RTT_BUCKETS_S`], then +Inf).
    pub rtt_buckets: [u64; RTT_BUCKETS_S.len() + 1],
    /// Sum of those RTTs, µs: an integer add per retained sample, where adding seconds in
    /// f64 chained each sample's add on the previous one's (u64 µs overflows after 584,000
    /// years of summed RTT).
    pub rtt_sum_us: u64,
    /// Bytes acked and received per second over the last [`RATE_SPAN_NS`] or more
    /// ([`Accounts::mark_rates`]); 0 until a span has passed.
    pub bytes_per_s: f64,
    /// bytes_acked + bytes_received at the last mark.
    marked_bytes: u64,
}

/// Shortest span a service's rate is measured over.
pub const RATE_SPAN_NS: u64 = 1_000_000_000;

/// The time constant of a service's rate, s: the host page states it.
pub const SERVICE_RATE_TAU_S: f64 = 10.0;

impl Account {
    fn new(netns: u32, cgroup_id: u64, port: u16, uid: u32) -> Self {
        Self {
            netns,
            cgroup_id,
            port,
            dest_service: None,
            comm: None,
            key_names: (NO_NAME, NO_NAME),
            uid,
            opened: 0,
            closed: 0,
            bytes_acked: 0,
            bytes_received: 0,
            bytes_retrans: 0,
            rtt_buckets: [0; RTT_BUCKETS_S.len() + 1],
            rtt_sum_us: 0,
            bytes_per_s: 0.0,
            marked_bytes: 0,
        }
    }

    /// Adds one retained sample's RTT (µs; 0 means none measured and is skipped).
    #[inline]
    pub fn observe_rtt(&mut self, rtt_us: u32) {
        if rtt_us == 0 {
            return;
        }
        // The bucket is the first bound ≥ the RTT: the number of bounds below it.
        self.rtt_buckets[rtt_bucket(rtt_us)] += 1;
        self.rtt_sum_us += u64::from(rtt_us);
    }
}

/// The id of no name in an account's key.
const NO_NAME: u32 = u32::MAX;

/// Most distinct destination names kept; later ones share the overflow id (and name).
const MAX_DEST_NAMES: usize = 65_536;

/// What names a flow's account besides its service: the remote end, and its program
/// (with the id the program resolver gave its name).
#[derive(Debug, Clone, Copy, Default)]
pub struct Names<'a> {
    /// The remote end's name.
    pub dest: Option<&'a Arc<str>>,
    /// The program's name id and name.
    pub comm: Option<(u32, &'a Arc<str>)>,
}

/// What a flow has been counted for so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counted {
    /// Its account slot.
    pub slot: u32,
    /// Its program is being looked for: its bytes wait (the counts below stay where they
    /// are) until [`Accounts::reslot`] or its end. Fits the padding after `slot`.
    pub pending: bool,
    /// bytes_acked counted.
    pub acked: u64,
    /// bytes_received counted.
    pub received: u64,
    /// bytes_retrans counted.
    pub retrans: u64,
}

/// Every account, and the listening ports that decide the port label.
#[derive(Debug)]
pub struct Accounts {
    slots: Vec<Account>,
    index: FxHashMap<(u32, u64, u16, u32, u32, u32), u32>,
    /// Destination name → its id in the keys.
    dest_ids: FxHashMap<Arc<str>, u32>,
    /// Listening port (with its namespace, [`listen_key`]) → the cgroup of a listener on
    /// it (0 when the kernel sent none).
    listening: FxHashMap<u64, u64>,
    next_listening: FxHashMap<u64, u64>,
    /// When the rates were last measured (0: never).
    marked_ns: u64,
}

/// A port's key in the listening set: ports listen per network namespace.
pub(crate) fn listen_key(netns: u32, port: u16) -> u64 {
    u64::from(netns) << 16 | u64::from(port)
}

/// The namespace of a [`listen_key`].
fn listen_key_netns(k: u64) -> u32 {
    (k >> 16) as u32
}

impl Default for Accounts {
    fn default() -> Self {
        Self {
            // Slot 0 is the overflow account.
            slots: vec![Account::new(0, OVERFLOW_CGROUP, 0, NO_UID)],
            index: FxHashMap::default(),
            dest_ids: FxHashMap::default(),
            listening: FxHashMap::default(),
            next_listening: FxHashMap::default(),
            marked_ns: 0,
        }
    }
}

impl Accounts {
    /// The slot for a socket in namespace `netns` of `cgroup_id` with local port `sport`;
    /// `uid` names the account when no cgroup is known. No destination or program.
    pub fn slot(&mut self, netns: u32, cgroup_id: u64, sport: u16, uid: Option<u32>) -> u32 {
        self.slot_named(netns, cgroup_id, sport, uid, Names::default())
    }

    /// As [`slot`](Self::slot), for a flow to `names.dest` owned by `names.comm`.
    pub fn slot_named(
        &mut self,
        netns: u32,
        cgroup_id: u64,
        sport: u16,
        uid: Option<u32>,
        names: Names<'_>,
    ) -> u32 {
        let port = if self.is_listening(netns, sport) { sport } else { 0 };
        let uid = if cgroup_id == 0 { uid.unwrap_or(NO_UID) } else { NO_UID };
        let (dest, dest_name) = match names.dest {
            Some(d) => self.dest_id(d),
            None => (NO_NAME, None),
        };
        let comm = names.comm.map_or(NO_NAME, |c| c.0);
        let key = (netns, cgroup_id, port, uid, dest, comm);
        if let Some(&i) = self.index.get(&key) {
            return i;
        }
        if self.slots.len() > MAX_ACCOUNTS {
            return 0;
        }
        let i = self.slots.len() as u32;
        let mut a = Account::new(netns, cgroup_id, port, uid);
        a.dest_service = dest_name;
        a.comm = names.comm.map(|c| c.1.clone());
        a.key_names = (dest, comm);
        self.slots.push(a);
        self.index.insert(key, i);
        i
    }

    /// The slot like `slot`'s but for the program `comm` (id and name): where a flow goes
    /// once its program is known. The overflow slot stays the overflow.
    pub fn reslot(&mut self, slot: u32, comm: (u32, &Arc<str>)) -> u32 {
        let a = &self.slots[slot as usize];
        if slot == 0 {
            return 0;
        }
        let key = (a.netns, a.cgroup_id, a.port, a.uid, a.key_names.0, comm.0);
        if let Some(&i) = self.index.get(&key) {
            return i;
        }
        if self.slots.len() > MAX_ACCOUNTS {
            return 0;
        }
        let mut b = Account::new(a.netns, a.cgroup_id, a.port, a.uid);
        b.dest_service = a.dest_service.clone();
        b.comm = Some(comm.1.clone());
        b.key_names = (a.key_names.0, comm.0);
        let i = self.slots.len() as u32;
        self.slots.push(b);
        self.index.insert(key, i);
        i
    }

    /// The id of a destination name, and the name an account under it shows (`other`
    /// past [`MAX_DEST_NAMES`]).
    fn dest_id(&mut self, name: &Arc<str>) -> (u32, Option<Arc<str>>) {
        if let Some(&id) = self.dest_ids.get(name) {
            return (id, Some(name.clone()));
        }
        if self.dest_ids.len() >= MAX_DEST_NAMES {
            return (MAX_DEST_NAMES as u32, Some(Arc::from("other")));
        }
        let id = self.dest_ids.len() as u32;
        self.dest_ids.insert(name.clone(), id);
        (id, Some(name.clone()))
    }

    /// Whether `port` listened in `netns` as of the last complete dump, or in the current
    /// one so far. A dump sends its listeners before its other sockets
    /// (docs/kernel.md), so the sockets a listener accepted find it even in the very
    /// first dump, where there is no complete dump before.
    pub fn is_listening(&self, netns: u32, port: u16) -> bool {
        let k = listen_key(netns, port);
        self.next_listening.contains_key(&k) || self.listening.contains_key(&k)
    }

    /// The cgroup of a listener on `port`, as [`is_listening`](Self::is_listening) finds
    /// it (the current dump's first), or 0.
    pub fn listener_cgroup(&self, netns: u32, port: u16) -> u64 {
        let k = listen_key(netns, port);
        match self.next_listening.get(&k) {
            Some(&c) if c != 0 => c,
            _ => self.listening.get(&k).copied().unwrap_or(0),
        }
    }

    /// Counts a retained sample: the growth of its flow's cumulative counters since the
    /// last call, and its RTT (µs). Inlined, with one slot lookup for both: it runs for
    /// every retained sample.
    #[inline]
    pub fn count_sample(
        &mut self,
        c: &mut Counted,
        acked: u64,
        received: u64,
        retrans: u64,
        rtt_us: u32,
    ) {
        self.count(c, acked, received, retrans);
        self.slots[c.slot as usize].observe_rtt(rtt_us);
    }

    /// Counts the growth of a flow's cumulative counters since the last call.
    #[inline]
    pub fn count(&mut self, c: &mut Counted, acked: u64, received: u64, retrans: u64) {
        if c.pending {
            return;
        }
        let a = &mut self.slots[c.slot as usize];
        a.bytes_acked += acked.saturating_sub(c.acked);
        a.bytes_received += received.saturating_sub(c.received);
        a.bytes_retrans += retrans.saturating_sub(c.retrans);
        c.acked = c.acked.max(acked);
        c.received = c.received.max(received);
        c.retrans = c.retrans.max(retrans);
    }

    /// The account at `slot`.
    pub fn get_mut(&mut self, slot: u32) -> &mut Account {
        &mut self.slots[slot as usize]
    }

    /// Every account (slot 0 is the overflow).
    pub fn all(&self) -> &[Account] {
        &self.slots
    }

    /// A listener seen in the current dump, with its cgroup (0 when none was sent). With
    /// several listeners on one port (other addresses, `SO_REUSEPORT`), one with a cgroup
    /// wins.
    pub fn saw_listener(&mut self, netns: u32, port: u16, cgroup_id: u64) {
        let c = self.next_listening.entry(listen_key(netns, port)).or_insert(cgroup_id);
        if *c == 0 {
            *c = cgroup_id;
        }
    }

    /// At most once per [`RATE_SPAN_NS`] (CLOCK_MONOTONIC `now_ns`), each account's rate
    /// takes in its bytes since the last mark over the time since, as an exponentially
    /// weighted average over about [`SERVICE_RATE_TAU_S`] (the host view's bytes per
    /// second: a one-second rate swung from 0.3 to 34 Mbit/s between three refreshes of
    /// a bursty service): a few thousand accounts at most, once a second.
    pub fn mark_rates(&mut self, now_ns: u64) {
        let dt = now_ns.saturating_sub(self.marked_ns);
        if self.marked_ns != 0 && dt < RATE_SPAN_NS {
            return;
        }
        let first = self.marked_ns == 0;
        for a in &mut self.slots {
            let bytes = a.bytes_acked + a.bytes_received;
            if !first {
                let dt_s = dt as f64 / 1e9;
                let rate = bytes.saturating_sub(a.marked_bytes) as f64 / dt_s;
                let alpha = 1.0 - (-dt_s / SERVICE_RATE_TAU_S).exp();
                a.bytes_per_s = alpha * rate + (1.0 - alpha) * a.bytes_per_s;
            }
            a.marked_bytes = bytes;
        }
        self.marked_ns = now_ns.max(1);
    }

    /// The dump completed: its listeners become the listening set, with those of the
    /// namespaces it did not walk (`carried`) kept as they were.
    pub fn end_dump(&mut self, carried: &[u32]) {
        if !carried.is_empty() {
            for (&k, &c) in &self.listening {
                if carried.contains(&listen_key_netns(k)) {
                    self.next_listening.entry(k).or_insert(c);
                }
            }
        }
        std::mem::swap(&mut self.listening, &mut self.next_listening);
        self.next_listening.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deltas_never_go_backwards_and_ports_follow_listeners() {
        let mut a = Accounts::default();
        a.saw_listener(0, 80, 7);
        a.end_dump(&[]);
        assert_eq!(a.listener_cgroup(0, 80), 7);
        assert_eq!(a.listener_cgroup(0, 81), 0);
        // Ports listen per namespace.
        assert_eq!(a.listener_cgroup(1, 80), 0);
        assert!(a.is_listening(0, 80) && !a.is_listening(1, 80));
        let s80 = a.slot(0, 7, 80, None);
        let client = a.slot(0, 7, 51000, None);
        // Without a cgroup the uid tells accounts apart; with one it does not.
        assert_ne!(a.slot(0, 0, 51000, Some(1000)), a.slot(0, 0, 51000, Some(1001)));
        assert_eq!(a.slot(0, 7, 51000, Some(1000)), client);
        // The same service in another namespace is another account.
        let other = a.slot(1, 7, 80, None);
        assert_ne!(other, s80);
        assert_eq!((a.all()[other as usize].netns, a.all()[other as usize].port), (1, 0));
        assert_ne!(s80, client);
        assert_eq!(a.all()[client as usize].port, 0);
        let mut c = Counted { slot: s80, ..Counted::default() };
        a.count(&mut c, 100, 10, 0);
        a.count(&mut c, 90, 10, 0); // a stale, smaller value counts nothing
        a.count(&mut c, 250, 30, 5);
        let acc = &a.all()[s80 as usize];
        assert_eq!((acc.bytes_acked, acc.bytes_received, acc.bytes_retrans), (250, 30, 5));
    }

    #[test]
    fn rates_are_bytes_over_at_least_a_second() {
        let mut a = Accounts::default();
        let s = a.slot(0, 7, 80, None);
        let mut c = Counted { slot: s, ..Counted::default() };
        a.count(&mut c, 1_000, 0, 0);
        a.mark_rates(5 * RATE_SPAN_NS); // the first mark only sets the base
        assert_eq!(a.all()[s as usize].bytes_per_s, 0.0);
        a.count(&mut c, 3_000, 500, 0);
        a.mark_rates(5 * RATE_SPAN_NS + RATE_SPAN_NS / 2); // too soon: unchanged
        assert_eq!(a.all()[s as usize].bytes_per_s, 0.0);
        a.mark_rates(7 * RATE_SPAN_NS); // 2,500 bytes over 2 s, weighted 1 − e^(−2/10)
        let first = 1_250.0 * (1.0 - (-0.2f64).exp());
        assert!((a.all()[s as usize].bytes_per_s - first).abs() < 1e-9);
        a.mark_rates(8 * RATE_SPAN_NS); // nothing more: it decays, it does not drop to 0
        let decayed = first * (-0.1f64).exp();
        assert!((a.all()[s as usize].bytes_per_s - decayed).abs() < 1e-9);
    }

    #[test]
    fn integer_bounds_sort_as_the_published_bounds_at_every_edge() {
        // Prometheus buckets are "≤ bound": an RTT equal to a bound is in that bucket, one
        // µs more is in the next.
        let published = [
            0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
            0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0,
        ];
        assert_eq!(RTT_BUCKETS_S, published, "the `le` labels of the metrics");
        for (i, &us) in RTT_BUCKETS_US.iter().enumerate() {
            for (rtt, want) in [(us - 1, i), (us, i), (us + 1, i + 1)] {
                let mut acc = Account::new(0, 1, 0, NO_UID);
                acc.observe_rtt(rtt);
                assert_eq!(acc.rtt_buckets[want], 1, "rtt {rtt} µs");
            }
        }
    }

    #[test]
    fn the_bucket_is_the_number_of_bounds_below_the_rtt() {
        let by_definition = |rtt: u32| RTT_BUCKETS_US.iter().filter(|&&b| b < rtt).count();
        // Every edge: each bound and each power of two, and their neighbours.
        let edges = RTT_BUCKETS_US.iter().copied().chain((0..32).map(|k| 1u32 << k));
        for e in edges {
            for rtt in [e.saturating_sub(1), e, e.saturating_add(1)] {
                assert_eq!(rtt_bucket(rtt.max(1)), by_definition(rtt.max(1)), "rtt {rtt} µs");
            }
        }
        // And a spread of values across the whole range (xorshift; any seed will do).
        let mut x = 0x9e37_79b9_u32;
        for _ in 0..200_000 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            let rtt = x >> (x % 32); // every magnitude, not only large values
            assert_eq!(rtt_bucket(rtt.max(1)), by_definition(rtt.max(1)), "rtt {rtt} µs");
        }
        assert_eq!(rtt_bucket(u32::MAX), RTT_BUCKETS_US.len());
    }

    #[test]
    fn rtt_buckets_and_overflow_slot() {
        let mut acc = Account::new(0, 1, 0, NO_UID);
        acc.observe_rtt(0);
        acc.observe_rtt(20_000); // 20 ms
        acc.observe_rtt(9_000_000); // 9 s: +Inf
        assert_eq!(acc.rtt_buckets.iter().sum::<u64>(), 2);
        assert_eq!(acc.rtt_buckets[10], 1); // ≤ 25 ms
        assert_eq!(acc.rtt_buckets[RTT_BUCKETS_S.len()], 1);
        let mut a = Accounts::default();
        for id in 0..(MAX_ACCOUNTS as u64 + 10) {
            a.slot(0, id + 1, 0, None);
        }
        assert_eq!(a.all().len(), MAX_ACCOUNTS + 1);
        assert_eq!(a.slot(0, 999_999, 0, None), 0);
    }
}

//! `/metrics`: the monitor's own figures and per-service flow aggregates in Prometheus text
//! format (OpenMetrics), through prometheus-client's `Collector`: values are read from the
//! shared atomics and the tracker's published accounts at scrape time, so sampling never
//! waits on a scrape.
//!
//! Names take the `cgmon_` prefix and base units (seconds, bytes); counters end in `_total`.
//! Flow aggregates carry these labels, each bounded:
//! - `service`: the systemd unit or container of the sockets' cgroup
//!   ([`crate::who::services`]); the first `top_services` distinct services keep their own label
//!   and later ones share `other` (a label, once given, never moves, so counters never go
//!   backwards);
//! - `listen_port`: the local port when it is a listening port (the server side of a
//!   flow), else `client`; the first [`MAX_PORT_LABELS`] ports keep their own label, later
//!   ones `other`;
//! - on the byte families only, `dest_service` (the remote end's name) and `comm` (the
//!   program, `processes`), the first K of each keeping their own value;
//! - with `--netns` sampling more than the monitor's own namespace, `netns`: the namespace's
//!   name (its `ip netns` name, `pod:<uid>`, `<runtime>:<container>`, `host`), the first
//!   `top_services` distinct ones keeping their own label, later ones `other`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use crate::locks::Locked;
use crate::metrics::Metrics;
use crate::tracker::accounts::{Account, RTT_BUCKETS_S};
use crate::who::services::Services;

/// Sums per label set.
#[derive(Debug, Default, Clone)]
struct Agg {
    opened: u64,
    closed: u64,
    rtt: Vec<u64>,
    rtt_sum: f64,
}

/// The collector behind `/metrics`.
#[derive(Debug)]
pub struct Exporter {
    metrics: Arc<Metrics>,
    accounts: Arc<Mutex<Vec<Account>>>,
    labels: Mutex<Labeler>,
    /// Namespace names by index, when more than one namespace is sampled.
    netns: Option<Arc<Mutex<Vec<String>>>>,
    /// `--metrics-kernsnoopd`.
    kernsnoopd: bool,
}

impl Exporter {
    /// An exporter of `metrics` and the accounts the tracker publishes into `accounts`.
    pub fn new(
        metrics: Arc<Metrics>,
        accounts: Arc<Mutex<Vec<Account>>>,
        services: Arc<Mutex<Services>>,
        top_services: usize,
    ) -> Self {
        let labels = Labeler::new(services, top_services);
        Self { metrics, accounts, labels: Mutex::new(labels), netns: None, kernsnoopd: false }
    }

    /// Labels the flow aggregates with their network namespace, named by index in `names`
    /// (which the namespace scanner keeps up to date).
    pub fn with_netns(mut self, names: Arc<Mutex<Vec<String>>>) -> Self {
        self.netns = Some(names);
        self
    }

    /// A registry holding this exporter.
    pub fn registry(self: Arc<Self>) -> Registry {
        let mut r = Registry::default();
        r.register_collector(Box::new(self));
        r
    }

    /// Keeps the first `dests` destination and `comms` program label values; with
    /// `kernsnoopd`, also exports kernsnoopd's byte families under their own names.
    pub fn with_attribution(self, dests: usize, comms: usize, kernsnoopd: bool) -> Self {
        self.labels.locked().set_tops(dests, comms);
        Self { kernsnoopd, ..self }
    }

    /// The accounts summed by label set: per (netns, service, listen_port) for the flow
    /// counts and RTTs, and per those and (dest_service, comm) for the bytes.
    fn aggregate(&self) -> (BTreeMap<FlowKey, Agg>, BTreeMap<ByteKey, Bytes>) {
        let accounts = self.accounts.locked().clone();
        let names = self.netns.as_ref().map(|n| n.locked().clone());
        let mut l = self.labels.locked();
        let mut flows: BTreeMap<FlowKey, Agg> = BTreeMap::new();
        let mut bytes: BTreeMap<ByteKey, Bytes> = BTreeMap::new();
        for a in &accounts {
            if a.opened == 0 && a.closed == 0 && a.bytes_acked == 0 && a.bytes_received == 0 {
                continue; // the unused overflow slot, or a flow's account before its bytes
            }
            let ns = match &names {
                Some(n) => {
                    let name = n.get(a.netns as usize).map_or("other", String::as_str);
                    l.netns(name)
                }
                None => String::new(),
            };
            let key = (ns, l.service(a.cgroup_id, a.uid), l.port(a.port));
            let g = flows
                .entry(key.clone())
                .or_insert_with(|| Agg { rtt: vec![0; RTT_BUCKETS_S.len() + 1], ..Agg::default() });
            g.opened += a.opened;
            g.closed += a.closed;
            for (t, v) in g.rtt.iter_mut().zip(&a.rtt_buckets) {
                *t += v;
            }
            g.rtt_sum += a.rtt_sum_us as f64 / 1e6;
            let (dest, comm) = (l.dest(a.dest_service.as_deref()), l.comm(a.comm.as_deref()));
            let b = bytes.entry((key, dest, comm)).or_default();
            b.acked += a.bytes_acked;
            b.received += a.bytes_received;
            b.retrans += a.bytes_retrans;
        }
        (flows, bytes)
    }
}

/// A flow family's labels: netns ("" when not told apart), service, listen_port.
type FlowKey = (String, String, String);
/// A byte family's labels: those and dest_service, comm.
type ByteKey = (FlowKey, String, String);

/// Bytes per label set.
#[derive(Debug, Default, Clone)]
struct Bytes {
    acked: u64,
    received: u64,
    retrans: u64,
}

impl Collector for Exporter {
    fn encode(&self, mut e: DescriptorEncoder) -> std::fmt::Result {
        let m = &self.metrics;
        encode_own(&mut e, m)?;
        encode_process(&mut e)?;
        self.encode_flows(&mut e)?;
        encode_verdicts(&mut e, &m.verdicts)
    }
}

impl Exporter {
    /// The per-service flow families: opened, closed, bytes, RTT.
    fn encode_flows(&self, e: &mut DescriptorEncoder) -> std::fmt::Result {
        let (agg, bytes) = self.aggregate();
        type Get = fn(&Agg) -> u64;
        let families: [(&str, &str, Get); 2] = [
            ("cgmon_flows_opened", "Flows opened, by service and listening port", |a| a.opened),
            ("cgmon_flows_closed", "Flows closed, by service and listening port", |a| a.closed),
        ];
        for (name, help, get) in families {
            let mut d = e.encode_descriptor(name, help, None, MetricType::Counter)?;
            for ((ns, svc, port), a) in &agg {
                d.encode_family(&labels(ns, svc, port))?
                    .encode_counter::<NoLabelSet, _, u64>(&get(a), None)?;
            }
        }
        type Of = fn(&Bytes) -> u64;
        let by = "by service, listening port, destination (dest_service) and program (comm)";
        let families: [(&str, &str, Of); 3] = [
            ("cgmon_flow_acked_bytes", "Bytes acknowledged by the peer (tcpi_bytes_acked)", |b| {
                b.acked
            }),
            ("cgmon_flow_received_bytes", "Bytes received (tcpi_bytes_received)", |b| b.received),
            ("cgmon_flow_retransmitted_bytes", "Bytes retransmitted (tcpi_bytes_retrans)", |b| {
                b.retrans
            }),
        ];
        for (name, help, get) in families {
            let mut d =
                e.encode_descriptor(name, &format!("{help}, {by}"), None, MetricType::Counter)?;
            for (((ns, svc, port), dest, comm), b) in &bytes {
                let mut l = labels(ns, svc, port);
                l.extend([("dest_service", dest.as_str()), ("comm", comm.as_str())]);
                d.encode_family(&l)?.encode_counter::<NoLabelSet, _, u64>(&get(b), None)?;
            }
        }
        if self.kernsnoopd {
            encode_kernsnoopd(e, &bytes)?;
        }
        let mut d = e.encode_descriptor(
            "cgmon_flow_rtt_seconds",
            "Smoothed RTT (tcpi_rtt) of retained samples, each counted once (not weighted by \
             time), by service and listening port",
            None,
            MetricType::Histogram,
        )?;
        for ((ns, svc, port), a) in &agg {
            let buckets: Vec<(f64, u64)> = RTT_BUCKETS_S
                .iter()
                .copied()
                .chain([f64::INFINITY])
                .zip(a.rtt.iter().copied())
                .collect();
            let count = a.rtt.iter().sum();
            d.encode_family(&labels(ns, svc, port))?
                .encode_histogram::<NoLabelSet>(a.rtt_sum, count, &buckets, None)?;
        }
        Ok(())
    }
}

mod labels;
mod own;
mod text;

pub(crate) use labels::owner_name;
pub use labels::{DEFAULT_TOP_SERVICES, MAX_PORT_LABELS};
use labels::{Labeler, labels};
use own::{encode_own, encode_process};

/// kernsnoopd's two families, with its names and labels (`--metrics-kernsnoopd`): the
/// bytes each program sent, and each service sent to each destination. Sent bytes are
/// the acknowledged ones: each byte the application sent, once (retransmissions are not
/// counted again).
fn encode_kernsnoopd(
    e: &mut DescriptorEncoder,
    bytes: &BTreeMap<ByteKey, Bytes>,
) -> std::fmt::Result {
    let mut by_binary: BTreeMap<&str, u64> = BTreeMap::new();
    let mut by_pair: BTreeMap<(&str, &str), u64> = BTreeMap::new();
    for (((_, svc, _), dest, comm), b) in bytes {
        *by_binary.entry(comm).or_default() += b.acked;
        *by_pair.entry((svc, dest)).or_default() += b.acked;
    }
    let mut d = e.encode_descriptor(
        "linux_bytes_sent",
        "Bytes sent (acknowledged) by each binary (kernsnoopd's family)",
        None,
        MetricType::Counter,
    )?;
    for (binary, n) in &by_binary {
        d.encode_family(&[("binary_name", *binary)])?
            .encode_counter::<NoLabelSet, _, u64>(n, None)?;
    }
    let mut d = e.encode_descriptor(
        "magma_bytes_sent",
        "Bytes sent (acknowledged) by each service to each destination service (kernsnoopd's \
         family)",
        None,
        MetricType::Counter,
    )?;
    for ((svc, dest), n) in &by_pair {
        d.encode_family(&[("service_name", *svc), ("dest_service", *dest)])?
            .encode_counter::<NoLabelSet, _, u64>(n, None)?;
    }
    Ok(())
}

/// Verdicts and limited time per service pair, from the records written (absent until the
/// first record).
fn encode_verdicts(
    e: &mut DescriptorEncoder,
    v: &crate::metrics::verdicts::VerdictCounts,
) -> std::fmt::Result {
    let flows = v.flows();
    if !flows.is_empty() {
        let mut d = e.encode_descriptor(
            "cgmon_flows",
            "Flows (records written), by service, destination (DestService), verdict and \
             cause (none when the diagnosis names none)",
            None,
            MetricType::Counter,
        )?;
        for (s, dst, verdict, cause, n) in &flows {
            let labels = [
                ("service", s.as_str()),
                ("dest_service", dst),
                ("verdict", verdict),
                ("cause", cause),
            ];
            d.encode_family(&labels)?.encode_counter::<NoLabelSet, _, u64>(n, None)?;
        }
    }
    let connects = v.connect_failures();
    if !connects.is_empty() {
        let mut d = e.encode_descriptor(
            "cgmon_connect_failures",
            "Connects that never established (records with Cause refused, syn-timeout or \
             abandoned), by destination (DestService) and outcome",
            None,
            MetricType::Counter,
        )?;
        for (dst, outcome, n) in &connects {
            let labels = [("dest_service", dst.as_str()), ("outcome", outcome)];
            d.encode_family(&labels)?.encode_counter::<NoLabelSet, _, u64>(n, None)?;
        }
    }
    let limited = v.limited();
    if !limited.is_empty() {
        let mut d = e.encode_descriptor(
            "cgmon_flow_limited_seconds",
            "Seconds of the records' sampled spans each cause limited (their time shares of \
             their Duration), by service, destination and limit",
            None,
            MetricType::Counter,
        )?;
        for (s, dst, limit, x) in &limited {
            let labels = [("service", s.as_str()), ("dest_service", dst), ("limit", limit)];
            d.encode_family(&labels)?.encode_counter::<NoLabelSet, _, u64>(x, None)?;
        }
    }
    Ok(())
}
pub use text::{render, to_prometheus_text};

#[cfg(test)]
mod tests {
    use super::*;

    fn account(cgroup_id: u64, port: u16, acked: u64) -> Account {
        let mut a = crate::tracker::accounts::Accounts::default();
        let slot = a.slot(0, cgroup_id, port, None);
        let mut c = crate::tracker::accounts::Counted { slot, ..Default::default() };
        a.count(&mut c, acked, 0, 0);
        a.get_mut(slot).opened = 1;
        a.get_mut(slot).observe_rtt(20_000);
        let mut v = a.all()[slot as usize].clone();
        v.port = port;
        v
    }

    #[test]
    fn services_beyond_top_k_share_other_and_labels_stay_put() {
        let accounts = Arc::new(Mutex::new(vec![
            account(11, 0, 100),
            account(12, 0, 200),
            account(13, 0, 300),
        ]));
        let ex = Arc::new(Exporter::new(
            Arc::default(),
            accounts.clone(),
            Arc::new(Mutex::new(Services::with_root(None))),
            2,
        ));
        let text = render(&ex.clone().registry()).unwrap();
        assert!(
            text.contains(
                "cgmon_flow_acked_bytes_total{service=\"cgroup-11\",listen_port=\"client\",dest_service=\"unknown\",comm=\"unknown\"} 100"
            ),
            "{text}"
        );
        assert!(text.contains(
            "cgmon_flow_acked_bytes_total{service=\"cgroup-12\",listen_port=\"client\",dest_service=\"unknown\",comm=\"unknown\"} 200"
        ));
        assert!(text.contains(
            "cgmon_flow_acked_bytes_total{service=\"other\",listen_port=\"client\",dest_service=\"unknown\",comm=\"unknown\"} 300"
        ));
        assert!(
            text.contains(
                "cgmon_flow_rtt_seconds_bucket{le=\"0.025\",service=\"cgroup-11\",listen_port=\"client\"} 1"
            ) || text.contains(
                "cgmon_flow_rtt_seconds_bucket{service=\"cgroup-11\",listen_port=\"client\",le=\"0.025\"} 1"
            ),
            "{text}"
        );
        // A fourth service later still goes to "other"; the first two keep their labels.
        accounts.lock().unwrap().push(account(14, 0, 5));
        let text = render(&ex.registry()).unwrap();
        assert!(
            text.contains(
                "cgmon_flow_acked_bytes_total{service=\"other\",listen_port=\"client\",dest_service=\"unknown\",comm=\"unknown\"} 305"
            ),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"));
        let plain = to_prometheus_text(&text);
        assert!(plain.contains("# HELP cgmon_dumps_total sock_diag dumps taken\n# TYPE cgmon_dumps_total counter\ncgmon_dumps_total 0\n"), "{plain}");
        assert!(plain.contains("# TYPE cgmon_flow_rtt_seconds histogram\n"));
        assert!(!plain.contains("# EOF"));
    }

    #[test]
    fn bytes_carry_destination_and_program_bounded_and_kernsnoopd_sums_them() {
        use crate::tracker::accounts::{Accounts, Counted, Names};
        let mut a = Accounts::default();
        let (db, cache, web): (Arc<str>, Arc<str>, Arc<str>) =
            (Arc::from("db"), Arc::from("cache"), Arc::from("web"));
        let (api, cron): (Arc<str>, Arc<str>) = (Arc::from("api"), Arc::from("cron"));
        let mut add = |cg, dest: &Arc<str>, comm: (u32, &Arc<str>), acked| {
            let names = Names { dest: Some(dest), comm: Some(comm) };
            let slot = a.slot_named(0, cg, 40000, None, names);
            a.count(&mut Counted { slot, ..Counted::default() }, acked, 0, 0);
            a.get_mut(slot).opened += 1;
        };
        add(11, &db, (1, &api), 100);
        add(11, &db, (1, &api), 50); // the same account
        add(11, &cache, (1, &api), 7);
        add(11, &web, (2, &cron), 3); // a third destination: past the top 2, "other"
        let accounts = Arc::new(Mutex::new(a.all().to_vec()));
        let services = Arc::new(Mutex::new(Services::with_root(None)));
        let ex = Exporter::new(Arc::default(), accounts, services, 5).with_attribution(2, 5, true);
        let text = to_prometheus_text(&render(&Arc::new(ex).registry()).unwrap());
        let line = |l: &str| assert!(text.lines().any(|x| x == l), "{l}\n{text}");
        let s = "service=\"cgroup-11\",listen_port=\"client\"";
        line(&format!("cgmon_flow_acked_bytes_total{{{s},dest_service=\"db\",comm=\"api\"}} 150"));
        line(&format!("cgmon_flow_acked_bytes_total{{{s},dest_service=\"cache\",comm=\"api\"}} 7"));
        line(&format!(
            "cgmon_flow_acked_bytes_total{{{s},dest_service=\"other\",comm=\"cron\"}} 3"
        ));
        // The flow counts stay per service and port.
        line(&format!("cgmon_flows_opened_total{{{s}}} 4"));
        line("linux_bytes_sent_total{binary_name=\"api\"} 157");
        line("linux_bytes_sent_total{binary_name=\"cron\"} 3");
        line("magma_bytes_sent_total{service_name=\"cgroup-11\",dest_service=\"db\"} 150");
        line("magma_bytes_sent_total{service_name=\"cgroup-11\",dest_service=\"other\"} 3");
    }

    #[test]
    fn the_root_cgroup_is_the_hosts_own() {
        let accounts = Arc::new(Mutex::new(vec![account(1, 0, 100)]));
        let services = Arc::new(Mutex::new(Services::with_root(None)));
        let ex = Arc::new(Exporter::new(Arc::default(), accounts, services, 5));
        let text = render(&ex.registry()).unwrap();
        assert!(text.contains("cgmon_flow_acked_bytes_total{service=\"host\","), "{text}");
        assert!(!text.contains("cgroup-1\""), "{text}");
    }

    #[test]
    fn ten_thousand_destinations_and_programs_keep_the_labels_bounded() {
        use crate::tracker::accounts::{Accounts, Counted, Names};
        let mut a = Accounts::default();
        for i in 0..10_000u32 {
            let (dest, comm): (Arc<str>, Arc<str>) =
                (Arc::from(format!("dest-{i}")), Arc::from(format!("prog-{i}")));
            let names = Names { dest: Some(&dest), comm: Some((i + 1, &comm)) };
            let slot = a.slot_named(0, 7, 40000, None, names);
            a.count(&mut Counted { slot, ..Counted::default() }, 10, 0, 0);
        }
        let accounts = Arc::new(Mutex::new(a.all().to_vec()));
        let services = Arc::new(Mutex::new(Services::with_root(None)));
        let ex =
            Exporter::new(Arc::default(), accounts, services, 20).with_attribution(20, 20, true);
        let text = to_prometheus_text(&render(&Arc::new(ex).registry()).unwrap());
        let values = |label: &str| {
            let mut v: Vec<&str> = text
                .lines()
                .filter_map(|l| l.split(&format!("{label}=\"")).nth(1)?.split('"').next())
                .collect();
            v.sort_unstable();
            v.dedup();
            v.len()
        };
        // The first 20 of each, and other (the accounts past 4,096 share the overflow).
        assert_eq!(values("dest_service"), 21, "{text}");
        assert_eq!(values("comm"), 21);
        assert_eq!(values("binary_name"), 21);
        // Every byte is still counted, under some label.
        let sum: f64 = text
            .lines()
            .filter(|l| l.starts_with("cgmon_flow_acked_bytes_total{"))
            .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
            .sum();
        assert_eq!(sum, 100_000.0);
    }

    /// Every series the README names is served: a name documented but never exported (as
    /// `cgmon_netns_sampled` once was) fails here.
    #[test]
    fn every_metric_the_readme_names_is_exported() {
        let accounts = Arc::new(Mutex::new(vec![account(1, 80, 100)]));
        // With the ClickHouse sink on, so its series are served too.
        let m = Arc::new(Metrics::default());
        m.sink.enabled.set(1);
        *m.sink.last_error.lock().unwrap() = Some("connection refused \"x\"\n".into());
        // And a record counted, so that the verdict families are served.
        m.verdicts.add([crate::metrics::verdicts::Ended {
            service: Some("api"),
            dest_service: Some("db"),
            verdict: Some("network"),
            cause: Some("queueing"),
            limited_s: [0.0, 0.0, 2.0, 0.0],
        }]);
        m.verdicts.add([crate::metrics::verdicts::Ended {
            service: Some("api"),
            dest_service: Some("db"),
            verdict: Some("unknown"),
            cause: Some("refused"),
            limited_s: [0.0; 4],
        }]);
        let ex = Arc::new(
            Exporter::new(m, accounts, Arc::new(Mutex::new(Services::with_root(None))), 2)
                .with_netns(Arc::new(Mutex::new(vec!["host".into(), "blue".into()])))
                .with_attribution(20, 20, true),
        );
        let text = to_prometheus_text(&render(&ex.registry()).unwrap());
        // The error's quotes and newline are escaped in its label.
        assert!(
            text.contains(
                "cgmon_sink_last_error_info{error=\"connection refused \\\"x\\\"\\n\"} 1"
            ),
            "{text}"
        );
        // What a user reads about the metrics: the README and the guides it links.
        let readme = [
            include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")),
            include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/http.md")),
            include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/running.md")),
            include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/deployment.md")),
            include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/fleet.md")),
            include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/web.md")),
        ]
        .concat();
        let readme = readme.as_str();
        let mut missing = Vec::new();
        for (i, _) in readme.match_indices("cgmon_") {
            let name: String = readme[i..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == '_')
                .collect();
            // `cgmon_*` (a prefix) and `cgmon_rs::…` (a log target) name no series.
            if name.ends_with('_') || readme[i + name.len()..].starts_with("::") {
                continue;
            }
            let served = text.lines().any(|l| {
                l.strip_prefix(name.as_str())
                    .is_some_and(|rest| rest.starts_with([' ', '{']) || rest.is_empty())
                    || l.starts_with(&format!("# TYPE {name} "))
            });
            if !served && !missing.contains(&name) {
                missing.push(name);
            }
        }
        assert!(missing.is_empty(), "in the README or docs/, not in /metrics: {missing:?}\n{text}");
    }
}

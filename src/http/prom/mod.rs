//! `/metrics`: the monitor's own figures and per-service flow aggregates in Prometheus text
//! format (OpenMetrics), through prometheus-client's `Collector`: values are read from the
//! shared atomics and the tracker's published accounts at scrape time, so sampling never
//! waits on a scrape.
//!
//! Names take the `cgmon_` prefix and base units (seconds, bytes); counters end in `_total`.
//! Flow aggregates carry two labels, bounding cardinality:
//! - `service`: the systemd unit or container of the sockets' cgroup
//!   ([`crate::services`]); the first `top_services` distinct services keep their own label
//!   and later ones share `other` (a label, once given, never moves, so counters never go
//!   backwards);
//! - `port`: the local port when it is a listening port (the server side of a flow), else
//!   `0`; the first [`MAX_PORT_LABELS`] ports keep their own label, later ones `other`;
//! - with `--netns` sampling more than the monitor's own namespace, `netns`: the namespace's
//!   name (its `ip netns` name, `pod:<uid>`, `<runtime>:<container>`, `host`), the first
//!   `top_services` distinct ones keeping their own label, later ones `other`.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::Registry;

use crate::metrics::Metrics;
use crate::services::Services;
use crate::tracker::accounts::{Account, RTT_BUCKETS_S};

/// Sums per label pair.
#[derive(Debug, Default, Clone)]
struct Agg {
    opened: u64,
    closed: u64,
    acked: u64,
    received: u64,
    retrans: u64,
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
        Self { metrics, accounts, labels: Mutex::new(labels), netns: None }
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

    fn aggregate(&self) -> BTreeMap<(String, String, String), Agg> {
        let accounts = self.accounts.lock().unwrap_or_else(|e| e.into_inner()).clone();
        let names =
            self.netns.as_ref().map(|n| n.lock().unwrap_or_else(|e| e.into_inner()).clone());
        let mut l = self.labels.lock().unwrap_or_else(|e| e.into_inner());
        let mut out: BTreeMap<(String, String, String), Agg> = BTreeMap::new();
        for a in &accounts {
            if a.opened == 0 && a.bytes_acked == 0 && a.bytes_received == 0 {
                continue; // the unused overflow slot
            }
            let ns = match &names {
                Some(n) => {
                    let name = n.get(a.netns as usize).map_or("other", String::as_str);
                    l.netns(name)
                }
                None => String::new(),
            };
            let key = (ns, l.service(a.cgroup_id, a.uid), l.port(a.port));
            let g = out
                .entry(key)
                .or_insert_with(|| Agg { rtt: vec![0; RTT_BUCKETS_S.len() + 1], ..Agg::default() });
            g.opened += a.opened;
            g.closed += a.closed;
            g.acked += a.bytes_acked;
            g.received += a.bytes_received;
            g.retrans += a.bytes_retrans;
            for (t, v) in g.rtt.iter_mut().zip(&a.rtt_buckets) {
                *t += v;
            }
            g.rtt_sum += a.rtt_sum_us as f64 / 1e6;
        }
        out
    }
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
        let agg = self.aggregate();
        type Get = fn(&Agg) -> u64;
        let families: [(&str, &str, Get); 5] = [
            ("cgmon_flows_opened", "Flows opened, by service and listening port", |a| a.opened),
            ("cgmon_flows_closed", "Flows closed, by service and listening port", |a| a.closed),
            (
                "cgmon_flow_acked_bytes",
                "Bytes acknowledged by the peer (tcpi_bytes_acked), by service and listening port",
                |a| a.acked,
            ),
            (
                "cgmon_flow_received_bytes",
                "Bytes received (tcpi_bytes_received), by service and listening port",
                |a| a.received,
            ),
            (
                "cgmon_flow_retransmitted_bytes",
                "Bytes retransmitted (tcpi_bytes_retrans), by service and listening port",
                |a| a.retrans,
            ),
        ];
        for (name, help, get) in families {
            let mut d = e.encode_descriptor(name, help, None, MetricType::Counter)?;
            for ((ns, svc, port), a) in &agg {
                d.encode_family(&labels(ns, svc, port))?
                    .encode_counter::<NoLabelSet, _, u64>(&get(a), None)?;
            }
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
            "Flows (records written), by service, destination (DestService) and verdict",
            None,
            MetricType::Counter,
        )?;
        for (s, dst, verdict, n) in &flows {
            let labels = [("service", s.as_str()), ("dest_service", dst), ("verdict", verdict)];
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
        let accounts =
            Arc::new(Mutex::new(vec![account(1, 0, 100), account(2, 0, 200), account(3, 0, 300)]));
        let ex = Arc::new(Exporter::new(
            Arc::default(),
            accounts.clone(),
            Arc::new(Mutex::new(Services::with_root(None))),
            2,
        ));
        let text = render(&ex.clone().registry()).unwrap();
        assert!(
            text.contains(
                "cgmon_flow_acked_bytes_total{service=\"cgroup-1\",listen_port=\"client\"} 100"
            ),
            "{text}"
        );
        assert!(text.contains(
            "cgmon_flow_acked_bytes_total{service=\"cgroup-2\",listen_port=\"client\"} 200"
        ));
        assert!(text.contains(
            "cgmon_flow_acked_bytes_total{service=\"other\",listen_port=\"client\"} 300"
        ));
        assert!(
            text.contains(
                "cgmon_flow_rtt_seconds_bucket{le=\"0.025\",service=\"cgroup-1\",listen_port=\"client\"} 1"
            ) || text.contains(
                "cgmon_flow_rtt_seconds_bucket{service=\"cgroup-1\",listen_port=\"client\",le=\"0.025\"} 1"
            ),
            "{text}"
        );
        // A fourth service later still goes to "other"; the first two keep their labels.
        accounts.lock().unwrap().push(account(4, 0, 5));
        let text = render(&ex.registry()).unwrap();
        assert!(
            text.contains(
                "cgmon_flow_acked_bytes_total{service=\"other\",listen_port=\"client\"} 305"
            ),
            "{text}"
        );
        assert!(text.ends_with("# EOF\n"));
        let plain = to_prometheus_text(&text);
        assert!(plain.contains("# HELP cgmon_dumps_total sock_diag dumps taken\n# TYPE cgmon_dumps_total counter\ncgmon_dumps_total 0\n"), "{plain}");
        assert!(plain.contains("# TYPE cgmon_flow_rtt_seconds histogram\n"));
        assert!(!plain.contains("# EOF"));
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
            limited_s: [0.0, 0.0, 2.0, 0.0],
        }]);
        let ex = Arc::new(
            Exporter::new(m, accounts, Arc::new(Mutex::new(Services::with_root(None))), 2)
                .with_netns(Arc::new(Mutex::new(vec!["host".into(), "blue".into()]))),
        );
        let text = to_prometheus_text(&render(&ex.registry()).unwrap());
        // The error's quotes and newline are escaped in its label.
        assert!(
            text.contains(
                "cgmon_sink_last_error_info{error=\"connection refused \\\"x\\\"\\n\"} 1"
            ),
            "{text}"
        );
        let readme = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"));
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
        assert!(missing.is_empty(), "in the README, not in /metrics: {missing:?}\n{text}");
    }
}

//! The web view's handlers: they gather what a page shows (the tracker's answer, the
//! published accounts, the ring of ended flows) into [`web`]'s plain data, and render it.
//! The tracker copies only the page's flows; grouping per service and rendering run here,
//! on the server's thread.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Path, Query as Query_, State};
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use rustc_hash::FxHashMap;

use super::web::{self, Filters, FlowView, Host, Row, ServiceRow};
use super::{BadRequest, Ctx, ask};
use crate::analysis::diagnosis::{VERDICTS, Window, so_far, so_far_number};
use crate::chart::flow::num;
use crate::locks::Locked;
use crate::recent::{Ended, Found};
use crate::record::{FlowId, tuple_text};
use crate::tracker::accounts::Account;
use crate::tracker::views::{Brief, Filter, Order, Query};
use crate::tracker::{EndReason, EndedFlow, Flow};
use crate::units::si_bytes;

/// `/`'s query string. An empty value (the filter form's "all") is no filter.
#[derive(Debug, serde::Deserialize)]
pub(super) struct HostQuery {
    order: Option<String>,
    offset: Option<usize>,
    limit: Option<usize>,
    netns: Option<String>,
    service: Option<String>,
    verdict: Option<String>,
    dest: Option<String>,
    idle: Option<String>,
}

/// A query value, `None` when empty.
fn given(v: Option<String>) -> Option<String> {
    v.filter(|v| !v.is_empty())
}

/// Service names of account slots, resolved once per request and slot.
struct Names<'a> {
    accounts: &'a [Account],
    services: &'a mut crate::who::services::Services,
    cache: FxHashMap<u32, (String, u16)>,
}

impl Names<'_> {
    fn of(&mut self, slot: u32) -> (String, u16) {
        if let Some(n) = self.cache.get(&slot) {
            return n.clone();
        }
        let n = match self.accounts.get(slot as usize) {
            None => ("unknown".to_string(), 0),
            Some(a) => (super::prom::owner_name(self.services, a.cgroup_id, a.uid), a.port),
        };
        self.cache.insert(slot, n.clone());
        n
    }
}

/// Per (service, port): its row, and its active flows' current RTTs (ms).
type Groups = FxHashMap<(String, u16), (ServiceRow, Vec<f64>)>;

/// The group of account `slot`'s service, made when first met.
fn group<'g>(
    groups: &'g mut Groups,
    nm: &mut Names<'_>,
    slot: u32,
) -> &'g mut (ServiceRow, Vec<f64>) {
    let (name, port) = nm.of(slot);
    groups
        .entry((name.clone(), port))
        .or_insert_with(|| (ServiceRow { name, port, ..ServiceRow::default() }, Vec::new()))
}

/// A page row for view copy `f` (with its newest samples) and its brief.
fn row(
    f: &Flow,
    b: &Brief,
    a: Option<&Account>,
    service: String,
    netns: Option<String>,
    offset_ns: i128,
) -> Row {
    let latest = f.samples.last();
    let l = &f.last;
    let srtt = latest.map_or(0, |s| s.rtt_us);
    let w = Window::of(f);
    let (verdict, cause) = so_far(&w, srtt).unwrap_or((crate::analysis::diagnosis::UNKNOWN, None));
    Row {
        cookie: f.key.cookie,
        tuple: tuple_text(&FlowId::new(&f.key, f.first_ts_ns)),
        service,
        comm: a.and_then(|a| a.comm.as_deref()).map(str::to_string),
        dest: a.and_then(|a| a.dest_service.as_deref()).map(str::to_string),
        netns,
        state: crate::states::name(l.state),
        bytes_per_s: f64::from(b.bytes_per_s),
        verdict,
        cause,
        main: so_far_number(&w, srtt, verdict, cause),
        rtt_ms: latest.filter(|s| s.rtt_us > 0).map(|s| f64::from(s.rtt_us) / 1000.0),
        min_rtt_ms: (l.min_rtt_us != u32::MAX).then(|| f64::from(l.min_rtt_us) / 1000.0),
        retrans: l.total_retrans,
        age_s: f.span_ns() as f64 / 1e9,
        points: f.chart_points(offset_ns),
        end_unix_s: (i128::from(f.last_ts_ns) + offset_ns) as f64 / 1e9,
    }
}

/// `/`'s filters as the tracker applies them: the account slots of the service or
/// destination asked for, and the verdict's index.
fn filter_of(f: &Filters, netns: Option<u32>, nm: &mut Names<'_>) -> Result<Filter, BadRequest> {
    let verdict = match &f.verdict {
        None => None,
        Some(v) => Some(VERDICTS.iter().position(|x| x == v).ok_or_else(|| {
            BadRequest(format!("invalid verdict {v:?}: one of {}", VERDICTS.join(", ")))
        })? as u8),
    };
    let slots = (f.service.is_some() || f.dest.is_some()).then(|| {
        (0..nm.accounts.len() as u32)
            .filter(|&s| {
                let a = &nm.accounts[s as usize];
                f.dest.as_deref().is_none_or(|d| a.dest_service.as_deref() == Some(d))
                    && f.service.as_ref().is_none_or(|want| nm.of(s).0 == *want)
            })
            .collect()
    });
    Ok(Filter { slots, verdict, idle: f.idle, netns })
}

/// What `/` was asked for: the order, the page's rows and first row, and the filters; or
/// what is wrong with it.
fn host_request(
    q: Result<Query_<HostQuery>, QueryRejection>,
) -> Result<(Order, usize, usize, Filters), BadRequest> {
    let Query_(q) = q.map_err(|e| BadRequest(e.to_string()))?;
    let order = parse_order(q.order.as_deref()).map_err(|msg| BadRequest(msg.0))?;
    let limit = q.limit.unwrap_or(web::DEFAULT_ROWS);
    if limit == 0 || limit > web::MAX_ROWS {
        return Err(BadRequest(format!("invalid limit {limit}: 1 to {}", web::MAX_ROWS)));
    }
    let filters = Filters {
        service: given(q.service),
        verdict: given(q.verdict),
        dest: given(q.dest),
        idle: q.idle.as_deref().is_some_and(|v| v == "1" || v == "on" || v == "true"),
        netns: given(q.netns),
    };
    Ok((order, limit, q.offset.unwrap_or(0), filters))
}

/// `/`.
pub(super) async fn host(
    State(c): State<Ctx>,
    q: Result<Query_<HostQuery>, QueryRejection>,
) -> Response {
    let (order, limit, offset, filters) = match host_request(q) {
        Ok(r) => r,
        Err(e) => return e.into_response(),
    };
    let netns = match c.netns_index(filters.netns.as_deref()) {
        Ok(ns) => ns,
        Err(e) => return e.into_response(),
    };
    let accounts = c.accounts.locked().clone();
    let filter = {
        let mut services = c.services.locked();
        let mut nm =
            Names { accounts: &accounts, services: &mut services, cache: FxHashMap::default() };
        match filter_of(&filters, netns, &mut nm) {
            Ok(f) => f,
            Err(e) => return e.into_response(),
        }
    };
    let ov = match super::overview(&c, (order, offset, limit), web::SPARK_SAMPLES, filter).await {
        Ok(ov) => ov,
        Err(r) => return r,
    };
    let names = c.netns.as_ref().map(|n| n.locked().clone());
    let mut services = c.services.locked();
    let mut nm =
        Names { accounts: &accounts, services: &mut services, cache: FxHashMap::default() };
    let rows = ov
        .page
        .iter()
        .zip(&ov.netns)
        .zip(&ov.briefs)
        .map(|((f, &ns), b)| {
            let netns = names.as_ref().and_then(|n| n.get(ns as usize).cloned());
            let a = accounts.get(f.counted.slot as usize);
            row(f, b, a, nm.of(f.counted.slot).0, netns, c.analysis.realtime_offset_ns)
        })
        .collect();
    let (services_table, choices) = services_of(&ov.all, &accounts, &mut nm);
    drop(services);
    let h = Host {
        rows,
        total: ov.matched,
        idle: ov.idle,
        all: ov.all.len(),
        order,
        offset,
        limit,
        filters,
        choices,
        services: services_table,
        ended: c.recent.enabled().then(|| c.recent.list_linked(std::time::Instant::now())),
        netns: names.is_some(),
        health: super::status::status_section(&c.metrics, names.as_deref()),
    };
    Html(web::host_page(&h)).into_response()
}

/// Per service: the active flows' current RTTs and verdicts so far, and the accounts'
/// rates; and what the filter menus offer (the services and destinations seen).
fn services_of(
    all: &[Brief],
    accounts: &[Account],
    nm: &mut Names<'_>,
) -> (Vec<ServiceRow>, (Vec<String>, Vec<String>)) {
    let mut groups = Groups::default();
    let (mut dests, mut seen) =
        (std::collections::BTreeSet::new(), std::collections::BTreeSet::new());
    for b in all {
        let g = group(&mut groups, nm, b.slot);
        g.0.flows += 1;
        if b.rtt_us > 0 {
            g.1.push(f64::from(b.rtt_us) / 1000.0);
        }
        g.0.verdicts[usize::from(b.verdict).min(4)] += 1;
        seen.insert(g.0.name.clone());
        if let Some(d) = accounts.get(b.slot as usize).and_then(|a| a.dest_service.clone()) {
            dests.insert(d.to_string());
        }
    }
    for (slot, a) in accounts.iter().enumerate() {
        if a.bytes_per_s > 0.0 {
            group(&mut groups, nm, slot as u32).0.bytes_per_s += a.bytes_per_s;
        }
    }
    (service_rows(groups), (seen.into_iter().collect(), dests.into_iter().collect()))
}

/// `?order=`: by throughput when not given.
fn parse_order(name: Option<&str>) -> Result<Order, crate::units::ValueError> {
    match name {
        None => Ok(Order::Rate),
        Some(name) => Order::ALL.into_iter().find(|o| o.name() == name).ok_or_else(|| {
            crate::units::ValueError(format!("invalid order {name:?}: rate, rtt, retrans or age"))
        }),
    }
}

/// The services' rows, each with its RTT quantiles, the busiest first.
fn service_rows(groups: Groups) -> Vec<ServiceRow> {
    let mut services: Vec<ServiceRow> = groups
        .into_values()
        .map(|(mut s, mut rtts)| {
            rtts.sort_unstable_by(f64::total_cmp);
            s.rtt_p50_ms = crate::stats::summary::percentile(&rtts, 50.0);
            s.rtt_p98_ms = crate::stats::summary::percentile(&rtts, 98.0);
            s
        })
        .collect();
    services.sort_by(|a, b| {
        b.bytes_per_s
            .total_cmp(&a.bytes_per_s)
            .then(b.flows.cmp(&a.flows))
            .then(a.name.cmp(&b.name))
    });
    services
}

/// The view of active flow copy `f`: its charts, and the record it would have if it ended
/// now.
fn active_view(c: &Ctx, f: Flow) -> FlowView {
    let offset = c.analysis.realtime_offset_ns;
    let points = f.chart_points(offset);
    let samples = f.stage.window().max(f.samples.len());
    let cookie = f.key.cookie;
    let end = f.last_ts_ns;
    let mut e = EndedFlow::new(f, EndReason::Shutdown, end);
    let mut r = crate::analysis::analyze(&mut e, &c.analysis);
    crate::who::namer::name(&mut c.services.locked(), &c.dests.locked(), &mut r);
    let f = &e.flow;
    let latest = points.last().copied().unwrap_or_default();
    let mut facts: Vec<(String, String)> = vec![
        ("service".into(), r.service.clone().unwrap_or_else(|| "–".into())),
        ("state".into(), crate::states::name(f.last.state).into()),
        ("congestion control".into(), f.cc.as_str().into()),
        ("sampled for".into(), format!("{:.1} s", f.span_ns() as f64 / 1e9)),
        (
            "RTT now / minimum".into(),
            format!(
                "{} / {} ms",
                latest.rtt_ms.map_or("–".into(), num),
                r.min_rtt_kernel_ms.map_or("–".into(), num)
            ),
        ),
        (
            "cwnd / ssthresh".into(),
            format!(
                "{} / {}",
                latest.cwnd_bytes.map_or("–".into(), |b| format!("{} KB", num(b / 1000.0))),
                latest
                    .ssthresh_bytes
                    .map_or("not set yet".into(), |b| format!("{} KB", num(b / 1000.0)))
            ),
        ),
        (
            "delivery / pacing rate".into(),
            format!(
                "{} / {}",
                web::rate_text(latest.delivery_mbps),
                web::rate_text(latest.pacing_mbps)
            ),
        ),
        ("send throughput so far".into(), web::rate_text(Some(r.send_throughput_mbps))),
        (
            "bytes acked / received".into(),
            format!("{} / {}", si_bytes(r.bytes_acked), si_bytes(r.bytes_received)),
        ),
        ("retransmitted segments".into(), r.total_retransmits.to_string()),
    ];
    if let Some(d) = &r.diagnosis {
        let t = &d.shares;
        facts.push((
            "time limited by receiver window / send buffer / network / application".into(),
            format!(
                "{:.0} % / {:.0} % / {:.0} % / {:.0} %",
                t.receiver_window, t.send_buffer, t.network, t.application
            ),
        ));
    }
    FlowView {
        cookie,
        tuple: tuple_text(&r.id),
        active: true,
        min_rtt_ms: r.min_rtt_kernel_ms.or(r.min_rtt_observed_ms),
        samples,
        points,
        end_unix_s: Some((i128::from(end) + offset) as f64 / 1e9),
        verdict: r.diagnosis.as_ref().map(|d| (d.verdict.to_string(), d.finding.clone())),
        facts,
        json: serde_json::to_string_pretty(&r).unwrap_or_default(),
    }
}

/// The view of ended flow `e`, from the ring, its service named as the written record's is.
fn ended_view(c: &Ctx, e: &Ended) -> FlowView {
    let mut record = (*e.record).clone();
    crate::who::namer::name(&mut c.services.locked(), &c.dests.locked(), &mut record);
    let rec: serde_json::Value = serde_json::to_value(&record).unwrap_or_default();
    let text = |k: &str| match &rec[k] {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Null => "–".into(),
        v => v.to_string(),
    };
    let bytes = |k: &str| rec[k].as_u64().map_or_else(|| "–".into(), si_bytes);
    let facts = vec![
        ("service".into(), text("Service")),
        ("ended".into(), text("EndTime")),
        ("how".into(), format!("{} ({})", text("EndReason"), text("Close"))),
        ("duration".into(), format!("{:.2} s", e.duration_ns as f64 / 1e9)),
        ("send throughput".into(), web::rate_text(Some(e.throughput_mbps))),
        ("minimum RTT".into(), e.min_rtt_ms.map_or("–".into(), |v| format!("{} ms", num(v)))),
        ("retransmitted segments".into(), text("TotalRetransmits")),
        (
            "bytes acked / received".into(),
            format!("{} / {}", bytes("BytesAcked"), bytes("BytesReceived")),
        ),
    ];
    FlowView {
        cookie: e.cookie,
        tuple: e.tuple(),
        active: false,
        points: e.points.clone(),
        end_unix_s: None,
        samples: e.samples,
        min_rtt_ms: e.min_rtt_ms,
        facts,
        verdict: e.verdict().map(|(v, f)| (v.to_string(), f.to_string())),
        json: serde_json::to_string_pretty(&record).unwrap_or_default(),
    }
}

/// The flow `cookie`: active, or ended and still kept; a [`not_found`] or [`aged_out`]
/// response when neither.
async fn find(c: &Ctx, cookie: u64) -> Result<FlowView, Response> {
    // All the samples the tracker holds: the charts are the flow's whole window, and the
    // record below is the one it would have (its statistics over every sample).
    match ask(c, |tx| Query::Flow { cookie, keep: usize::MAX, tx }).await? {
        Some((f, _)) => Ok(active_view(c, f)),
        None => match c.recent.find(cookie, std::time::Instant::now()) {
            Found::Kept(e) => Ok(ended_view(c, &e)),
            Found::Gone => Err(aged_out(cookie)),
            Found::Unknown => Err(not_found(cookie)),
        },
    }
}

fn not_found(cookie: u64) -> Response {
    let body = format!(
        "<main><h1>No flow with cookie {cookie}</h1><p>It is not active, and not among the \
         recently ended flows kept (<code>--recent-flows</code>).</p></main>"
    );
    (StatusCode::NOT_FOUND, Html(web::layout("cgmon-rs: no such flow", &body))).into_response()
}

/// 410: a flow a page listed once, whose entry has gone since.
fn aged_out(cookie: u64) -> Response {
    let body = format!(
        "<main><h1>This flow has aged out</h1><p>The flow with cookie {cookie} ended, and its \
         record left what the web view keeps: a listed flow stays for {} minutes after a page \
         last listed it, or until {} MiB of newer listed records take its place. Its record \
         is in the monitor's output.</p></main>",
        crate::recent::KEEP_LISTED.as_secs() / 60,
        crate::recent::KEEP_LISTED_BYTES >> 20
    );
    (StatusCode::GONE, Html(web::layout("cgmon-rs: flow aged out", &body))).into_response()
}

/// `/flow/{cookie}`.
pub(super) async fn flow_page(State(c): State<Ctx>, Path(cookie): Path<u64>) -> Response {
    match find(&c, cookie).await {
        Ok(v) => Html(web::flow_page(&v)).into_response(),
        Err(r) => r,
    }
}

/// `/flow/{cookie}/live`.
pub(super) async fn flow_live(State(c): State<Ctx>, Path(cookie): Path<u64>) -> Response {
    match find(&c, cookie).await {
        Ok(v) => axum::Json(web::flow_live(&v)).into_response(),
        Err(r) => r,
    }
}

/// `/static/{file}`.
pub(super) async fn asset(Path(file): Path<String>) -> Response {
    let (body, kind) = match file.as_str() {
        "style.css" => (web::style_css(), "text/css; charset=utf-8"),
        "live.js" => (web::LIVE_JS.to_string(), "text/javascript; charset=utf-8"),
        _ => return (StatusCode::NOT_FOUND, "no such file\n").into_response(),
    };
    ([(header::CONTENT_TYPE, kind), (header::CACHE_CONTROL, "max-age=300")], body).into_response()
}

//! Exact polls against the live kernel: each test asks only about loopback sockets it made.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use cgmon_rs::filter;
use cgmon_rs::metrics::Metrics;
use cgmon_rs::poll::{self as task, StageError, TaskConfig, Wiring};
use cgmon_rs::sampler::destroy::DestroyListener;
use cgmon_rs::tracker::{Close, EndReason, EndedFlow, Tracker, TrackerConfig, TrackerStats};
use tokio::sync::{mpsc, watch};

use cgmon_rs::sampler::exact::Answer;
use cgmon_rs::sampler::source::{NetlinkSource, SocketOptions};
use cgmon_rs::sampler::{Sampler, SamplerConfig};
use cgmon_rs::states::tcp;
use cgmon_rs::testkit::Pair;
use cgmon_rs::wire::inet_diag::SocketTarget;

fn sampler() -> Sampler<NetlinkSource> {
    Sampler::new(NetlinkSource::open(SocketOptions::default()).unwrap(), SamplerConfig::default())
        .unwrap()
}

/// Both ends of each stream as (local, peer), to pick them out of a dump.
fn ends(streams: &[&TcpStream]) -> Vec<(SocketAddr, SocketAddr)> {
    streams.iter().map(|t| (t.local_addr().unwrap(), t.peer_addr().unwrap())).collect()
}

/// The targets of the sockets whose (local, peer) is one of `ends`, from a dump.
///
/// By whole 4-tuple, not by port: tests run in parallel, and a listener bound to port 0
/// may share its number with another test's socket on another address, or with a
/// TIME-WAIT socket (std listeners set SO_REUSEADDR), which a port match would pick up.
async fn targets(
    s: &mut Sampler<NetlinkSource>,
    ends: &[(SocketAddr, SocketAddr)],
) -> Vec<(SocketTarget, u8)> {
    let canon = |a: SocketAddr| (a.ip().to_canonical(), a.port());
    let want: Vec<_> = ends.iter().map(|(l, p)| (canon(*l), canon(*p))).collect();
    let mut out = Vec::new();
    let d = s
        .dump_with(|x| {
            let m = x.msg();
            let here = ((m.src().to_canonical(), m.sport()), (m.dst().to_canonical(), m.dport()));
            if want.contains(&here) {
                out.push((SocketTarget::of(&m), m.state()));
            }
        })
        .await
        .unwrap();
    assert!(d.is_complete());
    out
}

/// Exact answers: (cookie, state) found, and the indexes gone.
async fn ask(s: &mut Sampler<NetlinkSource>, t: &[SocketTarget]) -> (Vec<(u64, u8)>, Vec<usize>) {
    let (mut found, mut gone) = (Vec::new(), Vec::new());
    let p = s
        .exact_with(t, |i, a| match a {
            Answer::Found(x) => found.push((x.msg().cookie(), x.msg().state())),
            Answer::Gone { .. } => gone.push(i),
        })
        .await
        .unwrap();
    assert_eq!(p.unanswered + p.refused + p.malformed, 0, "{p:?}");
    (found, gone)
}

#[tokio::test]
async fn every_family_is_found_by_identity_including_v4_clients_of_dual_stack_listeners() {
    let l4 = TcpListener::bind((crate::program::own_address(), 0)).unwrap();
    let l6 = TcpListener::bind("[::1]:0").unwrap();
    let ld = TcpListener::bind("[::]:0").unwrap();
    let ad: SocketAddr = format!("127.0.0.1:{}", ld.local_addr().unwrap().port()).parse().unwrap();
    let mut pairs = vec![
        Pair::connect(&l4, l4.local_addr().unwrap()).unwrap(),
        Pair::connect(&l6, l6.local_addr().unwrap()).unwrap(),
        Pair::connect(&ld, ad).unwrap(),
    ];
    for p in &mut pairs {
        p.exchange(1000).unwrap();
    }
    let streams: Vec<&TcpStream> = pairs.iter().flat_map(|p| [&p.client, &p.server]).collect();
    let mut s = sampler();
    let t = targets(&mut s, &ends(&streams)).await;
    assert_eq!(t.len(), 6, "both ends of three pairs");
    let want: Vec<(u64, u8)> = t.iter().map(|(x, st)| (x.cookie(), *st)).collect();
    let only: Vec<SocketTarget> = t.iter().map(|x| x.0).collect();
    let (found, gone) = ask(&mut s, &only).await;
    assert_eq!((found, gone), (want, vec![]));
}

#[tokio::test]
async fn a_reset_socket_is_gone_and_a_reused_four_tuple_is_not_the_old_socket() {
    let l = TcpListener::bind((crate::program::own_address(), 0)).unwrap();
    let to = l.local_addr().unwrap();
    // A client on a fixed local port, so that the next connection reuses the 4-tuple.
    let connect_from = |port: u16| {
        let c = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        c.set_reuse_address(true).unwrap();
        c.bind(&SocketAddr::from(([127, 0, 0, 1], port)).into()).unwrap();
        c.connect(&to.into()).unwrap();
        let (srv, _) = l.accept().unwrap();
        (TcpStream::from(c), srv)
    };
    let probe = TcpListener::bind((crate::program::own_address(), 0)).unwrap();
    let port = probe.local_addr().unwrap().port();
    drop(probe);
    let (c, srv) = connect_from(port);
    let mut s = sampler();
    let old = targets(&mut s, &ends(&[&c, &srv])).await;
    let old_client = old.iter().find(|(_, st)| *st == tcp::ESTABLISHED).map(|x| x.0);
    let old: Vec<SocketTarget> = old.iter().map(|x| x.0).collect();
    assert_eq!(old.len(), 2);
    // Abortive close: RST, no TIME-WAIT; both ends leave the tables at once.
    socket2::SockRef::from(&c).set_linger(Some(Duration::ZERO)).unwrap();
    drop(c);
    std::thread::sleep(Duration::from_millis(50));
    let (found, gone) = ask(&mut s, &old).await;
    assert!(found.iter().all(|(_, st)| *st == tcp::CLOSE), "{found:?}");
    let client_gone = old.iter().position(|t| Some(*t) == old_client).unwrap();
    assert!(gone.contains(&client_gone), "{found:?} {gone:?}");
    drop(srv);
    // The same 4-tuple again: a new socket, a new cookie; asking for the old one is refused.
    let (c2, s2) = connect_from(port);
    let new = targets(&mut s, &ends(&[&c2, &s2])).await;
    assert_eq!(new.len(), 2);
    assert!(new.iter().all(|(t, _)| !old.iter().any(|o| o.cookie() == t.cookie())));
    let (found, gone) = ask(&mut s, &old).await;
    assert!(found.is_empty(), "the old identity found {found:?}");
    assert_eq!(gone.len(), 2);
}

/// The tracker stage on the kernel's sockets of `port` only, with tiers on: full dumps
/// paced by a budget so small they come only every few seconds, 20 ms ticks, and a hot
/// flow lingering 200 ms.
struct Tiered {
    metrics: Arc<Metrics>,
    stop: watch::Sender<bool>,
    stage: tokio::task::JoinHandle<Result<TrackerStats, StageError>>,
    ended: mpsc::Receiver<Vec<EndedFlow>>,
}

fn tiered(a: SocketAddr, destroy: bool) -> Tiered {
    let f = filter::parse(&crate::program::port_filter(a)).unwrap();
    let cfg = SamplerConfig { filter: Some(f.clone()), ..SamplerConfig::default() };
    let sampler =
        Sampler::new(NetlinkSource::open(SocketOptions::default()).unwrap(), cfg).unwrap();
    let destroy = destroy.then(|| DestroyListener::open(Some(f)).unwrap());
    let tracker = Tracker::new(TrackerConfig {
        tiers: true,
        hot_linger_ns: 200_000_000,
        destroy_grace_ns: 5_000_000_000,
        ..TrackerConfig::default()
    });
    let (stop, stop_rx) = watch::channel(false);
    let (tx, ended) = mpsc::channel(1024);
    let metrics = Arc::new(Metrics::default());
    // A budget too small for any dump but the slowest pace: 10 s, the cap these tests were
    // written against (the budget alone would space dumps minutes apart).
    let cfg = TaskConfig {
        cpu_budget: 0.000_01,
        max_full_interval: Some(Duration::from_secs(10)),
        ..TaskConfig::every(Duration::from_millis(20))
    };
    let stage = tokio::spawn(task::run(
        tracker,
        sampler,
        destroy,
        cfg,
        Wiring::new(stop_rx, tx, metrics.clone()),
        |_| {},
    ));
    Tiered { metrics, stop, stage, ended }
}

/// `n` idle connections to `l`, so that a full dump of its port costs far more than asking
/// for two sockets (with only the busy pair, dumping it is the cheaper way, and is taken).
fn idle_pairs(l: &TcpListener, n: usize) -> Vec<Pair> {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit/setrlimit with a valid struct; raising the soft limit to the hard.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
        lim.rlim_cur = lim.rlim_max.min(65_536);
        libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
    }
    let a = l.local_addr().unwrap();
    (0..n).map(|_| Pair::connect(l, a).unwrap()).collect()
}

impl Tiered {
    /// The flows ended, once `n` have (or after 5 s).
    async fn ended(&mut self, n: usize) -> Vec<EndedFlow> {
        let mut ended = Vec::new();
        let t0 = std::time::Instant::now();
        while ended.len() < n && t0.elapsed() < Duration::from_secs(5) {
            if let Ok(b) = self.ended.try_recv() {
                ended.extend(b);
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        ended
    }
}

/// Exchanges data on `p` for `d`, a little every 5 ms.
fn busy(p: &mut Pair, d: Duration) {
    let t = std::time::Instant::now();
    while t.elapsed() < d {
        p.exchange(1000).unwrap();
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flow_that_goes_still_leaves_the_hot_set_and_a_full_dump_brings_it_back() {
    let l = TcpListener::bind((crate::program::own_address(), 0)).unwrap();
    let a = l.local_addr().unwrap();
    let mut p = Pair::connect(&l, a).unwrap();
    let _idle = idle_pairs(&l, 600);
    // Idle past the linger (a connection made just now reads as active, as a new one is),
    // and the busy pair moving as the monitor starts: its first dump reads it active
    // (tcp_info) and makes it hot; a dump costs more than a second of this budget, so no
    // second follows soon.
    std::thread::sleep(Duration::from_millis(300));
    p.exchange(1000).unwrap();
    let t = tiered(a, false);
    let m = t.metrics.clone();
    // Moving from the start: the first full dump makes both ends hot, exact polls follow.
    let mut p = tokio::task::spawn_blocking(move || {
        busy(&mut p, Duration::from_millis(400));
        p
    })
    .await
    .unwrap();
    assert_eq!(m.hot_flows.get(), 2, "both ends hot while they move");
    let polls = m.exact_polls.get();
    assert!(polls >= 10, "{polls} exact polls");
    let dumps = m.dumps.get();
    // Still for a while: past the linger they leave the hot set, with no full dump between.
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(m.hot_flows.get(), 0, "still flows are not polled");
    assert_eq!(m.dumps.get(), dumps, "the budget allows no full dump this soon");
    // Moving again: the next full dump sees it and makes it hot again.
    let stop_busy = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let s2 = stop_busy.clone();
    let mover = tokio::task::spawn_blocking(move || {
        while !s2.load(std::sync::atomic::Ordering::Relaxed) {
            busy(&mut p, Duration::from_millis(50));
        }
        p
    });
    let t0 = std::time::Instant::now();
    while m.dumps.get() == dumps && t0.elapsed() < Duration::from_secs(15) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(m.dumps.get() > dumps, "a full dump within the slowest pace");
    assert_eq!(m.hot_flows.get(), 2, "hot again after the full dump saw it move");
    stop_busy.store(true, std::sync::atomic::Ordering::Relaxed);
    let _p = mover.await.unwrap();
    t.stop.send(true).unwrap();
    t.stage.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_flow_that_resets_is_found_gone_by_the_next_exact_poll_and_ends_on_its_events() {
    let l = TcpListener::bind((crate::program::own_address(), 0)).unwrap();
    let a = l.local_addr().unwrap();
    let mut p = Pair::connect(&l, a).unwrap();
    let _idle = idle_pairs(&l, 600);
    // Idle past the linger (a connection made just now reads as active, as a new one is),
    // and the busy pair moving as the monitor starts: its first dump reads it active
    // (tcp_info) and makes it hot; a dump costs more than a second of this budget, so no
    // second follows soon.
    std::thread::sleep(Duration::from_millis(300));
    p.exchange(1000).unwrap();
    let mut t = tiered(a, true);
    let m = t.metrics.clone();
    let p = tokio::task::spawn_blocking(move || {
        busy(&mut p, Duration::from_millis(300));
        p
    })
    .await
    .unwrap();
    assert_eq!(m.hot_flows.get(), 2);
    let dumps = m.dumps.get();
    // An abortive close: both sockets leave the tables at once; the next exact poll finds
    // them gone, and their destroy events end them.
    socket2::SockRef::from(&p.client).set_linger(Some(Duration::ZERO)).unwrap();
    drop(p);
    let ended = t.ended(2).await;
    assert_eq!(ended.len(), 2, "both ends ended");
    assert_eq!(m.dumps.get(), dumps, "ended by exact polls and events, not a full dump");
    assert!(m.exact_gone.get() >= 1, "the exact poll found the sockets gone");
    for e in &ended {
        assert_eq!(e.reason, EndReason::Destroyed, "{:?}", e.reason);
        assert!(e.sampling.exact >= 10, "{:?}", e.sampling);
    }
    // Reset: the kernel cleared the counters in the destroy events, so the last samples'
    // stand, and the close says so.
    assert!(ended.iter().all(|e| e.close == Some(Close::Reset)), "{:?}", ended[0].close);
    t.stop.send(true).unwrap();
    t.stage.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hot_flow_that_closes_cleanly_gets_the_exact_final_counters_of_its_destroy_event() {
    let l = TcpListener::bind((crate::program::own_address(), 0)).unwrap();
    let a = l.local_addr().unwrap();
    let mut p = Pair::connect(&l, a).unwrap();
    let _idle = idle_pairs(&l, 600);
    // Idle past the linger (a connection made just now reads as active, as a new one is),
    // and the busy pair moving as the monitor starts: its first dump reads it active
    // (tcp_info) and makes it hot; a dump costs more than a second of this budget, so no
    // second follows soon.
    std::thread::sleep(Duration::from_millis(300));
    p.exchange(1000).unwrap();
    let mut t = tiered(a, true);
    let sent = tokio::task::spawn_blocking(move || {
        let t = std::time::Instant::now();
        let mut sent = 1000; // the exchange as the monitor started
        while t.elapsed() < Duration::from_millis(300) {
            p.exchange(1000).unwrap();
            sent += 1000;
            std::thread::sleep(Duration::from_millis(5));
        }
        // More than a tick's worth right before the close: only the destroy event has it.
        p.exchange(300_000).unwrap();
        p.client.shutdown(std::net::Shutdown::Write).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        drop(p);
        sent + 300_000
    })
    .await
    .unwrap();
    let ended = t.ended(2).await;
    assert_eq!(ended.len(), 2, "both ends ended");
    let client = ended.iter().find(|e| e.flow.key.dport == a.port()).unwrap();
    assert_eq!(client.reason, EndReason::Destroyed);
    assert!(client.sampling.event && client.sampling.exact >= 10, "{:?}", client.sampling);
    // SYN and FIN count one byte each.
    assert_eq!(client.flow.last.bytes_acked, sent as u64 + 2);
    assert_eq!(client.close, Some(Close::Clean));
    t.stop.send(true).unwrap();
    t.stage.await.unwrap().unwrap();
}

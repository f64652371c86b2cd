//! The tracker and analyzer stages end to end: on replayed fixtures (no kernel) and on a
//! live loopback connection.

use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

use cgmon_rs::analysis::stage::{self as analyzer, StageConfig};
use cgmon_rs::analysis::{AnalyzerConfig, FlowStats, analyze};
use cgmon_rs::filter;
use cgmon_rs::metrics::Metrics;
use cgmon_rs::poll::{self as task, ENDED_CHANNEL_CAPACITY};
use cgmon_rs::sampler::destroy::DestroyListener;
use cgmon_rs::sampler::fakes::ReplaySource;
use cgmon_rs::sampler::source::{NetlinkSource, SocketOptions};
use cgmon_rs::sampler::{Sampler, SamplerConfig};
use cgmon_rs::testkit::Pair;
use cgmon_rs::tracker::{EndReason, Tracker, TrackerConfig};
use cgmon_rs::writer::Msg;
use tokio::sync::{mpsc, watch};

use crate::{fixture, replay};

#[tokio::test]
async fn replayed_dump_and_destroy_events_give_exact_final_counters() {
    let mut t = Tracker::new(TrackerConfig::default());
    let mut out = Vec::new();
    // An empty first dump, so the flows below are not "open at startup".
    t.begin_dump();
    t.end_dump(true, 1, &mut out);
    let d = replay(&["single_walk.bin"], cgmon_rs::sampler::DumpMode::SingleWalk).await;
    t.begin_dump();
    for s in d.batch.iter() {
        t.observe(&s, &mut out);
    }
    t.end_dump(true, d.span_ns.0, &mut out);
    assert!(out.is_empty());
    assert_eq!(t.active(), 8, "8 connected sockets; the TIME-WAIT minisocket starts no flow");
    let mut l = DestroyListener::new(ReplaySource::new(fixture("destroy.bin")), None);
    let b = l.next_batch().await.unwrap();
    for s in b.batch.iter() {
        t.destroyed(&s, &mut out);
    }
    assert_eq!(out.len(), 8);
    assert_eq!(t.active(), 0);
    let cfg = AnalyzerConfig::default();
    let records: Vec<FlowStats> = out.iter_mut().map(|e| analyze(e, &cfg)).collect();
    assert!(out.iter().all(|e| e.reason == EndReason::Destroyed));
    // The four senders moved 256 KiB each: SYN + data + FIN, exactly, from the destroy event.
    let mut acked: Vec<u64> = records.iter().map(|r| r.bytes_acked).filter(|&b| b > 2).collect();
    acked.sort_unstable();
    assert_eq!(acked, vec![256 * 1024 + 2; 4]);
    assert!(records.iter().all(|r| r.samples == 2 && !r.partial && r.final_state == "CLOSE"));
    assert!(records.iter().any(|r| r.congestion_control.as_str() == "bbr"));
    assert!(records.iter().any(|r| r.family == "inet6" && r.id.src_ip.starts_with("::ffff:")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_connection_record_counts_syn_and_fin() {
    const SENT: usize = 3_000_000;
    let l = TcpListener::bind((crate::program::own_address(), 0)).unwrap();
    let addr = l.local_addr().unwrap();
    let f = filter::parse(&crate::program::port_filter(addr)).unwrap();
    let cfg = SamplerConfig { filter: Some(f.clone()), ..SamplerConfig::default() };
    let sampler =
        Sampler::new(NetlinkSource::open(SocketOptions::default()).unwrap(), cfg).unwrap();
    let destroy = DestroyListener::open(Some(f)).unwrap();
    let (stop_tx, stop_rx) = watch::channel(false);
    let (ended_tx, ended_rx) = mpsc::channel(ENDED_CHANNEL_CAPACITY);
    let (rec_tx, rec_rx) = std::sync::mpsc::sync_channel(16);
    let tracker = Tracker::new(TrackerConfig::default());
    let cfg = task::TaskConfig::every(Duration::from_millis(20));
    let metrics = Arc::new(Metrics::default());
    let tracker_task = tokio::spawn(task::run(
        tracker,
        sampler,
        Some(destroy),
        cfg,
        task::Wiring::new(stop_rx, ended_tx, metrics.clone()),
        |_| {},
    ));
    let stage = StageConfig::default();
    let analyzer_task = tokio::spawn(analyzer::run(stage, ended_rx, rec_tx, metrics.clone()));

    tokio::time::sleep(Duration::from_millis(60)).await; // let the first (empty) dump pass
    let conn = tokio::task::spawn_blocking(move || {
        let mut p = Pair::connect(&l, addr).unwrap();
        for _ in 0..10 {
            p.exchange(SENT / 10).unwrap();
            std::thread::sleep(Duration::from_millis(15));
        }
        p.client.shutdown(std::net::Shutdown::Write).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        drop(p);
    });
    conn.await.unwrap();
    let mut records = Vec::new();
    while records.len() < 2 {
        let Msg::Batch(batch) = rec_rx.recv_timeout(Duration::from_secs(5)).unwrap() else {
            panic!("only batches are sent")
        };
        records.extend(batch.records);
    }
    stop_tx.send(true).unwrap();
    let stats = tracker_task.await.unwrap().unwrap();
    analyzer_task.await.unwrap().unwrap();
    let client = records.iter().find(|r| r.id.dst_port == addr.port()).expect("client record");
    let server = records.iter().find(|r| r.id.src_port == addr.port()).expect("server record");
    // tcpi_bytes_acked counts the SYN and the FIN as one byte each.
    assert_eq!(client.bytes_acked, SENT as u64 + 2, "{client:#?}");
    assert_eq!(client.bytes_sent, SENT as u64);
    // tcpi_bytes_received counts the peer's FIN as one byte too (not its SYN).
    assert_eq!(server.bytes_received, SENT as u64 + 1);
    assert_eq!(client.end_reason, "destroyed");
    assert!(!client.partial, "opened after startup, closed before shutdown");
    assert!(client.samples >= 2, "{client:#?}");
    assert!(client.send_throughput_mbps > 0.0);
    assert!(client.rtt_summary.unwrap().iter().all(|&v| v > 0.0));
    assert!(stats.destroy_events >= 2);
    assert!(metrics.destroy_events.get() >= 2);
    assert!(metrics.dumps.get() >= 3);
    assert_eq!(metrics.dump_errors.get(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn windows_handed_on_in_pool_blocks_are_analysed_whole() {
    // Three flows change at every dump through windows of 10 samples. Each window leaves the
    // tracker with most of its samples still in pool blocks; the analyzer stage gathers
    // them on its own thread, while the tracker goes on reusing the blocks it gets back.
    use cgmon_rs::testkit::{SockBuilder, batch};
    const S: u64 = 1_000_000_000;
    let mut t = Tracker::new(TrackerConfig { window_samples: 10, ..TrackerConfig::default() });
    let (ended_tx, ended_rx) = mpsc::channel(ENDED_CHANNEL_CAPACITY);
    let (rec_tx, rec_rx) = std::sync::mpsc::sync_channel(64);
    let stage = StageConfig { write_partial: true, samples_out: true, ..StageConfig::default() };
    let analyzer_task =
        tokio::spawn(analyzer::run(stage, ended_rx, rec_tx, Arc::new(Metrics::default())));
    for k in 0..95u64 {
        let socks: Vec<(u64, Vec<u8>)> = (1..=3u64)
            .map(|c| (k * S, SockBuilder::new(c, c as u16, 80).rtt_us(1_000 * c as u32 + k as u32)))
            .map(|(ts, s)| (ts, s.build()))
            .collect();
        let b = batch(&socks);
        let mut out = Vec::new();
        t.begin_dump();
        for s in b.iter() {
            t.observe(&s, &mut out);
        }
        t.end_dump(true, k * S, &mut out);
        if !out.is_empty() {
            ended_tx.send(out).await.unwrap();
        }
        tokio::task::yield_now().await;
    }
    let mut out = Vec::new();
    t.finish(&mut out);
    ended_tx.send(out).await.unwrap();
    drop((ended_tx, t));
    analyzer_task.await.unwrap().unwrap();
    let (mut records, mut lines) = (Vec::new(), Vec::new());
    while let Ok(Msg::Batch(b)) = rec_rx.try_recv() {
        records.extend(b.records);
        lines
            .extend(b.samples.split(|&c| c == b'\n').filter(|l| !l.is_empty()).map(<[u8]>::to_vec));
    }
    // 95 samples a flow: windows 0..=9 of 10 samples (each after the first starting with its
    // predecessor's last), and the 5 left at shutdown.
    assert_eq!(records.len(), 3 * 11);
    for r in &records {
        let want = if r.end_reason == "shutdown" { 5 } else { 10 };
        assert_eq!(r.samples, want, "{r:#?}");
        // Window n holds the RTTs of dumps 9n to 9n + 9: c ms + k µs at dump k.
        let first = r.cookie as f64 + 9.0 * f64::from(r.seq) / 1e3;
        assert!((r.min_rtt_observed_ms.unwrap() - first).abs() < 1e-9, "{r:#?}");
    }
    assert_eq!(lines.len(), records.iter().map(|r| r.samples).sum::<usize>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_flows_the_web_views_ring_keeps_get_chart_points() {
    // A batch of six flows, the second not written (open at startup); the ring holds 2, so
    // the last two written get their points and the three before them none.
    use cgmon_rs::testkit::SockBuilder;
    use cgmon_rs::tracker::testing::ended_flow;
    const S: u64 = 1_000_000_000;
    let (ended_tx, ended_rx) = mpsc::channel(ENDED_CHANNEL_CAPACITY);
    let (rec_tx, rec_rx) = std::sync::mpsc::sync_channel(64);
    let stage = StageConfig { chart_points: 2, ..StageConfig::default() };
    let analyzer_task =
        tokio::spawn(analyzer::run(stage, ended_rx, rec_tx, Arc::new(Metrics::default())));
    let batch: Vec<_> = (1..=6u64)
        .map(|c| {
            let s = SockBuilder::new(c, 40_000 + c as u16, 80).rtt_us(100);
            let mut e = ended_flow(&[(S, s.clone()), (2 * S, s)]);
            e.flow.preexisting = c == 2;
            e
        })
        .collect();
    ended_tx.send(batch).await.unwrap();
    drop(ended_tx);
    analyzer_task.await.unwrap().unwrap();
    let Ok(Msg::Batch(b)) = rec_rx.try_recv() else { panic!("no batch") };
    let cookies: Vec<u64> = b.records.iter().map(|r| r.cookie).collect();
    assert_eq!(cookies, [1, 3, 4, 5, 6]);
    let counts: Vec<usize> = b.points.iter().map(Vec::len).collect();
    assert_eq!(counts, [0, 0, 0, 2, 2], "points by record");
}

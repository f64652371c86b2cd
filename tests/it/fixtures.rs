//! Real dumps captured on this kernel (tests/fixtures/README.md), decoded without a kernel.

use std::collections::BTreeSet;

use cgmon_rs::sampler::DumpMode;
use cgmon_rs::sampler::destroy::DestroyListener;
use cgmon_rs::sampler::fakes::ReplaySource;
use cgmon_rs::wire::cc::CcInfo;
use cgmon_rs::wire::inet_diag::{AF_INET, AF_INET6};

use crate::{fixture, replay};

#[tokio::test]
async fn ipv4_dump_has_cubic_bbr_and_time_wait() {
    let d = replay(&["inet.bin", "inet6.bin"], DumpMode::PerFamily).await;
    assert!(d.is_complete());
    assert_eq!(d.requests, 2);
    let socks: Vec<_> = d.batch.iter().filter(|s| s.msg().family() == AF_INET).collect();
    // cubic and bbr connections (both ends), the dual-stack listener's IPv4 client, and
    // one TIME-WAIT.
    assert_eq!(socks.len(), 6);
    let algs: BTreeSet<_> = socks.iter().filter_map(|s| s.cong()).collect();
    assert_eq!(algs, BTreeSet::from(["bbr", "cubic"]));
    for s in &socks {
        let m = s.msg();
        if m.state() == 6 {
            assert!(s.tcp_info().is_none(), "TIME-WAIT minisockets carry no tcp_info");
            continue;
        }
        let t = s.tcp_info().expect("full sockets carry tcp_info");
        assert_eq!(t.len(), 280, "kernel 6.18 layout");
        assert_eq!(t.state(), Some(m.state()));
        assert!(t.rtt().unwrap() > 0);
        assert!(s.skmem().unwrap().sndbuf().unwrap() > 0);
        assert!(m.cookie() != 0 && m.inode() != 0);
        match s.cong() {
            Some("bbr") => assert!(matches!(s.cc_info(), Some(CcInfo::Bbr(_)))),
            Some("cubic") => assert!(s.cc_info().is_none()),
            other => panic!("unexpected algorithm {other:?}"),
        }
    }
    // The sending ends moved 256 KiB: bytes_acked counts the SYN as well.
    let acked: BTreeSet<_> =
        socks.iter().filter_map(|s| s.tcp_info()?.bytes_acked()).filter(|&b| b > 1).collect();
    assert_eq!(acked, BTreeSet::from([256 * 1024 + 1]));
}

#[tokio::test]
async fn ipv6_dump_has_native_and_v4_mapped_sockets() {
    let d = replay(&["inet.bin", "inet6.bin"], DumpMode::PerFamily).await;
    let socks: Vec<_> = d.batch.iter().filter(|s| s.msg().family() == AF_INET6).collect();
    let srcs: BTreeSet<_> = socks.iter().map(|s| s.msg().src().to_string()).collect();
    assert!(srcs.contains("::1"), "{srcs:?}");
    assert!(srcs.contains("::ffff:127.0.0.1"), "IPv4 client of a dual-stack listener: {srcs:?}");
    // Only the accepted end of the v4-mapped connection is AF_INET6; its client is AF_INET.
    assert_eq!(socks.len(), 3);
}

#[tokio::test]
async fn single_walk_returns_both_families_as_the_two_dumps_do() {
    let one = replay(&["single_walk.bin"], DumpMode::SingleWalk).await;
    let two = replay(&["inet.bin", "inet6.bin"], DumpMode::PerFamily).await;
    let cookies = |d: &cgmon_rs::sampler::Dump| -> BTreeSet<u64> {
        d.batch.iter().map(|s| s.key().cookie).collect()
    };
    assert_eq!(cookies(&one), cookies(&two));
    assert_eq!(one.batch.len(), 9);
}

#[tokio::test]
async fn destroy_events_of_flows_and_of_listeners() {
    let mut l = DestroyListener::new(ReplaySource::new(fixture("destroy.bin")), None);
    let b = l.next_batch().await.unwrap();
    // Listeners' events have remote port 0: passed on, for the tracker to ignore.
    assert_eq!(b.unconnected, 3, "the three listeners' events");
    assert_eq!(b.batch.iter().filter(|s| s.msg().dport() == 0).count(), 3);
    assert_eq!(b.batch.len(), 8 + 3, "4 connections × 2 ends, and the listeners");
    for s in b.batch.iter().filter(|s| s.msg().dport() != 0) {
        assert_eq!(s.msg().state(), 7, "destroy events report CLOSE");
        assert_eq!(s.msg().inode(), 0);
        assert_eq!(s.protocol(), Some(6));
        assert!(s.cong().is_none(), "destroy events carry no CONG");
        assert_eq!(s.tcp_info().unwrap().len(), 280);
    }
    // Each sender's final bytes_acked: 256 KiB of data, SYN and FIN.
    let finals: BTreeSet<_> =
        b.batch.iter().filter_map(|s| s.tcp_info()?.bytes_acked()).filter(|&n| n > 2).collect();
    assert_eq!(finals, BTreeSet::from([256 * 1024 + 2]));
}

#[tokio::test]
async fn destroy_events_honour_the_filter_in_userspace() {
    let d = replay(&["single_walk.bin"], DumpMode::SingleWalk).await;
    let a_port = d.batch.iter().find(|s| s.cong() == Some("cubic")).unwrap().msg().sport();
    let f = cgmon_rs::filter::parse(&format!("sport {a_port}")).unwrap();
    let mut l = DestroyListener::new(ReplaySource::new(fixture("destroy.bin")), Some(f));
    let b = l.next_batch().await.unwrap();
    // Events with remote port 0 (the listeners) have no peer to filter on.
    let connected: Vec<_> = b.batch.iter().filter(|s| s.msg().dport() != 0).collect();
    assert!(!connected.is_empty() && connected.iter().all(|s| s.msg().sport() == a_port));
    assert_eq!(b.filtered as usize + connected.len(), 8);
    assert_eq!(b.batch.len() - connected.len(), b.unconnected as usize);
}

#[tokio::test]
async fn big_dump_decodes_every_socket() {
    let d = replay(&["dump20k.bin.gz"], DumpMode::SingleWalk).await;
    assert!(d.is_complete());
    assert_eq!(d.batch.len(), 20_000);
    assert!(d.batch.iter().all(|s| s.tcp_info().is_some_and(|t| t.len() == 280)));
    let cookies: BTreeSet<_> = d.batch.iter().map(|s| s.key().cookie).collect();
    assert_eq!(cookies.len(), 20_000, "cookies are unique");
}

#[test]
fn samples_serialise_to_json_without_absent_fields() {
    let dgs = fixture("inet.bin");
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let d = rt.block_on(async {
        let cfg = cgmon_rs::sampler::SamplerConfig::default();
        let mut s = cgmon_rs::sampler::Sampler::new(ReplaySource::new(dgs), cfg).unwrap();
        s.dump().await.unwrap()
    });
    for s in d.batch.iter() {
        let v: serde_json::Value = serde_json::to_value(s).unwrap();
        assert_eq!(v["sport"], s.msg().sport());
        if s.msg().state() == 6 {
            assert!(v.get("tcp_info").is_none());
        } else {
            assert_eq!(v["tcp_info"]["rtt"], s.tcp_info().unwrap().rtt().unwrap());
            assert_eq!(v["tcp_info_len"], 280);
        }
    }
}

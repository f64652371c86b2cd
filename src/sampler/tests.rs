//! Sampler tests driven by synthetic datagrams through `ReplaySource`: no kernel.

use super::fakes::ReplaySource;
use super::*;
use crate::wire::attr::INET_DIAG_INFO;
use crate::wire::build::MsgBuilder;
use crate::wire::nlmsg::control_msg;

fn dg(ts_ns: u64, parts: &[Vec<u8>]) -> Datagram {
    Datagram { ts_ns, bytes: parts.concat() }
}

fn info(rtt_us: u32) -> Vec<u8> {
    let mut b = vec![0u8; 280];
    b[68..72].copy_from_slice(&rtt_us.to_ne_bytes());
    b
}

fn sampler(datagrams: Vec<Datagram>, mode: DumpMode) -> Sampler<ReplaySource> {
    let cfg = SamplerConfig { mode, ..SamplerConfig::default() };
    Sampler::new(ReplaySource::new(datagrams), cfg).unwrap()
}

/// Cookies 10 and 11 (rtt 5 and 7 ms) arrive at t=100, cookie 12 (no tcp_info) and
/// NLMSG_DONE at t=200.
fn three_sockets_in_two_datagrams() -> Sampler<ReplaySource> {
    let a = MsgBuilder::v4(1, 10, 1000, 80).attr(INET_DIAG_INFO, &info(5_000)).build();
    let b = MsgBuilder::v4(1, 11, 1001, 80).attr(INET_DIAG_INFO, &info(7_000)).build();
    let c = MsgBuilder::v4(1, 12, 1002, 80).build();
    sampler(
        vec![dg(100, &[a, b]), dg(200, &[c, control_msg(1, nlmsg::NLMSG_DONE, 0)])],
        DumpMode::SingleWalk,
    )
}

#[tokio::test]
async fn reads_a_multipart_dump_with_per_datagram_timestamps() {
    let mut s = three_sockets_in_two_datagrams();
    let d = s.dump().await.unwrap();
    assert!(d.is_complete());
    assert_eq!((d.requests, d.datagrams), (1, 2));
    let got: Vec<_> = d.batch.iter().map(|x| (x.ts_ns, x.key().cookie)).collect();
    assert_eq!(got, [(100, 10), (100, 11), (200, 12)]);
    assert_eq!(d.batch.get(1).unwrap().tcp_info().unwrap().rtt(), Some(7_000));
    assert!(d.batch.get(2).unwrap().tcp_info().is_none());
}

#[tokio::test]
async fn dump_intr_marks_the_dump_incomplete() {
    let mut m = MsgBuilder::v4(1, 10, 1000, 80);
    m.flags |= nlmsg::NLM_F_DUMP_INTR;
    let mut s = sampler(
        vec![dg(1, &[m.build(), control_msg(1, nlmsg::NLMSG_DONE, 0)])],
        DumpMode::SingleWalk,
    );
    let d = s.dump().await.unwrap();
    assert!(d.interrupted);
    assert!(!d.is_complete(), "flows missing from an interrupted dump must not end");
    assert_eq!(d.batch.len(), 1);
}

#[tokio::test]
async fn truncated_datagram_is_detected_and_the_buffer_grows() {
    let msgs: Vec<Vec<u8>> = (0..30)
        .map(|i| MsgBuilder::v4(1, i, 1000 + i as u16, 80).attr(INET_DIAG_INFO, &info(1)).build())
        .collect();
    let big = dg(1, &msgs); // ~11 KB, more than the 4 KiB buffer below
    let done = dg(2, &[control_msg(1, nlmsg::NLMSG_DONE, 0)]);
    let cfg = SamplerConfig {
        mode: DumpMode::SingleWalk,
        read_bufsize: MIN_READ_BUFSIZE,
        ..SamplerConfig::default()
    };
    let mut s = Sampler::new(ReplaySource::new(vec![big, done]), cfg).unwrap();
    let d = s.dump().await.unwrap();
    assert_eq!(d.truncated, 1);
    assert!(!d.is_complete());
    assert!(d.batch.len() < 30, "only the messages that fit were read");
    assert!(s.read_bufsize() >= 11_000, "buffer grew to {}", s.read_bufsize());
}

#[tokio::test]
async fn nlmsg_error_is_reported() {
    let mut s = sampler(
        vec![dg(1, &[control_msg(1, nlmsg::NLMSG_ERROR, libc::EACCES)])],
        DumpMode::SingleWalk,
    );
    let e = s.dump().await.unwrap_err();
    assert!(matches!(e, SampleError::Kernel { errno, .. } if errno == libc::EACCES), "{e}");
    assert!(e.to_string().contains("single-walk"), "{e}");
}

#[tokio::test]
async fn failed_done_status_is_an_error() {
    let mut s = sampler(
        vec![dg(1, &[control_msg(1, nlmsg::NLMSG_DONE, libc::EINTR)])],
        DumpMode::SingleWalk,
    );
    assert!(
        matches!(s.dump().await, Err(SampleError::Kernel { errno, .. }) if errno == libc::EINTR)
    );
}

#[tokio::test]
async fn auto_falls_back_to_per_family_when_type_18_is_refused() {
    let v4 = MsgBuilder::v4(2, 1, 1000, 80).build();
    let mut v6 = MsgBuilder::v4(3, 2, 1000, 80);
    v6.head[0] = libc::AF_INET6 as u8;
    let mut s = sampler(
        vec![
            dg(1, &[control_msg(1, nlmsg::NLMSG_ERROR, libc::EINVAL)]),
            dg(2, &[v4, control_msg(2, nlmsg::NLMSG_DONE, 0)]),
            dg(3, &[v6.build(), control_msg(3, nlmsg::NLMSG_DONE, 0)]),
        ],
        DumpMode::Auto,
    );
    let d = s.dump().await.unwrap();
    assert_eq!(s.mode(), DumpMode::PerFamily);
    assert_eq!(d.requests, 2, "the refused request is not counted in the new dump");
    assert_eq!(d.batch.len(), 2);
    let src = s.into_source();
    assert_eq!(src.sent.len(), 3);
    assert_eq!(u16::from_ne_bytes([src.sent[0][4], src.sent[0][5]]), TCPDIAG_GETSOCK);
    assert_eq!(u16::from_ne_bytes([src.sent[1][4], src.sent[1][5]]), SOCK_DIAG_BY_FAMILY);
    assert_eq!(src.sent[1][16], AF_INET);
    assert_eq!(src.sent[2][16], AF_INET6);
}

#[tokio::test]
async fn stale_replies_and_bad_messages_are_skipped() {
    let stale = MsgBuilder::v4(99, 7, 1, 2).build(); // another request's seq
    let mut bad = MsgBuilder::v4(1, 8, 1, 2).build();
    bad.truncate(16 + 40); // shorter than inet_diag_msg
    bad[0..4].copy_from_slice(&56u32.to_ne_bytes());
    let good = MsgBuilder::v4(1, 9, 1, 2).build();
    let mut s = sampler(
        vec![dg(1, &[stale, bad, good, control_msg(1, nlmsg::NLMSG_DONE, 0)])],
        DumpMode::SingleWalk,
    );
    let d = s.dump().await.unwrap();
    assert_eq!(d.batch.len(), 1);
    assert_eq!(d.batch.get(0).unwrap().key().cookie, 9);
    assert_eq!(d.malformed, 1);
}

#[tokio::test]
async fn filter_is_compiled_into_the_request_or_sent_as_the_caller_compiled_it() {
    // cgmon's bytes for `-netlink-dport 5201`. The command line compiles the filter once
    // (`cli::Config::bytecode`); the sampler then sends those bytes as they are.
    let cgmon = [12, 0, 1, 0, 0x0c, 0x08, 0x0c, 0x00, 0x00, 0x00, 0x51, 0x14];
    let filter = crate::filter::Expr::from_port_lists("", "5201").unwrap();
    let compiled = crate::filter::compile(filter.as_ref().unwrap()).unwrap();
    // Given bytes win over the expression (here one that would compile to other bytes).
    let other = crate::filter::Expr::from_port_lists("", "80").unwrap();
    for (filter, bytecode) in [(filter, None), (other, Some(compiled))] {
        let cfg = SamplerConfig {
            mode: DumpMode::SingleWalk,
            filter,
            bytecode,
            ..SamplerConfig::default()
        };
        let done = dg(1, &[control_msg(1, nlmsg::NLMSG_DONE, 0)]);
        let mut s = Sampler::new(ReplaySource::new(vec![done]), cfg).unwrap();
        s.dump().await.unwrap();
        let sent = &s.into_source().sent[0];
        assert_eq!(&sent[sent.len() - 12..], &cgmon);
    }
}

#[tokio::test]
async fn dump_with_visits_every_socket_and_keeps_nothing() {
    let mut s = three_sockets_in_two_datagrams();
    let mut seen = Vec::new();
    let d = s
        .dump_with(|x| seen.push((x.ts_ns, x.key().cookie, x.tcp_info().and_then(|t| t.rtt()))))
        .await
        .unwrap();
    assert_eq!(seen, [(100, 10, Some(5_000)), (100, 11, Some(7_000)), (200, 12, None)]);
    assert_eq!(d.sockets, 3);
    assert!(d.batch.is_empty() && d.batch.datagrams.is_empty());
    assert!(d.is_complete());
}

//! Differential test: every captured message decoded by our zero-copy views and by
//! netlink-packet-sock-diag's parser (the reference); every field both know must agree.

use netlink_packet_core::{NetlinkMessage, NetlinkPayload, Nla as _};
use netlink_packet_sock_diag::SockDiagMessage;
use netlink_packet_sock_diag::inet::nlas::Nla;
use netlink_packet_sock_diag::inet::{InetResponse, Timer};

use cgmon_rs::wire::attr;
use cgmon_rs::wire::inet_diag::{SOCK_DIAG_BY_FAMILY, TCPDIAG_GETSOCK};
use cgmon_rs::wire::nlmsg::NlMsgIter;
use cgmon_rs::wire::sock::{Sample, index};

use crate::fixture;

fn reference(msg_bytes: &[u8]) -> InetResponse {
    let mut owned = msg_bytes.to_vec();
    // The crate knows only SOCK_DIAG_BY_FAMILY; type-18 replies have the same body.
    owned[4..6].copy_from_slice(&SOCK_DIAG_BY_FAMILY.to_ne_bytes());
    let m = NetlinkMessage::<SockDiagMessage>::deserialize(&owned).expect("reference parses");
    match m.payload {
        NetlinkPayload::InnerMessage(SockDiagMessage::InetResponse(r)) => *r,
        other => panic!("unexpected payload {other:?}"),
    }
}

fn compare(ours: &Sample<'_>, theirs: &InetResponse) -> usize {
    let m = ours.msg();
    let h = &theirs.header;
    assert_eq!(m.family(), h.family);
    assert_eq!(m.state(), h.state);
    assert_eq!(m.sport(), h.socket_id.source_port);
    assert_eq!(m.dport(), h.socket_id.destination_port);
    assert_eq!(m.src(), h.socket_id.source_address);
    assert_eq!(m.dst(), h.socket_id.destination_address);
    assert_eq!(m.ifindex(), h.socket_id.interface_id);
    assert_eq!(m.cookie().to_ne_bytes(), h.socket_id.cookie);
    assert_eq!(m.rqueue(), h.recv_queue);
    assert_eq!(m.wqueue(), h.send_queue);
    assert_eq!(m.uid(), h.uid);
    assert_eq!(m.inode(), h.inode);
    match &h.timer {
        Some(Timer::Retransmit(d, r)) => {
            assert_eq!((m.timer(), u128::from(m.expires()), m.retrans()), (1, d.as_millis(), *r));
        }
        Some(Timer::KeepAlive(d)) => {
            assert_eq!((m.timer(), u128::from(m.expires())), (2, d.as_millis()))
        }
        Some(Timer::TimeWait) => assert_eq!(m.timer(), 3),
        Some(Timer::Probe(d)) => {
            assert_eq!((m.timer(), u128::from(m.expires())), (4, d.as_millis()))
        }
        None => assert!(!(1..=4).contains(&m.timer())),
    }
    let mut compared = 0;
    for nla in &theirs.nlas {
        compared += 1;
        match nla {
            Nla::TcpInfo(t) => {
                let o = ours.tcp_info().unwrap();
                let sentinel64 = |v: u64| (v != u64::MAX).then_some(v);
                assert_eq!(o.state(), Some(t.state));
                assert_eq!(o.ca_state(), Some(t.ca_state));
                assert_eq!(o.retransmits(), Some(t.retransmits));
                assert_eq!(o.probes(), Some(t.probes));
                assert_eq!(o.backoff(), Some(t.backoff));
                assert_eq!(o.options(), Some(t.options));
                assert_eq!(o.snd_wscale().unwrap() | o.rcv_wscale().unwrap() << 4, t.wscale);
                let flags = u8::from(o.delivery_rate_app_limited().unwrap())
                    | o.fastopen_client_fail().unwrap() << 1;
                assert_eq!(flags, t.delivery_rate_app_limited);
                let pairs: [(Option<u64>, u64); 43] = [
                    (o.rto().map(u64::from), t.rto.into()),
                    (o.ato().map(u64::from), t.ato.into()),
                    (o.snd_mss().map(u64::from), t.snd_mss.into()),
                    (o.rcv_mss().map(u64::from), t.rcv_mss.into()),
                    (o.unacked().map(u64::from), t.unacked.into()),
                    (o.sacked().map(u64::from), t.sacked.into()),
                    (o.lost().map(u64::from), t.lost.into()),
                    (o.retrans().map(u64::from), t.retrans.into()),
                    (o.fackets().map(u64::from), t.fackets.into()),
                    (o.last_data_sent().map(u64::from), t.last_data_sent.into()),
                    (o.last_ack_sent().map(u64::from), t.last_ack_sent.into()),
                    (o.last_data_recv().map(u64::from), t.last_data_recv.into()),
                    (o.last_ack_recv().map(u64::from), t.last_ack_recv.into()),
                    (o.pmtu().map(u64::from), t.pmtu.into()),
                    (o.rcv_ssthresh().map(u64::from), t.rcv_ssthresh.into()),
                    (o.rtt().map(u64::from), t.rtt.into()),
                    (o.rttvar().map(u64::from), t.rttvar.into()),
                    (o.snd_ssthresh().map(u64::from), t.snd_ssthresh.into()),
                    (o.snd_cwnd().map(u64::from), t.snd_cwnd.into()),
                    (o.advmss().map(u64::from), t.advmss.into()),
                    (o.reordering().map(u64::from), t.reordering.into()),
                    (o.rcv_rtt().map(u64::from), t.rcv_rtt.into()),
                    (o.rcv_space().map(u64::from), t.rcv_space.into()),
                    (o.total_retrans().map(u64::from), t.total_retrans.into()),
                    (o.bytes_acked(), t.bytes_acked),
                    (o.bytes_received(), t.bytes_received),
                    (o.segs_out().map(u64::from), t.segs_out.into()),
                    (o.segs_in().map(u64::from), t.segs_in.into()),
                    (o.notsent_bytes().map(u64::from), t.notsent_bytes.into()),
                    (o.data_segs_in().map(u64::from), t.data_segs_in.into()),
                    (o.data_segs_out().map(u64::from), t.data_segs_out.into()),
                    (o.delivery_rate(), t.delivery_rate),
                    (o.busy_time(), t.busy_time),
                    (o.rwnd_limited(), t.rwnd_limited),
                    (o.sndbuf_limited(), t.sndbuf_limited),
                    (o.delivered().map(u64::from), t.delivered.into()),
                    (o.delivered_ce().map(u64::from), t.delivered_ce.into()),
                    (o.bytes_sent(), t.bytes_sent),
                    (o.bytes_retrans(), t.bytes_retrans),
                    (o.dsack_dups().map(u64::from), t.dsack_dups.into()),
                    (o.reord_seen().map(u64::from), t.reord_seen.into()),
                    (o.rcv_ooopack().map(u64::from), t.rcv_ooopack.into()),
                    (o.snd_wnd().map(u64::from), t.snd_wnd.into()),
                ];
                for (i, (a, b)) in pairs.iter().enumerate() {
                    assert_eq!(*a, Some(*b), "tcp_info field #{i}");
                }
                // Sentinels: ours are absent exactly where the raw value is the sentinel.
                assert_eq!(o.pacing_rate(), sentinel64(t.pacing_rate));
                assert_eq!(o.max_pacing_rate(), sentinel64(t.max_pacing_rate));
                assert_eq!(o.min_rtt(), (t.min_rtt != u32::MAX).then_some(t.min_rtt));
            }
            Nla::Congestion(c) => assert_eq!(ours.cong(), Some(c.as_str())),
            Nla::Tos(v) => assert_eq!(ours.tos(), Some(*v)),
            Nla::Tc(v) => assert_eq!(ours.tclass(), Some(*v)),
            Nla::Shutdown(v) => assert_eq!(ours.shutdown(), Some(*v)),
            Nla::Protocol(v) => assert_eq!(ours.protocol(), Some(*v)),
            Nla::Mark(v) => assert_eq!(ours.mark(), Some(*v)),
            Nla::MemInfo(mi) => {
                let o = ours.skmem().unwrap();
                assert_eq!(o.rmem_alloc(), Some(mi.receive_queue));
                assert_eq!(o.rcvbuf(), Some(mi.receive_queue_max));
                assert_eq!(o.wmem_alloc(), Some(mi.bottom_send_queues));
                assert_eq!(o.sndbuf(), Some(mi.send_queue_max));
                assert_eq!(o.fwd_alloc(), Some(mi.cache));
                assert_eq!(o.wmem_queued(), Some(mi.send_queue));
                assert_eq!(o.optmem(), Some(mi.options));
                assert_eq!(o.backlog(), Some(mi.backlog_queue_length));
                assert_eq!(o.drops(), Some(mi.drops));
            }
            Nla::Other(raw) => {
                let mut v = vec![0u8; raw.value_len()];
                raw.emit_value(&mut v);
                match raw.kind() {
                    attr::INET_DIAG_CGROUP_ID => {
                        assert_eq!(
                            ours.cgroup_id(),
                            Some(u64::from_ne_bytes(v[..8].try_into().unwrap()))
                        );
                    }
                    attr::INET_DIAG_SOCKOPT => {
                        assert_eq!(ours.sockopt(), Some(u16::from_ne_bytes([v[0], v[1]])));
                    }
                    attr::INET_DIAG_BBRINFO => {
                        let Some(cgmon_rs::wire::cc::CcInfo::Bbr(b)) = ours.cc_info() else {
                            panic!("BBRINFO missing from our decode")
                        };
                        assert_eq!(b.0, &v[..]);
                        let lo = u32::from_ne_bytes(v[0..4].try_into().unwrap());
                        let hi = u32::from_ne_bytes(v[4..8].try_into().unwrap());
                        assert_eq!(b.bw(), Some(u64::from(hi) << 32 | u64::from(lo)));
                    }
                    _ => compared -= 1,
                }
            }
            _ => compared -= 1,
        }
    }
    compared
}

#[test]
fn every_fixture_message_agrees_with_netlink_packet_sock_diag() {
    let mut messages = 0;
    let mut attrs = 0;
    for file in ["inet.bin", "inet6.bin", "single_walk.bin", "destroy.bin", "dump20k.bin.gz"] {
        for dg in fixture(file) {
            for m in NlMsgIter::new(&dg.bytes) {
                let m = m.unwrap();
                if m.kind != SOCK_DIAG_BY_FAMILY && m.kind != TCPDIAG_GETSOCK {
                    continue;
                }
                let start = m.payload_offset - 16;
                let whole = &dg.bytes[start..m.payload_offset + m.payload.len()];
                let idx = index(m.payload).unwrap();
                let ours = Sample::new(dg.ts_ns, m.payload, &idx);
                attrs += compare(&ours, &reference(whole));
                messages += 1;
            }
        }
    }
    assert!(messages > 20_000, "{messages} messages compared");
    assert!(attrs > 100_000, "{attrs} attributes compared");
}

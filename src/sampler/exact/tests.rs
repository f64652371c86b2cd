//! Exact polls against a simulated host: no kernel.

use super::*;
use crate::sampler::SamplerConfig;
use crate::sampler::fakes::SimHost;
use crate::wire::build::SockBuilder;
use crate::wire::inet_diag::InetDiagMsg;

fn target(msg: &[u8]) -> SocketTarget {
    SocketTarget::of(&InetDiagMsg::new_checked(&msg[16..]).unwrap())
}

/// Polls `targets`; the cookies and bytes acked found, and the indexes gone.
async fn poll(
    s: &mut Sampler<SimHost>,
    targets: &[SocketTarget],
) -> (ExactPoll, Vec<(u64, u64)>, Vec<usize>) {
    let (mut found, mut gone) = (Vec::new(), Vec::new());
    let p = s
        .exact_with(targets, |i, a| match a {
            Answer::Found(x) => {
                found.push((x.msg().cookie(), x.tcp_info().unwrap().bytes_acked().unwrap()))
            }
            Answer::Gone { .. } => gone.push(i),
        })
        .await
        .unwrap();
    (p, found, gone)
}

#[tokio::test]
async fn answers_found_gone_and_replaced_sockets_in_one_send() {
    let host = SimHost::new();
    let st = host.state();
    let a = SockBuilder::new(1, 5000, 80).bytes_acked(11).build();
    let b = SockBuilder::new(2, 5001, 80).bytes_acked(22).build();
    let c = SockBuilder::new(3, 5002, 80).bytes_acked(33).build();
    let targets = [target(&a), target(&b), target(&c)];
    {
        let mut st = st.lock().unwrap();
        st.set(a);
        st.set(SockBuilder::new(2, 5001, 80).bytes_acked(23).build()); // moved on
        // Socket 3 closed and its 4-tuple was taken by a new socket, cookie 4.
        st.set(SockBuilder::new(4, 5002, 80).bytes_acked(44).build());
    }
    let mut s = Sampler::new(host, SamplerConfig::default()).unwrap();
    let (p, found, gone) = poll(&mut s, &targets).await;
    assert_eq!(found, [(1, 11), (2, 23)]);
    assert_eq!(gone, [2], "the reused 4-tuple is not taken for the old socket");
    assert_eq!((p.asked, p.found, p.gone, p.unanswered, p.sends), (3, 2, 1, 0, 1));
    st.lock().unwrap().close(1);
    let (_, found, gone) = poll(&mut s, &targets[..2]).await;
    assert_eq!((found, gone), (vec![(2, 23)], vec![0]));
}

#[tokio::test]
async fn many_targets_go_in_chunks_and_an_overrun_leaves_them_unanswered_never_gone() {
    let host = SimHost::new();
    let st = host.state();
    let msgs: Vec<Vec<u8>> = (1..=600u64)
        .map(|c| SockBuilder::new(c, 1000 + c as u16, 80).bytes_acked(c).build())
        .collect();
    let targets: Vec<SocketTarget> = msgs.iter().map(|m| target(m)).collect();
    for m in msgs {
        st.lock().unwrap().set(m);
    }
    let mut s = Sampler::new(host, SamplerConfig::default()).unwrap();
    let (p, found, gone) = poll(&mut s, &targets).await;
    assert_eq!((p.found, p.sends, found.len(), gone.len()), (600, 3, 600, 0));
    assert!(found.iter().enumerate().all(|(i, f)| f.0 == i as u64 + 1));
    // A receive buffer that holds 100 answers per send: the rest overrun, the chunk halves
    // until the answers fit, and the overrun requests are asked again.
    st.lock().unwrap().queue_limit = Some(100);
    let (p, found, gone) = poll(&mut s, &targets).await;
    assert_eq!((p.found, p.unanswered, gone.len(), found.len()), (600, 0, 0, 600), "{p:?}");
    assert_eq!(s.exact_chunk(), 64);
    assert_eq!(p.sends, 6 + 3, "256, 128, 64 ×3, 24, then 184 again in 64s");
    // One that holds only 4: even the smallest chunk overruns; what is left unanswered is
    // reported so, and never as gone.
    st.lock().unwrap().queue_limit = Some(4);
    let (p, found, gone) = poll(&mut s, &targets[..40]).await;
    assert!(p.unanswered > 0 && gone.is_empty(), "{p:?}");
    assert_eq!(p.found as usize + p.unanswered as usize, 40);
    assert_eq!(found.len(), p.found as usize);
    assert!(s.exact_chunk() <= 16, "{}", s.exact_chunk());
}

//! Exact polls against the live kernel: each test asks only about loopback sockets it made.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::Duration;

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

/// The targets of the sockets on `ports` (either end), from a dump.
async fn targets(s: &mut Sampler<NetlinkSource>, ports: &[u16]) -> Vec<(SocketTarget, u8)> {
    let mut out = Vec::new();
    let d = s
        .dump_with(|x| {
            let m = x.msg();
            if ports.contains(&m.sport()) || ports.contains(&m.dport()) {
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
    let l4 = TcpListener::bind("127.0.0.1:0").unwrap();
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
    let ports: Vec<u16> =
        [&l4, &l6, &ld].iter().map(|l| l.local_addr().unwrap().port()).collect();
    let mut s = sampler();
    let t = targets(&mut s, &ports).await;
    assert_eq!(t.len(), 6, "both ends of three pairs");
    let want: Vec<(u64, u8)> = t.iter().map(|(x, st)| (x.cookie(), *st)).collect();
    let only: Vec<SocketTarget> = t.iter().map(|x| x.0).collect();
    let (found, gone) = ask(&mut s, &only).await;
    assert_eq!((found, gone), (want, vec![]));
}

#[tokio::test]
async fn a_reset_socket_is_gone_and_a_reused_four_tuple_is_not_the_old_socket() {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
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
    let probe = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = probe.local_addr().unwrap().port();
    drop(probe);
    let (c, srv) = connect_from(port);
    let mut s = sampler();
    let old = targets(&mut s, &[to.port()]).await;
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
    let (_c2, _s2) = connect_from(port);
    let new = targets(&mut s, &[to.port()]).await;
    assert!(new.iter().all(|(t, _)| !old.iter().any(|o| o.cookie() == t.cookie())));
    let (found, gone) = ask(&mut s, &old).await;
    assert!(found.is_empty(), "the old identity found {found:?}");
    assert_eq!(gone.len(), 2);
}

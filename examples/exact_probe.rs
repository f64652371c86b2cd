//! Probe: exact-request behaviour and cost on this kernel (not a test).
use cgmon_rs::sampler::source::{NetlinkSource, SocketOptions};
use cgmon_rs::sampler::{Sampler, SamplerConfig};
use cgmon_rs::testkit::ConnHolder;
use cgmon_rs::wire::inet_diag::SocketTarget;
use std::net::SocketAddr;

fn main() {
    let n: usize = std::env::args().nth(1).map_or(2000, |a| a.parse().unwrap());
    let rcv: usize = std::env::args().nth(2).map_or(0, |a| a.parse().unwrap());
    let h = ConnHolder::start("127.0.0.1:0".parse::<SocketAddr>().unwrap(), n).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let opts = SocketOptions { rcvbuf: (rcv > 0).then_some(rcv), ..Default::default() };
        let src = NetlinkSource::open(opts).unwrap();
        eprintln!("rcvbuf {}", src.rcvbuf().unwrap());
        let mut s = Sampler::new(src, SamplerConfig::default()).unwrap();
        let mut targets = Vec::new();
        let port = h.addr.port();
        let busy: u16 = std::env::var("BUSY").map_or(0, |v| v.parse().unwrap());
        let d = s
            .dump_with(|x| {
                if (busy == 0 && (x.msg().sport() == port || x.msg().dport() == port))
                    || (busy > 0 && (x.msg().sport() == busy || x.msg().dport() == busy))
                {
                    targets.push(SocketTarget::of(&x.msg()))
                }
            })
            .await
            .unwrap();
        eprintln!("dump sockets {} targets {}", d.sockets, targets.len());
        for round in 0..5 {
            let t = std::time::Instant::now();
            let c0 = cpu();
            let p = s.exact_with(&targets, |_, _| {}).await.unwrap();
            let c1 = cpu();
            eprintln!(
                "round {round}: {:?} wall {:?} cpu/socket {:.2} µs chunk {}",
                p,
                t.elapsed(),
                (c1 - c0) as f64 / 1e3 / targets.len() as f64,
                s.exact_chunk()
            );
        }
        let t = std::time::Instant::now();
        let c0 = cpu();
        let d = s.dump_with(|_| {}).await.unwrap();
        let c1 = cpu();
        eprintln!(
            "full dump {} sockets wall {:?} cpu/socket {:.2} µs",
            d.sockets,
            t.elapsed(),
            (c1 - c0) as f64 / 1e3 / d.sockets as f64
        );
    });
}

fn cpu() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

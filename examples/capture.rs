//! Records real sock_diag datagrams as test fixtures (tests/fixtures/README.md).
//!
//! ```text
//! cargo run --release --example capture -- tests/fixtures          # small dumps + destroy events
//! cargo run --release --example capture -- tests/fixtures --big     # + a 20,000-socket dump
//! ```
//! It opens its own loopback connections (IPv4 cubic and bbr, IPv6, an IPv4 client of a
//! dual-stack listener, one TIME-WAIT), dumps them with a filter naming only its own ports
//! and every extension (TOS and TCLASS too, so their decoding is covered),
//! then closes them while subscribed to destroy events. Files use the format of
//! `cgmon_rs::sampler::source::write_datagrams`; a request's `seq` is what the sampler would
//! use, so the files replay through `Sampler` unchanged.

use std::io::Write;
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::time::Duration;

use cgmon_rs::filter::{self, Expr, Side};
use cgmon_rs::sampler::destroy::{SKNLGRP_INET_TCP_DESTROY, SKNLGRP_INET6_TCP_DESTROY};
use cgmon_rs::sampler::source::{DumpSource, NetlinkSource, SocketOptions, write_datagrams};
use cgmon_rs::states::StateSet;
use cgmon_rs::testkit::{ConnHolder, Pair, set_congestion};
use cgmon_rs::wire::inet_diag::{
    AF_INET, AF_INET6, DumpRequest, RequestKind, all_extensions, default_extensions,
};
use cgmon_rs::wire::nlmsg::{NLMSG_DONE, NLMSG_ERROR, NlMsgIter};
use cgmon_rs::wire::sock::Datagram;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

async fn capture(kind: RequestKind, seq: u32, filter: &Expr, ext: u8) -> Res<Vec<Datagram>> {
    let mut src = NetlinkSource::open(SocketOptions::default())?;
    let req = DumpRequest {
        kind,
        states: StateSet::default().0,
        ext,
        bytecode: Some(filter::compile(filter)?),
    };
    src.send(&req.emit(seq)).await?;
    let mut out = Vec::new();
    loop {
        let mut buf = Vec::with_capacity(64 * 1024);
        let r = src.recv(&mut buf).await?;
        assert_eq!(r.len, buf.len(), "64 KiB holds any dump datagram");
        let done = NlMsgIter::new(&buf)
            .filter_map(Result::ok)
            .any(|m| m.kind == NLMSG_DONE || m.kind == NLMSG_ERROR);
        out.push(Datagram { ts_ns: r.ts_ns, bytes: buf });
        if done {
            return Ok(out);
        }
    }
}

fn save(dir: &Path, name: &str, d: &[Datagram]) -> Res<()> {
    let path = dir.join(name);
    if name.ends_with(".gz") {
        let f = std::fs::File::create(&path)?;
        let mut gz = flate2::write::GzEncoder::new(f, flate2::Compression::best());
        write_datagrams(&mut gz, d)?;
        gz.finish()?.flush()?;
    } else {
        write_datagrams(std::fs::File::create(&path)?, d)?;
    }
    let bytes: usize = d.iter().map(|x| x.bytes.len()).sum();
    eprintln!("{}: {} datagrams, {bytes} bytes", path.display(), d.len());
    Ok(())
}

fn ports_filter(ports: &[u16]) -> Expr {
    Expr::any_of(
        ports.iter().flat_map(|&p| {
            [Side::Local, Side::Remote].map(|side| Expr::Port { side, lo: p, hi: p })
        }),
    )
    .expect("at least one port")
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Res<()> {
    let mut args = std::env::args().skip(1);
    let dir = args.next().ok_or("usage: capture DIR [--big]")?;
    let big = args.next().as_deref() == Some("--big");
    let dir = Path::new(&dir);

    if big {
        // Must fork before anything else starts threads; current_thread runtime has none.
        // The big dump asks for exactly what the sampler asks for by default.
        let holder = ConnHolder::start("127.0.0.1:0".parse()?, 10_000)?;
        let f = ports_filter(&[holder.addr.port()]);
        let d = capture(RequestKind::SingleWalk, 1, &f, default_extensions()).await?;
        save(dir, "dump20k.bin.gz", &d)?;
        return Ok(());
    }

    let l4 = TcpListener::bind("127.0.0.1:0")?;
    let l6 = TcpListener::bind("[::1]:0")?;
    let ld = TcpListener::bind("[::]:0")?; // dual stack: IPv4 clients appear v4-mapped
    let a4 = l4.local_addr()?;
    let a6 = l6.local_addr()?;
    let ad: SocketAddr = format!("127.0.0.1:{}", ld.local_addr()?.port()).parse()?;

    let mut pairs = Vec::new();
    for cc in ["cubic", "bbr"] {
        let client = socket2_connect(a4, cc)?;
        let (server, _) = l4.accept()?;
        set_congestion(&server, cc)?;
        pairs.push(Pair { client, server });
    }
    pairs.push(Pair::connect(&l6, a6)?);
    pairs.push(Pair::connect(&ld, ad)?);
    for p in &mut pairs {
        p.exchange(256 * 1024)?;
    }
    // One TIME-WAIT: the client closes first, the server answers.
    {
        let tw = Pair::connect(&l4, a4)?;
        drop(tw.client);
        drop(tw.server);
    }
    std::thread::sleep(Duration::from_millis(100));

    let ports = [a4.port(), a6.port(), ad.port()];
    let f = ports_filter(&ports);
    save(
        dir,
        "inet.bin",
        &capture(RequestKind::ByFamily(AF_INET), 1, &f, all_extensions()).await?,
    )?;
    save(
        dir,
        "inet6.bin",
        &capture(RequestKind::ByFamily(AF_INET6), 2, &f, all_extensions()).await?,
    )?;
    save(
        dir,
        "single_walk.bin",
        &capture(RequestKind::SingleWalk, 1, &f, all_extensions()).await?,
    )?;

    // Destroy events: subscribe, close everything (listeners too), collect ours.
    let mut ev = NetlinkSource::open_with_groups(
        SocketOptions { rcvbuf: Some(4 << 20), ..Default::default() },
        &[SKNLGRP_INET_TCP_DESTROY, SKNLGRP_INET6_TCP_DESTROY],
    )?;
    drop(pairs);
    drop((l4, l6, ld));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut events = Vec::new();
    loop {
        let mut buf = Vec::with_capacity(16 * 1024);
        match ev.try_recv(&mut buf)? {
            Some(r) => {
                let ours = NlMsgIter::new(&buf).filter_map(Result::ok).any(|m| {
                    cgmon_rs::wire::inet_diag::InetDiagMsg::new_checked(m.payload)
                        .is_ok_and(|d| ports.contains(&d.sport()) || ports.contains(&d.dport()))
                });
                if ours {
                    events.push(Datagram { ts_ns: r.ts_ns, bytes: buf });
                }
            }
            None => break,
        }
    }
    save(dir, "destroy.bin", &events)?;
    Ok(())
}

/// Connects with a congestion-control algorithm set before the SYN, so both the handshake
/// and the data use it.
fn socket2_connect(to: SocketAddr, cc: &str) -> Res<std::net::TcpStream> {
    use std::os::fd::FromRawFd;
    // SAFETY: plain socket(2); the fd is owned by the TcpStream below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    // SAFETY: fd is a fresh socket we own.
    let s = unsafe { std::net::TcpStream::from_raw_fd(fd) };
    set_congestion(&s, cc)?;
    let SocketAddr::V4(v4) = to else { return Err("IPv4 only".into()) };
    let sa = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: v4.port().to_be(),
        sin_addr: libc::in_addr { s_addr: u32::from_ne_bytes(v4.ip().octets()) },
        sin_zero: [0; 8],
    };
    // SAFETY: a valid sockaddr_in and its size.
    let rc = unsafe {
        libc::connect(
            fd,
            (&sa as *const libc::sockaddr_in).cast(),
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error().into());
    }
    Ok(s)
}

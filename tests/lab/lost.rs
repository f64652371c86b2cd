//! Destroy events the kernel drops are counted exactly and said: a namespace of the test's
//! own, a destroy buffer forced tiny (`--destroy-buffer 4096`), and every connection made
//! and closed while the monitor is stopped (SIGSTOP), so that the kernel has nowhere to put
//! most of their events. Root is needed; under `CI=true` its lack fails.

use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::Command;
use std::time::{Duration, Instant};

use cgmon_rs::lab::in_netns;

use crate::BIN;
use crate::monitor::Monitor;
use crate::netns::{Named, get, metric, port, root};

/// Connections made (each destroys two sockets, each a destroy event).
const CONNECTIONS: usize = 300;

/// The Drops column of `/proc/net/netlink` in namespace `ns`, summed over the
/// NETLINK_SOCK_DIAG sockets that joined multicast groups: the kernel's own count, read
/// apart from the monitor.
fn kernel_drops(ns: &str) -> u64 {
    let out = Command::new("ip").args(["netns", "exec", ns, "cat", "/proc/net/netlink"]).output();
    let text = String::from_utf8(out.unwrap().stdout).unwrap();
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            // sk Eth Pid Groups Rmem Wmem Dump Locks Drops Inode
            let subscribed =
                f.get(3).is_some_and(|g| u64::from_str_radix(g, 16).is_ok_and(|g| g != 0));
            (f.get(1) == Some(&"4") && subscribed).then(|| f[8].parse::<u64>().unwrap())
        })
        .sum()
}

#[test]
fn destroy_events_the_kernel_drops_are_counted_exactly_and_fail_the_run() {
    if !root() {
        return;
    }
    let ns = Named::new("lost", 1);
    let http = port();
    let mut c = Command::new(BIN);
    c.args(["--netns", &ns.0[0], "-run-interval", "50ms", "--destroy-buffer", "4096"])
        .args(["-run-http-server", &format!("127.0.0.1:{http}")]);
    let m = Monitor::spawn(c);
    let deadline = Instant::now() + Duration::from_secs(20);
    while metric(&get(http, "/metrics"), "cgmon_dumps_total") < 1.0 {
        assert!(Instant::now() < deadline, "no dump: {}", m.log());
        std::thread::sleep(Duration::from_millis(50));
    }
    let buffer = metric(&get(http, "/metrics"), "cgmon_destroy_buffer_bytes");
    assert!((4096.0..=8192.0).contains(&buffer), "the forced buffer: {buffer}");
    // The monitor stopped, every connection lives and dies; their events queue in the
    // kernel until the buffer is full, and the rest are dropped.
    m.signal(libc::SIGSTOP);
    let fd = ns.fd(0);
    let listener = in_netns(&fd, || {
        let l = TcpListener::bind("127.0.0.1:0")?;
        let a: SocketAddr = l.local_addr()?;
        for _ in 0..CONNECTIONS {
            let c = TcpStream::connect(a)?;
            let (s, _) = l.accept()?;
            drop((c, s));
        }
        Ok(l)
    })
    .unwrap();
    // Both ends reach their end (TIME-WAIT's minisocket sends no event).
    std::thread::sleep(Duration::from_millis(500));
    let dropped = kernel_drops(&ns.0[0]);
    m.signal(libc::SIGCONT);
    let events = (2 * CONNECTIONS) as f64;
    let deadline = Instant::now() + Duration::from_secs(20);
    let (received, lost) = loop {
        let t = get(http, "/metrics");
        let (r, l) = (
            metric(&t, "cgmon_destroy_events_total"),
            metric(&t, "cgmon_destroy_events_lost_total"),
        );
        if r + l >= events || Instant::now() > deadline {
            break (r, l);
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    eprintln!(
        "LAB lost: {events} events, {received} received, {lost} counted lost, kernel {dropped}"
    );
    assert!(dropped > 0, "the tiny buffer dropped nothing: the case was not built");
    assert_eq!(received + lost, events, "every event received or counted lost");
    assert_eq!(lost, dropped as f64, "the count is the kernel's");
    let health = get(http, "/healthz");
    assert!(health.contains("degraded") && health.contains("destroy events"), "{health}");
    m.signal(libc::SIGTERM);
    let (st, log, lines) = m.wait(Duration::from_secs(20));
    drop(listener);
    assert_eq!(st.code(), Some(1), "a run that lost connections exits 1: {log}");
    let stop = log.lines().find(|l| l.contains("stopped: ")).unwrap_or_else(|| panic!("{log}"));
    assert!(stop.contains(&format!("{} destroy events lost", lost as u64)), "{stop}");
    // No dump saw these connections (the monitor was stopped): none ended gone, every lost
    // end left no record.
    let split =
        format!("0 of their flows ended gone, {} connection ends left no record", lost as u64);
    assert!(stop.contains(&split), "{stop}");
    // Every event received made its record (no dump saw these connections); the lost ones
    // left none.
    assert_eq!(lines.len() as f64, received, "{log}");
}

//! Attribution in the tracker, over made-up processes (no kernel, no /proc).

use std::time::Duration;

use super::*;
use crate::tracker::{EndedFlow, TrackerConfig};
use crate::who::processes::{Procfs, spawn};
use crate::wire::build::SockBuilder;
use crate::wire::sock::batch;

/// Two processes in cgroup 7: pid 42 `python3 -m api` holding sockets 500 and 600 (a
/// listener), pid 43 `cron` holding 700. Counts the processes whose descriptors it read.
#[derive(Default)]
struct Host(Arc<std::sync::atomic::AtomicUsize>);

impl Procfs for Host {
    fn cgroup_pids(&mut self, id: u64) -> Option<Vec<u32>> {
        (id == 7).then(|| vec![42, 43])
    }
    fn all_pids(&mut self) -> Vec<u32> {
        vec![42, 43]
    }
    fn fds(&mut self, pid: u32) -> Option<Vec<u32>> {
        self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        match pid {
            42 => Some(vec![3, 4]),
            43 => Some(vec![3]),
            _ => None,
        }
    }
    fn fd_socket(&mut self, pid: u32, fd: u32) -> Option<u64> {
        match (pid, fd) {
            (42, 3) => Some(500),
            (42, 4) => Some(600),
            (43, 3) => Some(700),
            _ => None,
        }
    }
    fn comm(&mut self, pid: u32) -> Option<String> {
        Some(if pid == 42 { "python3" } else { "cron" }.into())
    }
    fn cmdline(&mut self, pid: u32) -> Option<Vec<u8>> {
        Some(if pid == 42 { b"python3\0-m\0api\0".to_vec() } else { b"cron\0".to_vec() })
    }
}

fn tracker() -> Tracker {
    tracker_over(Host::default())
}

fn tracker_over(host: Host) -> Tracker {
    let mut t = Tracker::new(TrackerConfig::default());
    let namer: DestNamer = Box::new(|_, port| Arc::from(if port == 5432 { "db" } else { "web" }));
    t.attribute(Some(spawn(host, Arc::default()).expect("walker")), Some(namer));
    t
}

fn dump(t: &mut Tracker, ts: u64, socks: &[&SockBuilder]) -> Vec<EndedFlow> {
    let b = batch(&socks.iter().map(|s| (ts, s.build())).collect::<Vec<_>>());
    let mut out = Vec::new();
    t.ask_owners();
    t.settle_owners();
    t.begin_dump();
    for s in b.iter() {
        t.observe(&s, &mut out);
    }
    t.end_dump(true, ts, &mut out);
    out
}

fn destroy(t: &mut Tracker, ts: u64, s: &SockBuilder) -> Vec<EndedFlow> {
    let b = batch(&[(ts, s.clone().state(7).build())]);
    let mut out = Vec::new();
    t.settle_owners();
    t.destroyed(&b.get(0).unwrap(), &mut out);
    out
}

/// Settles until `done` holds (the walker answers on its own thread).
fn settle_until(t: &mut Tracker, done: impl Fn(&Tracker) -> bool) {
    for _ in 0..500 {
        t.ask_owners();
        t.settle_owners();
        if done(t) {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("the walker never answered");
}

fn bytes_of(t: &Tracker, comm: &str) -> u64 {
    let of =
        |a: &&crate::tracker::accounts::Account| a.comm.as_deref().unwrap_or("unknown") == comm;
    t.accounts().all().iter().filter(of).map(|a| a.bytes_acked).sum()
}

fn count(t: &Tracker, how: How) -> u64 {
    t.owner_counts()[How::ALL.iter().position(|&h| h == how).unwrap()]
}

#[test]
fn a_flow_waits_for_its_program_and_then_counts_all_its_bytes_there() {
    let s = SockBuilder::new(2, 40001, 5432).inode(500).cgroup(7);
    let mut t = tracker();
    dump(&mut t, 1, &[]); // after the first dump: a new flow counts from its first byte
    dump(&mut t, 2, &[&s.clone().bytes_acked(1_000)]);
    // Before the answer its bytes wait: counted nowhere.
    assert_eq!(t.accounts().all().iter().map(|a| a.bytes_acked).sum::<u64>(), 0);
    settle_until(&mut t, |t| t.attr.owners.contains_key(&2));
    assert_eq!(bytes_of(&t, "api"), 1_000, "what it carried before the answer");
    dump(&mut t, 3, &[&s.clone().bytes_acked(3_000)]);
    let ended = destroy(&mut t, 4, &s.clone().bytes_acked(3_500));
    let o = ended[0].owner.as_ref().expect("an owner");
    assert_eq!((o.pid, &*o.name, o.how), (42, "api", How::Socket));
    assert_eq!(bytes_of(&t, "api"), 3_500);
    assert_eq!(bytes_of(&t, "unknown"), 0);
    let a = t.accounts().all().iter().find(|a| a.comm.as_deref() == Some("api")).unwrap();
    assert_eq!(a.dest_service.as_deref(), Some("db"));
    assert_eq!(count(&t, How::Socket), 1);
}

#[test]
fn accepted_connections_seen_only_at_their_end_inherit_their_listener() {
    let mut t = tracker();
    let listener =
        SockBuilder::new(9, 8080, 0).state(crate::states::tcp::LISTEN).inode(600).cgroup(7);
    dump(&mut t, 1, &[&listener]);
    settle_until(&mut t, |t| !t.attr.listeners.is_empty());
    // Accepted and closed between two dumps: its destroy event has no inode.
    let ended = destroy(&mut t, 2, &SockBuilder::new(3, 8080, 51000).bytes_acked(100));
    let o = ended[0].owner.as_ref().expect("its listener's process");
    assert_eq!((o.pid, &*o.name, o.how), (42, "api", How::Listener));
    assert_eq!(bytes_of(&t, "api"), 100);
    // The connecting side of a short connection has no owner: never a guess.
    let mut ended = destroy(&mut t, 3, &SockBuilder::new(4, 51001, 9000).bytes_acked(5));
    t.resolve_sides(&mut ended); // which side it was waits for a listeners' dump
    assert!(ended[0].owner.is_none());
    assert_eq!((count(&t, How::Listener), count(&t, How::None)), (1, 1));
    assert_eq!(bytes_of(&t, "unknown"), 5);
}

#[test]
fn a_socket_no_process_holds_goes_to_unknown_with_its_bytes() {
    let mut t = tracker();
    dump(&mut t, 1, &[]);
    let s = SockBuilder::new(5, 40005, 80).inode(999).cgroup(7);
    dump(&mut t, 2, &[&s.clone().bytes_acked(10)]);
    settle_until(&mut t, |t| t.attr.owners.contains_key(&5));
    let ended = destroy(&mut t, 3, &s.clone().bytes_acked(20));
    assert!(ended[0].owner.is_none());
    assert_eq!((bytes_of(&t, "unknown"), count(&t, How::NotFound)), (20, 1));
    // Still waiting at its end: its bytes are counted, as not found.
    let s = SockBuilder::new(6, 40006, 80).inode(700).cgroup(7);
    dump(&mut t, 4, &[&s.clone().bytes_acked(1)]);
    let mut out = Vec::new();
    let b = batch(&[(5, s.clone().state(7).bytes_acked(8).build())]);
    t.destroyed(&b.get(0).unwrap(), &mut out); // no settle: the answer has not come in
    assert_eq!(bytes_of(&t, "unknown"), 28);
    assert_eq!(count(&t, How::NotFound), 2);
}

#[test]
fn without_a_walker_nothing_waits_and_nothing_is_named() {
    let mut t = Tracker::new(TrackerConfig::default());
    dump(&mut t, 1, &[]);
    let s = SockBuilder::new(7, 40007, 80).inode(500).cgroup(7);
    dump(&mut t, 2, &[&s.clone().bytes_acked(10)]);
    assert_eq!(t.accounts().all().iter().map(|a| a.bytes_acked).sum::<u64>(), 10);
    let ended = destroy(&mut t, 3, &s);
    assert!(ended[0].owner.is_none());
    assert_eq!(count(&t, How::None), 1);
}

#[test]
fn a_flow_gone_before_the_next_tick_costs_no_walk() {
    let walks = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut t = tracker_over(Host(walks.clone()));
    dump(&mut t, 1, &[]);
    let s = SockBuilder::new(8, 40008, 80).inode(500).cgroup(7);
    dump(&mut t, 2, &[&s.clone().bytes_acked(10)]);
    let ended = destroy(&mut t, 3, &s.clone().bytes_acked(10));
    dump(&mut t, 4, &[]); // the tick that would have asked
    std::thread::sleep(Duration::from_millis(50));
    t.settle_owners();
    assert!(ended[0].owner.is_none());
    assert_eq!(walks.load(std::sync::atomic::Ordering::Relaxed), 0, "nothing was walked");
    assert_eq!((count(&t, How::NotFound), bytes_of(&t, "unknown")), (1, 10));
}

#[test]
fn a_listener_not_found_is_not_looked_for_again_until_it_is_another_socket() {
    let walks = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut t = tracker_over(Host(walks.clone()));
    let listen = |inode| {
        SockBuilder::new(9, 2024, 0).state(crate::states::tcp::LISTEN).inode(inode).cgroup(7)
    };
    let read = || walks.load(std::sync::atomic::Ordering::Relaxed);
    for ts in 1..=3 {
        dump(&mut t, ts, &[&listen(999)]); // held by no process we can read
        std::thread::sleep(Duration::from_millis(30));
    }
    settle_until(&mut t, |_| read() == 2); // one walk: cgroup 7's two processes
    dump(&mut t, 4, &[&listen(999)]);
    dump(&mut t, 5, &[&listen(600)]); // restarted: another socket, found
    // Asked once more, for the new socket, and answered from what the first walk cached.
    settle_until(&mut t, |t| !t.attr.listeners.is_empty());
    assert_eq!(read(), 2);
}

#[test]
fn a_flow_packed_from_the_first_dump_gets_its_program_without_being_made_whole() {
    let s = SockBuilder::new(2, 40001, 5432).inode(500).cgroup(7).bytes_acked(1_000);
    let mut t = tracker();
    dump(&mut t, 1, &[&s]); // open before we started: packed at once
    assert_eq!(t.packed().0, 1);
    // Its answer is settled in the store: no owner kept beside it, nothing made whole.
    settle_until(&mut t, |t| count_packed_owner(t) == Some(42));
    assert!(t.attr.owners.is_empty() && t.packed().0 == 1);
    // Open before we started, it counts from here: nothing yet; then what it carries next.
    dump(&mut t, 2, &[&s.clone().bytes_acked(1_800)]);
    assert_eq!(t.packed().0, 0, "a changed sample makes it whole");
    let ended = destroy(&mut t, 3, &s.clone().bytes_acked(2_000));
    let o = ended[0].owner.as_ref().expect("an owner");
    assert_eq!((o.pid, &*o.name, o.how), (42, "api", How::Socket));
    assert_eq!(bytes_of(&t, "api"), 1_000);
    assert_eq!(count(&t, How::Socket), 1);
}

/// The owner's pid of the one packed flow, as the store has it.
fn count_packed_owner(t: &Tracker) -> Option<u32> {
    t.view_one(2, 0)?;
    match t.slab.first()? {
        super::Body::Cold(at) => t.cold.get(*at).1.map(|o| o.pid),
        super::Body::Live(_) => None,
    }
}

#[test]
fn an_accepted_connection_a_dump_holds_is_named_from_its_listener_without_a_walk() {
    let walks = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let mut t = tracker_over(Host(walks.clone()));
    let listener =
        SockBuilder::new(9, 8080, 0).state(crate::states::tcp::LISTEN).inode(600).cgroup(7);
    dump(&mut t, 1, &[&listener]);
    settle_until(&mut t, |t| !t.attr.listeners.is_empty());
    let read = walks.load(std::sync::atomic::Ordering::Relaxed);
    // Accepted, and open at the next dump: its inode is one no walk has read.
    let accepted = SockBuilder::new(3, 8080, 51000).inode(901).cgroup(7).bytes_acked(100);
    dump(&mut t, 2, &[&listener, &accepted]);
    dump(&mut t, 3, &[&listener, &accepted]);
    std::thread::sleep(Duration::from_millis(50));
    t.settle_owners();
    assert_eq!(walks.load(std::sync::atomic::Ordering::Relaxed), read, "no walk for it");
    let ended = destroy(&mut t, 4, &accepted);
    let o = ended[0].owner.as_ref().expect("its listener's process");
    assert_eq!((o.pid, &*o.name, o.how), (42, "api", How::Listener));
    assert_eq!(bytes_of(&t, "api"), 100);
}

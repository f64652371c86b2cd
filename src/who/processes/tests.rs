//! The resolver over made-up processes, and over this test's own sockets.

use super::*;

/// A made-up process: pid, cgroup, task name, command line, socket inodes.
type Proc = (u32, u64, &'static str, Vec<u8>, Vec<u64>);

/// Processes as a test declares them.
#[derive(Default)]
struct Fake {
    procs: Vec<Proc>,
    /// Descriptor listings read.
    fd_walks: usize,
    /// Links read.
    links_read: usize,
}

impl Procfs for Fake {
    fn cgroup_pids(&mut self, id: u64) -> Option<Vec<u32>> {
        (id != 0).then(|| self.procs.iter().filter(|p| p.1 == id).map(|p| p.0).collect())
    }
    fn all_pids(&mut self) -> Vec<u32> {
        self.procs.iter().map(|p| p.0).collect()
    }
    fn fds(&mut self, pid: u32) -> Option<Vec<u32>> {
        self.fd_walks += 1;
        let p = self.procs.iter().find(|p| p.0 == pid)?;
        Some((0..p.4.len() as u32).collect())
    }
    fn fd_socket(&mut self, pid: u32, fd: u32) -> Option<u64> {
        self.links_read += 1;
        self.procs.iter().find(|p| p.0 == pid)?.4.get(fd as usize).copied().filter(|&i| i != 0)
    }
    fn comm(&mut self, pid: u32) -> Option<String> {
        self.procs.iter().find(|p| p.0 == pid).map(|p| p.2.to_string())
    }
    fn cmdline(&mut self, pid: u32) -> Option<Vec<u8>> {
        self.procs.iter().find(|p| p.0 == pid).map(|p| p.3.clone())
    }
}

fn req(cookie: u64, inode: u64, cgroup_id: u64) -> Request {
    Request { target: Target::Flow(cookie), inode, cgroup_id }
}

#[test]
fn walks_only_the_sockets_cgroup_each_process_once() {
    let fake = Fake {
        procs: vec![
            (10, 7, "nginx", b"nginx\0".to_vec(), vec![100, 101]),
            (11, 7, "nginx", b"nginx\0".to_vec(), vec![102]),
            (20, 8, "python3", b"python3\0-m\0api\0".to_vec(), vec![200]),
        ],
        fd_walks: 0,
        links_read: 0,
    };
    let mut r = Resolver::new(fake);
    let out = r.resolve(&[req(1, 100, 7), req(2, 102, 7), req(3, 999, 7)], &mut || {});
    assert_eq!(r.fs.fd_walks, 2, "cgroup 8's process is not read");
    assert_eq!(
        (out[0].owner.pid, &*out[0].owner.name, out[0].owner.how),
        (10, "nginx", How::Socket)
    );
    assert_eq!(out[1].owner.pid, 11);
    assert_eq!(out[0].owner.name_id, out[1].owner.name_id, "one name, one id");
    assert_eq!(out[2].owner, Owner::none(How::NotFound));
    // 101 was cached by the first walk: no walk for it.
    let out = r.resolve(&[req(4, 101, 7)], &mut || {});
    assert_eq!((out[0].owner.pid, r.fs.fd_walks), (10, 2));
    // Without a cgroup every process is walked; the interpreter is named by its module.
    let out = r.resolve(&[req(5, 200, 0)], &mut || {});
    assert_eq!((out[0].owner.pid, &*out[0].owner.name), (20, "api"));
    assert_ne!(out[0].owner.name_id, UNKNOWN);
}

#[test]
fn the_thread_answers() {
    let fake = Fake { procs: vec![(10, 7, "redis-server", vec![], vec![5])], ..Fake::default() };
    let link = spawn(fake, Arc::new(Metrics::default())).expect("thread");
    link.send(vec![req(1, 5, 7)]).expect("room");
    let got = link.wait(Duration::from_secs(5)).expect("an answer");
    assert_eq!((got[0].target, got[0].owner.pid), (Target::Flow(1), 10));
    assert_eq!(&*got[0].owner.name, "redis-server");
}

#[test]
fn finds_this_process_by_its_own_socket() {
    use std::os::unix::fs::MetadataExt;
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    // The socket's inode, as sock_diag reports it: the fd's inode in sockfs.
    let fd = std::os::fd::AsRawFd::as_raw_fd(&l);
    let inode = std::fs::metadata(format!("/proc/self/fd/{fd}")).expect("fd").ino();
    let mut r = Resolver::new(RealProcfs::new());
    let out = r.resolve(&[req(1, inode, 0)], &mut || {});
    assert_eq!(out[0].owner.pid, std::process::id());
    assert_eq!(out[0].owner.how, How::Socket);
}

#[test]
fn socket_links_parse() {
    assert_eq!(procfs::socket_inode(b"socket:[12345]"), Some(12345));
    assert_eq!(procfs::socket_inode(b"pipe:[12345]"), None);
    assert_eq!(procfs::socket_inode(b"/dev/null"), None);
}

#[test]
fn a_later_walk_reads_only_the_new_descriptors_unless_one_was_reused() {
    // One process holding 10,000 sockets (inodes 1000..11000 on fds 0..10000).
    let socks: Vec<u64> = (1000..11_000).collect();
    let fake = Fake { procs: vec![(10, 7, "api", vec![], socks)], ..Fake::default() };
    let mut r = Resolver::new(fake);
    let out = r.resolve(&[req(1, 10_999, 7)], &mut || {});
    assert_eq!(out[0].owner.pid, 10);
    // The first walk reads the highest numbers first, and stops at the socket asked for.
    assert_eq!(r.fs.links_read, 1);
    let out = r.resolve(&[req(2, 1000, 7)], &mut || {});
    assert_eq!((out[0].owner.pid, r.fs.links_read), (10, 10_000), "then the rest, once");
    // A new connection on a new descriptor number: one link read.
    r.fs.procs[0].4.push(20_000);
    let out = r.resolve(&[req(3, 20_000, 7)], &mut || {});
    assert_eq!((out[0].owner.pid, r.fs.links_read), (10, 10_001));
    assert_eq!(r.fs.fd_walks, 3, "one listing a walk");
    // A socket no process holds (closed before the walk): with the listing as it was, no
    // link is read again.
    let before = (r.fs.links_read, r.fs.fd_walks);
    let out = r.resolve(&[req(5, 99, 7)], &mut || {});
    assert_eq!(out[0].owner, Owner::none(How::NotFound));
    assert_eq!((r.fs.links_read - before.0, r.fs.fd_walks - before.1), (0, 1));
    // A number closed and reused for another socket while another opened: the new one is
    // read first, then the known ones again, until it is found.
    r.fs.procs[0].4[5] = 30_000;
    r.fs.procs[0].4.push(30_001);
    let out = r.resolve(&[req(4, 30_000, 7)], &mut || {});
    assert_eq!(out[0].owner.pid, 10);
    assert!(r.fs.links_read - before.0 <= 10_002, "{}", r.fs.links_read);
    // The price of that rule: a number reused with nothing else changed is not found.
    r.fs.procs[0].4[6] = 30_002;
    let out = r.resolve(&[req(6, 30_002, 7)], &mut || {});
    assert_eq!(out[0].owner, Owner::none(How::NotFound));
}

#[test]
fn a_walk_paces_itself_every_few_hundred_links() {
    let socks: Vec<u64> = (1000..3000).collect();
    let fake = Fake { procs: vec![(10, 7, "api", vec![], socks)], ..Fake::default() };
    let mut r = Resolver::new(fake);
    let mut paced = 0;
    let out = r.resolve(&[req(1, 2999, 7), req(2, 1000, 7)], &mut || paced += 1);
    assert_eq!((out[0].owner.pid, out[1].owner.pid), (10, 10));
    assert_eq!(paced, 2000 / PACE_EVERY, "2,000 links read");
}

#[test]
fn the_walker_waits_while_the_budget_is_spent_and_says_how_many_wait() {
    let m = Arc::new(Metrics::default());
    m.budget.set_share(0.02);
    // 40 ms owed: two seconds at 2 % of a core.
    m.budget.spend(40_000_000);
    let fake = Fake { procs: vec![(10, 7, "api", vec![], vec![5, 6])], ..Fake::default() };
    let link = spawn(fake, m.clone()).expect("thread");
    link.send(vec![req(1, 5, 7), req(2, 6, 7)]).expect("room");
    std::thread::sleep(Duration::from_millis(300));
    assert!(link.wait(Duration::from_millis(10)).is_none(), "nothing walked while in debt");
    assert_eq!(m.budget.waiting(), 2);
    // Repaid, they are walked and named.
    let got = link.wait(Duration::from_secs(5)).expect("answers once the debt is repaid");
    assert_eq!((got.len(), got[0].owner.pid), (2, 10));
    assert_eq!((m.naming_named.get(), m.budget.waiting()), (2, 0));
    assert!(m.naming_cpu_ns.get() > 0);
}

#[test]
fn requests_past_what_may_wait_are_answered_skipped_and_counted() {
    let m = Arc::new(Metrics::default());
    m.budget.set_share(0.02);
    m.budget.spend(100_000_000); // five seconds owed
    let fake = Fake { procs: vec![(10, 7, "api", vec![], vec![5])], ..Fake::default() };
    let link = spawn(fake, m.clone()).expect("thread");
    let many: Vec<Request> = (0..MAX_WAITING as u64 + 10).map(|c| req(c, 5, 7)).collect();
    link.send(many).expect("room");
    let got = link.wait(Duration::from_secs(2)).expect("the skipped, at once");
    assert_eq!(got.len(), 10);
    assert!(got.iter().all(|a| a.owner.how == How::Skipped));
    assert_eq!(m.naming_skipped.get(), 10);
}

#[test]
fn a_batch_the_full_queue_refuses_is_counted_as_skipped() {
    let m = Arc::new(Metrics::default());
    m.budget.set_share(0.02);
    m.budget.spend(1_000_000_000); // the walker rests in its first batch for long
    let fake = Fake { procs: vec![(10, 7, "api", vec![], vec![5])], ..Fake::default() };
    let link = spawn(fake, m.clone()).expect("thread");
    let mut refused = 0;
    for c in 0..200 {
        // The walker takes batches in while it rests, 50 ms apart: fill faster than that.
        if link.send(vec![req(c, 5, 7)]).is_err() {
            refused += 1;
        }
    }
    assert!(refused > 0);
    assert_eq!(m.naming_skipped.get(), refused);
}

#[test]
fn a_socket_no_process_holds_costs_no_second_read_of_links_read_in_the_same_batch() {
    let socks: Vec<u64> = (1000..6000).collect();
    let fake = Fake { procs: vec![(10, 7, "api", vec![], socks)], ..Fake::default() };
    let mut r = Resolver::new(fake);
    // The first walk of a host: 5,000 sockets asked for and one (a kernel socket) no
    // process holds. Each link is read once.
    let mut batch: Vec<Request> = (1000..6000).map(|i| req(i, i, 7)).collect();
    batch.push(req(1, 99, 7));
    let out = r.resolve(&batch, &mut || {});
    assert_eq!(out.iter().filter(|a| a.owner.pid == 10).count(), 5000);
    assert_eq!(r.fs.links_read, 5000);
}

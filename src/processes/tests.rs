//! The resolver over made-up processes, and over this test's own sockets.

use super::*;

/// A made-up process: pid, cgroup, task name, command line, socket inodes.
type Proc = (u32, u64, &'static str, Vec<u8>, Vec<u64>);

/// Processes as a test declares them.
#[derive(Default)]
struct Fake {
    procs: Vec<Proc>,
    fd_walks: usize,
}

impl Procfs for Fake {
    fn cgroup_pids(&mut self, id: u64) -> Option<Vec<u32>> {
        (id != 0).then(|| self.procs.iter().filter(|p| p.1 == id).map(|p| p.0).collect())
    }
    fn all_pids(&mut self) -> Vec<u32> {
        self.procs.iter().map(|p| p.0).collect()
    }
    fn socket_inodes(&mut self, pid: u32) -> Vec<u64> {
        self.fd_walks += 1;
        self.procs.iter().find(|p| p.0 == pid).map(|p| p.4.clone()).unwrap_or_default()
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
    };
    let mut r = Resolver::new(fake);
    let out = r.resolve(&[req(1, 100, 7), req(2, 102, 7), req(3, 999, 7)]);
    assert_eq!(r.fs.fd_walks, 2, "cgroup 8's process is not read");
    assert_eq!(
        (out[0].owner.pid, &*out[0].owner.name, out[0].owner.how),
        (10, "nginx", How::Socket)
    );
    assert_eq!(out[1].owner.pid, 11);
    assert_eq!(out[0].owner.name_id, out[1].owner.name_id, "one name, one id");
    assert_eq!(out[2].owner, Owner::none(How::NotFound));
    // 101 was cached by the first walk: no walk for it.
    let out = r.resolve(&[req(4, 101, 7)]);
    assert_eq!((out[0].owner.pid, r.fs.fd_walks), (10, 2));
    // Without a cgroup every process is walked; the interpreter is named by its module.
    let out = r.resolve(&[req(5, 200, 0)]);
    assert_eq!((out[0].owner.pid, &*out[0].owner.name), (20, "api"));
    assert_ne!(out[0].owner.name_id, UNKNOWN);
}

#[test]
fn the_thread_answers() {
    let fake = Fake { procs: vec![(10, 7, "redis-server", vec![], vec![5])], fd_walks: 0 };
    let link = spawn(fake, 0.0).expect("thread");
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
    let out = r.resolve(&[req(1, inode, 0)]);
    assert_eq!(out[0].owner.pid, std::process::id());
    assert_eq!(out[0].owner.how, How::Socket);
}

#[test]
fn socket_links_parse() {
    assert_eq!(procfs::socket_inode(b"socket:[12345]"), Some(12345));
    assert_eq!(procfs::socket_inode(b"pipe:[12345]"), None);
    assert_eq!(procfs::socket_inode(b"/dev/null"), None);
}

//! The exact path allocates nothing per socket: once its buffers have grown, a poll of 256
//! sockets allocates no memory at all. A test binary of its own, for its counting allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

use cgmon_rs::sampler::exact::Answer;
use cgmon_rs::sampler::fakes::CannedAnswers;
use cgmon_rs::sampler::{Sampler, SamplerConfig};
use cgmon_rs::testkit::SockBuilder;
use cgmon_rs::wire::inet_diag::{InetDiagMsg, SocketTarget};

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// Set on the test's own thread: the harness's threads allocate when they please (it
    /// printed the test's name inside the counted window once, on a loaded machine).
    static COUNTED: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn count() {
    if COUNTED.try_with(std::cell::Cell::get).unwrap_or(false) {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
    }
}

// SAFETY: forwards to the system allocator, counting calls.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        count();
        // SAFETY: the caller's layout, passed on.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: a pointer this allocator gave, with its layout.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        count();
        // SAFETY: as above.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static A: Counting = Counting;

#[test]
fn an_exact_poll_allocates_nothing_once_warm() {
    let msgs: Vec<Vec<u8>> = (1..=256u64)
        .map(|c| SockBuilder::new(c, 1000 + c as u16, 80).cong("bbr").bytes_acked(c).build())
        .collect();
    let targets: Vec<SocketTarget> = msgs
        .iter()
        .map(|m| SocketTarget::of(&InetDiagMsg::new_checked(&m[16..]).unwrap()))
        .collect();
    let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
    let mut s = Sampler::new(CannedAnswers::new(msgs), SamplerConfig::default()).unwrap();
    let poll = |s: &mut Sampler<CannedAnswers>| {
        let mut sum = 0u64;
        let p = rt
            .block_on(s.exact_with(&targets, |_, a| {
                if let Answer::Found(x) = a {
                    sum += x.tcp_info().and_then(|t| t.bytes_acked()).unwrap_or(0);
                }
            }))
            .unwrap();
        (p.found, sum)
    };
    assert_eq!(poll(&mut s), (256, 256 * 257 / 2));
    COUNTED.with(|c| c.set(true));
    let before = ALLOCS.load(Ordering::Relaxed);
    for _ in 0..10 {
        assert_eq!(poll(&mut s).0, 256);
    }
    let n = ALLOCS.load(Ordering::Relaxed) - before;
    COUNTED.with(|c| c.set(false));
    assert_eq!(n, 0, "{n} allocations in 10 polls of 256 sockets");
}

//! A host in memory, for tests: sockets a test adds, changes and closes while the program
//! runs. It answers dump requests with every socket and exact requests socket by socket,
//! as the kernel does: the socket when its identity (4-tuple, interface, cookie) matches,
//! `ESTALE` when the 4-tuple now belongs to a socket with another cookie, `ENOENT` when
//! there is none. It counts what it was asked, so scheduling tests can tell what each tick
//! did, and it can spend CPU per socket answered, so a budget has something to measure.

use crate::locks::Locked;
use crate::sampler::dump_source::next_queued;
use std::collections::VecDeque;
use std::io;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::sampler::dump_source::{DumpSource, Received};
use crate::wire::inet_diag::{INET_DIAG_MSG_LEN, SOCKID_LEN};
use crate::wire::nlmsg::{self, NLM_F_DUMP, NlMsgIter, control_msg};

/// Where the socket id lies in a request and in an answer (after `nlmsghdr`).
const REQ_ID: usize = nlmsg::NLMSG_HDRLEN + 8;
const MSG_ID: usize = nlmsg::NLMSG_HDRLEN + 4;
/// The id's bytes before the interface and cookie: ports and addresses.
const TUPLE: usize = 36;

/// What the simulated host holds and has been asked.
#[derive(Debug, Default)]
pub struct SimState {
    /// Sockets in dump order: cookie and whole message (`nlmsghdr` included).
    sockets: Vec<(u64, Vec<u8>)>,
    /// Dump requests answered.
    pub dumps: u32,
    /// Exact requests answered, and the `send` calls that carried them.
    pub exact_requests: u64,
    /// `send` calls with exact requests.
    pub exact_sends: u32,
    /// Answers one `send` may queue; the rest overrun (None: no limit).
    pub queue_limit: Option<usize>,
    /// CPU to spend per socket put in an answer (a dump's or an exact one's).
    pub cost_per_socket: Duration,
    /// ... and per exact request on top (exact requests cost more per socket).
    pub cost_per_exact: Duration,
}

impl SimState {
    /// Adds the socket `msg` describes, or replaces its message when its cookie is known.
    pub fn set(&mut self, msg: Vec<u8>) {
        let cookie = cookie_of(&msg[MSG_ID..MSG_ID + SOCKID_LEN]);
        match self.sockets.iter_mut().find(|(c, _)| *c == cookie) {
            Some(s) => s.1 = msg,
            None => self.sockets.push((cookie, msg)),
        }
    }

    /// Removes the socket with `cookie` (it closed).
    pub fn close(&mut self, cookie: u64) {
        self.sockets.retain(|(c, _)| *c != cookie);
    }

    /// Sockets held.
    pub fn len(&self) -> usize {
        self.sockets.len()
    }

    /// True when it holds no socket.
    pub fn is_empty(&self) -> bool {
        self.sockets.is_empty()
    }
}

fn cookie_of(id: &[u8]) -> u64 {
    let w = |at: usize| u64::from(u32::from_ne_bytes(id[at..at + 4].try_into().unwrap_or([0; 4])));
    w(40) | w(44) << 32
}

/// Spins until this thread has used `d` of CPU, so that thread CPU clocks see exactly
/// that (counting wall time instead, a busy machine that took the CPU away mid-spin made
/// the costs, and so the schedule, vary).
fn burn(d: Duration) {
    if d.is_zero() {
        return;
    }
    let until = crate::clock::thread_cpu_ns() + d.as_nanos() as u64;
    while crate::clock::thread_cpu_ns() < until {
        std::hint::spin_loop();
    }
}

/// The source side of a simulated host; [`SimHost::state`] is the test's side.
#[derive(Debug)]
pub struct SimHost {
    state: Arc<Mutex<SimState>>,
    queue: VecDeque<Vec<u8>>,
    overrun: bool,
    t0: tokio::time::Instant,
}

impl Default for SimHost {
    fn default() -> Self {
        Self::new()
    }
}

impl SimHost {
    /// An empty host. Timestamps follow tokio's clock (paused in scheduling tests).
    pub fn new() -> Self {
        Self {
            state: Arc::default(),
            queue: VecDeque::new(),
            overrun: false,
            t0: tokio::time::Instant::now(),
        }
    }

    /// The state, shared with the source.
    pub fn state(&self) -> Arc<Mutex<SimState>> {
        self.state.clone()
    }

    fn lock(&self) -> MutexGuard<'_, SimState> {
        self.state.locked()
    }

    fn answer(&mut self, req: &[u8], seq: u32, dump: bool) {
        let mut st = self.state.locked();
        let stamp = |m: &[u8]| {
            let mut m = m.to_vec();
            m[8..12].copy_from_slice(&seq.to_ne_bytes());
            m
        };
        if dump {
            st.dumps += 1;
            burn(st.cost_per_socket * st.sockets.len() as u32);
            let msgs: Vec<Vec<u8>> = st.sockets.iter().map(|(_, m)| stamp(m)).collect();
            drop(st);
            self.queue.extend(msgs);
            self.queue.push_back(control_msg(seq, nlmsg::NLMSG_DONE, 0));
            return;
        }
        st.exact_requests += 1;
        burn(st.cost_per_exact + st.cost_per_socket);
        let id = &req[REQ_ID..REQ_ID + SOCKID_LEN];
        let exact = st.sockets.iter().find(|(_, m)| &m[MSG_ID..MSG_ID + SOCKID_LEN] == id);
        let answer = match exact {
            Some((_, m)) => stamp(m),
            None if st.sockets.iter().any(|(_, m)| m[MSG_ID..MSG_ID + TUPLE] == id[..TUPLE]) => {
                control_msg(seq, nlmsg::NLMSG_ERROR, libc::ESTALE)
            }
            None => control_msg(seq, nlmsg::NLMSG_ERROR, libc::ENOENT),
        };
        let full = st.queue_limit.is_some_and(|l| self.queue.len() >= l);
        drop(st);
        if full {
            self.overrun = true;
        } else {
            self.queue.push_back(answer);
        }
    }
}

impl DumpSource for SimHost {
    async fn send(&mut self, request: &[u8]) -> io::Result<()> {
        let mut exact = false;
        for m in NlMsgIter::new(request) {
            let m = m.map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
            if m.payload.len() < INET_DIAG_MSG_LEN - 16 {
                return Err(io::Error::from_raw_os_error(libc::EINVAL));
            }
            let at = m.payload.as_ptr() as usize - request.as_ptr() as usize - nlmsg::NLMSG_HDRLEN;
            let dump = m.flags & NLM_F_DUMP == NLM_F_DUMP;
            exact |= !dump;
            self.answer(&request[at..], m.seq, dump);
        }
        if exact {
            self.lock().exact_sends += 1;
        }
        Ok(())
    }

    async fn recv(&mut self, buf: &mut Vec<u8>) -> io::Result<Received> {
        next_queued(self, buf).await
    }

    fn try_recv(&mut self, buf: &mut Vec<u8>) -> io::Result<Option<Received>> {
        if std::mem::take(&mut self.overrun) {
            return Err(io::Error::from_raw_os_error(libc::ENOBUFS));
        }
        let Some(d) = self.queue.pop_front() else { return Ok(None) };
        buf.clear();
        buf.extend_from_slice(&d);
        let ts_ns = 1_000_000_000 + self.t0.elapsed().as_nanos() as u64;
        Ok(Some(Received { len: d.len(), ts_ns }))
    }

    fn reset(&mut self) -> io::Result<()> {
        self.queue.clear();
        self.overrun = false;
        Ok(())
    }
}

/// Answers exact requests from a fixed set of messages, without allocating: the `k`-th
/// request of each `send` is answered with `answers[k]` (its sequence number stamped in).
/// For measuring the exact path's own cost (benches/exact.rs) and checking that it does
/// not allocate per socket.
#[derive(Debug)]
pub struct CannedAnswers {
    answers: Vec<Vec<u8>>,
    queue: VecDeque<usize>,
}

impl CannedAnswers {
    /// Answers from whole messages (`nlmsghdr` included).
    pub fn new(answers: Vec<Vec<u8>>) -> Self {
        let queue = VecDeque::with_capacity(answers.len());
        Self { answers, queue }
    }
}

impl DumpSource for CannedAnswers {
    async fn send(&mut self, request: &[u8]) -> io::Result<()> {
        for (k, m) in NlMsgIter::new(request).enumerate() {
            let m = m.map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e.to_string()))?;
            let k = k % self.answers.len().max(1);
            if let Some(a) = self.answers.get_mut(k) {
                a[8..12].copy_from_slice(&m.seq.to_ne_bytes());
                self.queue.push_back(k);
            }
        }
        Ok(())
    }

    async fn recv(&mut self, buf: &mut Vec<u8>) -> io::Result<Received> {
        next_queued(self, buf).await
    }

    fn try_recv(&mut self, buf: &mut Vec<u8>) -> io::Result<Option<Received>> {
        let Some(k) = self.queue.pop_front() else { return Ok(None) };
        buf.clear();
        buf.extend_from_slice(&self.answers[k]);
        Ok(Some(Received { len: self.answers[k].len(), ts_ns: 1 }))
    }

    fn reset(&mut self) -> io::Result<()> {
        self.queue.clear();
        Ok(())
    }
}

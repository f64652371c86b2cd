//! Exact polls: sockets asked for one by one, by identity, instead of dumping the host.
//!
//! A dump makes the kernel fill a reply for every socket it walks, and filling is what
//! costs (about 1 µs a socket with `tcp_info`; walking past a socket is ~15 times cheaper).
//! To follow a few busy flows among many idle ones, asking for just those sockets costs
//! only theirs (docs/kernel.md, "Asking for one socket").
//!
//! Each request is a `SOCK_DIAG_BY_FAMILY` message without `NLM_F_DUMP`, carrying the
//! socket's `inet_diag_sockid` (4-tuple, interface, cookie). Many go in one `send`; the
//! kernel handles them within that call and queues one answer for each: the socket, or
//! `NLMSG_ERROR` with `ENOENT` (no such socket any more) or `ESTALE` (the 4-tuple now
//! belongs to another socket, whose cookie differs). Answers the receive buffer could not
//! hold are dropped by the kernel (`ENOBUFS`): those sockets are reported unanswered, never
//! gone, and the next polls send fewer requests at a time.
//!
//! No allocation per socket: the requests are built into one reused buffer and the answers
//! are read into the sampler's pooled receive buffers and shown in place.

use super::source::{DumpSource, Slots};
use super::{SampleError, Sampler};
use crate::wire::inet_diag::{EXACT_REQUEST_LEN, SOCK_DIAG_BY_FAMILY, SocketTarget};
use crate::wire::nlmsg::{self, NlMsgIter};
use crate::wire::sock::{Sample, SockIndex, index_into};

/// Requests per `send` at most. 256 answers of ~0.7 KB (1.3 KB of buffer accounting each)
/// fit the default 208 KiB receive buffer only in part, so the sampler grows its socket
/// buffer for exact polls where it may and halves the chunk when answers overrun it.
pub const MAX_CHUNK: usize = 256;

/// The fewest requests per `send` after overruns.
pub const MIN_CHUNK: usize = 8;

/// The kernel's answer about one socket.
#[derive(Debug)]
pub enum Answer<'a> {
    /// The socket, as a dump would show it (whatever its state now).
    Found(Sample<'a>),
    /// No socket has that identity any more (`ENOENT`, or `ESTALE`: its 4-tuple now
    /// belongs to another socket). `ts_ns`: when the answer arrived.
    Gone {
        /// CLOCK_MONOTONIC ns of the answer.
        ts_ns: u64,
    },
}

/// What one exact poll did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExactPoll {
    /// Sockets asked for.
    pub asked: u32,
    /// Sockets the kernel answered with (shown to the visitor).
    pub found: u32,
    /// Sockets the kernel no longer has under that identity (`ENOENT`, `ESTALE`).
    pub gone: u32,
    /// Requests left without an answer: their answers overran the receive buffer.
    pub unanswered: u32,
    /// Requests refused with another error (counted, the socket's fate unknown).
    pub refused: u32,
    /// Answers that did not decode.
    pub malformed: u32,
    /// `send` calls made.
    pub sends: u32,
    /// Bytes received.
    pub bytes: u64,
    /// CLOCK_MONOTONIC ns of the last answer (0: none came).
    pub last_ts_ns: u64,
}

/// What [`Sampler::take_queued`] found.
enum Taken {
    /// Datagrams that answered this many requests, and whether one was cut short.
    Answered(usize, bool),
    /// Nothing queued.
    None,
}

/// Bytes of a slot for one answer in a receive of many: an answer (one socket's message with
/// `tcp_info` and the extensions) is 480–504 bytes on Linux 6.18 (the dumps in
/// tests/fixtures), room to spare for a kernel whose `tcp_info` grows.
const ANSWER_SLOT: usize = 4096;

impl<S: DumpSource> Sampler<S> {
    /// Requests per `send` now.
    pub fn exact_chunk(&self) -> usize {
        self.exact_chunk
    }

    /// Asks the kernel for each of `targets` by identity; each answer goes to `answer` with
    /// the target's index. Targets left unanswered get no call.
    ///
    /// The kernel does not apply the dump's state set or filter to such requests: the
    /// visitor sees whatever state the socket is in now.
    ///
    /// # Errors
    /// A socket error other than an overrun; the poll's partial answers have been shown.
    pub async fn exact_with<F>(
        &mut self,
        targets: &[SocketTarget],
        mut answer: F,
    ) -> Result<ExactPoll, SampleError>
    where
        F: FnMut(usize, Answer<'_>),
    {
        let mut poll = ExactPoll { asked: targets.len() as u32, ..ExactPoll::default() };
        // Answers an overrun dropped are asked for once more, in smaller chunks.
        let mut retry = std::mem::take(&mut self.exact_retry);
        retry.clear();
        let mut r = self.exact_round(targets, None, &mut retry, &mut poll, &mut answer).await;
        if r.is_ok() && !retry.is_empty() {
            let again = std::mem::take(&mut retry);
            poll.unanswered = 0;
            r = self.exact_round(targets, Some(&again), &mut retry, &mut poll, &mut answer).await;
            poll.unanswered = retry.len() as u32;
            retry = again;
        }
        self.exact_retry = retry;
        if r.is_err()
            && let Err(re) = self.source.reset()
        {
            tracing::warn!(error = %re, "reopening the sock_diag socket failed");
        }
        r.map(|()| poll)
    }

    /// Asks for `targets` (or those of them `only` names), a chunk per `send`; the indexes
    /// of those left unanswered go to `unanswered`.
    async fn exact_round<F>(
        &mut self,
        targets: &[SocketTarget],
        only: Option<&[usize]>,
        unanswered: &mut Vec<usize>,
        poll: &mut ExactPoll,
        answer: &mut F,
    ) -> Result<(), SampleError>
    where
        F: FnMut(usize, Answer<'_>),
    {
        let total = only.map_or(targets.len(), <[usize]>::len);
        let mut start = 0;
        while start < total {
            let n = self.exact_chunk.min(total - start);
            let pick = |k: usize| only.map_or(start + k, |o| o[start + k]);
            self.exact_req.clear();
            self.exact_req.reserve(n * EXACT_REQUEST_LEN);
            let base = self.seq.wrapping_add(1);
            self.seq = self.seq.wrapping_add(n as u32);
            for k in 0..n {
                targets[pick(k)].emit(
                    self.cfg.ext,
                    base.wrapping_add(k as u32),
                    &mut self.exact_req,
                );
            }
            self.exact_chunk_with(n, base, poll, &mut |k, a| answer(pick(k), a)).await?;
            for k in 0..n {
                if !self.exact_answered[k] {
                    unanswered.push(pick(k));
                    poll.unanswered += 1;
                }
            }
            start += n;
        }
        Ok(())
    }

    /// Sends the `n` requests built in `exact_req` (sequence numbers from `base`) and reads
    /// their answers; `exact_answered[k]` says which were answered.
    async fn exact_chunk_with<F>(
        &mut self,
        n: usize,
        base: u32,
        poll: &mut ExactPoll,
        answer: &mut F,
    ) -> Result<(), SampleError>
    where
        F: FnMut(usize, Answer<'_>),
    {
        self.exact_answered.clear();
        self.exact_answered.resize(n, false);
        let req = std::mem::take(&mut self.exact_req);
        let sent = self.source.send(&req).await;
        self.exact_req = req;
        sent.map_err(|source| SampleError::Io { op: "send", source })?;
        poll.sends += 1;
        let mut left = n;
        let mut overrun = false;
        let mut buf = self.pool.pop().unwrap_or_default();
        while left > 0 {
            match self.take_queued(left, base, poll, answer) {
                Ok(Taken::Answered(k, cut)) => {
                    left -= k;
                    overrun |= cut;
                    continue;
                }
                Ok(Taken::None) if overrun => break,
                Ok(Taken::None) => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                    overrun = true;
                    continue;
                }
                Err(source) => {
                    self.pool.push(buf);
                    return Err(SampleError::Io { op: "recv", source });
                }
            }
            // None queued yet (the kernel answers within the send, so this is rare): wait.
            buf.clear();
            buf.reserve(self.bufsize);
            let got = match tokio::time::timeout(self.cfg.recv_timeout, self.source.recv(&mut buf))
                .await
            {
                Ok(Ok(got)) => got,
                Ok(Err(e)) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                    overrun = true;
                    continue;
                }
                Ok(Err(source)) => {
                    self.pool.push(buf);
                    return Err(SampleError::Io { op: "recv", source });
                }
                Err(_) => break, // counted as unanswered below
            };
            poll.bytes += got.len as u64;
            poll.last_ts_ns = got.ts_ns;
            let stored = got.len.min(buf.len());
            let answered = &mut self.exact_answered;
            left -= read_answers(&buf[..stored], got.ts_ns, base, answered, poll, answer);
        }
        self.pool.push(buf);
        if left > 0 && overrun && self.exact_chunk > MIN_CHUNK {
            self.exact_chunk = (self.exact_chunk / 2).max(MIN_CHUNK);
            tracing::info!(
                chunk = self.exact_chunk,
                "exact answers overran the receive buffer; sending fewer requests at a time"
            );
        }
        Ok(())
    }

    /// Reads the answers already queued, up to `left`, many a call (recvmmsg): each is a
    /// datagram of its own, queued within the send. One `recv` each cost the poll a system
    /// call an answer (benches/RESULTS.md, D31). Says how many it answered and whether one
    /// came cut (never seen: an answer is ~500 bytes; which request it answered is then
    /// unknown, so nothing more is waited for).
    ///
    /// # Errors
    /// The receive failed (`ENOBUFS`: answers were dropped).
    fn take_queued<F>(
        &mut self,
        left: usize,
        base: u32,
        poll: &mut ExactPoll,
        answer: &mut F,
    ) -> std::io::Result<Taken>
    where
        F: FnMut(usize, Answer<'_>),
    {
        let slots = self.exact_slots.get_or_insert_with(|| Slots::new(Slots::MAX, ANSWER_SLOT));
        let got = self.source.try_recv_many(slots, left.min(Slots::MAX))?;
        if got == 0 {
            return Ok(Taken::None);
        }
        let (mut answered, mut cut) = (0, false);
        for i in 0..got {
            let (bytes, r) = slots.get(i);
            poll.bytes += r.len as u64;
            poll.last_ts_ns = r.ts_ns;
            if r.len > bytes.len() {
                poll.malformed += 1;
                cut = true;
            }
            let done = &mut self.exact_answered;
            answered += read_answers(bytes, r.ts_ns, base, done, poll, answer);
        }
        Ok(Taken::Answered(answered, cut))
    }
}

/// Reads the answers in datagram `bytes` (received at `ts_ns`) to the requests of sequence
/// numbers `base..base + answered.len()`, marking each in `answered` and passing it to
/// `answer`; how many were newly answered. An answer to an earlier poll, a second answer
/// and an acknowledgement are skipped.
fn read_answers<F>(
    bytes: &[u8],
    ts_ns: u64,
    base: u32,
    answered: &mut [bool],
    poll: &mut ExactPoll,
    answer: &mut F,
) -> usize
where
    F: FnMut(usize, Answer<'_>),
{
    let mut found = 0;
    for m in NlMsgIter::new(bytes) {
        let Ok(m) = m else {
            poll.malformed += 1;
            break;
        };
        let i = m.seq.wrapping_sub(base) as usize;
        if i >= answered.len() || answered[i] {
            continue; // an answer to an earlier poll, or a second one
        }
        match m.kind {
            SOCK_DIAG_BY_FAMILY => {
                let mut idx = SockIndex::default();
                if index_into(m.payload, &mut idx).is_ok() {
                    poll.found += 1;
                    answer(i, Answer::Found(Sample::new(ts_ns, m.payload, &idx)));
                } else {
                    poll.malformed += 1;
                }
            }
            nlmsg::NLMSG_ERROR => match m.error_code() {
                Ok(0) => continue, // an acknowledgement, not the answer
                Ok(libc::ENOENT | libc::ESTALE) => {
                    poll.gone += 1;
                    answer(i, Answer::Gone { ts_ns });
                }
                Ok(_) => poll.refused += 1,
                Err(_) => poll.malformed += 1,
            },
            _ => continue,
        }
        answered[i] = true;
        found += 1;
    }
    found
}

#[cfg(test)]
mod tests;

//! A kernel that answers each dump as a script says: for running the sampling stage, or the
//! whole program in-process, on the answers a test wants.

use std::collections::VecDeque;
use std::io;
use std::time::Duration;

use crate::clock::monotonic_ns;
use crate::sampler::dump_source::{DumpSource, Received, next_queued};
use crate::wire::nlmsg::{NLMSG_DONE, NLMSG_ERROR, control_msg};

/// Answers each dump request with the messages a script gives for that dump (numbered from
/// 1), stamped with the request's sequence number and followed by `NLMSG_DONE`, unless the
/// script's last message is an `NLMSG_ERROR` (a failed dump ends there, as the kernel's
/// does). With [`delay`](Self::delay), each answer takes that long (tokio's clock: the
/// kernel's walk). As a destroy listener it has nothing to say.
pub struct ScriptSource {
    script: Box<dyn FnMut(u32) -> Vec<Vec<u8>> + Send>,
    delay: Duration,
    /// Dump requests answered.
    pub dumps: u32,
    queue: VecDeque<Vec<u8>>,
}

impl ScriptSource {
    /// A source that answers dump `n` with `script(n)`.
    pub fn new(script: impl FnMut(u32) -> Vec<Vec<u8>> + Send + 'static) -> Self {
        Self { script: Box::new(script), delay: Duration::ZERO, dumps: 0, queue: VecDeque::new() }
    }

    /// Each dump takes `d` before its answer.
    #[must_use]
    pub fn delay(mut self, d: Duration) -> Self {
        self.delay = d;
        self
    }

    /// A failed dump's answer, for a script to give: `NLMSG_ERROR` with `errno`.
    pub fn error(errno: i32) -> Vec<u8> {
        control_msg(0, NLMSG_ERROR, errno)
    }
}

impl std::fmt::Debug for ScriptSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScriptSource").field("dumps", &self.dumps).finish_non_exhaustive()
    }
}

impl DumpSource for ScriptSource {
    async fn send(&mut self, request: &[u8]) -> io::Result<()> {
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
        let seq = request.get(8..12).map_or([0; 4], |b| b.try_into().unwrap_or([0; 4]));
        self.dumps += 1;
        let mut failed = false;
        for mut m in (self.script)(self.dumps) {
            if m.len() >= 12 {
                m[8..12].copy_from_slice(&seq);
            }
            failed = m.len() >= 6 && u16::from_ne_bytes([m[4], m[5]]) == NLMSG_ERROR;
            self.queue.push_back(m);
        }
        if !failed {
            self.queue.push_back(control_msg(u32::from_ne_bytes(seq), NLMSG_DONE, 0));
        }
        Ok(())
    }

    async fn recv(&mut self, buf: &mut Vec<u8>) -> io::Result<Received> {
        next_queued(self, buf).await
    }

    fn try_recv(&mut self, buf: &mut Vec<u8>) -> io::Result<Option<Received>> {
        let Some(d) = self.queue.pop_front() else { return Ok(None) };
        buf.clear();
        buf.extend_from_slice(&d);
        Ok(Some(Received { len: d.len(), ts_ns: monotonic_ns() }))
    }

    fn reset(&mut self) -> io::Result<()> {
        self.queue.clear();
        Ok(())
    }
}

impl crate::sampler::source::BoxedSource for ScriptSource {
    fn send_boxed<'a>(
        &'a mut self,
        request: &'a [u8],
    ) -> crate::sampler::source::BoxFuture<'a, io::Result<()>> {
        Box::pin(self.send(request))
    }
    fn recv_boxed<'a>(
        &'a mut self,
        buf: &'a mut Vec<u8>,
    ) -> crate::sampler::source::BoxFuture<'a, io::Result<Received>> {
        Box::pin(self.recv(buf))
    }
    fn try_recv_now(&mut self, buf: &mut Vec<u8>) -> io::Result<Option<Received>> {
        self.try_recv(buf)
    }
    fn reset_now(&mut self) -> io::Result<()> {
        self.reset()
    }
}

impl From<ScriptSource> for crate::sampler::source::Source {
    fn from(s: ScriptSource) -> Self {
        Self::Other(Box::new(s))
    }
}

//! Runs the `cgmon-rs` binary as a user would and reads what it writes: stdout records as
//! they arrive, and the log. Shared by the `it` and `lab` test binaries.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{Receiver, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

/// A running monitor.
pub struct Monitor {
    child: Child,
    stdout: Receiver<String>,
    stderr: Arc<Mutex<String>>,
}

impl Monitor {
    /// Starts the command (the binary, possibly through `ip netns exec`) and waits until its
    /// first dump has run.
    pub fn spawn(cmd: Command) -> Monitor {
        Self::start(cmd, None)
    }

    /// As [`Monitor::spawn`], but nothing reads its stdout until the returned sender sends
    /// (or is dropped): a reader that has stopped reading.
    #[allow(dead_code)] // the lab tests share this file and have no use for it
    pub fn spawn_unread(cmd: Command) -> (Monitor, std::sync::mpsc::Sender<()>) {
        let (go, gate) = channel();
        (Self::start(cmd, Some(gate)), go)
    }

    fn start(mut cmd: Command, gate: Option<Receiver<()>>) -> Monitor {
        // The test's environment's RUST_LOG is not the monitor's, unless the test set one.
        if !cmd.get_envs().any(|(k, v)| k == "RUST_LOG" && v.is_some()) {
            cmd.env_remove("RUST_LOG");
        }
        let mut child = cmd
            .env_remove("JOURNAL_STREAM")
            .env_remove("NOTIFY_SOCKET")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, stdout) = channel();
        let out = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            if let Some(g) = gate {
                let _ = g.recv();
            }
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let err = child.stderr.take().unwrap();
        let sink = stderr.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines() {
                let Ok(line) = line else { break };
                let mut s = sink.lock().unwrap();
                s.push_str(&line);
                s.push('\n');
            }
        });
        let m = Monitor { child, stdout, stderr };
        m.wait_log("interval=", Duration::from_secs(10));
        // The first dump runs at once after that line; give it time to finish.
        std::thread::sleep(Duration::from_millis(300));
        m
    }

    pub fn log(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    pub fn wait_log(&self, needle: &str, timeout: Duration) {
        let end = Instant::now() + timeout;
        while !self.log().contains(needle) {
            assert!(Instant::now() < end, "no {needle:?} in the log:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until `needle` appears at least `n` times in the log.
    #[allow(dead_code)] // not every test binary that includes this module asks
    pub fn wait_log_count(&self, needle: &str, n: usize, timeout: Duration) {
        let end = Instant::now() + timeout;
        while self.log().matches(needle).count() < n {
            assert!(Instant::now() < end, "fewer than {n} {needle:?} in the log:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The monitor's process id.
    #[allow(dead_code)] // not every test binary that includes this module asks
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child's pid.
        assert_eq!(unsafe { libc::kill(self.child.id() as i32, sig) }, 0);
    }

    /// Reads stdout records until `n` have arrived.
    pub fn records(&self, n: usize, timeout: Duration) -> Vec<Value> {
        let end = Instant::now() + timeout;
        let mut v = Vec::new();
        while v.len() < n {
            let left = end.saturating_duration_since(Instant::now());
            match self.stdout.recv_timeout(left) {
                Ok(line) => v.push(serde_json::from_str(&line).unwrap_or_else(|e| {
                    panic!("stdout line is not one JSON object ({e}): {line}")
                })),
                Err(_) => panic!("{} of {n} records; log:\n{}", v.len(), self.log()),
            }
        }
        v
    }

    /// Waits for the exit; returns the status and the whole log.
    pub fn wait(mut self, timeout: Duration) -> (ExitStatus, String, Vec<String>) {
        let end = Instant::now() + timeout;
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                // Let the reader threads see EOF.
                std::thread::sleep(Duration::from_millis(50));
                let rest: Vec<String> = self.stdout.try_iter().collect();
                return (st, self.log(), rest);
            }
            if Instant::now() > end {
                let _ = self.child.kill();
                panic!("still running after {timeout:?}; log:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A monitor a test lets go of (dropped, or its test failed) is killed: left running, it
/// would sample on for the rest of the suite, costing the other tests CPU.
impl Drop for Monitor {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

//! The destination map as the monitor keeps it (`--dest-map`): loaded at the start, read
//! again on SIGHUP and when the file's modification time changes (checked once a second),
//! and the host's own addresses (what `local` names) read again once a minute. A map that
//! no longer parses is reported and the one before it kept: records go on being named.

use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime};

use crate::who::destinations::{DestMap, own_addresses};

/// How often the file's modification time is looked at.
const CHECK_EVERY: Duration = Duration::from_secs(1);
/// How often the host's addresses are read again.
const ADDRESSES_EVERY: Duration = Duration::from_secs(60);

/// The map, where it came from, and when it was last looked at.
pub struct Dests {
    path: Option<PathBuf>,
    map: DestMap,
    mtime: Option<SystemTime>,
    checked: Instant,
    addresses_read: Instant,
}

/// A map file that cannot be read or parsed: the message names the file, and the line.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {why}")]
pub struct DestMapError {
    /// The file.
    pub path: String,
    /// Why.
    pub why: String,
}

impl Dests {
    /// The fallbacks only (no `--dest-map`).
    pub fn fallbacks() -> Self {
        let now = Instant::now();
        Dests {
            path: None,
            map: DestMap::fallbacks(own_addresses()),
            mtime: None,
            checked: now,
            addresses_read: now,
        }
    }

    /// The map in `path`.
    ///
    /// # Errors
    /// The file cannot be read, or a line of it is bad.
    pub fn load(path: PathBuf) -> Result<Self, DestMapError> {
        let (map, mtime) = read(&path)?;
        let now = Instant::now();
        Ok(Dests { path: Some(path), map, mtime, checked: now, addresses_read: now })
    }

    /// The name of a remote end.
    pub fn lookup(&self, addr: std::net::IpAddr, port: u16) -> std::sync::Arc<str> {
        self.map.name(addr, port)
    }

    /// The name of a remote end as a record's `DestService` carries it; the caller sets
    /// the field.
    pub fn name(&self, addr: std::net::IpAddr, port: u16) -> &str {
        self.map.name_str(addr, port)
    }

    /// Reads the file again (SIGHUP), keeping the map before it when it fails.
    pub fn reload(&mut self) {
        let Some(path) = &self.path else {
            self.map = DestMap::fallbacks(own_addresses());
            return;
        };
        match read(path) {
            Ok((map, mtime)) => {
                tracing::info!(target: "cgmon_rs::who", file = %path.display(),
                    entries = map.len(), "destination map read");
                (self.map, self.mtime) = (map, mtime);
            }
            Err(e) => {
                // The mtime is taken, so that a bad file is reported once, not every second.
                self.mtime = std::fs::metadata(path).and_then(|m| m.modified()).ok();
                tracing::error!(target: "cgmon_rs::who", error = %e,
                    "destination map not read again; the one before it stays");
            }
        }
        self.addresses_read = Instant::now();
    }

    /// The periodic look: the file changed, or the host's addresses are due.
    pub fn tick(&mut self, now: Instant) {
        if now.duration_since(self.checked) < CHECK_EVERY {
            return;
        }
        self.checked = now;
        let changed = self
            .path
            .as_ref()
            .is_some_and(|p| std::fs::metadata(p).and_then(|m| m.modified()).ok() != self.mtime);
        if changed || now.duration_since(self.addresses_read) >= ADDRESSES_EVERY {
            self.reload();
        }
    }
}

/// The most of a map file read: 64 MiB is over a million lines.
const MAP_MAX: u64 = 64 << 20;

/// A map file's text: a regular file (through links, as a Kubernetes ConfigMap mounts it)
/// of at most [`MAP_MAX`] bytes, opened without blocking, so that a FIFO or `/dev/zero`
/// given as the map neither hangs the start nor fills memory.
fn read_bounded(path: &std::path::Path) -> std::io::Result<String> {
    use std::io::Read;
    let (f, _) = crate::units::open_regular(path, MAP_MAX, true)?;
    let mut text = String::new();
    f.take(MAP_MAX + 1).read_to_string(&mut text)?;
    Ok(text)
}

fn read(path: &PathBuf) -> Result<(DestMap, Option<SystemTime>), DestMapError> {
    let err = |why: String| DestMapError { path: path.display().to_string(), why };
    let mtime = std::fs::metadata(path).and_then(|m| m.modified()).ok();
    let text = read_bounded(path).map_err(|e| err(e.to_string()))?;
    let map = DestMap::parse(&text, own_addresses()).map_err(|e| err(e.to_string()))?;
    Ok((map, mtime))
}

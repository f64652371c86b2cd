//! `--spool-dir`: batches that wait for the server, kept on disk across restarts.
//!
//! One file per batch, `SEQ.batch` (16 hex digits, so names sort in order): a line with
//! the batch id, a line with its row count, then its gzip body as it is sent. A file is
//! written under a temporary name, synced and renamed, so a crash leaves whole batches or
//! none; it is deleted once the batch is delivered or dropped. A restarted monitor sends
//! them first, as *uncertain*: the last run may have died after the server stored one.
//!
//! A spooled batch waits on disk only: the queue keeps its id, row count and size, and the
//! sender reads its body back when its turn comes, so `--spool-max` bounds the disk, not
//! the memory.

use std::io::Write;
use std::path::{Path, PathBuf};

use super::batch::Batch;

/// The spool directory.
#[derive(Debug)]
pub struct Spool {
    dir: PathBuf,
    next: u64,
    /// Each spooled batch's id and file, in order.
    files: std::collections::VecDeque<(String, PathBuf)>,
}

impl Spool {
    /// Opens `dir` (created when missing) and reads the heads of the batches an earlier run
    /// left, oldest first: each as a [`Batch`] without its rows, and the size of its body.
    /// Files that are not whole batches are left where they are, logged.
    ///
    /// # Errors
    /// The directory cannot be created or read.
    pub fn open(dir: &Path) -> std::io::Result<(Self, Vec<(Batch, usize)>)> {
        std::fs::create_dir_all(dir)?;
        let mut names: Vec<(u64, PathBuf)> = Vec::new();
        for e in std::fs::read_dir(dir)? {
            let p = e?.path();
            let Some(stem) =
                p.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_suffix(".batch"))
            else {
                continue;
            };
            if let Ok(n) = u64::from_str_radix(stem, 16) {
                names.push((n, p));
            }
        }
        names.sort();
        let next = names.last().map_or(0, |n| n.0 + 1);
        let mut s = Self { dir: dir.to_path_buf(), next, files: Default::default() };
        let mut batches = Vec::new();
        for (_, p) in names {
            match read_head(&p) {
                Some((b, size)) => {
                    s.files.push_back((b.id.clone(), p));
                    batches.push((b, size));
                }
                None => tracing::warn!(target: "cgmon_rs::sink", file = %p.display(),
                    "a spool file that is not a whole batch; left in place"),
            }
        }
        Ok((s, batches))
    }

    /// Writes `b` (its body as it will be sent).
    ///
    /// # Errors
    /// The write, sync or rename failed (a full disk): the batch stays in memory only.
    pub fn save(&mut self, b: &Batch) -> std::io::Result<()> {
        let name = self.dir.join(format!("{:016x}.batch", self.next));
        let tmp = self.dir.join(format!(".{:016x}.tmp", self.next));
        let mut f = std::fs::File::create(&tmp)?;
        let r = (|| {
            writeln!(f, "{}\n{}", b.id, b.count)?;
            f.write_all(&b.rows)?;
            f.sync_all()?;
            std::fs::rename(&tmp, &name)
        })();
        if r.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        r?;
        self.next += 1;
        self.files.push_back((b.id.clone(), name));
        Ok(())
    }

    /// Deletes the file of the batch `id` (delivered, or dropped past the bound).
    pub fn remove(&mut self, id: &str) {
        if let Some(i) = self.files.iter().position(|f| f.0 == id) {
            let (_, p) = self.files.remove(i).expect("found just above");
            if let Err(e) = std::fs::remove_file(&p) {
                tracing::warn!(target: "cgmon_rs::sink", file = %p.display(), error = %e,
                    "cannot delete a spool file");
            }
        }
    }

    /// The file of the batch `id`, while it is spooled.
    pub fn path_of(&self, id: &str) -> Option<PathBuf> {
        self.files.iter().find(|f| f.0 == id).map(|f| f.1.clone())
    }

    /// Batches on disk.
    pub fn len(&self) -> usize {
        self.files.len()
    }

    /// True when none is on disk.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }
}

/// A spooled batch, whole (its body read back to be sent).
pub fn read(p: &Path) -> Option<Batch> {
    let raw = std::fs::read(p).ok()?;
    let (mut b, at) = head(&raw)?;
    b.rows = raw[at..].to_vec();
    Some(b)
}

/// A spooled batch's id and count (no rows), and its body's size, from the file's start.
fn read_head(p: &Path) -> Option<(Batch, usize)> {
    use std::io::BufRead;
    let f = std::fs::File::open(p).ok()?;
    let len = f.metadata().ok()?.len() as usize;
    // The two lines, however long the id (`--host-name` has no bound); a file without
    // them is not a batch.
    let mut r = std::io::BufReader::new(f);
    let mut start = Vec::new();
    for _ in 0..2 {
        if r.read_until(b'\n', &mut start).ok()? == 0 {
            return None;
        }
    }
    let (b, at) = head(&start)?;
    Some((b, len - at))
}

/// The two head lines: the batch without rows, and where its body starts.
fn head(raw: &[u8]) -> Option<(Batch, usize)> {
    let nl = raw.iter().position(|&b| b == b'\n')?;
    let id = std::str::from_utf8(&raw[..nl]).ok()?.to_string();
    let rest = &raw[nl + 1..];
    let nl2 = rest.iter().position(|&b| b == b'\n')?;
    let count = std::str::from_utf8(&rest[..nl2]).ok()?.parse().ok()?;
    Some((Batch { id, rows: Vec::new(), count }, nl + nl2 + 2))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_survive_a_restart_in_order_and_leave_when_done() {
        let dir = tempfile::tempdir().unwrap();
        let b = |i: u32| Batch { id: format!("h/1/{i}"), rows: vec![i as u8; 10], count: 3 };
        let (mut s, old) = Spool::open(dir.path()).unwrap();
        assert!(old.is_empty());
        for i in 0..3 {
            s.save(&b(i)).unwrap();
        }
        s.remove("h/1/1");
        std::fs::write(dir.path().join("0000000000000009.batch"), "half").unwrap();
        std::fs::write(dir.path().join("notes.txt"), "not ours").unwrap();
        drop(s);
        let (mut s, back) = Spool::open(dir.path()).unwrap();
        let heads: Vec<(&str, usize, usize)> =
            back.iter().map(|(h, size)| (h.id.as_str(), h.count, *size)).collect();
        assert_eq!(heads, [("h/1/0", 3, 10), ("h/1/2", 3, 10)], "whole batches, oldest first");
        assert!(back.iter().all(|(h, _)| h.rows.is_empty()), "bodies stay on disk");
        assert_eq!(read(&s.path_of("h/1/2").unwrap()), Some(b(2)), "read back whole");
        assert_eq!(s.path_of("h/1/1"), None);
        // New files number after everything there, the broken one included.
        s.save(&b(3)).unwrap();
        assert!(dir.path().join("000000000000000a.batch").exists());
        assert_eq!(s.len(), 3);
    }

    /// A batch id as long as a host name given to `--host-name` may be is read back whole.
    #[test]
    fn a_long_batch_id_survives_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let id = format!("{}/1/7", "h".repeat(2000));
        let b = Batch { id: id.clone(), rows: vec![1u8; 30], count: 4 };
        let (mut s, _) = Spool::open(dir.path()).unwrap();
        s.save(&b).unwrap();
        drop(s);
        let (s, back) = Spool::open(dir.path()).unwrap();
        assert_eq!(back.len(), 1);
        assert_eq!((back[0].0.id.as_str(), back[0].0.count, back[0].1), (id.as_str(), 4, 30));
        assert_eq!(read(&s.path_of(&id).unwrap()), Some(b));
    }
}

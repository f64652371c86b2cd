//! `--spool-dir`: batches that wait for the server, kept on disk across restarts.
//!
//! One file per batch, `SEQ.batch` (16 hex digits, so names sort in order): a line with
//! the batch id, a line with its row count, then its gzip body as it is sent. A file is
//! written under a temporary name, synced and renamed, so a crash leaves whole batches or
//! none; it is deleted once the batch is delivered or dropped. A restarted monitor sends
//! them first, as *uncertain*: the last run may have died after the server stored one.

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
    /// Opens `dir` (created when missing) and reads the batches an earlier run left,
    /// oldest first. Files that are not whole batches are left where they are, logged.
    ///
    /// # Errors
    /// The directory cannot be created or read.
    pub fn open(dir: &Path) -> std::io::Result<(Self, Vec<Batch>)> {
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
            match read(&p) {
                Some(b) => {
                    s.files.push_back((b.id.clone(), p));
                    batches.push(b);
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

    /// Batches on disk.
    pub fn len(&self) -> usize {
        self.files.len()
    }

    /// True when none is on disk.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }
}

fn read(p: &Path) -> Option<Batch> {
    let raw = std::fs::read(p).ok()?;
    let nl = raw.iter().position(|&b| b == b'\n')?;
    let id = std::str::from_utf8(&raw[..nl]).ok()?.to_string();
    let rest = &raw[nl + 1..];
    let nl2 = rest.iter().position(|&b| b == b'\n')?;
    let count = std::str::from_utf8(&rest[..nl2]).ok()?.parse().ok()?;
    Some(Batch { id, rows: rest[nl2 + 1..].to_vec(), count })
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
        assert_eq!(back, vec![b(0), b(2)], "whole batches, oldest first");
        // New files number after everything there, the broken one included.
        s.save(&b(3)).unwrap();
        assert!(dir.path().join("000000000000000a.batch").exists());
        assert_eq!(s.len(), 3);
    }
}

//! The batch being filled, on disk as its rows come (`--spool-dir`): so that a SIGKILL
//! costs no more with a long `--clickhouse-batch-interval` (a fleet's 60 s) than with the
//! default second.
//!
//! The rows go to `SEQ.filling` in the spool directory as the writer hands them over: a
//! line with the batch's id, then its rows, plain, each ending in a newline. Each hand-off
//! is one `write` with no sync: a process killed keeps what the kernel already took (the
//! page cache outlives the process); a power cut is a sync's job, done when the batch is
//! cut and spooled whole (`SEQ.batch`, [`super::spool`]). The file is deleted once that
//! batch is spooled (or, where the disk refused it, once it waits in memory, as before).
//!
//! At the start, a `.filling` an earlier run left is made a batch again: its rows up to
//! the last whole line, compressed as configured, spooled, and sent first as *uncertain*
//! (looked up by its id before it is sent: a run killed between spooling the cut batch and
//! deleting this file left both, and its id is the same). One whose id a spooled batch
//! already has, or with no whole row, is deleted. One that cannot be spooled now (a full
//! disk) stays for the next start.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use super::batch::Batch;
use super::spool::{MAX_FILE, SpoolError, create_new, open_regular};

/// The file of the batch being filled.
#[derive(Debug)]
pub struct Filling {
    dir: PathBuf,
    /// The sequence of the next file's name.
    next: u64,
    open: Option<Open>,
}

#[derive(Debug)]
struct Open {
    path: PathBuf,
    file: std::fs::File,
    id: String,
    /// Bytes of the batch's rows written so far.
    written: usize,
    /// A write failed: the file holds a prefix of whole rows, and takes no more.
    failed: bool,
}

impl Filling {
    /// The files an earlier run left in `dir` (oldest first), and the state for this run,
    /// whose names follow theirs.
    pub fn open(dir: &Path) -> std::io::Result<(Self, Vec<PathBuf>)> {
        let mut left: Vec<(u64, PathBuf)> = Vec::new();
        for e in std::fs::read_dir(dir)? {
            let p = e?.path();
            let stem =
                p.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_suffix(".filling"));
            if let Some(n) =
                stem.filter(|s| s.len() == 16).and_then(|s| u64::from_str_radix(s, 16).ok())
            {
                left.push((n, p));
            }
        }
        left.sort();
        let next = left.last().map_or(0, |l| l.0.saturating_add(1));
        let me = Self { dir: dir.to_path_buf(), next, open: None };
        Ok((me, left.into_iter().map(|l| l.1).collect()))
    }

    /// Puts the rows of batch `id` (all of them so far; those not yet written are
    /// appended) on disk.
    ///
    /// # Errors
    /// The file cannot be made or written (a full disk): it keeps the whole rows it has,
    /// and takes none more of this batch. Returned once a batch.
    pub fn fill(&mut self, id: &str, rows: &[u8]) -> std::io::Result<()> {
        if self.open.as_ref().is_some_and(|o| o.id != id) {
            self.done();
        }
        if self.open.is_none() {
            let path = self.dir.join(format!("{:016x}.filling", self.next));
            self.next += 1;
            let mut file = create_new(&path)?;
            if let Err(e) = writeln!(file, "{id}") {
                let _ = std::fs::remove_file(&path);
                return Err(e);
            }
            self.open = Some(Open { path, file, id: id.to_string(), written: 0, failed: false });
        }
        let o = self.open.as_mut().expect("opened just above");
        if o.failed || rows.len() <= o.written {
            return Ok(());
        }
        match o.file.write_all(&rows[o.written..]) {
            Ok(()) => {
                o.written = rows.len();
                Ok(())
            }
            Err(e) => {
                // What a short write left past the last whole row is cut off, so the file
                // stays whole rows (read back, a cut line is dropped in any case).
                o.failed = true;
                let _ = o.file.set_len((id.len() + 1 + o.written) as u64);
                Err(e)
            }
        }
    }

    /// The batch being filled was cut (and spooled, or kept in memory): its file goes.
    pub fn done(&mut self) {
        if let Some(o) = self.open.take()
            && let Err(e) = std::fs::remove_file(&o.path)
        {
            tracing::warn!(target: "cgmon_rs::sink", file = %o.path.display(), error = %e,
                "cannot delete the file of a batch that was cut");
        }
    }
}

/// A `.filling` file an earlier run left, as the batch it was filling: its rows up to the
/// last whole line (plain), their count and `EndTime` range. `None` when it holds no row.
///
/// # Errors
/// It is not a file of ours (no head, not a regular file, too large).
pub fn read_left(p: &Path) -> Result<Option<Batch>, SpoolError> {
    let (f, _) = open_regular(p)?;
    let mut raw = Vec::new();
    f.take(MAX_FILE + 1).read_to_end(&mut raw).map_err(|e| SpoolError::Read(e.to_string()))?;
    let nl = memchr::memchr(b'\n', &raw).ok_or(SpoolError::NoHead)?;
    let id = std::str::from_utf8(&raw[..nl]).map_err(|_| SpoolError::NoHead)?;
    if id.is_empty() || id.chars().any(char::is_control) {
        return Err(SpoolError::NoHead);
    }
    let body = &raw[nl + 1..];
    let whole = memchr::memrchr(b'\n', body).map_or(0, |i| i + 1);
    let rows = body[..whole].to_vec();
    let count = memchr::memchr_iter(b'\n', &rows).count();
    if count == 0 {
        return Ok(None);
    }
    let ends = end_times(&rows);
    Ok(Some(Batch { id: id.to_string(), rows, count, ends }))
}

/// The earliest and latest `EndTime` of `rows` (seconds since the epoch), as the batcher
/// notes them while it fills a batch.
fn end_times(rows: &[u8]) -> Option<(i64, i64)> {
    const KEY: &[u8] = b"\"EndTime\":\"";
    let mut range: Option<(i64, i64)> = None;
    for line in rows.split(|&b| b == b'\n') {
        let Some(at) = memchr::memmem::find(line, KEY) else { continue };
        let rest = &line[at + KEY.len()..];
        let Some(end) = memchr::memchr(b'"', rest) else { continue };
        let Some(t) = std::str::from_utf8(&rest[..end])
            .ok()
            .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok())
        else {
            continue;
        };
        let s = t.timestamp();
        range = Some(range.map_or((s, s), |(a, b)| (a.min(s), b.max(s))));
    }
    range
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn row(id: &str, end: &str) -> String {
        format!("{{\"EndTime\":\"{end}\",\"BatchId\":\"{id}\"}}\n")
    }

    #[test]
    fn the_rows_reach_the_file_as_they_come_and_a_cut_deletes_it() {
        let dir = tempfile::tempdir().unwrap();
        let (mut f, left) = Filling::open(dir.path()).unwrap();
        assert!(left.is_empty());
        let mut rows = row("h/1/0", "2026-11-28T03:00:05Z");
        f.fill("h/1/0", rows.as_bytes()).unwrap();
        rows.push_str(&row("h/1/0", "2026-11-28T03:00:01Z"));
        f.fill("h/1/0", rows.as_bytes()).unwrap();
        let p = dir.path().join("0000000000000000.filling");
        assert_eq!(std::fs::read_to_string(&p).unwrap(), format!("h/1/0\n{rows}"));
        assert_eq!(std::fs::metadata(&p).unwrap().mode() & 0o777, 0o600);
        // As a run killed now leaves it, read back: the batch, its count and end times.
        let b = read_left(&p).unwrap().unwrap();
        assert_eq!((b.id.as_str(), b.count, b.rows.as_slice()), ("h/1/0", 2, rows.as_bytes()));
        let t = |s: &str| chrono::DateTime::parse_from_rfc3339(s).unwrap().timestamp();
        assert_eq!(b.ends, Some((t("2026-11-28T03:00:01Z"), t("2026-11-28T03:00:05Z"))));
        f.done();
        assert!(!p.exists(), "cut: the whole batch is spooled instead");
        // The next batch's file follows; an id that changed starts a new file.
        f.fill("h/1/1", row("h/1/1", "2026-11-28T03:00:09Z").as_bytes()).unwrap();
        f.fill("h/1/2", row("h/1/2", "2026-11-28T03:00:09Z").as_bytes()).unwrap();
        assert!(!dir.path().join("0000000000000001.filling").exists());
        assert!(dir.path().join("0000000000000002.filling").exists());
        // A restart finds it and names its own after it.
        let (f2, left) = Filling::open(dir.path()).unwrap();
        assert_eq!(left, [dir.path().join("0000000000000002.filling")]);
        assert_eq!(f2.next, 3);
    }

    #[test]
    fn a_cut_line_is_dropped_and_a_file_without_a_row_or_head_is_no_batch() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("0000000000000000.filling");
        std::fs::write(&p, format!("h/1/0\n{}{{\"EndTi", row("h/1/0", "2026-11-28T03:00:05Z")))
            .unwrap();
        let b = read_left(&p).unwrap().unwrap();
        assert_eq!(b.count, 1);
        assert!(b.rows.ends_with(b"}\n"));
        std::fs::write(&p, "h/1/0\n{\"cut").unwrap();
        assert_eq!(read_left(&p), Ok(None));
        std::fs::write(&p, "").unwrap();
        assert!(read_left(&p).is_err());
        std::os::unix::fs::symlink("/dev/zero", dir.path().join("0000000000000001.filling"))
            .unwrap();
        assert!(read_left(&dir.path().join("0000000000000001.filling")).is_err());
    }

    /// A disk that refuses a write: the file keeps the whole rows it had and takes no more
    /// of that batch; the error is returned once.
    #[test]
    fn a_full_disk_leaves_whole_rows_and_is_said_once() {
        let dir = tempfile::tempdir().unwrap();
        let (mut f, _) = Filling::open(dir.path()).unwrap();
        let one = row("h/1/0", "2026-11-28T03:00:05Z");
        f.fill("h/1/0", one.as_bytes()).unwrap();
        // /dev/full stands in for the disk: every write is ENOSPC.
        let o = f.open.as_mut().unwrap();
        o.file = std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
        let two = one.repeat(2);
        let e = f.fill("h/1/0", two.as_bytes()).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOSPC));
        assert!(f.fill("h/1/0", one.repeat(3).as_bytes()).is_ok(), "said once");
        let p = dir.path().join("0000000000000000.filling");
        assert_eq!(read_left(&p).unwrap().unwrap().count, 1, "the row written before");
    }
}

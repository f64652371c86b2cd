//! `--spool-dir`: batches that wait for the server, kept on disk across restarts.
//!
//! One file per batch, `SEQ.batch` (16 hex digits, so names sort in order): a line with
//! the batch id, a line with its row count (and, since this release, the range of its rows'
//! `EndTime`), then its body as it is sent. A file is written under a temporary name,
//! synced, and linked to its name, so a crash leaves whole batches or none, and a name
//! that exists is never written over; it is deleted once the batch is delivered or
//! dropped. A restarted monitor sends them first, as *uncertain*: the last run may have
//! died after the server stored one.
//!
//! A spooled batch waits on disk only: the queue keeps its id, row count and size, and the
//! sender reads its body back when its turn comes, so `--spool-max` bounds the disk, not
//! the memory.
//!
//! The directory holds every record's peers and programs, and root writes in it: it must
//! be the monitor's own. [`check_dir`] refuses one another user owns or may write (a
//! planted link would have root overwrite its target), the directory is made 0700 and
//! files 0600, files are created with `O_EXCL|O_NOFOLLOW`, and only regular files are
//! read, with bounded reads (a FIFO or a link to `/dev/zero` named like a batch would
//! otherwise hang the start or exhaust memory). A file that is not a whole batch is set
//! aside under `SEQ.rejected`, never deleted: it is evidence.

use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use super::batch::Batch;

/// The largest spool file read back: a batch is cut at 8 MiB of rows
/// ([`super::batch::Limits`]), and compressed it is far smaller; anything larger was not
/// written by us.
pub const MAX_FILE: u64 = 64 << 20;

/// The largest sequence number a spool file of ours has: names above it were planted (a
/// run would need 2^62 batches to get there), and taking them would wrap the sequence.
const MAX_SEQ: u64 = 1 << 62;

/// The spool directory.
#[derive(Debug)]
pub struct Spool {
    dir: PathBuf,
    next: u64,
    /// Each spooled batch's id and file, in order.
    files: std::collections::VecDeque<(String, PathBuf)>,
}

/// Why a directory cannot be the spool, or a file in it is not a whole batch of ours.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpoolError {
    /// The path is a symbolic link.
    #[error("a symbolic link; give the directory itself")]
    Symlink,
    /// The path is not a directory.
    #[error("not a directory")]
    NotDir,
    /// A missing spool's nearest existing parent is not a directory.
    #[error("{0} is not a directory")]
    ParentNotDir(PathBuf),
    /// Another user owns it.
    #[error("owned by uid {owner}, not this user (uid {me}): another user could plant files in it")]
    Owner {
        /// The owner.
        owner: u32,
        /// This process's effective uid.
        me: u32,
    },
    /// Other users may write it.
    #[error("writable by other users (mode {0:o}): chmod go-w, or let the monitor create it")]
    OthersWrite(u32),
    /// stat failed.
    #[error("cannot stat it: {0}")]
    Stat(String),
    /// This process cannot write it.
    #[error("not writable: {0}")]
    NotWritable(String),
    /// The path holds a NUL byte.
    #[error("a NUL in the path")]
    Nul,
    /// A file that cannot be opened as a batch (not a regular file, too large, gone).
    #[error("{0}")]
    Open(String),
    /// Reading it failed.
    #[error("cannot read: {0}")]
    Read(String),
    /// It has no head of ours.
    #[error("no batch head")]
    NoHead,
    /// Its gzip body inflates past any batch's size.
    #[error("inflates past any batch's size")]
    TooLarge,
    /// Its gzip body is cut or corrupt.
    #[error("the gzip body does not inflate: {0}")]
    Inflate(String),
}

/// Checks, without creating anything, that `dir` can be the spool: an existing directory
/// (not a link) owned by this user, that no other user may write, and that this process
/// can write (a read-only file system is found here, not at the first batch); or a
/// missing one whose nearest existing parent is a directory.
///
/// # Errors
/// Which of these does not hold.
pub fn check_dir(dir: &Path) -> Result<(), SpoolError> {
    match std::fs::symlink_metadata(dir) {
        Ok(m) => {
            if m.file_type().is_symlink() {
                return Err(SpoolError::Symlink);
            }
            if !m.is_dir() {
                return Err(SpoolError::NotDir);
            }
            // SAFETY: geteuid has no preconditions.
            let me = unsafe { libc::geteuid() };
            if m.uid() != me {
                return Err(SpoolError::Owner { owner: m.uid(), me });
            }
            if m.mode() & 0o022 != 0 {
                return Err(SpoolError::OthersWrite(m.mode() & 0o7777));
            }
            writable(dir)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut p = dir.parent();
            while let Some(d) = p {
                if d.as_os_str().is_empty() {
                    return Ok(());
                }
                match std::fs::metadata(d) {
                    Ok(m) if m.is_dir() => return writable(d),
                    Ok(_) => return Err(SpoolError::ParentNotDir(d.to_path_buf())),
                    Err(_) => p = d.parent(),
                }
            }
            Ok(())
        }
        Err(e) => Err(SpoolError::Stat(e.to_string())),
    }
}

/// Creates `dir` (0700) when missing and checks it ([`check_dir`]): done before any output
/// file is opened or rotated, so that a spool that cannot be had is a usage error that has
/// touched nothing else.
///
/// # Errors
/// It cannot be created, or is not fit to be the spool.
pub fn prepare(dir: &Path) -> std::io::Result<()> {
    std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir)?;
    check_dir(dir).map_err(std::io::Error::other)
}

fn writable(d: &Path) -> Result<(), SpoolError> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(d.as_os_str().as_bytes()).map_err(|_| SpoolError::Nul)?;
    // SAFETY: a valid NUL-terminated path.
    if unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) } != 0 {
        return Err(SpoolError::NotWritable(std::io::Error::last_os_error().to_string()));
    }
    Ok(())
}

impl Spool {
    /// Opens `dir` (created 0700 when missing) and reads the heads of the batches an
    /// earlier run left, oldest first: each as a [`Batch`] without its rows, and the size
    /// of its body. Files that are not whole batches are set aside (`.rejected`), logged.
    ///
    /// # Errors
    /// The directory cannot be created or read, or is not fit to be the spool.
    pub fn open(dir: &Path) -> std::io::Result<(Self, Vec<(Batch, usize)>)> {
        prepare(dir)?;
        let mut names: Vec<(u64, PathBuf)> = Vec::new();
        for e in std::fs::read_dir(dir)? {
            let p = e?.path();
            let Some(stem) =
                p.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_suffix(".batch"))
            else {
                continue;
            };
            match u64::from_str_radix(stem, 16) {
                Ok(n) if stem.len() == 16 && n < MAX_SEQ => names.push((n, p)),
                _ => set_aside(&p, "a name no run of ours writes"),
            }
        }
        names.sort();
        let next = names.last().map_or(0, |n| n.0 + 1);
        let mut s = Self { dir: dir.to_path_buf(), next, files: Default::default() };
        let mut batches = Vec::new();
        for (_, p) in names {
            match read_head(&p) {
                Ok((b, size)) => {
                    s.files.push_back((b.id.clone(), p));
                    batches.push((b, size));
                }
                Err(why) => set_aside(&p, &why.to_string()),
            }
        }
        Ok((s, batches))
    }

    /// Writes `b` (its body as it will be sent).
    ///
    /// # Errors
    /// The write, sync or link failed (a full disk): the batch stays in memory only.
    pub fn save(&mut self, b: &Batch) -> std::io::Result<()> {
        let name = self.dir.join(format!("{:016x}.batch", self.next));
        let tmp = self.dir.join(format!(".{:016x}.tmp", self.next));
        let mut f = match create_new(&tmp) {
            // A temporary file a crash left: ours (the directory is), so it goes. An
            // unlink removes a link itself, never what it points to.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                std::fs::remove_file(&tmp)?;
                create_new(&tmp)?
            }
            r => r?,
        };
        let r = (|| {
            match b.ends {
                Some((lo, hi)) => writeln!(f, "{}\n{} {lo} {hi}", b.id, b.count)?,
                None => writeln!(f, "{}\n{}", b.id, b.count)?,
            }
            f.write_all(&b.rows)?;
            f.sync_all()?;
            // A link fails where the name exists, where a rename would replace it.
            std::fs::hard_link(&tmp, &name)
        })();
        let _ = std::fs::remove_file(&tmp);
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

    /// Sets aside the file of the batch `id` (it could not be sent: broken, or refused as
    /// malformed), keeping it for a person to look at.
    pub fn reject(&mut self, id: &str, why: &str) {
        if let Some(i) = self.files.iter().position(|f| f.0 == id) {
            let (_, p) = self.files.remove(i).expect("found just above");
            set_aside(&p, why);
        }
    }

    /// The file of the batch `id`, while it is spooled.
    pub fn path_of(&self, id: &str) -> Option<PathBuf> {
        self.files.iter().find(|f| f.0 == id).map(|f| f.1.clone())
    }

    /// Its directory.
    pub fn dir(&self) -> &Path {
        &self.dir
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

/// A new file, 0600, that is not there yet and is not reached through a link.
pub(super) fn create_new(p: &Path) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(p)
}

/// Renames `p` to `SEQ.rejected` (or `NAME.rejected`), logged; where that fails, it is left.
pub(super) fn set_aside(p: &Path, why: &str) {
    let aside = p.with_extension("rejected");
    let moved = !aside.exists() && std::fs::rename(p, &aside).is_ok();
    tracing::warn!(target: "cgmon_rs::sink", file = %p.display(), reason = why,
        set_aside = moved, "a spool file that is not a whole batch of ours; not sent");
}

/// Opens a spool file for reading: a regular file, not through a link, without blocking
/// (a FIFO would), and not over [`MAX_FILE`].
pub(super) fn open_regular(p: &Path) -> Result<(std::fs::File, u64), SpoolError> {
    crate::units::open_regular(p, MAX_FILE, false).map_err(|e| SpoolError::Open(e.to_string()))
}

/// A spooled batch, whole (its body read back to be sent).
///
/// # Errors
/// Why it is not a whole batch of ours.
pub fn read(p: &Path) -> Result<Batch, SpoolError> {
    let (f, len) = open_regular(p)?;
    let mut raw = Vec::with_capacity(len as usize);
    f.take(MAX_FILE + 1).read_to_end(&mut raw).map_err(|e| SpoolError::Read(e.to_string()))?;
    let (mut b, at) = head(&raw).ok_or(SpoolError::NoHead)?;
    b.rows = raw[at..].to_vec();
    Ok(b)
}

/// A spooled batch's id and count (no rows), and its body's size, from the file's start.
fn read_head(p: &Path) -> Result<(Batch, usize), SpoolError> {
    use std::io::BufRead;
    let (f, len) = open_regular(p)?;
    // The two lines, within the bound (a host name is at most 255 bytes).
    let mut r = std::io::BufReader::new(f.take(4096));
    let mut start = Vec::new();
    for _ in 0..2 {
        if r.read_until(b'\n', &mut start).map_err(|e| SpoolError::Read(e.to_string()))? == 0 {
            return Err(SpoolError::NoHead);
        }
    }
    let (b, at) = head(&start).ok_or(SpoolError::NoHead)?;
    Ok((b, len as usize - at))
}

/// The two head lines: the batch without rows, and where its body starts.
fn head(raw: &[u8]) -> Option<(Batch, usize)> {
    let nl = raw.iter().position(|&b| b == b'\n')?;
    let id = std::str::from_utf8(&raw[..nl]).ok()?.to_string();
    let rest = &raw[nl + 1..];
    let nl2 = rest.iter().position(|&b| b == b'\n')?;
    let mut words = std::str::from_utf8(&rest[..nl2]).ok()?.split(' ');
    let count = words.next()?.parse().ok()?;
    let ends = match (words.next(), words.next()) {
        (Some(a), Some(b)) => Some((a.parse().ok()?, b.parse().ok()?)),
        _ => None,
    };
    if id.is_empty() || id.chars().any(char::is_control) {
        return None;
    }
    Some((Batch { id, rows: Vec::new(), count, ends }, nl + nl2 + 2))
}

/// How many rows a batch's body holds (gzip or plain), by its line ends: a head that
/// claims more than the body holds is counted by the body.
///
/// # Errors
/// A gzip body that does not inflate whole (a truncated or corrupt file).
pub fn rows_in(body: &[u8]) -> Result<usize, SpoolError> {
    if body.starts_with(&[0x1f, 0x8b]) {
        let mut n = 0;
        let mut d = flate2::read::MultiGzDecoder::new(body);
        let mut buf = vec![0u8; 64 << 10];
        let mut total = 0u64;
        loop {
            match d.read(&mut buf) {
                Ok(0) => break,
                Ok(k) => {
                    total += k as u64;
                    // Bounded like the batch itself (a gzip bomb would say otherwise).
                    if total > 4 * MAX_FILE {
                        return Err(SpoolError::TooLarge);
                    }
                    n += memchr::memchr_iter(b'\n', &buf[..k]).count();
                }
                Err(e) => return Err(SpoolError::Inflate(e.to_string())),
            }
        }
        Ok(n)
    } else {
        Ok(memchr::memchr_iter(b'\n', body).count())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn batch(i: u32) -> Batch {
        Batch { id: format!("h/1/{i}"), rows: vec![i as u8; 10], count: 3, ends: Some((5, 9)) }
    }

    #[test]
    fn batches_survive_a_restart_in_order_and_leave_when_done() {
        let dir = tempfile::tempdir().unwrap();
        let sp = dir.path().join("spool");
        let (mut s, old) = Spool::open(&sp).unwrap();
        assert!(old.is_empty());
        assert_eq!(std::fs::metadata(&sp).unwrap().mode() & 0o777, 0o700);
        for i in 0..3 {
            s.save(&batch(i)).unwrap();
        }
        s.remove("h/1/1");
        std::fs::write(sp.join("0000000000000009.batch"), "half").unwrap();
        std::fs::write(sp.join("notes.txt"), "not ours").unwrap();
        drop(s);
        let (mut s, back) = Spool::open(&sp).unwrap();
        let heads: Vec<(&str, usize, usize)> =
            back.iter().map(|(h, size)| (h.id.as_str(), h.count, *size)).collect();
        assert_eq!(heads, [("h/1/0", 3, 10), ("h/1/2", 3, 10)], "whole batches, oldest first");
        assert!(back.iter().all(|(h, _)| h.rows.is_empty()), "bodies stay on disk");
        assert_eq!(back[0].0.ends, Some((5, 9)), "the rows' end times come back");
        assert_eq!(read(&s.path_of("h/1/2").unwrap()), Ok(batch(2)), "read back whole");
        assert_eq!(s.path_of("h/1/1"), None);
        // The broken one is set aside, not deleted; the others are left alone.
        assert!(sp.join("0000000000000009.rejected").exists());
        assert!(sp.join("notes.txt").exists());
        s.save(&batch(3)).unwrap();
        // New names follow every name there, the set-aside one's too: none is used again.
        assert!(sp.join("000000000000000a.batch").exists());
        assert_eq!(s.len(), 3);
        let mode = std::fs::metadata(sp.join("000000000000000a.batch")).unwrap().mode();
        assert_eq!(mode & 0o777, 0o600, "records are not for every local user");
    }

    /// A batch id as long as a host name may be is read back whole; a head written by an
    /// earlier release (a count alone) still reads.
    #[test]
    fn long_ids_and_old_heads_survive_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let id = format!("{}/1/7", "h".repeat(255));
        let b = Batch { id: id.clone(), rows: vec![1u8; 30], count: 4, ends: None };
        let (mut s, _) = Spool::open(dir.path()).unwrap();
        s.save(&b).unwrap();
        let mut old = b"h/1/9\n2\n".to_vec();
        old.extend_from_slice(&[7u8; 5]);
        std::fs::write(dir.path().join("0000000000000005.batch"), old).unwrap();
        drop(s);
        let (s, back) = Spool::open(dir.path()).unwrap();
        assert_eq!(back.len(), 2);
        assert_eq!((back[0].0.id.as_str(), back[0].0.count, back[0].1), (id.as_str(), 4, 30));
        assert_eq!((back[1].0.id.as_str(), back[1].0.count, back[1].0.ends), ("h/1/9", 2, None));
        assert_eq!(read(&s.path_of(&id).unwrap()), Ok(b));
    }

    /// Files planted in the spool: a link at the next temporary name is not followed (its
    /// target keeps its text), a FIFO or a link to /dev/zero named like a batch neither
    /// hangs nor fills memory, and a name at the top of the sequence does not wrap it.
    #[test]
    fn planted_files_are_neither_followed_nor_read_unbounded_nor_wrap_the_sequence() {
        let dir = tempfile::tempdir().unwrap();
        let sp = dir.path().join("spool");
        let victim = dir.path().join("victim");
        std::fs::write(&victim, "root's file").unwrap();
        std::fs::DirBuilder::new().mode(0o700).create(&sp).unwrap();
        std::os::unix::fs::symlink(&victim, sp.join(".0000000000000002.tmp")).unwrap();
        std::os::unix::fs::symlink("/dev/zero", sp.join("0000000000000000.batch")).unwrap();
        let fifo = std::ffi::CString::new(sp.join("0000000000000001.batch").to_str().unwrap());
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(fifo.unwrap().as_ptr(), 0o600) }, 0);
        std::fs::write(sp.join("ffffffffffffffff.batch"), "h/1/0\n1\n{}\n").unwrap();
        let (mut s, back) = Spool::open(&sp).unwrap();
        assert!(back.is_empty(), "none of them is a batch");
        s.save(&batch(0)).unwrap();
        s.save(&batch(1)).unwrap();
        s.save(&batch(2)).unwrap();
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "root's file");
        assert!(sp.join("0000000000000002.batch").exists(), "numbered after the planted");
        assert!(sp.join("ffffffffffffffff.rejected").exists(), "set aside, not wrapped");
        assert_eq!(read(&s.path_of("h/1/2").unwrap()), Ok(batch(2)));
    }

    #[test]
    fn a_spool_dir_another_user_could_write_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("open");
        std::fs::create_dir(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(check_dir(&d).unwrap_err().to_string().contains("writable by other users"));
        assert!(Spool::open(&d).is_err());
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(check_dir(&d), Ok(()));
        assert_eq!(check_dir(&d.join("new/deeper")), Ok(()), "made at the start");
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(&d, &link).unwrap();
        assert!(check_dir(&link).unwrap_err().to_string().contains("symbolic link"));
        std::fs::write(dir.path().join("file"), "").unwrap();
        assert!(
            check_dir(&dir.path().join("file"))
                .unwrap_err()
                .to_string()
                .contains("not a directory")
        );
        let e = check_dir(&dir.path().join("file/sub")).unwrap_err();
        assert!(e.to_string().to_lowercase().contains("not a directory"), "{e}");
        // Another owner (as root, where the test can chown).
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            std::os::unix::fs::chown(&d, Some(65534), None).unwrap();
            assert!(check_dir(&d).unwrap_err().to_string().contains("owned by uid 65534"));
        }
    }

    #[test]
    fn rows_are_counted_by_what_the_body_holds() {
        assert_eq!(rows_in(b"{}\n{}\n"), Ok(2));
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(b"{}\n{}\n{}\n").unwrap();
        let body = gz.finish().unwrap();
        assert_eq!(rows_in(&body), Ok(3));
        assert!(
            rows_in(&body[..body.len() - 6]).unwrap_err().to_string().contains("does not inflate")
        );
    }
}

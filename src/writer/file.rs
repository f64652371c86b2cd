//! An output file in a directory: optional gzip, rotation, and write errors that lose
//! nothing.
//!
//! Compression runs into memory (a [`Gzip`] into a `Vec<u8>`, which cannot fail) and this code
//! writes the compressed bytes to the file itself. A failed `write(2)` (disk full,
//! permission) therefore never leaves the gzip stream half-fed: the unwritten bytes wait in
//! `unwritten` and go out first on the next attempt, and no new record enters the encoder
//! while any wait. flate2's own `GzEncoder<File>` would keep going after an error with no
//! way to tell which records reached the disk.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::gzip::Gzip;

/// The file's settings.
#[derive(Debug, Clone)]
pub struct FileConfig {
    /// Directory, which must exist.
    pub dir: PathBuf,
    /// File name; gzip when it ends in `.gz`.
    pub name: String,
    /// gzip level 1–9.
    pub level: u32,
    /// How many closed (rotated) files to keep beside the live one.
    pub keep: Keep,
}

/// `--writer-keep-files` and `--writer-keep-size`: the bound on a file's rotated
/// siblings; the oldest go first. Zero in either means no limit from it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Keep {
    /// Most rotated files kept (0: any number).
    pub files: u32,
    /// Most bytes of rotated files kept (0: any amount).
    pub bytes: u64,
}

impl Keep {
    /// True when it bounds nothing.
    pub fn unbounded(&self) -> bool {
        self.files == 0 && self.bytes == 0
    }
}

/// This process's effective user.
fn euid() -> u32 {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() }
}

/// Deletes the oldest of `name`'s rotated files in `dir` (the monitor's own pattern,
/// `stem.N.ext`, gzipped or not, owned by this user; nothing else is touched) until at most `keep.files`
/// remain and they hold at most `keep.bytes`. The live file is not counted. Returns each
/// deleted file and its size, oldest first.
///
/// # Errors
/// The directory cannot be read. A file that cannot be deleted is skipped (and returned
/// nowhere), so one stuck file does not stop the rest.
pub fn prune(dir: &Path, name: &str, keep: Keep) -> io::Result<Vec<(PathBuf, u64)>> {
    if keep.unbounded() {
        return Ok(Vec::new());
    }
    let other = match name.strip_suffix(".gz") {
        Some(s) => s.to_string(),
        None => format!("{name}.gz"),
    };
    // (N, path, size), oldest first: a higher N is always newer (see `highest_rotated`).
    let mut files = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let Some(entry) = e.file_name().to_str().map(str::to_string) else { continue };
        let Some(n) = [name, other.as_str()].iter().find_map(|b| rotated_number(b, &entry)) else {
            continue;
        };
        // Only the monitor's own files: a file of that name another user owns is theirs.
        match e.metadata() {
            Ok(m) if m.is_file() && m.uid() == euid() => files.push((n, e.path(), m.len())),
            _ => {}
        }
    }
    files.sort_unstable_by_key(|f| f.0);
    let mut total: u64 = files.iter().map(|f| f.2).sum();
    let mut count = files.len();
    let mut deleted = Vec::new();
    for (_, path, size) in files {
        let over_count = keep.files > 0 && count > keep.files as usize;
        let over_size = keep.bytes > 0 && total > keep.bytes;
        if !over_count && !over_size {
            break;
        }
        if std::fs::remove_file(&path).is_ok() {
            deleted.push((path, size));
        }
        count -= 1;
        total -= size;
    }
    Ok(deleted)
}

impl FileConfig {
    /// Checks that the directory exists and this process may create files in it, without
    /// touching it: the writer checks every output before it opens (and rotates) any, so a
    /// usage error leaves no file behind and moves none aside.
    ///
    /// # Errors
    /// The directory is missing, not a directory, or not writable (a read-only mount too).
    pub fn check(&self) -> io::Result<()> {
        let meta = std::fs::metadata(&self.dir)?;
        if !meta.is_dir() {
            return Err(io::Error::new(io::ErrorKind::NotADirectory, "not a directory"));
        }
        let dir = std::ffi::CString::new(self.dir.as_os_str().as_encoded_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in the path"))?;
        // With the effective IDs and capabilities, as open(2) will use (plain access(2)
        // uses the real IDs and, for a non-root user, no capabilities: a service given
        // CAP_DAC_OVERRIDE would be refused a directory it can write).
        // SAFETY: `dir` is a valid NUL-terminated string for the duration of the call.
        let r = unsafe {
            libc::faccessat(libc::AT_FDCWD, dir.as_ptr(), libc::W_OK | libc::X_OK, libc::AT_EACCESS)
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

/// Mode of a file the monitor creates (the umask still applies): records name hosts and
/// services, so they are not for every user.
pub const FILE_MODE: u32 = 0o640;

/// Opens `path` for appending without following a symlink: a new file is created with
/// `O_EXCL` and [`FILE_MODE`]; an existing one (a regular file or a device) is opened with
/// `O_NOFOLLOW`. A symlink at `path` (dangling or not) is an error naming it: as root the
/// monitor would otherwise create or append to whatever it points at.
///
/// # Errors
/// Neither open works; a symlink is in the way.
pub fn open_output(path: &Path) -> io::Result<File> {
    let nofollow = libc::O_NOFOLLOW | libc::O_CLOEXEC;
    match OpenOptions::new()
        .append(true)
        .create_new(true)
        .mode(FILE_MODE)
        .custom_flags(nofollow)
        .open(path)
    {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
            OpenOptions::new().append(true).custom_flags(nofollow).open(path).map_err(|e| {
                if e.raw_os_error() == Some(libc::ELOOP) { symlink_in_the_way(path) } else { e }
            })
        }
        r => r,
    }
}

fn symlink_in_the_way(path: &Path) -> io::Error {
    io::Error::other(format!("{} is a symbolic link; not following it", path.display()))
}

/// Renames `from` to `to` unless `to` exists (`renameat2(RENAME_NOREPLACE)`): a check then
/// a rename would let another writer's file be overwritten in between.
///
/// # Errors
/// `to` exists (`AlreadyExists`), or the rename failed.
pub fn rename_noreplace(from: &Path, to: &Path) -> io::Result<()> {
    let c = |p: &Path| {
        std::ffi::CString::new(p.as_os_str().as_encoded_bytes())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL in the path"))
    };
    let (f, t) = (c(from)?, c(to)?);
    // SAFETY: both paths are valid NUL-terminated strings for the duration of the call.
    let r = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            f.as_ptr(),
            libc::AT_FDCWD,
            t.as_ptr(),
            libc::RENAME_NOREPLACE,
        )
    };
    if r == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// What a rotation still has to do. Each step is retried until it works, and a step is
/// never done twice: the gzip stream is ended once, and a file is renamed once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rotation {
    /// The stream is ended (its trailer produced) but not all written, or not synced: the
    /// file is still open. Nothing new may enter it.
    Close,
    /// Closed; the rename is still to do.
    Rename,
    /// Renamed (or nothing to rename); a fresh file is still to open.
    Reopen,
}

/// An output file.
///
/// A rotation is close, rename, reopen (see `Rotation`). A step that fails leaves the
/// rotation *pending* at that step, and every later write first tries to finish it, so
/// records wait (in the writer's backlog) until it works, and none is taken into a stream
/// that was ended or a file that is not open. In particular an ended gzip encoder is
/// dropped as soon as its trailer is produced: flate2 asserts (panics) when a finished
/// encoder is written or flushed again, which a disk that filled during a rotation used
/// to trigger.
pub struct OutFile {
    cfg: FileConfig,
    gz: bool,
    file: Option<File>,
    /// A rotation that has not finished; see [`Rotation`].
    pending: Option<Rotation>,
    /// A plain [`close`](Self::close) (the end of the run) has ended the stream: like
    /// [`Rotation::Close`], but no new file follows.
    ending: bool,
    /// Records confirmed written by a close whose rotation then failed, not yet reported.
    confirmed: u64,
    inode: u64,
    enc: Option<Gzip>,
    /// Compressed (or plain) bytes not yet written.
    unwritten: Vec<u8>,
    /// The last write of `unwritten` failed.
    stuck: bool,
    /// Bytes on disk in the current file.
    pub size: u64,
    /// Records in the current file.
    pub records: u64,
    /// Records taken since the last successful flush: not yet known to be on disk.
    unconfirmed: u64,
    /// Data went in since the last flush.
    dirty: bool,
    /// Tests: while set, every write and sync fails with ENOSPC, as on a full disk.
    #[cfg(test)]
    pub(crate) full: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
}

impl OutFile {
    /// Opens `dir/name` for appending. An existing non-empty file is rotated out of the
    /// way first, so every file holds whole runs and a file cut by a crash is never
    /// appended to. Returns the file and the rotated name, if any.
    ///
    /// # Errors
    /// The directory is missing or unwritable, or the file cannot be opened.
    pub fn open(cfg: FileConfig) -> io::Result<(Self, Option<PathBuf>)> {
        cfg.check()?;
        let gz = cfg.name.ends_with(".gz");
        let mut f = OutFile {
            cfg,
            gz,
            file: None,
            pending: None,
            ending: false,
            confirmed: 0,
            inode: 0,
            enc: None,
            unwritten: Vec::new(),
            stuck: false,
            size: 0,
            records: 0,
            unconfirmed: 0,
            dirty: false,
            #[cfg(test)]
            full: None,
        };
        let path = f.path();
        let rotated = match std::fs::symlink_metadata(&path) {
            Ok(m) if m.file_type().is_symlink() => return Err(symlink_in_the_way(&path)),
            Ok(m) if m.is_file() && m.len() > 0 => Some(f.move_aside()?),
            _ => None,
        };
        f.reopen()?;
        Ok((f, rotated))
    }

    #[cfg(test)]
    fn is_full(&self) -> bool {
        self.full.as_ref().is_some_and(|f| f.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// The live file's path.
    pub fn path(&self) -> PathBuf {
        self.cfg.dir.join(&self.cfg.name)
    }

    /// Renames the live file to the next rotated name, numbered after the highest that
    /// exists, and never over an existing file (a name taken meanwhile moves on to the next).
    fn move_aside(&self) -> io::Result<PathBuf> {
        let mut n = highest_rotated(&self.cfg.dir, &self.cfg.name)?;
        for _ in 0..100 {
            n = n.checked_add(1).filter(|&n| n <= MAX_ROTATED).ok_or_else(|| {
                io::Error::other(format!("no rotated file name under {MAX_ROTATED} is free"))
            })?;
            let to = self.cfg.dir.join(rotated_name(&self.cfg.name, n));
            match rename_noreplace(&self.path(), &to) {
                Ok(()) => return Ok(to),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e),
            }
        }
        Err(io::Error::other("rotated file names keep being taken"))
    }

    fn reopen(&mut self) -> io::Result<()> {
        let file = open_output(&self.path())?;
        let m = file.metadata()?;
        self.inode = m.ino();
        self.size = m.len();
        self.file = Some(file);
        self.records = 0;
        self.enc = self.gz.then(|| Gzip::new(Vec::with_capacity(64 << 10), self.cfg.level));
        Ok(())
    }

    /// True when a write failed and its bytes are still waiting. (Bytes a plain file
    /// gathers are not: they go out at 64 KiB or the next flush, as gzip's do. Taking them
    /// for a failure made a write(2) of every record.)
    pub fn blocked(&self) -> bool {
        self.stuck && !self.unwritten.is_empty()
    }

    /// True while a rotation's rename or reopen has not worked yet.
    pub fn rotation_pending(&self) -> bool {
        self.pending.is_some()
    }

    /// Whether the live file's path still names the file this writes (logrotate, or a
    /// person, may have moved it, or put something else there).
    fn still_ours(&self) -> bool {
        self.file.is_some()
            && std::fs::symlink_metadata(self.path())
                .is_ok_and(|m| m.is_file() && m.ino() == self.inode)
    }

    /// Finishes a pending rotation: the rename (when the file there is still ours and holds
    /// records; logrotate may have moved it) and the reopen. Returns the rotated name.
    ///
    /// # Errors
    /// Either step failed again; it stays pending.
    pub fn finish_rotation(&mut self) -> io::Result<Option<PathBuf>> {
        let mut to = None;
        if self.pending == Some(Rotation::Close) {
            self.confirmed += self.end_stream()?;
            self.pending = Some(Rotation::Rename);
        }
        if self.pending == Some(Rotation::Rename) {
            let ours = std::fs::symlink_metadata(self.path())
                .is_ok_and(|m| m.is_file() && m.ino() == self.inode && m.len() > 0);
            if ours {
                match self.move_aside() {
                    Ok(p) => to = Some(p),
                    // No name is worth holding records back for: the stream is ended, so
                    // the records go on into the live file as a new gzip member after it
                    // (every gzip reader takes both), and the next rotation tries again.
                    Err(e) => tracing::warn!(target: "cgmon_rs::writer",
                        file = %self.path().display(), error = %e,
                        "cannot move the output file aside; writing on into it"),
                }
            }
            self.pending = Some(Rotation::Reopen);
        }
        if self.pending == Some(Rotation::Reopen) {
            self.reopen()?;
            self.pending = None;
        }
        Ok(to)
    }

    /// Records confirmed written by a close whose rotation did not complete, since the last
    /// call.
    pub fn take_confirmed(&mut self) -> u64 {
        std::mem::take(&mut self.confirmed)
    }

    /// Writes whatever is waiting. `Ok` means nothing waits any more.
    ///
    /// # Errors
    /// The write failed; the bytes stay and are retried next time.
    pub fn drain(&mut self) -> io::Result<()> {
        if self.pending.is_some() {
            // Nothing waits for a closed file: finish the rotation first.
            self.finish_rotation()?;
        }
        self.write_out()
    }

    /// Writes `unwritten` (and what the encoder holds) to the open file.
    fn write_out(&mut self) -> io::Result<()> {
        if let Some(enc) = &mut self.enc {
            self.unwritten.append(enc.out_mut());
        }
        let r = self.write_unwritten();
        self.stuck = r.is_err();
        r
    }

    fn write_unwritten(&mut self) -> io::Result<()> {
        #[cfg(test)]
        if !self.unwritten.is_empty() && self.is_full() {
            return Err(io::Error::from_raw_os_error(libc::ENOSPC));
        }
        let Some(file) = &mut self.file else {
            return Err(io::Error::other("file is closed"));
        };
        while !self.unwritten.is_empty() {
            match file.write(&self.unwritten) {
                Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
                Ok(n) => {
                    self.unwritten.drain(..n);
                    self.size += n as u64;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Takes one record into the stream. The bytes go to the file once 64 KiB are pending,
    /// at [`flush`](Self::flush), or at [`close`](Self::close).
    ///
    /// # Errors
    /// Bytes from an earlier attempt still cannot be written; the record was **not** taken
    /// and the caller keeps it.
    pub fn write_record(&mut self, json: &[u8]) -> io::Result<()> {
        if self.ending {
            return Err(io::Error::other("file is being closed"));
        }
        if self.blocked() || self.pending.is_some() || self.file.is_none() {
            self.drain()?;
        }
        match &mut self.enc {
            Some(enc) => enc.write_all(json)?,
            None => self.unwritten.extend_from_slice(json),
        }
        self.records += 1;
        self.unconfirmed += 1;
        self.dirty = true;
        Ok(())
    }

    /// Writes pending bytes once there are enough of them to be worth a system call.
    ///
    /// # Errors
    /// The write failed; the bytes wait (the records are already taken).
    pub fn pump(&mut self) -> io::Result<()> {
        let pending = self.unwritten.len() + self.enc.as_ref().map_or(0, Gzip::out_len);
        if pending >= 64 << 10 { self.drain() } else { Ok(()) }
    }

    /// Bytes this file will hold once everything produced so far is written: what size
    /// rotation compares (compressed bytes, as cgmon counts).
    pub fn produced(&self) -> u64 {
        self.size
            + self.unwritten.len() as u64
            + self.enc.as_ref().map_or(0, |e| e.out_len() as u64)
    }

    /// Sync-flushes the compressor and writes everything out, so a reader (`zcat`) sees
    /// every record so far even if the process is then killed. Returns how many records
    /// this confirmed as written.
    ///
    /// # Errors
    /// The write failed; the bytes wait for the next attempt.
    pub fn flush(&mut self) -> io::Result<u64> {
        if self.ending {
            // An ended stream is flushed by finishing its close.
            return self.close();
        }
        if !self.dirty && !self.blocked() {
            return Ok(std::mem::take(&mut self.unconfirmed));
        }
        if self.pending.is_none()
            && let Some(enc) = &mut self.enc
        {
            enc.flush()?;
        }
        self.drain()?;
        self.dirty = false;
        Ok(std::mem::take(&mut self.unconfirmed))
    }

    /// Records taken but not yet confirmed by a flush: lost if the file is never written.
    pub fn unconfirmed(&self) -> u64 {
        self.unconfirmed
    }

    /// Ends the gzip stream, writes it out, syncs and closes the file. Returns how many
    /// records this confirmed as written.
    ///
    /// # Errors
    /// The write or sync failed; the file stays open with the bytes waiting.
    /// Safe to call again after an error: the stream is ended once, and the call goes on
    /// writing what is left; no record is taken in between.
    pub fn close(&mut self) -> io::Result<u64> {
        // A rotation left half done ends here: the stream it ended is completed where the
        // file stands (the next run moves it aside), and no new file is opened.
        self.pending = None;
        self.ending = true;
        let n = self.end_stream()?;
        self.ending = false;
        Ok(n + self.take_confirmed())
    }

    /// Ends the gzip stream (once), writes everything out, syncs and closes the file.
    /// Returns how many records this confirmed as written. Resumable: on an error the
    /// ended stream's bytes wait in `unwritten` with the file still open, and the encoder
    /// is already gone, so nothing can write into (or flush) a finished stream.
    fn end_stream(&mut self) -> io::Result<u64> {
        if let Some(enc) = self.enc.take() {
            // Into memory: finishing cannot fail for want of disk.
            let tail = enc.finish()?;
            self.unwritten.extend_from_slice(&tail);
        }
        if self.file.is_some() {
            self.write_out()?;
            #[cfg(test)]
            if self.is_full() {
                return Err(io::Error::from_raw_os_error(libc::ENOSPC));
            }
            if let Some(f) = &self.file {
                f.sync_data()?;
            }
        }
        self.file = None;
        self.dirty = false;
        Ok(std::mem::take(&mut self.unconfirmed))
    }

    /// Closes the file, renames it to the next free rotated name (when it is still ours, as
    /// logrotate may have moved it, and holds records), and opens a fresh one. Returns the
    /// rotated name and the records the close confirmed.
    ///
    /// # Errors
    /// Closing, renaming or reopening failed. On a failed close nothing changed and the
    /// rotation can be retried.
    pub fn rotate(&mut self) -> io::Result<(Option<PathBuf>, u64)> {
        // A file with no record that is still ours stays as it is: a storm of SIGHUPs would
        // otherwise leave a trail of empty rotated files.
        if self.pending.is_none() && self.records == 0 && !self.dirty && self.still_ours() {
            return Ok((None, 0));
        }
        if self.pending.is_none() {
            self.pending = Some(Rotation::Close);
        }
        // The close's records are on disk whatever comes next: they count as written even
        // when the rename or the reopen fails (see `take_confirmed`).
        let to = self.finish_rotation()?;
        Ok((to, self.take_confirmed()))
    }
}

/// The highest N among `name`'s rotated files in `dir` (with or without `.gz`), 0 if none:
/// new files are numbered after it, so a higher N is always newer, gaps and all. One
/// directory read per rotation.
///
/// # Errors
/// The directory cannot be read.
pub fn highest_rotated(dir: &Path, name: &str) -> io::Result<u32> {
    let other = match name.strip_suffix(".gz") {
        Some(s) => s.to_string(),
        None => format!("{name}.gz"),
    };
    let mut high = 0;
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let Some(entry) = e.file_name().to_str().map(str::to_string) else { continue };
        for base in [name, other.as_str()] {
            if let Some(n) = rotated_number(base, &entry) {
                high = high.max(n);
            }
        }
    }
    Ok(high)
}

/// `name` split where a rotation number goes: `flows.json.gz` → (`flows`, `.json.gz`).
fn rotated_parts(name: &str) -> (&str, String) {
    let (rest, gz) = match name.strip_suffix(".gz") {
        Some(r) => (r, ".gz"),
        None => (name, ""),
    };
    let (stem, ext) = match rest.rfind('.') {
        Some(i) if i > 0 => rest.split_at(i),
        _ => (rest, ""),
    };
    (stem, format!("{ext}{gz}"))
}

/// `name` with `.N` before its extension: `flows.json.gz` → `flows.N.json.gz`,
/// `flows.gz` → `flows.N.gz`, `flows` → `flows.N`.
pub fn rotated_name(name: &str, n: u32) -> String {
    let (stem, suffix) = rotated_parts(name);
    format!("{stem}.{n}{suffix}")
}

/// The highest rotation number the monitor writes: a file rotated every second for thirty
/// years stays under it. A larger one was put there by someone else (a planted
/// `r.4294967295.json` once left no number to rotate to, and held every record back).
pub const MAX_ROTATED: u32 = 999_999_999;

/// N when `entry` is `rotated_name(name, N)`, written as the monitor writes it: no leading
/// zero (`r.0001.json` is not ours) and at most [`MAX_ROTATED`].
fn rotated_number(name: &str, entry: &str) -> Option<u32> {
    let (stem, suffix) = rotated_parts(name);
    let digits = entry.strip_prefix(stem)?.strip_prefix('.')?.strip_suffix(suffix.as_str())?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || digits.starts_with('0') {
        return None;
    }
    digits.parse().ok().filter(|&n| n <= MAX_ROTATED)
}

/// The name the next rotation of `name` in `dir` would take (after the highest existing N).
///
/// # Errors
/// The directory cannot be read.
pub fn next_rotated_name(dir: &Path, name: &str) -> io::Result<PathBuf> {
    let n = highest_rotated(dir, name)?
        .checked_add(1)
        .ok_or_else(|| io::Error::other("no free rotated file name"))?;
    Ok(dir.join(rotated_name(name, n)))
}

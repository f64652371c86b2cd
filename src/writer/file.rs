//! An output file in a directory: optional gzip, rotation, and write errors that lose
//! nothing.
//!
//! Compression runs into memory (`GzEncoder<Vec<u8>>`, which cannot fail) and this code
//! writes the compressed bytes to the file itself. A failed `write(2)` (disk full,
//! permission) therefore never leaves the gzip stream half-fed: the unwritten bytes wait in
//! `unwritten` and go out first on the next attempt, and no new record enters the encoder
//! while any wait. flate2's own `GzEncoder<File>` would keep going after an error with no
//! way to tell which records reached the disk.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use flate2::Compression;
use flate2::write::GzEncoder;

/// The file's settings.
#[derive(Debug, Clone)]
pub struct FileConfig {
    /// Directory, which must exist.
    pub dir: PathBuf,
    /// File name; gzip when it ends in `.gz`.
    pub name: String,
    /// gzip level 1–9.
    pub level: u32,
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

/// An open output file.
pub struct OutFile {
    cfg: FileConfig,
    gz: bool,
    file: Option<File>,
    inode: u64,
    enc: Option<GzEncoder<Vec<u8>>>,
    /// Compressed (or plain) bytes not yet written.
    unwritten: Vec<u8>,
    /// Bytes on disk in the current file.
    pub size: u64,
    /// Records in the current file.
    pub records: u64,
    /// Records taken since the last successful flush: not yet known to be on disk.
    unconfirmed: u64,
    /// Data went in since the last flush.
    dirty: bool,
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
            inode: 0,
            enc: None,
            unwritten: Vec::new(),
            size: 0,
            records: 0,
            unconfirmed: 0,
            dirty: false,
        };
        let path = f.path();
        let rotated = match std::fs::metadata(&path) {
            Ok(m) if m.is_file() && m.len() > 0 => {
                let to = next_rotated_name(&f.cfg.dir, &f.cfg.name)?;
                std::fs::rename(&path, &to)?;
                Some(to)
            }
            _ => None,
        };
        f.reopen()?;
        Ok((f, rotated))
    }

    /// The live file's path.
    pub fn path(&self) -> PathBuf {
        self.cfg.dir.join(&self.cfg.name)
    }

    fn reopen(&mut self) -> io::Result<()> {
        let file = OpenOptions::new().create(true).append(true).open(self.path())?;
        let m = file.metadata()?;
        self.inode = m.ino();
        self.size = m.len();
        self.file = Some(file);
        self.records = 0;
        self.enc = self.gz.then(|| {
            GzEncoder::new(Vec::with_capacity(64 << 10), Compression::new(self.cfg.level))
        });
        Ok(())
    }

    /// True when bytes from an earlier attempt are still waiting.
    pub fn blocked(&self) -> bool {
        !self.unwritten.is_empty()
    }

    /// Writes whatever is waiting. `Ok` means nothing waits any more.
    ///
    /// # Errors
    /// The write failed; the bytes stay and are retried next time.
    pub fn drain(&mut self) -> io::Result<()> {
        if let Some(enc) = &mut self.enc {
            self.unwritten.append(enc.get_mut());
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
        if self.blocked() {
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
        let pending = self.unwritten.len() + self.enc.as_ref().map_or(0, |e| e.get_ref().len());
        if pending >= 64 << 10 { self.drain() } else { Ok(()) }
    }

    /// Bytes this file will hold once everything produced so far is written: what size
    /// rotation compares (compressed bytes, as cgmon counts).
    pub fn produced(&self) -> u64 {
        self.size
            + self.unwritten.len() as u64
            + self.enc.as_ref().map_or(0, |e| e.get_ref().len() as u64)
    }

    /// Sync-flushes the compressor and writes everything out, so a reader (`zcat`) sees
    /// every record so far even if the process is then killed. Returns how many records
    /// this confirmed as written.
    ///
    /// # Errors
    /// The write failed; the bytes wait for the next attempt.
    pub fn flush(&mut self) -> io::Result<u64> {
        if !self.dirty && !self.blocked() {
            return Ok(std::mem::take(&mut self.unconfirmed));
        }
        if let Some(enc) = &mut self.enc {
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
    pub fn close(&mut self) -> io::Result<u64> {
        if let Some(enc) = &mut self.enc {
            enc.try_finish()?;
        }
        self.drain()?;
        if let Some(f) = &self.file {
            f.sync_data()?;
        }
        self.file = None;
        self.enc = None;
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
        let confirmed = self.close()?;
        let path = self.path();
        let ours = std::fs::metadata(&path).is_ok_and(|m| m.ino() == self.inode && m.len() > 0);
        let to = if ours {
            let to = next_rotated_name(&self.cfg.dir, &self.cfg.name)?;
            std::fs::rename(&path, &to)?;
            Some(to)
        } else {
            None
        };
        self.reopen()?;
        Ok((to, confirmed))
    }
}

/// `name` with `.N` before its extension: `flows.json.gz` → `flows.N.json.gz`,
/// `flows.gz` → `flows.N.gz`, `flows` → `flows.N`.
pub fn rotated_name(name: &str, n: u32) -> String {
    let (rest, gz) = match name.strip_suffix(".gz") {
        Some(r) => (r, ".gz"),
        None => (name, ""),
    };
    let (stem, ext) = match rest.rfind('.') {
        Some(i) if i > 0 => rest.split_at(i),
        _ => (rest, ""),
    };
    format!("{stem}.{n}{ext}{gz}")
}

/// The smallest N ≥ 1 whose rotated name is free, with and without `.gz` (as cgmon
/// chooses), so a rotated file is never overwritten and higher N is newer.
pub fn next_rotated_name(dir: &Path, name: &str) -> io::Result<PathBuf> {
    for n in 1..=u32::MAX {
        let cand = rotated_name(name, n);
        let other = match cand.strip_suffix(".gz") {
            Some(s) => s.to_string(),
            None => format!("{cand}.gz"),
        };
        if !dir.join(&cand).exists() && !dir.join(&other).exists() {
            return Ok(dir.join(cand));
        }
    }
    Err(io::Error::other("no free rotated file name"))
}

//! Secrets given as files (`--clickhouse-password-file`, `--http-token-file`): their first
//! line, read with bounds, so that a FIFO nobody writes or `/dev/zero` given by mistake
//! neither hangs the start nor fills memory, while a pipe a secrets manager writes
//! (`<(pass show ch)`) still works.

use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

/// The most of a secret file read: a secret is one line, far shorter.
const PASSWORD_MAX: usize = 4096;

/// How long a pipe given as a secret file may take to write it.
const PASSWORD_WAIT: Duration = Duration::from_secs(5);

/// The first line of a secret file (a password, a token), and warnings (empty, or
/// readable by every local user). Reads at most [`PASSWORD_MAX`] bytes and waits at most [`PASSWORD_WAIT`] for a
/// pipe, so that `/dev/zero` or a FIFO nobody writes cannot hang or exhaust the start.
pub fn read_first_line(p: &Path, flag: &str) -> Result<(String, Vec<String>), String> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(p)
        .map_err(|e| format!("cannot open it: {e}"))?;
    let meta = f.metadata().map_err(|e| format!("cannot stat it: {e}"))?;
    let mut warnings = Vec::new();
    if meta.is_file() && meta.mode() & 0o004 != 0 {
        warnings.push(format!("{flag} {}: readable by every local user (chmod o-r)", p.display()));
    }
    let mut buf = Vec::new();
    let mut chunk = [0u8; 512];
    let end = Instant::now() + PASSWORD_WAIT;
    let mut f = f;
    loop {
        match f.read(&mut chunk) {
            // A FIFO reads as ended while no writer has it open: wait for one.
            Ok(0) if buf.is_empty() && !meta.is_file() => {
                if Instant::now() >= end {
                    return Err(format!(
                        "nothing to read within {} s (a pipe nobody writes?)",
                        PASSWORD_WAIT.as_secs()
                    ));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            Ok(0) => break,
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                if buf.contains(&b'\n') {
                    break;
                }
                if buf.len() >= PASSWORD_MAX {
                    return Err(format!("no line end within its first {PASSWORD_MAX} bytes"));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() >= end {
                    return Err(format!(
                        "nothing to read within {} s (a pipe nobody writes?)",
                        PASSWORD_WAIT.as_secs()
                    ));
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("cannot read it: {e}")),
        }
    }
    let line = buf.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = line.strip_suffix(b"\r").unwrap_or(line);
    let pw = String::from_utf8(line.to_vec()).map_err(|_| "its first line is not UTF-8")?;
    if pw.chars().any(char::is_control) {
        return Err("its first line holds a control character".into());
    }
    if pw.is_empty() {
        warnings.push(format!("{flag} {}: the secret is empty", p.display()));
    }
    Ok((pw, warnings))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn password_files_are_read_to_their_first_line_within_bounds() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("pw");
        std::fs::write(&p, "s3cr/t?\nsecond line\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(read_first_line(&p, "--f").unwrap(), ("s3cr/t?".to_string(), vec![]));
        // No line end, CRLF: the whole text, or the line without its CR.
        std::fs::write(&p, "abc\r\n").unwrap();
        assert_eq!(read_first_line(&p, "--f").unwrap().0, "abc");
        std::fs::write(&p, "").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        let (pw, w) = read_first_line(&p, "--f").unwrap();
        assert_eq!(pw, "");
        // Each warning names the flag it was read for.
        assert!(w.iter().any(|w| w.starts_with("--f ") && w.contains("every local user")), "{w:?}");
        assert!(w.iter().any(|w| w.starts_with("--f ") && w.contains("is empty")), "{w:?}");
        // /dev/zero: bounded, refused.
        let e = read_first_line(Path::new("/dev/zero"), "--f").unwrap_err();
        assert!(e.contains("no line end within its first 4096 bytes"), "{e}");
        // A FIFO nobody writes: given up on, not waited for forever.
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let t = Instant::now();
        let e = read_first_line(&fifo, "--f").unwrap_err();
        assert!(e.contains("nothing to read"), "{e}");
        assert!(t.elapsed() < PASSWORD_WAIT + Duration::from_secs(2));
        assert!(
            read_first_line(&dir.path().join("none"), "--f").unwrap_err().contains("cannot open")
        );
    }
}

//! `--clickhouse` and the flags that go with it, checked before anything is written: the
//! URL, the host name every row carries, the password file and the spool directory. A
//! value that can never work is a usage error here, not a sink that fails at every batch.

use std::io::Read;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::Path;
use std::time::{Duration, Instant};

use super::flags::Cli;
use super::{EnvOrigins, UsageError, hostname};
use crate::units::clip;

/// The most of a password file read: a password is one line, far shorter.
const PASSWORD_MAX: usize = 4096;

/// How long a pipe given as the password file (`<(pass show ch)`) may take to write it.
const PASSWORD_WAIT: Duration = Duration::from_secs(5);

/// `--clickhouse` and its flags as the sink's settings. The password comes from
/// `--clickhouse-password-file` or `CGMON_CLICKHOUSE_PASSWORD`, never from a flag.
pub(super) fn sink_config(
    cli: &Cli,
    env: &EnvOrigins,
) -> Result<Option<crate::sink::SinkConfig>, UsageError> {
    let Some(url) = &cli.clickhouse else { return Ok(None) };
    let from = env.suffix(&["clickhouse", "clickhouse_table"]);
    let mut target = crate::sink::client::Target::parse(url, &cli.clickhouse_table)
        .map_err(|e| UsageError(format!("--clickhouse: {e}{from}")))?;
    let mut warnings = Vec::new();
    target.password = match &cli.clickhouse_password_file {
        Some(p) => {
            let (pw, warn) = read_password(p).map_err(|e| {
                UsageError(format!(
                    "--clickhouse-password-file {:?}: {e}{}",
                    clip(&p.display().to_string()),
                    env.suffix(&["clickhouse_password_file"])
                ))
            })?;
            warnings.extend(warn);
            Some(pw)
        }
        None => std::env::var("CGMON_CLICKHOUSE_PASSWORD").ok(),
    };
    if cli.spool_max < 1 << 20 {
        return Err(UsageError(format!(
            "invalid value '{}' for '--spool-max': at least 1M bytes{}",
            cli.spool_max,
            env.suffix(&["spool_max"])
        )));
    }
    let host = match &cli.host_name {
        Some(h) => check_host_name(h).map_err(|e| {
            UsageError(format!(
                "invalid value {:?} for '--host-name': {e}{}",
                clip(h),
                env.suffix(&["host_name"])
            ))
        })?,
        None => hostname(),
    };
    if let Some(d) = &cli.spool_dir {
        crate::sink::spool::check_dir(d).map_err(|e| {
            UsageError(format!(
                "--spool-dir {:?}: {e}{}",
                clip(&d.display().to_string()),
                env.suffix(&["spool_dir"])
            ))
        })?;
    }
    Ok(Some(crate::sink::SinkConfig {
        target,
        host,
        limits: crate::sink::batch::Limits::default(),
        spool_dir: cli.spool_dir.clone(),
        spool_max: cli.spool_max,
        backoff: crate::sink::delivery::Backoff::default(),
        compress: cli.clickhouse_compress,
        timeout: cli.clickhouse_timeout,
        warnings,
    }))
}

/// The name every row's `Host` carries and every `BatchId` begins with: not empty, at most
/// 255 bytes, no control character (a newline would split a spooled batch's head).
pub fn check_host_name(h: &str) -> Result<String, String> {
    if h.is_empty() {
        return Err("empty".into());
    }
    if h.len() > 255 {
        return Err(format!("{} bytes, over 255", h.len()));
    }
    if h.chars().any(char::is_control) {
        return Err("a control character (a newline, say)".into());
    }
    Ok(h.to_string())
}

/// The first line of a password file, and warnings (empty, or readable by every local
/// user). Reads at most [`PASSWORD_MAX`] bytes and waits at most [`PASSWORD_WAIT`] for a
/// pipe, so that `/dev/zero` or a FIFO nobody writes cannot hang or exhaust the start.
fn read_password(p: &Path) -> Result<(String, Vec<String>), String> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(p)
        .map_err(|e| format!("cannot open it: {e}"))?;
    let meta = f.metadata().map_err(|e| format!("cannot stat it: {e}"))?;
    let mut warnings = Vec::new();
    if meta.is_file() && meta.mode() & 0o004 != 0 {
        warnings.push(format!(
            "--clickhouse-password-file {}: readable by every local user (chmod o-r)",
            p.display()
        ));
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
        warnings.push(format!("--clickhouse-password-file {}: the password is empty", p.display()));
    }
    Ok((pw, warnings))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn host_names_that_would_break_a_batch_id_are_refused() {
        assert_eq!(check_host_name("web-1.eu"), Ok("web-1.eu".into()));
        assert!(check_host_name("").unwrap_err().contains("empty"));
        assert!(check_host_name("web-1\n").unwrap_err().contains("control"));
        assert!(check_host_name(&"h".repeat(256)).unwrap_err().contains("over 255"));
    }

    #[test]
    fn password_files_are_read_to_their_first_line_within_bounds() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("pw");
        std::fs::write(&p, "s3cr/t?\nsecond line\n").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(read_password(&p).unwrap(), ("s3cr/t?".to_string(), vec![]));
        // No line end, CRLF: the whole text, or the line without its CR.
        std::fs::write(&p, "abc\r\n").unwrap();
        assert_eq!(read_password(&p).unwrap().0, "abc");
        std::fs::write(&p, "").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
        let (pw, w) = read_password(&p).unwrap();
        assert_eq!(pw, "");
        assert!(w.iter().any(|w| w.contains("every local user")), "{w:?}");
        assert!(w.iter().any(|w| w.contains("is empty")), "{w:?}");
        // /dev/zero: bounded, refused.
        let e = read_password(Path::new("/dev/zero")).unwrap_err();
        assert!(e.contains("no line end within its first 4096 bytes"), "{e}");
        // A FIFO nobody writes: given up on, not waited for forever.
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let t = Instant::now();
        let e = read_password(&fifo).unwrap_err();
        assert!(e.contains("nothing to read"), "{e}");
        assert!(t.elapsed() < PASSWORD_WAIT + Duration::from_secs(2));
        assert!(read_password(&dir.path().join("none")).unwrap_err().contains("cannot open"));
    }
}

//! Parsing of the value syntaxes cgmon's flags use: Go durations (`100ms`, `1m30s`) and
//! sizes with binary suffixes (`10M`). Hand-written because users' existing command lines
//! must parse exactly as Go's `time.ParseDuration` and cgmon's size parser read them; the
//! crates we looked at (humantime, bytesize) accept other spellings and reject some of Go's
//! (`1.5h`, `300µs`, a bare `0`).

use std::time::Duration;

/// A value that does not parse, or is out of range. The message names the value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct ValueError(pub String);

/// Parses a Go duration: an optional `+`, then one or more decimal numbers each with a unit
/// (`ns`, `us`, `µs`, `μs`, `ms`, `s`, `m`, `h`), e.g. `1h15m30.5s`. A bare `0` is zero.
/// Negative durations are rejected (no flag of ours means anything by them).
///
/// # Errors
/// Malformed text, a missing or unknown unit, or an overflow.
pub fn parse_duration(text: &str) -> Result<Duration, ValueError> {
    let bad = |why: &str| ValueError(format!("invalid duration {text:?}: {why}"));
    let mut s = text.strip_prefix('+').unwrap_or(text);
    if s.starts_with('-') {
        return Err(bad("must not be negative"));
    }
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    if s.is_empty() {
        return Err(bad("empty"));
    }
    let mut total: u128 = 0;
    while !s.is_empty() {
        let num_end = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
        let (num, rest) = s.split_at(num_end);
        if num.is_empty() || num == "." || num.matches('.').count() > 1 {
            return Err(bad("expected a number"));
        }
        let unit_end = rest.find(|c: char| c.is_ascii_digit() || c == '.').unwrap_or(rest.len());
        let (unit, rest) = rest.split_at(unit_end);
        let scale: u128 = match unit {
            "ns" => 1,
            "us" | "µs" | "μs" => 1_000,
            "ms" => 1_000_000,
            "s" => 1_000_000_000,
            "m" => 60_000_000_000,
            "h" => 3_600_000_000_000,
            "" => return Err(bad("missing unit (use ns, us, ms, s, m or h)")),
            _ => return Err(bad(&format!("unknown unit {unit:?}"))),
        };
        let (int, frac) = num.split_once('.').unwrap_or((num, ""));
        let int: u128 =
            if int.is_empty() { 0 } else { int.parse().map_err(|_| bad("overflow"))? };
        let mut ns = int.checked_mul(scale).ok_or_else(|| bad("overflow"))?;
        // The fraction, exactly to the nanosecond (digits beyond it are dropped, as Go does).
        let mut place = scale;
        for d in frac.bytes() {
            place /= 10;
            if place == 0 {
                break;
            }
            ns += u128::from(d - b'0') * place;
        }
        total = total.checked_add(ns).ok_or_else(|| bad("overflow"))?;
        s = rest;
    }
    let total = u64::try_from(total).map_err(|_| bad("overflow"))?;
    Ok(Duration::from_nanos(total))
}

/// Formats a duration the way Go prints one (`1m30s`, `100ms`, `0s`), for help and logs.
pub fn format_duration(d: Duration) -> String {
    let ns = d.as_nanos();
    if ns == 0 {
        return "0s".into();
    }
    if ns < 1_000_000_000 {
        let (v, unit) = if ns < 1_000 {
            (ns as f64, "ns")
        } else if ns < 1_000_000 {
            (ns as f64 / 1e3, "µs")
        } else {
            (ns as f64 / 1e6, "ms")
        };
        return format!("{v}{unit}");
    }
    let secs = ns / 1_000_000_000;
    let sub = ns % 1_000_000_000;
    let (h, m, s) = (secs / 3600, secs / 60 % 60, secs % 60);
    let mut out = String::new();
    if h > 0 {
        out += &format!("{h}h");
    }
    if h > 0 || m > 0 {
        out += &format!("{m}m");
    }
    if sub == 0 {
        out += &format!("{s}s");
    } else {
        let frac = format!("{sub:09}");
        out += &format!("{s}.{}s", frac.trim_end_matches('0'));
    }
    out
}

/// What a URL's query leaves as it is: RFC 3986's unreserved characters.
const UNRESERVED: &percent_encoding::AsciiSet =
    &percent_encoding::NON_ALPHANUMERIC.remove(b'-').remove(b'_').remove(b'.').remove(b'~');

/// `s` percent-encoded for a URL's query (a value, or a whole query the server decodes):
/// the pages' filter links and the sink's `?query=`.
pub fn url_escape(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, UNRESERVED).to_string()
}

/// Bytes in SI units, as `ss` and iperf3 write them for a person: `4.1 KB`, `2.0 GB`
/// (10³ steps; sizes a user types keep their ×1024 suffixes, see [`parse_size`]).
pub fn si_bytes(b: u64) -> String {
    if b < 1000 {
        // The same text as `{:.0}` of the float, without its exact-mode float formatting
        // (a bignum path), which was a third of a churned flow's diagnosis ("too short to
        // judge: 102 B sent"; benches/RESULTS.md, D16).
        return format!("{b} B");
    }
    let b = b as f64;
    match b {
        _ if b >= 1e12 => format!("{:.1} TB", b / 1e12),
        _ if b >= 1e9 => format!("{:.1} GB", b / 1e9),
        _ if b >= 1e6 => format!("{:.1} MB", b / 1e6),
        _ if b >= 1e3 => format!("{:.1} KB", b / 1e3),
        _ => format!("{b:.0} B"),
    }
}

/// A rate given in Mbit/s, in SI units with one decimal: `16.1 Gbit/s`, `5.9 Mbit/s`.
pub fn si_rate_mbps(mbps: f64) -> String {
    match mbps {
        _ if mbps >= 1e3 => format!("{:.1} Gbit/s", mbps / 1e3),
        _ if mbps >= 1.0 => format!("{mbps:.1} Mbit/s"),
        _ if mbps >= 1e-3 => format!("{:.1} kbit/s", mbps * 1e3),
        _ => format!("{:.0} bit/s", mbps * 1e6),
    }
}

/// A rate given in bytes per second, as [`si_rate_mbps`] writes it (in bits).
pub fn si_rate_bps(bytes_per_s: f64) -> String {
    si_rate_mbps(bytes_per_s * 8.0 / 1e6)
}

/// Most characters of a bad value an error message quotes: enough to recognise it, and a
/// 100 KB filter pasted by mistake does not fill the terminal (or the journal).
pub const QUOTED_CHARS: usize = 200;

/// `s` cut to [`QUOTED_CHARS`] characters, with how long it was, for an error message.
pub fn clip(s: &str) -> std::borrow::Cow<'_, str> {
    match s.char_indices().nth(QUOTED_CHARS) {
        None => s.into(),
        Some((at, _)) => format!("{}… ({} bytes in all)", &s[..at], s.len()).into(),
    }
}

/// `msg` shortened in its middle when a value inside made it long: the start (which
/// names the flag) and the end (the reason) stay. A safety net for messages built by
/// others (clap, parsers) around a value; values we quote ourselves go through [`clip`].
pub fn clip_line(msg: &str) -> String {
    let keep = 2 * QUOTED_CHARS;
    if msg.chars().count() <= keep + QUOTED_CHARS {
        return msg.to_string();
    }
    let head: String = msg.chars().take(keep).collect();
    let tail: String = {
        let t: Vec<char> = msg.chars().rev().take(QUOTED_CHARS / 2).collect();
        t.into_iter().rev().collect()
    };
    format!("{head}… ({} bytes in all) …{tail}", msg.len())
}

/// Parses a size: a whole number of bytes, optionally followed by `K`, `M`, `G` or `T`
/// (×1024ⁿ, as cgmon reads them; `KiB`, `MiB`… and lower case are accepted too).
///
/// # Errors
/// Malformed text, an unknown suffix, or an overflow.
pub fn parse_size(text: &str) -> Result<u64, ValueError> {
    let bad = |why: &str| ValueError(format!("invalid size {text:?}: {why}"));
    let digits = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
    let (num, suffix) = text.split_at(digits);
    if num.is_empty() {
        return Err(bad("expected a number of bytes, e.g. 10M"));
    }
    let shift = match suffix {
        "" | "B" | "b" => 0,
        "K" | "k" | "KiB" | "KB" => 10,
        "M" | "m" | "MiB" | "MB" => 20,
        "G" | "g" | "GiB" | "GB" => 30,
        "T" | "t" | "TiB" | "TB" => 40,
        _ => return Err(bad(&format!("unknown suffix {suffix:?} (use K, M, G or T)"))),
    };
    let n: u64 = num.parse().map_err(|_| bad("overflow"))?;
    n.checked_mul(1u64 << shift).ok_or_else(|| bad("overflow"))
}

/// Parses a listen address: `host:port`, `[v6]:port`, or Go's `:port` (every interface).
///
/// # Errors
/// The text is not an address with a port.
pub fn parse_addr(s: &str) -> Result<std::net::SocketAddr, ValueError> {
    let full = if s.starts_with(':') { format!("[::]{s}") } else { s.to_string() };
    full.parse().map_err(|_| {
        ValueError(format!(
            "invalid value {s:?} for '--run-http-server': want host:port, e.g. 127.0.0.1:9464"
        ))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_under_a_kilobyte_as_the_float_path_writes_them() {
        for b in [0, 1, 9, 10, 99, 100, 102, 999] {
            assert_eq!(si_bytes(b), format!("{:.0} B", b as f64));
        }
        assert_eq!(
            (si_bytes(999), si_bytes(1000), si_bytes(4096)),
            ("999 B".into(), "1.0 KB".into(), "4.1 KB".into())
        );
    }

    #[test]
    fn go_durations() {
        let ms = Duration::from_millis;
        assert_eq!(parse_duration("100ms"), Ok(ms(100)));
        assert_eq!(parse_duration("1s"), Ok(ms(1000)));
        assert_eq!(parse_duration("1m30s"), Ok(ms(90_000)));
        assert_eq!(parse_duration("1.5h"), Ok(ms(5_400_000)));
        assert_eq!(parse_duration("15m"), Ok(ms(900_000)));
        assert_eq!(parse_duration("300µs"), Ok(Duration::from_micros(300)));
        assert_eq!(parse_duration("300us"), Ok(Duration::from_micros(300)));
        assert_eq!(parse_duration("2ns"), Ok(Duration::from_nanos(2)));
        assert_eq!(parse_duration(".5s"), Ok(ms(500)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("1.0000000001s"), Ok(ms(1000)));
    }

    #[test]
    fn bad_durations_name_the_value() {
        for bad in ["", "1", "abc", "1x", "-1s", "1..5s", ".s", "s", "99999999999999999999h"] {
            let e = parse_duration(bad).unwrap_err().to_string();
            assert!(e.contains(&format!("{bad:?}")), "{e}");
        }
    }

    #[test]
    fn durations_print_as_go_does() {
        for (d, s) in [
            (Duration::ZERO, "0s"),
            (Duration::from_millis(100), "100ms"),
            (Duration::from_secs(1), "1s"),
            (Duration::from_secs(900), "15m0s"),
            (Duration::from_millis(1500), "1.5s"),
            (Duration::from_secs(3661), "1h1m1s"),
        ] {
            assert_eq!(format_duration(d), s);
            assert_eq!(parse_duration(s), Ok(d));
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("10M"), Ok(10 << 20));
        assert_eq!(parse_size("200K"), Ok(200 << 10));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("512"), Ok(512));
        assert_eq!(parse_size("4MiB"), Ok(4 << 20));
        for bad in ["10X", "", "M", "1.5M", "-1", "99999999999T"] {
            let e = parse_size(bad).unwrap_err().to_string();
            assert!(e.contains(&format!("{bad:?}")), "{e}");
        }
    }
}

/// A password or token: its `Debug` never shows it, so a settings struct logged with `{:?}`
/// cannot leak it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(…)")
    }
}

/// Opens `p` to read a file the monitor is handed (a spool batch, a map): a regular file of
/// at most `max` bytes, opened without blocking, so that a FIFO or `/dev/zero` in its place
/// neither hangs nor fills memory; through a symbolic link only when `follow` (a Kubernetes
/// ConfigMap is a link; a file in a directory others could write into must not be). Returns
/// the file and its length.
///
/// # Errors
/// Why it cannot be read so, in words for a log or usage line (`InvalidData` for a file
/// that is not regular or is too large).
pub fn open_regular(
    p: &std::path::Path,
    max: u64,
    follow: bool,
) -> std::io::Result<(std::fs::File, u64)> {
    use std::io::{Error, ErrorKind};
    use std::os::unix::fs::OpenOptionsExt;
    let nofollow = if follow { 0 } else { libc::O_NOFOLLOW };
    let f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nofollow | libc::O_NONBLOCK)
        .open(p)
        .map_err(|e| Error::new(e.kind(), format!("cannot open: {e}")))?;
    let m = f.metadata().map_err(|e| Error::new(e.kind(), format!("cannot stat: {e}")))?;
    if !m.is_file() {
        return Err(Error::new(ErrorKind::InvalidData, "not a regular file"));
    }
    if m.len() > max {
        let why = format!("{} bytes, over the {max} it may have", m.len());
        return Err(Error::new(ErrorKind::InvalidData, why));
    }
    Ok((f, m.len()))
}

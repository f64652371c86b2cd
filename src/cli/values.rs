//! Value parsers for the flags: each names the bad value and why, in one line.

use std::time::Duration;

use crate::filter;
use crate::states::StateSet;
use crate::units::{ValueError, format_duration, parse_duration, parse_size};

pub(super) fn positive_duration(s: &str) -> Result<Duration, ValueError> {
    let d = parse_duration(s)?;
    if d.is_zero() {
        return Err(ValueError(format!("invalid duration {s:?}: must be greater than 0")));
    }
    Ok(d)
}

/// `--clickhouse-batch-interval`: above 0 and at most 10 minutes (a batch waits in memory,
/// or in the spool, that long before its first try).
pub(super) fn batch_interval(s: &str) -> Result<Duration, ValueError> {
    let d = positive_duration(s)?;
    if d > Duration::from_secs(600) {
        return Err(ValueError(format!("invalid duration {s:?}: at most 10m")));
    }
    Ok(d)
}

pub(super) fn destroy_grace(s: &str) -> Result<Duration, ValueError> {
    let d = parse_duration(s)?;
    let max = crate::tracker::MAX_DESTROY_GRACE;
    if d > max {
        return Err(ValueError(format!(
            "invalid duration {s:?}: at most {} (waiting flows hold their samples)",
            format_duration(max)
        )));
    }
    Ok(d)
}

pub(crate) fn netns_which(s: &str) -> Result<crate::netns::Which, ValueError> {
    crate::netns::Which::parse(s)
}

/// `--cpu-budget`: a percentage of one core, `2`, `2%` or `0.5`; 0 turns tiers off.
pub(super) fn cpu_budget(s: &str) -> Result<f64, ValueError> {
    let t = s.trim().trim_end_matches('%');
    match t.parse::<f64>() {
        Ok(p) if (0.0..=100.0).contains(&p) => Ok(p / 100.0),
        _ => Err(ValueError(format!(
            "invalid CPU budget {s:?}: a percentage of one core from 0 to 100, e.g. 2 or 0.5%"
        ))),
    }
}

pub(super) fn size(s: &str) -> Result<u64, ValueError> {
    parse_size(s)
}

/// `--writer-backlog`: the backlog holds records while the output cannot take them. Below
/// 1 MiB a short stall would lose a few hundred records; above 16 GiB it is a typo (or
/// the memory the host needs for everything else).
pub(super) fn backlog_size(s: &str) -> Result<u64, ValueError> {
    match parse_size(s)? {
        n if (1 << 20..=16 << 30).contains(&n) => Ok(n),
        n => Err(ValueError(format!("must be 1M to 16G bytes, not {n}"))),
    }
}

/// A netlink receive buffer: SO_RCVBUF and SO_RCVBUFFORCE take a C int.
pub(super) fn rcvbuf_size(s: &str) -> Result<u64, ValueError> {
    match parse_size(s)? {
        n if n <= i32::MAX as u64 => Ok(n),
        n => Err(ValueError(format!("at most {} bytes (a C int), not {n}", i32::MAX))),
    }
}

/// `--destroy-buffer`: a C int's worth, and room for a few events at least.
pub(super) fn destroy_size(s: &str) -> Result<u64, ValueError> {
    match rcvbuf_size(s)? {
        n if n < 4096 => Err(ValueError(format!("at least 4096 bytes (a few events), not {n}"))),
        n => Ok(n),
    }
}

pub(super) fn port_list(s: &str) -> Result<String, ValueError> {
    if s.is_empty() {
        return Ok(String::new());
    }
    filter::parse_port_list(s).map_err(|e| ValueError(e.to_string()))?;
    Ok(s.to_string())
}

pub(super) fn states(s: &str) -> Result<StateSet, ValueError> {
    StateSet::parse(s).map_err(|e| ValueError(e.to_string()))
}

pub(super) fn go_bool(s: &str) -> Result<bool, ValueError> {
    match s {
        "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
        "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
        _ => Err(ValueError(format!("invalid boolean {s:?} (use true or false)"))),
    }
}

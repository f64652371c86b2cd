//! A flow record as a ClickHouse `JSONEachRow` row.
//!
//! The row is the record's own JSON (what the files hold, so nothing is lost on a server
//! that maps the nested parts) with flat columns appended: the host, the batch id, and the
//! parts of the nested record that fleets filter and group by. ClickHouse 18.16 skips
//! nested objects (`input_format_skip_unknown_fields=1`), so without these the diagnosis
//! would not reach its tables (docs/clickhouse.md). The columns are appended to the
//! serialised record rather than built through a `serde_json::Value`, which would
//! allocate for every field of every record.

use std::io::Write;

use crate::record::FlowStats;

/// The flat columns a row adds to its record, in order (the DDL declares each).
pub const FLAT_COLUMNS: [&str; 15] = [
    "Host",
    "BatchId",
    "Verdict",
    "Cause",
    "Finding",
    "ReceiverWindowPct",
    "SendBufferPct",
    "NetworkPct",
    "ApplicationPct",
    "SrcIP",
    "SrcPort",
    "DstIP",
    "DstPort",
    "ZeroWindowStalls",
    "ZeroWindowms",
];

/// Appends `r`'s row to `out`: its record JSON (`json`, as the writer serialised it,
/// without a trailing newline or with one) with the flat columns, then a newline.
///
/// # Errors
/// `json` is not a JSON object.
pub fn append(
    out: &mut Vec<u8>,
    json: &[u8],
    r: &FlowStats,
    host: &str,
    batch_id: &str,
) -> Result<(), RowError> {
    let body = json.trim_ascii_end();
    let Some(open) = body.strip_suffix(b"}") else {
        return Err(RowError::NotAnObject);
    };
    if !body.starts_with(b"{") {
        return Err(RowError::NotAnObject);
    }
    out.extend_from_slice(open);
    // A record always has fields, so a comma follows the last one.
    let q = |s: &str| serde_json::to_string(s).expect("a string serialises");
    // One spelling everywhere a fleet looks (ClickHouse, /metrics, the pages): a value
    // the record leaves out is `unknown` (who) or `none` (no cause), never blank. The
    // record itself keeps leaving the field out, so its parsers do not change.
    let (verdict, cause, finding, shares) = match &r.diagnosis {
        Some(d) => (d.verdict, d.cause.unwrap_or(NO_CAUSE), d.finding.as_str(), Some(&d.shares)),
        None => (UNKNOWN, NO_CAUSE, "", None),
    };
    // Through serde_json, as the record's own numbers are (98.0, not 98).
    let pct = |f: fn(&crate::record::TimeShares) -> f64| {
        serde_json::to_string(&shares.map_or(0.0, f)).expect("a float serialises")
    };
    writeln!(
        out,
        ",\"Host\":{},\"BatchId\":{},\"Verdict\":{},\"Cause\":{},\"Finding\":{},\
         \"ReceiverWindowPct\":{},\
         \"SendBufferPct\":{},\"NetworkPct\":{},\"ApplicationPct\":{},\"SrcIP\":{},\
         \"SrcPort\":{},\"DstIP\":{},\"DstPort\":{},\"ZeroWindowStalls\":{},\
         \"ZeroWindowms\":{}}}",
        q(host),
        q(batch_id),
        q(verdict),
        q(cause),
        q(finding),
        pct(|s| s.receiver_window),
        pct(|s| s.send_buffer),
        pct(|s| s.network),
        pct(|s| s.application),
        q(&r.id.src_ip),
        r.id.src_port,
        q(&r.id.dst_ip),
        r.id.dst_port,
        r.diagnosis.as_ref().and_then(|d| d.signals.zero_window_stalls).unwrap_or(0),
        serde_json::to_string(
            &r.diagnosis.as_ref().and_then(|d| d.signals.zero_window_ms).unwrap_or(0.0)
        )
        .expect("a float serialises"),
    )
    .expect("writing to a Vec cannot fail");
    // Only where the record has none: a key written twice is refused by some servers.
    let named = [
        ("Service", r.service.is_some()),
        ("DestService", r.dest_service.is_some()),
        ("Comm", r.comm.is_some()),
    ];
    if named.iter().any(|(_, has)| !has) {
        out.truncate(out.len() - 2); // "}\n"
        for (k, has) in named {
            if !has {
                write!(out, ",\"{k}\":\"{UNKNOWN}\"").expect("writing to a Vec cannot fail");
            }
        }
        out.extend_from_slice(b"}\n");
    }
    Ok(())
}

/// A name the monitor could not find (service, destination, program), in ClickHouse and
/// on every page and label.
pub const UNKNOWN: &str = "unknown";

/// The cause of a flow no rule explained.
pub const NO_CAUSE: &str = crate::metrics::verdicts::NO_CAUSE;

/// A record that cannot become a row.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RowError {
    /// The serialised record is not a JSON object.
    #[error("a record's JSON is not an object")]
    NotAnObject,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::{AnalyzerConfig, analyze};
    use crate::tracker::testing::ended_flow;
    use crate::wire::build::SockBuilder;

    #[test]
    fn a_row_is_the_record_plus_the_flat_columns() {
        const S: u64 = 1_000_000_000;
        let a = SockBuilder::new(7, 5000, 80).rtt_us(50_000).min_rtt_us(50_000).snd_wnd(85_000);
        let mut e = ended_flow(&[
            (S, a.clone().chrono_us(0, 0, 0).bytes_acked(1)),
            (11 * S, a.chrono_us(9_900_000, 9_800_000, 0).bytes_acked(16_500_001)),
        ]);
        let r = analyze(&mut e, &AnalyzerConfig::default());
        let json = serde_json::to_vec(&r).unwrap();
        let mut out = Vec::new();
        append(&mut out, &json, &r, "web-1 \"eu\"", "web-1/42").unwrap();
        append(&mut out, &json, &r, "web-1", "web-1/43").unwrap();
        let rows: Vec<serde_json::Value> = out
            .split(|&b| b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice(l).unwrap())
            .collect();
        assert_eq!(rows.len(), 2);
        let v = &rows[0];
        let record: serde_json::Value = serde_json::from_slice(&json).unwrap();
        for (k, want) in record.as_object().unwrap() {
            assert_eq!(&v[k], want, "{k}: the record is whole");
        }
        // No key twice (serde_json keeps the last of two).
        let first = std::str::from_utf8(out.split(|&b| b == b'\n').next().unwrap()).unwrap();
        let text = std::str::from_utf8(&json).unwrap();
        for k in FLAT_COLUMNS.iter().chain(&["Service", "DestService", "Comm"]) {
            let key = format!("\"{k}\":");
            // Once more than the record holds it (nested, as Diagnosis.Verdict).
            assert_eq!(first.matches(&key).count(), text.matches(&key).count() + 1, "{k}");
        }
        // A named flow keeps its names.
        let mut named = r.clone();
        named.service = Some("web".into());
        named.comm = Some("nginx".into());
        let nj = serde_json::to_vec(&named).unwrap();
        let mut o = Vec::new();
        append(&mut o, &nj, &named, "h", "b").unwrap();
        let n: serde_json::Value = serde_json::from_slice(&o).unwrap();
        assert_eq!(
            (n["Service"].as_str(), n["Comm"].as_str(), n["DestService"].as_str()),
            (Some("web"), Some("nginx"), Some("unknown"))
        );
        assert_eq!(v["Host"], "web-1 \"eu\"");
        // Unnamed, the record leaves them out; the row says unknown.
        assert!(record.get("Service").is_none() && record.get("Comm").is_none());
        assert_eq!(
            (v["Service"].as_str(), v["DestService"].as_str(), v["Comm"].as_str()),
            (Some("unknown"), Some("unknown"), Some("unknown"))
        );
        assert_eq!(v["Cause"], record["Diagnosis"]["Cause"].as_str().unwrap_or("none"));
        assert_eq!(v["BatchId"], "web-1/42");
        assert_eq!(v["Verdict"], "receiver-window");
        assert_eq!(v["Finding"], record["Diagnosis"]["Finding"]);
        assert_eq!(v["ReceiverWindowPct"], record["Diagnosis"]["TimeShares"]["ReceiverWindowPct"]);
        assert_eq!((v["SrcPort"].as_u64(), v["DstPort"].as_u64()), (Some(5000), Some(80)));
        for c in FLAT_COLUMNS {
            assert!(v.get(c).is_some(), "{c}");
        }
        assert_eq!(append(&mut out, b"[1]", &r, "h", "b"), Err(RowError::NotAnObject));
    }
}

//! The text formats: OpenMetrics as prometheus-client writes it, and Prometheus text
//! format 0.0.4 for clients that do not ask for OpenMetrics.

use prometheus_client::registry::Registry;

/// The registry rendered as OpenMetrics text (what Prometheus asks for).
///
/// # Errors
/// Formatting failed (it does not, writing to a String).
pub fn render(r: &Registry) -> Result<String, std::fmt::Error> {
    let mut s = String::with_capacity(16 << 10);
    prometheus_client::encoding::text::encode(&mut s, r)?;
    Ok(s)
}

/// OpenMetrics text rewritten as Prometheus text format 0.0.4, for clients that do not ask
/// for OpenMetrics (curl, `promtool check metrics`). prometheus-client writes only
/// OpenMetrics, where a counter family `x` has samples `x_total`; format 0.0.4 names the
/// family `x_total` too, and has no `# EOF`.
pub fn to_prometheus_text(om: &str) -> String {
    let mut out = String::with_capacity(om.len());
    let mut help: Option<&str> = None;
    for line in om.lines() {
        if line == "# EOF" {
            continue;
        }
        if line.starts_with("# HELP ") {
            if let Some(h) = help.replace(line) {
                out.push_str(h);
                out.push('\n');
            }
            continue;
        }
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap_or((rest, ""));
            let h = help.take();
            if kind == "counter" {
                if let Some(h) = h {
                    let text = h.strip_prefix("# HELP ").and_then(|t| t.strip_prefix(name));
                    out.push_str(&format!("# HELP {name}_total{}\n", text.unwrap_or("")));
                }
                out.push_str(&format!("# TYPE {name}_total counter\n"));
            } else {
                if let Some(h) = h {
                    out.push_str(h);
                    out.push('\n');
                }
                out.push_str(line);
                out.push('\n');
            }
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

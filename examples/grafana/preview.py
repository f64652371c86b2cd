"""Draws a cgmon-rs Grafana dashboard's panels from their own queries, without Grafana:
for the README's pictures (Grafana has no package in the registries this project uses).

    python3 preview.py cgmon-host.json --prometheus http://127.0.0.1:9090 [--minutes 15] -o host.html
    python3 preview.py cgmon-fleet.json --rows rows.ndjson --ddl ../clickhouse/flows.sql -o fleet.html

With --prometheus, each time series panel's targets run as range queries over the last
--minutes (variables "All", $__rate_interval four scrape intervals) and are drawn as lines,
with the legend's {{label}} names. With --rows (the sink's rows, JSON lines), the rows go
into chdb with the table's DDL, each SQL panel runs with the ClickHouse plugin's macros
expanded for the rows' time range, and is drawn as a table, or as lines for a time series.
The HTML is one self-contained page; open it, or screenshot it in headless Chromium.
"""
import argparse
import html
import json
import re
import sys
import time
import urllib.parse
import urllib.request

COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2",
           "#17becf", "#7f7f7f", "#bcbd22"]


def prom_range(base, expr, start, end, step):
    q = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": step})
    with urllib.request.urlopen(f"{base}/api/v1/query_range?{q}", timeout=30) as r:
        v = json.load(r)
    if v["status"] != "success":
        raise RuntimeError(f"{expr}: {v}")
    return v["data"]["result"]


def legend(fmt, labels):
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt or "") or \
        ",".join(f"{k}={v}" for k, v in labels.items())


def human(v, unit):
    if unit == "percentunit":
        return f"{v * 100:.1f} %"
    if unit == "s":
        return f"{v * 1000:.2f} ms" if v < 1 else f"{v:.2f} s"
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= div:
            v, pre = v / div, suffix
            break
    else:
        pre = ""
    tail = {"bps": "bit/s", "bytes": "B", "ops": "/s"}.get(unit, "")
    return f"{v:.3g} {pre}{tail}".strip()


def lines_svg(series, unit, t0, t1):
    """series: [(name, [(t, v)])] drawn as a 760×220 SVG with a legend under it."""
    w, h, left, top, bottom = 760, 220, 70, 10, 24
    vals = [v for _, pts in series for _, v in pts]
    hi = max(vals) if vals else 1.0
    hi = hi if hi > 0 else 1.0
    x = lambda t: left + (t - t0) / max(t1 - t0, 1e-9) * (w - left - 10)
    y = lambda v: top + (1 - v / hi) * (h - top - bottom)
    out = [f'<svg width="{w}" height="{h}" viewBox="0 0 {w} {h}" xmlns="http://www.w3.org/2000/svg">']
    for k in range(5):
        v = hi * k / 4
        out.append(f'<line x1="{left}" x2="{w - 10}" y1="{y(v):.1f}" y2="{y(v):.1f}" stroke="#e5e5e5"/>'
                   f'<text x="{left - 6}" y="{y(v) + 4:.1f}" text-anchor="end" font-size="11">{html.escape(human(v, unit))}</text>')
    for k in range(5):
        t = t0 + (t1 - t0) * k / 4
        out.append(f'<text x="{x(t):.1f}" y="{h - 6}" text-anchor="{"end" if k == 4 else "middle"}" font-size="11">{time.strftime("%H:%M", time.localtime(t))}</text>')
    for i, (_, pts) in enumerate(series):
        if pts:
            p = " ".join(f"{x(t):.1f},{y(v):.1f}" for t, v in pts)
            out.append(f'<polyline fill="none" stroke="{COLOURS[i % len(COLOURS)]}" stroke-width="1.6" points="{p}"/>')
    out.append("</svg>")
    keys = "".join(f'<span class="k"><i style="background:{COLOURS[i % len(COLOURS)]}"></i>{html.escape(n)}</span>'
                   for i, (n, _) in enumerate(series[:12]))
    return "".join(out) + f'<div class="legend">{keys}</div>'


def table_html(rows, limit=12):
    if not rows:
        return "<p class=\"none\">No rows in this range.</p>"
    cols = list(rows[0].keys())
    head = "".join(f"<th>{html.escape(c)}</th>" for c in cols)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(str(r[c]))[:160]}</td>" for c in cols) + "</tr>"
                   for r in rows[:limit])
    more = f"<p class=\"none\">… {len(rows) - limit} more rows</p>" if len(rows) > limit else ""
    return f"<table><tr>{head}</tr>{body}</table>{more}"


def expand(sql, frm, to):
    step = max(1, (to - frm) // 100)
    sql = re.sub(r"\$__conditionalAll\((.*?), \$(\w+)\)", "1=1", sql, flags=re.S)
    sql = re.sub(r"\$__timeFilter\((\w+)\)",
                 lambda m: f"{m.group(1)} >= toDateTime({frm}) AND {m.group(1)} <= toDateTime({to})", sql)
    sql = re.sub(r"\$__timeInterval\((\w+)\)",
                 lambda m: f"toStartOfInterval(toDateTime({m.group(1)}), INTERVAL {step} second)", sql)
    sql = sql.replace("$__interval_s", str(step))
    return sql.replace("$__fromTime", f"toDateTime({frm})").replace("$__toTime", f"toDateTime({to})")


def page(title, sections):
    style = ("body{font:13px system-ui,sans-serif;background:#111217;color:#ccccdc;margin:0;padding:12px}"
             "h1{font-size:18px;margin:4px 0 10px}.grid{display:flex;flex-wrap:wrap;gap:10px}"
             ".panel{background:#181b1f;border:1px solid #2c3235;border-radius:3px;padding:8px;width:780px}"
             ".panel.wide{width:1570px}.panel h2{font-size:13px;margin:0 0 6px;color:#d8d9da}"
             "svg text{fill:#9fa7b3}table{border-collapse:collapse;width:100%;font-size:12px}"
             "td,th{border-bottom:1px solid #2c3235;padding:3px 6px;text-align:left}th{color:#9fa7b3}"
             ".legend{font-size:11px;margin-top:4px}.k{margin-right:12px;white-space:nowrap}"
             ".k i{display:inline-block;width:10px;height:3px;margin-right:4px;vertical-align:middle}"
             ".none{color:#777}.note{color:#9fa7b3;font-size:12px}")
    return (f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>"
            f"<style>{style}</style></head><body><h1>{html.escape(title)}</h1>"
            "<p class=\"note\">Drawn by examples/grafana/preview.py from the dashboard's own queries "
            "(not by Grafana).</p><div class=\"grid\">" + "".join(sections) + "</div></body></html>\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("dashboard")
    ap.add_argument("--prometheus")
    ap.add_argument("--minutes", type=float, default=15)
    ap.add_argument("--rows")
    ap.add_argument("--ddl")
    ap.add_argument("-o", "--output", required=True)
    a = ap.parse_args()
    d = json.load(open(a.dashboard))
    sections = []
    if a.prometheus:
        end = time.time()
        start = end - a.minutes * 60
        step = max(5, int(a.minutes * 60 / 200))
        for p in d["panels"]:
            if p["type"] == "row":
                continue
            unit = p.get("fieldConfig", {}).get("defaults", {}).get("unit", "")
            series = []
            for t in p["targets"]:
                expr = (t["expr"].replace("$__rate_interval", f"{4 * step}s")
                        .replace("$instance", ".*").replace("$service", ".*"))
                for s in prom_range(a.prometheus, expr, start, end, step):
                    pts = [(float(x), float(v)) for x, v in s["values"] if v not in ("NaN", "+Inf", "-Inf")]
                    series.append((legend(t.get("legendFormat"), s["metric"]), pts))
            sections.append(f'<div class="panel"><h2>{html.escape(p["title"])}</h2>{lines_svg(series, unit, start, end)}</div>')
    elif a.rows:
        import chdb.session
        import tempfile
        s = chdb.session.Session(tempfile.mkdtemp())
        text = "\n".join(l for l in open(a.ddl) if not l.strip().startswith("--"))
        for st in [x.strip() for x in text.split(";") if x.strip()]:
            s.query(st)
        s.query(f"INSERT INTO cgmon.flows SELECT * FROM file('{a.rows}', JSONEachRow) "
                "SETTINGS input_format_skip_unknown_fields=1")
        frm, to = [int(x) for x in s.query(
            "SELECT toUnixTimestamp(min(EndTime)) - 60, toUnixTimestamp(max(EndTime)) + 60 FROM cgmon.flows",
            "TSV").data().split()]
        for p in d["panels"]:
            sql = expand(p["targets"][0]["rawSql"], frm, to)
            rows = [json.loads(l) for l in s.query(sql + " FORMAT JSONEachRow", "JSONEachRow").data().splitlines() if l.strip()]
            wide = " wide" if p["gridPos"]["w"] == 24 else ""
            if p["type"] == "timeseries" and rows:
                keys = list(rows[0].keys())
                tcol, vcol = keys[0], keys[-1]
                groups = {}
                for r in rows:
                    t = time.mktime(time.strptime(r[tcol][:19], "%Y-%m-%d %H:%M:%S"))
                    groups.setdefault(str(r[keys[1]]), []).append((t, float(r[vcol])))
                unit = p["fieldConfig"]["defaults"].get("unit", "")
                body = lines_svg(sorted(groups.items()), unit, frm, to)
            else:
                body = table_html(rows)
            sections.append(f'<div class="panel{wide}"><h2>{html.escape(p["title"])}</h2>{body}</div>')
    else:
        sys.exit("--prometheus or --rows")
    open(a.output, "w").write(page(d["title"], sections))


if __name__ == "__main__":
    main()

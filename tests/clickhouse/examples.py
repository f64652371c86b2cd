"""Runs every query in examples/clickhouse/queries/ (and, given Grafana dashboards, every
SQL query of theirs) over the table a cgmon-rs monitor filled, and checks each answer
against the same question answered here in Python from the monitor's gzip record files.

Usage:
  python3 examples.py --files DIR --host NAME --chdb ROWS.ndjson EXAMPLES_DIR [DASH.json ...]
  python3 examples.py --files DIR --host NAME --server URL EXAMPLES_DIR [DASH.json ...]

--chdb: current ClickHouse SQL in process (chdb has no HTTP listener, so no monitor can
talk to it): the table is examples/clickhouse/flows.sql (what `cgmon-rs clickhouse-ddl`
prints for a current server; a Rust test keeps the file equal to it), loaded with ROWS,
the rows the monitor's sink sent. --server: a real server (ClickHouse 18.16 in CI) whose
table cgmon.flows the monitor created itself and filled.

Either way the table's rows of host NAME must be the files' records, flattened here as
the sink should flatten them (the flat columns, 'unknown' for an unnamed service or
program, 'none' for no cause). Besides them, the table gets a copy of them under a second
host (a third of them made receiver-window-limited bulk flows), and a copy dated a day
earlier with half the RTT (so that "worse than yesterday" has an answer). Prints one line
per query; exits 1 on a mismatch.

With Grafana dashboards (examples/grafana/), every SQL query of theirs (panels and
template variables) runs too, with the ClickHouse plugin's macros expanded as the plugin
expands them for a fixed range (the last two days): each must return rows with every
host and service ("All"), and run with one of each selected.
"""
import copy
import datetime as dt
import glob
import gzip
import json
import os
import sys
import tempfile
import urllib.parse
import urllib.request


def statements(path):
    text = "\n".join(l for l in open(path) if not l.strip().startswith("--"))
    return [s.strip() for s in text.split(";") if s.strip()]


def ts(s):
    return dt.datetime.fromisoformat(s.replace("Z", "+00:00")[:26] + "+00:00")


def iso(t):
    return t.strftime("%Y-%m-%dT%H:%M:%S.%f000Z")


def same(got, want, step):
    """Dicts of tuples equal, but for rounded floats a tie rounded the other way: ClickHouse
    18.16 rounds an exact half away from zero (82.25 to 82.3), Python to even (82.2)."""
    if got.keys() != want.keys():
        return False
    for k in want:
        for a, b in zip(got[k], want[k]):
            if isinstance(a, float) or isinstance(b, float):
                if abs(a - b) > step * 1.0001:
                    return False
            elif a != b:
                return False
    return True


def qexact(level, values):
    v = sorted(values)
    return v[min(int(level * len(v)), len(v) - 1)]


def flatten(r, host):
    """A record as the sink's row should hold it: its top-level fields, the flat columns,
    and one spelling for what it leaves out."""
    d = r.get("Diagnosis") or {}
    shares = d.get("TimeShares") or {}
    sig = d.get("Signals") or {}
    row = {k: v for k, v in r.items() if not isinstance(v, dict)}
    row.update(
        Host=host, Verdict=d.get("Verdict", "unknown"), Cause=d.get("Cause") or "none",
        Finding=d.get("Finding", ""),
        ReceiverWindowPct=shares.get("ReceiverWindowPct", 0.0),
        SendBufferPct=shares.get("SendBufferPct", 0.0), NetworkPct=shares.get("NetworkPct", 0.0),
        ApplicationPct=shares.get("ApplicationPct", 0.0),
        SrcIP=r["ID"]["SrcIP"], SrcPort=r["ID"]["SrcPort"], DstIP=r["ID"]["DstIP"],
        DstPort=r["ID"]["DstPort"], ZeroWindowStalls=sig.get("ZeroWindowStalls", 0),
        ZeroWindowms=sig.get("ZeroWindowms", 0.0))
    for k in ("Service", "DestService", "Comm"):
        row.setdefault(k, "unknown")
    row.setdefault("NotNamed", "")
    row.setdefault("Close", "")
    row.setdefault("RTTSummary", [])
    return row


def file_records(d):
    out = []
    for p in sorted(glob.glob(os.path.join(d, "*.gz"))):
        with gzip.open(p, "rt") as f:
            out += [json.loads(l) for l in f if l.strip()]
    return out


class Chdb:
    def __init__(self, ex, sent):
        import chdb.session
        self.tmp = tempfile.mkdtemp()
        self.s = chdb.session.Session(os.path.join(self.tmp, "db"))
        for st in statements(os.path.join(ex, "flows.sql")):
            self.s.query(st)
        self.insert(sent)

    def query(self, sql, fmt):
        return self.s.query(sql, fmt).data()

    def insert(self, rows):
        data = os.path.join(self.tmp, "rows%d.ndjson" % len(os.listdir(self.tmp)))
        with open(data, "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
        self.s.query(f"INSERT INTO cgmon.flows SELECT * FROM file('{data}', JSONEachRow) "
                     "SETTINGS input_format_skip_unknown_fields=1")


class Server:
    """A real server over HTTP, with the settings the monitor inserts with."""
    def __init__(self, url):
        self.url = url.rstrip("/") + "/"

    def post(self, params, body):
        q = urllib.parse.urlencode(params)
        req = urllib.request.Request(self.url + "?" + q, data=body.encode(), method="POST")
        try:
            with urllib.request.urlopen(req, timeout=60) as resp:
                return resp.read().decode()
        except urllib.error.HTTPError as e:
            raise RuntimeError(e.read().decode()[:400])

    def query(self, sql, fmt):
        return self.post({"output_format_json_quote_64bit_integers": "0"}, f"{sql} FORMAT {fmt}")

    def insert(self, rows):
        self.post({"query": "INSERT INTO cgmon.flows FORMAT JSONEachRow",
                   "input_format_skip_unknown_fields": "1",
                   "date_time_input_format": "best_effort"},
                  "".join(json.dumps(r) + "\n" for r in rows))


def main():
    args = sys.argv[1:]
    opts = {}
    while args and args[0].startswith("--"):
        opts[args[0]] = args[1]
        args = args[2:]
    ex, dashboards = args[0], args[1:]
    host = opts["--host"]
    base = [flatten(r, host) for r in file_records(opts["--files"])]
    assert base, "no records in the files"
    if "--chdb" in opts:
        sent = [json.loads(l) for l in open(opts["--chdb"]) if l.strip()]
        db = Chdb(ex, sent)
    else:
        db = Server(opts["--server"])
    # The table's rows are the files' records, flattened as the sink should.
    cols = ["Cookie", "Service", "DestService", "Comm", "Verdict", "Cause", "SrcPort",
            "DstPort", "BytesAcked", "Close", "ZeroWindowStalls"]
    got = sorted(db.query(f"SELECT {', '.join(cols)} FROM cgmon.flows WHERE Host = '{host}'",
                          "TSV").splitlines())
    want = sorted("\t".join(str(r[c]) for c in cols) for r in base)
    if got != want:
        print("MISMATCH the table's rows against the files' records")
        print("\n".join(sorted(set(got) ^ set(want))[:10]))
        sys.exit(1)
    print(f"ok the table holds the files' {len(base)} records, flattened")
    now = dt.datetime.now(dt.timezone.utc)
    rows, extra = list(base), []
    for r in base:
        h2 = copy.deepcopy(r)
        h2["Host"] = "other-host"
        h2["Cookie"] = r["Cookie"] + (1 << 40)
        if r["Cookie"] % 3 == 0:
            # Loopback flows are rarely limited by anything but the application: some of
            # the other host's are made window-limited bulk flows, so that the questions
            # about limited flows have answers to check.
            h2.update(Verdict="receiver-window", ReceiverWindowPct=80.0 + r["Cookie"] % 7,
                      BytesAcked=r["BytesAcked"] + 1_000_000,
                      SendThroughputMbps=1.0 + (r["Cookie"] % 100) / 10)
        extra.append(h2)
        y = copy.deepcopy(r)
        y["Cookie"] = r["Cookie"] + (2 << 40)
        y["StartTime"] = iso(ts(r["StartTime"]) - dt.timedelta(days=1, minutes=5))
        y["EndTime"] = iso(ts(r["EndTime"]) - dt.timedelta(days=1, minutes=5))
        y["RTTSummary"] = [v / 2 for v in r["RTTSummary"]]
        extra.append(y)
    db.insert(extra)
    rows += extra
    n = int(db.query("SELECT count() FROM cgmon.flows", "TSV").strip())
    assert n == len(rows), (n, len(rows))

    in_day = [r for r in rows if ts(r["EndTime"]) > now - dt.timedelta(days=1)]
    in_hour = [r for r in rows if ts(r["EndTime"]) > now - dt.timedelta(hours=1)]
    has_rtt = [r for r in in_day if r.get("RTTSummary")]

    def group(rs, key):
        out = {}
        for r in rs:
            out.setdefault(key(r), []).append(r)
        return out

    def rtt_by_service_and_host(got):
        g = group(has_rtt, lambda r: (r["Service"], r["Host"]))
        want = {
            k: (len(v), qexact(0.5, [r["RTTSummary"][3] for r in v]),
                qexact(0.98, [r["RTTSummary"][3] for r in v]))
            for k, v in g.items()
        }
        return {(x["Service"], x["Host"]): (x["flows"], x["p50_ms"], x["p98_ms"]) for x in got} == want

    def service_pairs(got):
        g = group(in_day, lambda r: (r["Service"], r["DestService"]))
        want = {}
        for k, v in g.items():
            br, bs = sum(r["BytesRetrans"] for r in v), sum(r["BytesSent"] for r in v)
            want[k] = (len(v), sum(r["BytesAcked"] for r in v), round(100 * br / max(bs, 1), 3))
        return same({(x["Service"], x["DestService"]): (x["flows"], x["bytes_acked"], x["retrans_pct"])
                     for x in got}, want, 0.001)

    def programs(got):
        def program(r):
            if r["NotNamed"] == "connecting side":
                return "connecting side, not named"
            return r["Comm"]
        g = group(in_day, lambda r: (r["Host"], program(r), r["DestService"]))
        want = {}
        for k, v in g.items():
            rtts = [r["RTTSummary"][3] for r in v if r.get("RTTSummary")]
            want[k] = (len(v), sum(r["BytesAcked"] for r in v), sum(r["BytesReceived"] for r in v),
                       qexact(0.5, rtts) if rtts else 0,
                       sum(r["BytesRetrans"] for r in v),
                       sum(1 for r in v if r["Verdict"] == "network"))
        got_ = {(x["Host"], x["Program"], x["DestService"]):
                (x["flows"], x["bytes_sent"], x["bytes_received"], x["p50_ms"], x["bytes_retrans"],
                 x["network_limited"]) for x in got}
        # The monitor's own rows name their program: at least one is not 'unknown'.
        return got_ == want and any(k[1] != "unknown" for k in want)

    def retransmits_by_destination(got):
        g = group(in_day, lambda r: r["DstIP"])
        want = {}
        for k, v in g.items():
            br, bs = sum(r["BytesRetrans"] for r in v), sum(r["BytesSent"] for r in v)
            want[k] = (len(v), sum(r["TotalRetransmits"] for r in v), br, bs,
                       round(100 * br / max(bs, 1), 3))
        return same({x["DstIP"]: (x["flows"], x["retransmits"], x["bytes_retrans"], x["bytes_sent"],
                                  x["retrans_pct"]) for x in got}, want, 0.001)

    def verdicts_by_service_and_host(got):
        g = group(in_day, lambda r: (r["Service"], r["Host"], r["Verdict"]))
        tot = group(in_day, lambda r: (r["Service"], r["Host"]))
        want = {k: (len(v), round(100 * len(v) / len(tot[k[:2]]), 1)) for k, v in g.items()}
        return same({(x["Service"], x["Host"], x["Verdict"]): (x["flows"], x["pct"]) for x in got},
                    want, 0.1)

    def time_limited_by_service(got):
        g = group([r for r in in_day if r["Duration"] > 0], lambda r: r["Service"])
        want = {}
        for k, v in g.items():
            d = sum(r["Duration"] for r in v)
            w = lambda f: round(sum(r["Duration"] * r[f] for r in v) / d, 2)
            want[k] = (w("ReceiverWindowPct"), w("SendBufferPct"), w("NetworkPct"), w("ApplicationPct"))
        return same({x["Service"]: (x["receiver_window_pct"], x["send_buffer_pct"], x["network_pct"],
                                    x["application_pct"]) for x in got}, want, 0.01)

    def slowest_flows_last_hour(got):
        sel = [r for r in in_hour if r["Verdict"] in ("receiver-window", "send-buffer", "network")
               and r["BytesAcked"] >= 65536 and r["Cause"] != "slow-start"]
        sel.sort(key=lambda r: (r["SendThroughputMbps"], r["Cookie"]))
        want = [(r["SrcPort"], r["DstPort"], r["Host"], r["Finding"]) for r in sel[:20]]
        return [(x["SrcPort"], x["DstPort"], x["Host"], x["Finding"]) for x in got] == want

    def hosts_worse_than_yesterday(got):
        want = {}
        for h, v in group([r for r in rows if r.get("RTTSummary")], lambda r: r["Host"]).items():
            cur = [r["RTTSummary"][3] for r in v if ts(r["EndTime"]) > now - dt.timedelta(hours=1)]
            old = [r["RTTSummary"][3] for r in v
                   if now - dt.timedelta(hours=25) <= ts(r["EndTime"]) <= now - dt.timedelta(days=1)]
            if cur and old and qexact(0.5, old) > 0 and round(qexact(0.5, cur) / qexact(0.5, old), 2) >= 1.5:
                want[h] = round(qexact(0.5, cur) / qexact(0.5, old), 2)
        got_ = {x["Host"]: x["ratio"] for x in got}
        # The day-old copy (half the RTT) makes the monitor's host twice as slow now.
        return got_ == want and want.get(base[0]["Host"]) == 2.0

    def receiver_window_limited_today(got):
        midnight = now.astimezone().replace(hour=0, minute=0, second=0, microsecond=0)
        sel = [r for r in rows if r["Verdict"] == "receiver-window" and ts(r["EndTime"]) >= midnight]
        g = group(sel, lambda r: (r["Host"], r["Service"], r["DstIP"]))
        want = {k: (len(v), round(sum(r["ReceiverWindowPct"] for r in v) / len(v), 1)) for k, v in g.items()}
        return same({(x["Host"], x["Service"], x["DstIP"]): (x["flows"], x["avg_limited_pct"])
                     for x in got}, want, 0.1)

    def bytes_by_service_per_hour(got):
        g = group(in_day, lambda r: (ts(r["EndTime"]).strftime("%Y-%m-%d %H:00:00"), r["Service"]))
        want = {k: (len(v), sum(r["BytesAcked"] for r in v), sum(r["BytesReceived"] for r in v))
                for k, v in g.items()}
        return {(x["hour"][:19], x["Service"]): (x["flows"], x["bytes_sent"], x["bytes_received"])
                for x in got} == want

    def resets_by_service(got):
        g = group(in_day, lambda r: r["Service"])
        want = {}
        for k, v in g.items():
            c = lambda what: sum(1 for r in v if r.get("Close", "") == what)
            want[k] = (len(v), c("clean"), c("reset"), c(""), round(100 * c("reset") / len(v), 1))
        return same({x["Service"]: (x["flows"], x["clean"], x["reset"], x["unknown"], x["reset_pct"])
                     for x in got}, want, 0.1)

    def failed_connects_by_destination(got):
        sel = [r for r in in_day if r["Cause"] in ("refused", "syn-timeout", "abandoned")]
        g = group(sel, lambda r: (r["Host"], r["DestService"], r["DstIP"], r["DstPort"], r["Cause"]))
        want = {k: len(v) for k, v in g.items()}
        got_ = {(x["Host"], x["DestService"], x["DstIP"], x["DstPort"], x["outcome"]): x["attempts"]
                for x in got}
        # The monitor's own refused connects are there: the answer is not vacuous.
        return got_ == want and any(k[4] == "refused" for k in want)

    checks = {f.__name__: f for f in [
        failed_connects_by_destination,
        rtt_by_service_and_host, retransmits_by_destination, verdicts_by_service_and_host,
        time_limited_by_service, slowest_flows_last_hour, hosts_worse_than_yesterday,
        receiver_window_limited_today, bytes_by_service_per_hour, resets_by_service,
        service_pairs, programs]}
    failed = 0
    qdir = os.path.join(ex, "queries")
    names = sorted(f for f in os.listdir(qdir) if f.endswith(".sql"))
    assert len(names) >= 8, names
    for name in names:
        q = statements(os.path.join(qdir, name))
        assert len(q) == 1, name
        try:
            text = db.query(q[0], "JSONEachRow")
        except Exception as e:  # a query the server refuses
            print(f"FAILED {name}: {e}")
            failed += 1
            continue
        got = [json.loads(l) for l in text.splitlines() if l.strip()]
        check = checks.get(name[:-4])
        ok = check is not None and check(got)
        print(f"{'ok' if ok else 'MISMATCH'} {name}: {len(got)} rows")
        if not ok:
            failed += 1
            print(json.dumps(got[:5], indent=1))
    print(f"{len(names) - failed} passed, {failed} failed")
    for path in dashboards:
        failed += dashboard(db, path, now)
    sys.exit(1 if failed else 0)


def expand(sql, frm, to, values):
    """The grafana-clickhouse-datasource macros and template variables of `sql`, for the
    range frm..to (Unix s) and `values` (variable → selected values; None: All)."""
    import re
    step = max(1, (to - frm) // 200)  # $__interval: the range over a panel's ~200 points

    def cond(m):
        c, var = m.group(1), m.group(2)
        return "1=1" if values.get(var) is None else c

    sql = re.sub(r"\$__conditionalAll\((.*?), \$(\w+)\)", cond, sql, flags=re.S)
    for var, vals in values.items():
        if vals is not None:
            sql = sql.replace("${%s:singlequote}" % var, ", ".join("'%s'" % v for v in vals))
    sql = re.sub(r"\$__timeFilter\((\w+)\)",
                 lambda m: f"{m.group(1)} >= toDateTime({frm}) AND {m.group(1)} <= toDateTime({to})", sql)
    sql = re.sub(r"\$__timeInterval\((\w+)\)",
                 lambda m: f"toStartOfInterval(toDateTime({m.group(1)}), INTERVAL {step} second)", sql)
    sql = sql.replace("$__interval_s", str(step))
    sql = sql.replace("$__fromTime", f"toDateTime({frm})").replace("$__toTime", f"toDateTime({to})")
    assert "$" not in sql, sql
    return sql


def dashboard(db, path, now):
    """Runs every SQL query of the dashboard at `path`; returns how many failed."""
    d = json.load(open(path))
    frm, to = int((now - dt.timedelta(days=2)).timestamp()), int(now.timestamp()) + 300
    queries = [(f"variable {v['name']}", v["query"]) for v in d["templating"]["list"]
               if v["type"] == "query"]
    queries += [(f"panel {p['title']}", t["rawSql"]) for p in d["panels"] for t in p.get("targets", [])]
    assert len(queries) >= 8, queries
    one = {}
    for name in ("host", "service"):
        got = db.query(expand(dict(queries)[f"variable {name}"], frm, to, {}), "TSV").split()
        one[name] = got[:1]
    failed = 0
    for name, sql in queries:
        for label, values in (("all", {"host": None, "service": None}), ("one each", one)):
            try:
                text = db.query(expand(sql, frm, to, values), "JSONEachRow")
                n = len([l for l in text.splitlines() if l.strip()])
                # With All, rows; with one host and service selected, the query runs (the
                # rows that answer a panel may be another host's).
                ok = n > 0 or label != "all"
            except Exception as e:  # a query ClickHouse refuses
                n, ok = f"error: {e}", False
            print(f"{'ok' if ok else 'FAILED'} dashboard {d['uid']} {name} ({label}): {n} rows")
            failed += 0 if ok else 1
    print(f"dashboard {d['uid']}: {2 * len(queries) - failed} passed, {failed} failed")
    return failed


if __name__ == "__main__":
    main()

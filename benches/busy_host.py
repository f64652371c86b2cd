#!/usr/bin/env python3
"""Issue 51's busy loopback host, built on purpose, and the diagnosis checked against it.

    benches/busy_host.py MONITOR_BIN INTERVAL [SECONDS]

Runs, all on loopback at once, for SECONDS (default 15):
  - a curl loop fetching 200 KB responses (a new connection each, 20 a second);
  - iperf3 bulk, paced at 2 Gbit/s, and iperf3 -w 32K;
  - a bulk flow into a 16 KB receive buffer read flat out;
  - a slow reader (16 KB every 50 ms from a default buffer);
  - 2,000 idle connections.
The monitor runs unfiltered beside them at INTERVAL with --samples-out; then every record is
checked against the targets of issue 51, and one line per target is printed (a table row for
benches/RESULTS.md). Exit status 1 when a target is missed. Needs iperf3 and curl.

Not a test: its verdicts depend on a host's other traffic. The lab tests build each class
alone; this is the mix a new user tries first.
"""

import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PORTS = {"http": 18080, "bulk": 15201, "w32k": 15202, "rcvbuf": 18082, "slow": 18083, "idle": 18084}
RESPONSE = b"r" * 200_000
stop = threading.Event()


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", str(len(RESPONSE)))
        self.end_headers()
        self.wfile.write(RESPONSE)

    def log_message(self, *_):
        pass


def listen(port, rcvbuf=None):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if rcvbuf:
        # Before listen, so that the accepted socket inherits it (and its window scale).
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.bind(("127.0.0.1", port))
    s.listen(4096)
    return s


def reader(port, rcvbuf, chunk, pause):
    """Accepts one connection and reads it, `chunk` bytes every `pause` s (0: flat out)."""
    s = listen(port, rcvbuf)
    c, _ = s.accept()
    while not stop.is_set():
        if not c.recv(chunk):
            break
        if pause:
            time.sleep(pause)
    c.close()


def sender(port, seconds):
    c = socket.create_connection(("127.0.0.1", port))
    buf = b"s" * 65536
    end = time.time() + seconds
    try:
        while time.time() < end:
            c.sendall(buf)
    except OSError:
        pass
    c.close()


def idle(n):
    s = listen(PORTS["idle"])
    held = []

    def accept():
        for _ in range(n):
            c, _ = s.accept()
            c.recv(100)
            c.sendall(b"pong")
            held.append(c)

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    for _ in range(n):
        c = socket.create_connection(("127.0.0.1", PORTS["idle"]))
        c.sendall(b"ping")
        c.recv(100)
        held.append(c)
    t.join()
    return held


def main():
    monitor, interval = sys.argv[1], sys.argv[2]
    seconds = int(sys.argv[3]) if len(sys.argv) > 3 else 15
    out = tempfile.mkdtemp(prefix="busy-host-")
    recs_path, samples_path = os.path.join(out, "records.ndjson"), os.path.join(out, "samples.ndjson")
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    held = idle(2000)
    servers = [
        subprocess.Popen(["iperf3", "-s", "-p", str(PORTS[k])], stdout=subprocess.DEVNULL)
        for k in ("bulk", "w32k")
    ]
    http = ThreadingHTTPServer(("127.0.0.1", PORTS["http"]), Handler)
    threading.Thread(target=http.serve_forever, daemon=True).start()
    threads = [
        threading.Thread(target=reader, args=(PORTS["rcvbuf"], 16384, 1 << 20, 0)),
        threading.Thread(target=reader, args=(PORTS["slow"], None, 16384, 0.05)),
    ]
    for t in threads:
        t.start()
    time.sleep(0.5)
    with open(recs_path, "w") as recs:
        mon = subprocess.Popen(
            [monitor, "-run-interval", interval, "--samples-out", samples_path, "-writer-partial"],
            stdout=recs,
            stderr=subprocess.DEVNULL,
        )
        time.sleep(1)
        work = [
            subprocess.Popen(
                ["iperf3", "-c", "127.0.0.1", "-p", str(PORTS["bulk"]), "-t", str(seconds - 3), "-b", "2G"],
                stdout=subprocess.DEVNULL,
            ),
            subprocess.Popen(
                ["iperf3", "-c", "127.0.0.1", "-p", str(PORTS["w32k"]), "-t", str(seconds - 3), "-w", "32K"],
                stdout=subprocess.DEVNULL,
            ),
        ]
        senders = [
            threading.Thread(target=sender, args=(PORTS["rcvbuf"], seconds - 3)),
            threading.Thread(target=sender, args=(PORTS["slow"], seconds - 3)),
        ]
        for t in senders:
            t.start()
        end = time.time() + seconds - 3
        responses = 0
        while time.time() < end:
            subprocess.run(
                ["curl", "-s", "-o", "/dev/null", f"http://127.0.0.1:{PORTS['http']}/"], check=True
            )
            responses += 1
            time.sleep(0.05)
        for w in work:
            w.wait()
        stop.set()
        for t in senders + threads:
            t.join()
        for c in held:
            c.close()
        time.sleep(3 * max(0.1, parse_interval(interval)) + 1)
        mon.send_signal(2)
        mon.wait()
    for s in servers:
        s.terminate()
    http.shutdown()
    ok = check(recs_path, samples_path, interval, responses)
    print(f"records and samples kept in {out}")
    sys.exit(0 if ok else 1)


def parse_interval(text):
    return float(text[:-2]) / 1000 if text.endswith("ms") else float(text.rstrip("s"))


def check(recs_path, samples_path, interval, responses):
    recs = [json.loads(l) for l in open(recs_path) if l.strip()]
    busy = {}  # cookie -> [first BusyMs, last BusyMs, samples]
    for l in open(samples_path):
        s = json.loads(l)
        if "BusyMs" not in s:
            continue
        b = busy.setdefault(s["Cookie"], [s["BusyMs"], s["BusyMs"], 0])
        b[1], b[2] = s["BusyMs"], b[2] + 1

    def grew(r):
        b = busy.get(r["Cookie"])
        if b is None:
            return None
        return b[1] if b[2] == 1 else b[1] - b[0]

    def side(r, name):
        """The sending end of workload `name`'s data flows (the one whose verdict counts)."""
        port = PORTS[name]
        if name in ("http",):
            return r["ID"]["SrcPort"] == port
        return r["ID"]["DstPort"] == port

    def diag(r):
        d = r.get("Diagnosis", {})
        return d.get("Verdict"), d.get("Cause", "none")

    rows = []

    def target(what, bad, total):
        rows.append((what, len(bad), total))
        for r in bad[:3]:
            d = r.get("Diagnosis", {})
            print(f"  {what}: {r['ID']} {diag(r)} {d.get('Finding', '')[:160]}", file=sys.stderr)

    with_diag = [r for r in recs if "Diagnosis" in r]
    typ = [
        r
        for r in with_diag
        if (r["Diagnosis"].get("Caps", {}).get("TypicalWindowBytes") or 0)
        > (r["Diagnosis"].get("Caps", {}).get("PeerWindowBytes") or 0)
    ]
    target("typical > largest", typ, len(with_diag))

    def zero_counter(r):
        v, _ = diag(r)
        sh = r["Diagnosis"].get("TimeShares", {})
        sig = r["Diagnosis"].get("Signals", {})
        if v == "receiver-window":
            return sh.get("ReceiverWindowPct", 0) == 0 and not sig.get("WindowClosedPct")
        if v == "send-buffer":
            return sh.get("SendBufferPct", 0) == 0
        return False

    target("verdict on a zero counter", [r for r in with_diag if zero_counter(r)], len(with_diag))
    target("queueing (no queue on loopback)", [r for r in with_diag if diag(r)[1] == "queueing"], len(with_diag))
    short = [r for r in with_diag if grew(r) is not None and grew(r) < 20]
    target(
        "window or reader verdict under 5 jiffies busy",
        [r for r in short if diag(r)[0] in ("receiver-window", "send-buffer")],
        len(short),
    )
    http = [r for r in with_diag if side(r, "http") and r.get("BytesAcked", 0) >= 200_000]
    target("200 KB response is receiver-window", [r for r in http if diag(r)[0] == "receiver-window"], len(http))

    def data(name, least):
        return [r for r in with_diag if side(r, name) and r.get("BytesAcked", 0) >= least]

    for name, want in (
        ("w32k", ("receiver-window", "small-buffer")),
        ("rcvbuf", ("receiver-window", "small-buffer")),
        ("slow", ("receiver-window", "slow-reader")),
    ):
        flows = data(name, 1 << 20)
        target(f"{name} not {want[0]}/{want[1]}", [r for r in flows if diag(r) != want], len(flows))
        if not flows:
            rows.append((f"{name}: no data flow recorded", 1, 0))
    for name in ("bulk",):
        flows = data(name, 1 << 20)
        print(f"  {name}: " + ", ".join(f"{diag(r)}" for r in flows), file=sys.stderr)
    verdicts = {}
    for r in with_diag:
        verdicts[diag(r)] = verdicts.get(diag(r), 0) + 1
    print(f"interval {interval}: {len(recs)} records, {responses} responses; by verdict/cause:")
    for k, n in sorted(verdicts.items(), key=lambda x: -x[1]):
        print(f"  {k[0]}/{k[1]}: {n}")
    ok = True
    for what, bad, total in rows:
        print(f"| {interval} | {what} | {bad} of {total} |")
        ok &= bad == 0
    return ok


if __name__ == "__main__":
    main()

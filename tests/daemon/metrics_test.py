#!/usr/bin/env python3
"""Privileged end-to-end test of metaroced's Prometheus metrics (daemon/metrics_server.h,
docs/metrics.md) on a namespace fabric (tools/fabric/mrfabric).

Brings up 2 hosts x 2 planes x 2 spines and one metaroced per host with
`--metrics-listen 127.0.0.1:9469` (each host's own loopback, inside its namespace), then scrapes
http://127.0.0.1:9469/metrics from inside the namespace and checks:
  - 200 with the exposition Content-Type; `promtool check metrics` says nothing (no parse error,
    no lint warning) about the scrape, idle and with traffic;
  - metaroce_build_info carries version, kernel, libbpf, libxdp and liburing; every family has
    HELP and TYPE; no label is a port (port, src_port, source_port);
  - links, AF_XDP ring health per interface and queue, the XDP program's counters;
  - `mrctl conn add ... paths 4`: the connection's info and state, and path series for every
    path id 0..3 whose source port values are those `path show` reports;
  - traffic (mrperf write_bw through both daemons, attached): the application's connection is
    listed with its paths and its counters grow between two scrapes; afterwards the ports', the
    workers' and the XDP program's counters have grown;
  - 404 for another path, 405 (Allow: GET, HEAD) for POST, 400 for garbage, 431 for an oversize
    request head, 408 for a request that never completes; the server and the daemon stay up;
  - SIGTERM stops the daemon with exit 0 and the metrics port closes.
The fabric and the daemons are always torn down.

usage: metrics_test.py METAROCED MRCTL MRFABRIC MRPERF   exit 0 pass, 1 fail, 77 skip
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import fabric_harness as harness  # noqa: E402

NAME = "mrmx"
PEER_OF_H0 = "198.18.0.6"  # host 1 on plane 0
METRICS = "127.0.0.1:9469"
PERF_PORT = "18731"
PROMTOOL = shutil.which("promtool") or "/usr/bin/promtool"

# Run inside a host's namespace: sends its standard input to the metrics port (argv[1]) and
# prints the raw answer in hex; exits non-zero (a traceback) when it cannot connect.
CLIENT = r"""
import socket, sys
host, port = sys.argv[1].rsplit(":", 1)
request = sys.stdin.buffer.read()
s = socket.create_connection((host, int(port)), timeout=15)
try:
    s.sendall(request)
except (BrokenPipeError, ConnectionResetError):
    pass
out = b""
while True:
    try:
        chunk = s.recv(65536)
    except ConnectionResetError:
        break
    if not chunk:
        break
    out += chunk
sys.stdout.write(out.hex())
"""

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


class Scrape:
    """One parsed exposition: families (name -> type), HELP names, samples."""

    def __init__(self, text):
        self.text = text
        self.types, self.helps, self.samples, self.errors = {}, set(), [], []
        for line in text.splitlines():
            if line.startswith("# HELP "):
                self.helps.add(line.split(" ", 3)[2])
            elif line.startswith("# TYPE "):
                _, _, name, kind = line.split(" ", 3)
                self.types[name] = kind
            elif line and not line.startswith("#"):
                m = SAMPLE.match(line)
                if not m:
                    self.errors.append(line)
                    continue
                labels = dict(LABEL.findall(m.group(3) or ""))
                self.samples.append((m.group(1), labels, float(m.group(4))))

    def find(self, name, **labels):
        return [(l, v) for n, l, v in self.samples
                if n == name and all(l.get(k) == str(x) for k, x in labels.items())]

    def value(self, name, **labels):
        found = self.find(name, **labels)
        return found[0][1] if len(found) == 1 else None

    def total(self, name, **labels):
        return sum(v for _, v in self.find(name, **labels))


def main():
    if len(sys.argv) != 5:
        sys.stderr.write(__doc__)
        return 2
    metaroced, mrctl, mrfabric, mrperf = sys.argv[1:]
    if not (harness.have_root() and harness.have_tools("ip", "nsenter")):
        return harness.SKIP
    if not os.access(PROMTOOL, os.X_OK):
        print("skip: no promtool (apt install prometheus)")
        return harness.SKIP
    if not harness.have_netns():
        return harness.SKIP
    fabric = harness.Fabric(mrfabric, NAME)
    ns = fabric.ns
    tmp = harness.make_tmp("metaroced-metrics-")
    md = harness.Daemons(metaroced, mrctl, ns, tmp, extra_args=["--metrics-listen", METRICS],
                         log_tail=3000)
    sock, daemons, ctl, ctl_json, log_of = md.sock, md.procs, md.ctl, md.ctl_json, md.log_of
    perfs = []
    f = harness.Failures(width=72)

    def http(h, request):
        """Sends raw bytes to host h's metrics port from inside its namespace; returns
        (status, headers dict, body) or (None, {}, error text)."""
        p = subprocess.run(["nsenter", "--net=/run/netns/" + ns(h), sys.executable, "-c", CLIENT,
                            METRICS], input=request, capture_output=True, timeout=60)
        if p.returncode != 0:
            return None, {}, p.stderr.decode("utf-8", "replace").strip()[-500:]
        raw = bytes.fromhex(p.stdout.decode())
        head, _, body = raw.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        m = re.match(r"HTTP/1\.1 (\d{3}) ", lines[0])
        headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            headers[k.strip().lower()] = v.strip()
        return (int(m.group(1)) if m else None), headers, body.decode("utf-8", "replace")

    def scrape(h):
        status, headers, body = http(h, b"GET /metrics HTTP/1.1\r\nHost: t\r\n\r\n")
        if status != 200:
            raise RuntimeError("GET /metrics on host %d: %r %s" % (h, status, body[:500]))
        if headers.get("content-type") != "text/plain; version=0.0.4; charset=utf-8":
            raise RuntimeError("GET /metrics: Content-Type %r" % headers.get("content-type"))
        if int(headers.get("content-length", -1)) != len(body.encode()):
            raise RuntimeError("GET /metrics: Content-Length %r for %d bytes" %
                               (headers.get("content-length"), len(body.encode())))
        return Scrape(body)

    def promtool_clean(s, what):
        p = subprocess.run([PROMTOOL, "check", "metrics"], input=s.text, capture_output=True,
                           text=True, timeout=60)
        said = (p.stdout + p.stderr).strip()
        f.check(p.returncode == 0 and said == "",
                "promtool check metrics (%s): no error, no lint warning" % what)
        if said:
            print("  promtool: " + said[:2000])

    def well_formed(s, what):
        f.check(not s.errors and s.types and set(s.types) == s.helps and
                all(n in s.types for n, _, _ in s.samples),
                "%s: every family has HELP and TYPE, every sample a family" % what)
        names = {k for _, l, _ in s.samples for k in l}
        f.check(not names & {"port", "src_port", "source_port", "sport"},
                "%s: no label is a port (labels: %s)" % (what, ",".join(sorted(names))))

    def perf(h, *args):
        p = subprocess.Popen(["nsenter", "--net=/run/netns/" + ns(h), mrperf, "write_bw",
                              "--daemon", "--daemon-socket", sock[h], "-p", PERF_PORT, "-s",
                              "4096", "-D", "4"] + list(args),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        perfs.append(p)
        return p

    fabric.prepare()
    try:
        fabric.up()
        md.start_all()
        f.check("metrics at http://%s/metrics" % METRICS in log_of(0),
                "the log names the metrics address")

        # Idle.
        idle = scrape(0)
        well_formed(idle, "idle")
        promtool_clean(idle, "idle")
        info = idle.find("metaroce_build_info")
        f.check(len(info) == 1 and info[0][1] == 1 and
                all(info[0][0].get(k) for k in ("version", "kernel", "libbpf", "libxdp",
                                                "liburing")),
                "build_info: version, kernel, libbpf, libxdp, liburing")
        version = ctl_json(0, "daemon", "show").get("metaroced_version")
        f.check(info and info[0][0].get("version") == version,
                "build_info version is daemon show's (%s)" % version)
        f.check(sorted(l["interface"] for l, _ in idle.find("metaroce_link_info")) ==
                ["pl0", "pl1"] and
                all(v > 0 for _, v in idle.find("metaroce_link_xdp_program_id")),
                "links pl0 and pl1, an XDP program attached to each")
        rings = ("metaroce_af_xdp_rx_ring_full_total", "metaroce_af_xdp_fill_ring_empty_total",
                 "metaroce_af_xdp_rx_invalid_descriptors_total",
                 "metaroce_af_xdp_tx_invalid_descriptors_total", "metaroce_af_xdp_rx_dropped_total")
        f.check(all(sorted((l["interface"], l["queue"]) for l, _ in idle.find(r)) ==
                    [("pl0", "0"), ("pl1", "0")] for r in rings),
                "AF_XDP ring health per interface and queue")
        f.check(idle.find("metaroce_xdp_packets_total", interface="pl0", outcome="redirected") and
                idle.find("metaroce_worker_loops_total", worker=0),
                "XDP program and worker counters")
        f.check(idle.value("metaroce_daemon_connections", owner="daemon") == 0 and
                idle.value("metaroce_daemon_uptime_seconds") > 0 and
                idle.value("metaroce_daemon_heap_in_use_bytes") > 0,
                "daemon: no connection yet, uptime, heap")

        # A daemon connection with 4 paths.
        cid = ctl_json(0, "conn", "add", PEER_OF_H0, "paths", "4").get("conn", {}).get("id")
        paths = ctl_json(0, "path", "show", str(cid)).get("paths", [])
        s = scrape(0)
        well_formed(s, "one connection")
        promtool_clean(s, "one connection")
        conn_info = s.find("metaroce_connection_info", conn=cid)
        f.check(len(conn_info) == 1 and conn_info[0][0].get("peer") == PEER_OF_H0 and
                conn_info[0][0].get("owner") == "daemon",
                "connection %s: info with peer and owner" % cid)
        f.check(s.value("metaroce_connection_state", conn=cid, state="ready") == 1,
                "connection state ready")
        f.check(s.value("metaroce_daemon_connections", owner="daemon") == 1,
                "daemon: 1 connection")
        per_path = ("metaroce_path_source_port", "metaroce_path_srtt_seconds",
                    "metaroce_path_min_rtt_seconds", "metaroce_path_cwnd_bytes",
                    "metaroce_path_inflight_bytes", "metaroce_path_ecn_marked_ratio",
                    "metaroce_path_utilization_ratio", "metaroce_path_tx_packets_total",
                    "metaroce_path_tx_bytes_total", "metaroce_path_acked_packets_total",
                    "metaroce_path_retransmits_total", "metaroce_path_timeouts_total",
                    "metaroce_path_rotations_total", "metaroce_path_ce_marks_total")
        f.check(all(sorted(int(l["path"]) for l, _ in s.find(n, conn=cid)) == [0, 1, 2, 3]
                    for n in per_path),
                "path series for every path id 0..3 (%d families)" % len(per_path))
        f.check(all(sum(v for _, v in s.find("metaroce_path_state", conn=cid, path=i)) == 1
                    for i in range(4)) and len(s.find("metaroce_path_state", conn=cid)) == 16,
                "path state: one of active/suspect/failed/probing is 1, per path")
        show_ports = {p["path_id"]: p["src_port"] for p in paths}
        now_ports = {int(l["path"]): int(v) for l, v in s.find("metaroce_path_source_port",
                                                                conn=cid)}
        f.check(now_ports == show_ports, "source port values are path show's %s" % show_ports)

        # Traffic through both daemons (attached mrperf); scraped twice while it runs.
        before = s
        server = perf(1)
        time.sleep(1.0)
        client = perf(0, PEER_OF_H0)
        time.sleep(1.5)
        during = [scrape(0)]
        time.sleep(1.0)
        during.append(scrape(0))
        app = [l for l, _ in during[1].find("metaroce_connection_info", owner="application")]
        f.check(len(app) >= 1 and app[0].get("application") and app[0].get("pid"),
                "the application's connection: owner, name and pid")
        if app:
            aid = app[0]["conn"]
            sent = [d.value("metaroce_connection_sent_pkts_total", conn=aid) or 0 for d in during]
            done = [d.value("metaroce_connection_messages_completed_total", conn=aid) or 0
                    for d in during]
            f.check(0 < sent[0] < sent[1] and done[0] < done[1],
                    "its counters grow: sent_pkts %s, messages_completed %s" % (sent, done))
            n_paths = len(during[1].find("metaroce_path_tx_packets_total", conn=aid))
            f.check(n_paths > 0 and
                    during[1].total("metaroce_path_tx_packets_total", conn=aid) >
                    during[0].total("metaroce_path_tx_packets_total", conn=aid),
                    "its %d paths' tx_packets grow" % n_paths)
            f.check(sorted(int(l["path"]) for l, _ in during[1].find(
                "metaroce_path_source_port", conn=aid)) == list(range(n_paths)),
                "its path ids are 0..%d" % (n_paths - 1))
        well_formed(during[1], "with traffic")
        promtool_clean(during[1], "with traffic")
        rc_client = client.wait(timeout=60)
        rc_server = server.wait(timeout=60)
        f.check(rc_client == 0 and rc_server == 0,
                "mrperf through the daemons: exit %d and %d" % (rc_client, rc_server))
        if rc_client != 0 or rc_server != 0:
            print("  client: %s\n  server: %s" % (client.stdout.read()[-1500:],
                                                  server.stdout.read()[-1500:]))
        after = scrape(0)
        for name in ("metaroce_port_tx_packets_total", "metaroce_port_rx_packets_total",
                     "metaroce_worker_rx_datagrams_total"):
            f.check(after.total(name) > before.total(name),
                    "%s grew (%d -> %d)" % (name, before.total(name), after.total(name)))
        x0 = before.total("metaroce_xdp_packets_total", outcome="redirected")
        x1 = after.total("metaroce_xdp_packets_total", outcome="redirected")
        f.check(x1 > x0, "XDP redirected grew (%d -> %d)" % (x0, x1))

        # Refusals; the server stays up.
        status, headers, _ = http(0, b"GET /other HTTP/1.1\r\n\r\n")
        f.check(status == 404, "GET /other: 404")
        status, headers, _ = http(0, b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
        f.check(status == 405 and headers.get("allow") == "GET, HEAD",
                "POST /metrics: 405, Allow: GET, HEAD")
        status, _, _ = http(0, b"\x16\x03\x01\x00\xa5garbage\r\n\r\n")
        f.check(status == 400, "garbage: 400")
        status, _, _ = http(0, b"GET /metrics HTTP/1.1\r\nX-Long: " + b"a" * (1 << 20))
        f.check(status == 431, "1 MiB request head: 431")
        t0 = time.monotonic()
        status, _, _ = http(0, b"GET /metrics HTTP/1.1\r\n")
        f.check(status == 408 and time.monotonic() - t0 < 15,
                "incomplete request: 408 after the timeout (%.1f s)" % (time.monotonic() - t0))
        status, _, body = http(0, b"HEAD /metrics HTTP/1.0\r\n\r\n")
        f.check(status == 200 and body == "", "HEAD /metrics: 200, no body")
        f.check(scrape(0).find("metaroce_build_info") and daemons[0].poll() is None and
                ctl(0, "daemon", "show").returncode == 0,
                "the metrics server and the daemon are still up")

        # Stop: the port closes with the daemon.
        daemons[0].send_signal(signal.SIGTERM)
        rc = daemons[0].wait(timeout=20)
        listeners = subprocess.run(["ip", "netns", "exec", ns(0), "ss", "-ltnH"],
                                   capture_output=True, text=True).stdout
        f.check(rc == 0 and ":9469" not in listeners, "SIGTERM: exit 0, metrics port closed")
    except harness.ABORTS + (ValueError,) as e:
        f.abort(e, md)
    finally:
        harness.kill_all(perfs + list(daemons.values()))
        fabric.down()
        shutil.rmtree(tmp, ignore_errors=True)
    return f.finish()


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Privileged end-to-end test of mrperf (tools/perf) on a namespace fabric (tools/fabric/mrfabric).

Brings up 2 hosts x 2 planes x 2 spines, runs mrperf write_bw and send_bw with --verify for a few
seconds each (and once each without, as perftest runs them; send_bw must meet no RNR): clean (while `mrfabric ping` and a TCP exchange check that the XDP program passes
other traffic),
with 5 % drop on one spine, with a spine blackholed mid-run, over the UDP port kind, and with 2
workers (on a fabric with 2 queues per host link); write_lat and send_lat (inline engine) clean,
and send_lat with the drop. Every run must report zero failed operations,
zero data errors and verified messages in its JSON. The fabric is always torn down.

usage: perf_fabric_test.py MRPERF MRFABRIC        exit 0 pass, 1 fail, 77 skip (not root)
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import fabric_harness as harness  # noqa: E402

NAME = "mrpt"
SECONDS = "3"


def main():
    if len(sys.argv) != 3:
        sys.stderr.write(__doc__)
        return 2
    mrperf, mrfabric = sys.argv[1], sys.argv[2]
    if not (harness.have_root() and harness.have_netns()):
        return harness.SKIP
    failures = []
    fabric = harness.Fabric(mrfabric, NAME, whole_command_in_errors=True)
    ns = fabric.ns

    def run(label, test, flags, during=None, verify=True):
        tmp = tempfile.mkdtemp(prefix="mrperf-test-")
        cjson = os.path.join(tmp, "client.json")
        common = ([test, "--interface", "pl0,pl1", "-D", SECONDS, "-p", "18600"] +
                  (["--verify"] if verify else []) + flags)
        server = subprocess.Popen(["ip", "netns", "exec", ns(1), mrperf] + common,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(0.5)
        side = None
        if during is not None:
            side = threading.Thread(target=during)
            side.start()
        client = subprocess.run(["ip", "netns", "exec", ns(0), mrperf] + common +
                                ["--out_json", cjson, "198.18.0.6"], capture_output=True,
                                text=True, timeout=120)
        if side is not None:
            side.join()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.send_signal(signal.SIGINT)
            server.wait(timeout=10)
        problems = []
        if not os.path.exists(cjson):
            problems.append("no JSON (client exit %d: %s; server: %s)" %
                            (client.returncode, client.stderr.strip(), server.stderr.read().strip()))
        else:
            with open(cjson) as f:
                doc = json.load(f)
            s, r = doc["summary"], doc["results"][0]
            if s["failed_ops"] != 0:
                problems.append("%d failed operations" % s["failed_ops"])
            if s["data_errors"] != 0:
                problems.append("%d data errors" % s["data_errors"])
            if r["iterations"] == 0 or (verify and r["verified"] == 0):
                problems.append("nothing verified (%d messages)" % r["iterations"])
            # The server posts its -r receives before it lets the client start, and reposts
            # each one as it completes: a client within its -t never meets receiver-not-ready.
            rnr = sum(c["counters"]["rcvd_rnr_err"] for c in doc.get("connections", []))
            if test == "send_bw" and rnr != 0:
                problems.append("%d RNR NAKs received" % rnr)
            if doc.get("version") != 1:
                problems.append("JSON version %r" % doc.get("version"))
            if client.returncode != 0:
                problems.append("client exit %d: %s" % (client.returncode, client.stderr.strip()))
            figure = ("%6.2f us  " % r["t_typical_us"] if "t_typical_us" in r else
                      "%6.2f Gb/s" % r["bw_avg_gbps"])
            print("%-40s %s  %6d messages, %6d verified, %6d retransmits%s" %
                  (label, figure, r["iterations"], r["verified"],
                   s.get("retransmits", 0), "" if not problems else "  FAIL: " + "; ".join(problems)))
        shutil.rmtree(tmp, ignore_errors=True)
        if problems:
            failures.append("%s: %s" % (label, "; ".join(problems)))

    ping_ok = {}

    # A TCP exchange between the hosts on plane 1 (bounded: 256 KiB, 10 s): the XDP program
    # must pass every protocol but MetaRoCE's port to the kernel.
    tcp_server = (
        "import socket,sys\n"
        "s=socket.socket(); s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\n"
        "s.bind(('198.18.1.6',18999)); s.listen(1); s.settimeout(10)\n"
        "c,_=s.accept(); c.settimeout(10); n=0\n"
        "while n<262144:\n"
        "    b=c.recv(65536)\n"
        "    if not b: break\n"
        "    n+=len(b)\n"
        "c.sendall(str(n).encode()); c.close()\n")
    tcp_client = (
        "import socket,time\n"
        "for i in range(50):\n"
        "    try:\n"
        "        c=socket.create_connection(('198.18.1.6',18999),timeout=10); break\n"
        "    except OSError: time.sleep(0.1)\n"
        "c.sendall(b'x'*262144); c.shutdown(socket.SHUT_WR); print(c.recv(64).decode())\n")

    def ping_during():
        time.sleep(1)
        p = fabric("ping", "0", "1", "--plane", "all", "-c", "3", check=False)
        ping_ok["rc"] = p.returncode
        ping_ok["out"] = (p.stdout + p.stderr).strip()
        srv = subprocess.Popen(["ip", "netns", "exec", ns(1), "python3", "-c",
                                tcp_server], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
        cli = subprocess.run(["ip", "netns", "exec", ns(0), "python3", "-c",
                              tcp_client], capture_output=True, text=True, timeout=30)
        try:
            srv.wait(timeout=15)
        except subprocess.TimeoutExpired:
            srv.kill()
        ping_ok["tcp"] = cli.stdout.strip()
        ping_ok["tcp_err"] = (cli.stderr + srv.stderr.read()).strip()

    def blackhole_mid_run():
        time.sleep(1.5)
        fabric("fault", "1", "--udp-dport", "4792", "blackhole", "on")

    fabric.prepare()
    try:
        fabric.up()
        run("write_bw clean (+ ping through XDP)", "write_bw", [], during=ping_during)
        if ping_ok.get("rc") != 0:
            failures.append("mrfabric ping failed while mrperf ran: %s" % ping_ok.get("out"))
        else:
            print("%-40s ok" % "ping while mrperf runs")
        if ping_ok.get("tcp") != "262144":
            failures.append("TCP between the hosts failed while mrperf ran: %r %s" %
                            (ping_ok.get("tcp"), ping_ok.get("tcp_err")))
        else:
            print("%-40s ok" % "TCP (256 KiB) while mrperf runs")
        run("send_bw clean", "send_bw", [])
        # Without --verify: perftest's buffers (one per connection, every receive into it).
        run("send_bw clean, unverified", "send_bw", [], verify=False)
        run("write_bw clean, unverified", "write_bw", [], verify=False)
        # Latency tests default to the inline engine (no engine thread: the app thread polls).
        run("write_lat clean (inline engine)", "write_lat", [])
        run("send_lat clean (inline engine)", "send_lat", [])
        fabric("fault", "0", "drop", "5")
        run("write_bw, 5 % drop on spine 0", "write_bw", [])
        run("send_bw, 5 % drop on spine 0", "send_bw", [])
        run("send_lat, 5 % drop on spine 0", "send_lat", [])
        fabric("fault", "all", "clear")
        run("write_bw, spine 1 blackholed mid-run", "write_bw", [], during=blackhole_mid_run)
        fabric("fault", "all", "clear")
        run("send_bw, spine 1 blackholed mid-run", "send_bw", [], during=blackhole_mid_run)
        fabric("fault", "all", "clear")
        run("write_bw over --port-kind udp", "write_bw", ["--port-kind", "udp"])
        fabric("down")
        fabric.up("--queues", "2")
        run("send_bw, 2 workers, 4 connections", "send_bw", ["--workers", "2", "-q", "4"])
        run("write_bw, 2 workers, 4 connections", "write_bw", ["--workers", "2", "-q", "4"])
    except (RuntimeError, subprocess.TimeoutExpired, KeyboardInterrupt) as e:
        failures.append("aborted: %s" % e)
    finally:
        fabric.down()
    return harness.finish(failures)


if __name__ == "__main__":
    sys.exit(main())

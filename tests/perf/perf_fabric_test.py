#!/usr/bin/env python3
"""Privileged end-to-end test of mrperf (tools/perf) on a namespace fabric (tools/fabric/mrfabric).

Brings up 2 hosts x 2 planes x 2 spines, runs mrperf write_bw and send_bw with --verify for a few
seconds each (and once each without, as perftest runs them; send_bw must meet no RNR): clean (while `mrfabric ping` and a TCP exchange check that the XDP program passes
other traffic),
with 5 % drop on one spine, with a spine blackholed mid-run, over the UDP port kind, and with 2
workers (on a fabric with 2 queues per host link); write_lat and send_lat (inline engine) clean,
and send_lat with the drop. Every run must report zero failed operations,
zero data errors and, with --verify, every message verified in its JSON; every fault must have
dropped packets by its program's counters (a fault that never acted fails its run), and the ping
and TCP side job must not raise. The fabric is always torn down.

usage: perf_fabric_test.py MRPERF MRFABRIC        exit 0 pass, 1 fail, 77 skip (not root)
"""
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
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

    def run(label, test, flags, around=None, verify=True):
        """One mrperf run; around: a context manager entered as the client starts and left as
        it ends (a harness.SpineFault, or a harness.SideThread of other traffic), whose failure
        (a fault that never acted, a side job that raised) fails the run."""
        tmp = tempfile.mkdtemp(prefix="mrperf-test-")
        cjson = os.path.join(tmp, "client.json")
        common = ([test, "--interface", "pl0,pl1", "-D", SECONDS, "-p", "18600"] +
                  (["--verify"] if verify else []) + flags)
        problems = []
        server = subprocess.Popen(["ip", "netns", "exec", ns(1), mrperf] + common,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            time.sleep(0.5)
            try:
                with around if around is not None else contextlib.nullcontext():
                    client = subprocess.run(["ip", "netns", "exec", ns(0), mrperf] + common +
                                            ["--out_json", cjson, "198.18.0.6"],
                                            capture_output=True, text=True, timeout=120)
            except (harness.SideThreadFailed, harness.FaultNotProved) as e:
                problems.append(str(e))  # raised on leaving the block: the client has run
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.send_signal(signal.SIGINT)
                server.wait(timeout=10)
            if not os.path.exists(cjson):
                problems.append("no JSON (client exit %d: %s; server: %s)" %
                                (client.returncode, client.stderr.strip(),
                                 server.stderr.read().strip()))
            else:
                with open(cjson) as f:
                    doc = json.load(f)
                s, r = doc["summary"], doc["results"][0]
                if s["failed_ops"] != 0:
                    problems.append("%d failed operations" % s["failed_ops"])
                if s["data_errors"] != 0:
                    problems.append("%d data errors" % s["data_errors"])
                # Every measured message verified: a bandwidth test's server checks each message
                # it receives (also those the client drained after the interval), a latency
                # test's two sides each ping and each pong (also the warm-up's).
                must_verify = r["iterations"] * (2 if test.endswith("_lat") else 1)
                if r["iterations"] == 0:
                    problems.append("no messages")
                elif verify and r["verified"] < must_verify:
                    problems.append("%d verified of %d (%d messages)" %
                                    (r["verified"], must_verify, r["iterations"]))
                # The server posts its -r receives before it lets the client start, and reposts
                # each one as it completes: a client within its -t never meets receiver-not-ready.
                rnr = sum(c["counters"]["rcvd_rnr_err"] for c in doc.get("connections", []))
                if test == "send_bw" and rnr != 0:
                    problems.append("%d RNR NAKs received" % rnr)
                if doc.get("version") != 1:
                    problems.append("JSON version %r" % doc.get("version"))
                if client.returncode != 0:
                    problems.append("client exit %d: %s" % (client.returncode,
                                                            client.stderr.strip()))
                figure = ("%6.2f us  " % r["t_typical_us"] if "t_typical_us" in r else
                          "%6.2f Gb/s" % r["bw_avg_gbps"])
                dropped = getattr(around, "dropped", None)
                print("%-40s %s  %6d messages, %6d verified, %6d retransmits%s%s" %
                      (label, figure, r["iterations"], r["verified"], s.get("retransmits", 0),
                       "" if dropped is None else ", %d dropped by the fault" % dropped,
                       "" if not problems else "  FAIL: " + "; ".join(problems)))
        finally:
            harness.kill_all([server])
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
        return harness.SpineFault(fabric, 1, "blackhole", "on", udp_dport=4792, delay_s=1.5)

    def drop_5pct():
        return harness.SpineFault(fabric, 0, "drop", "5")

    fabric.prepare()
    try:
        fabric.up()
        run("write_bw clean (+ ping through XDP)", "write_bw", [],
            around=harness.SideThread("ping and TCP while mrperf runs", ping_during))
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
        # Each fault is set for one run, proved by its counters at the run's end, and cleared.
        run("write_bw, 5 % drop on spine 0", "write_bw", [], around=drop_5pct())
        run("send_bw, 5 % drop on spine 0", "send_bw", [], around=drop_5pct())
        run("send_lat, 5 % drop on spine 0", "send_lat", [], around=drop_5pct())
        run("write_bw, spine 1 blackholed mid-run", "write_bw", [], around=blackhole_mid_run())
        run("send_bw, spine 1 blackholed mid-run", "send_bw", [], around=blackhole_mid_run())
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

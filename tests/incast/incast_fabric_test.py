#!/usr/bin/env python3
"""Privileged: a small real-datapath incast through tools/bench/incast must lose no operation.

Runs `tools/bench/incast --skip-sim --clients 2 --seconds 2 --fabric-name mrinct` with the
binaries of this build: a fabric of 3 hosts (tools/fabric/mrfabric), metaroced on host 0 with
one attached `mrperf write_bw` server per client, first one client alone (host 1), then two
clients (hosts 1 and 2, -q 8 each, embedded) writing into host 0 at the same time. Checks, from
the bench's JSON (the last line of its stdout): the bench exits 0 and reports no error, no
operation failed on either side of any run (fabric_incast_failed_ops and the unloaded run's),
no data error, every client and server wrote its mrperf JSON and exited 0, every client moved
data (messages and bytes above zero), each incast client had its 8 connections; and afterwards
no namespace of the fabric is left. No wall-clock figure is checked: bandwidth on these machines
is whatever the CPUs give.

The bench tears its fabric down itself (also on SIGTERM, which is passed on to it: meson's
timeout); the test runs `mrfabric down --name mrinct` afterwards in any case.

usage: incast_fabric_test.py BENCH_INCAST METAROCED MRCTL MRPERF MRFABRIC
exit 0 pass, 1 fail, 77 skip (not root, no network namespaces, no AF_XDP, no nsenter/taskset)
"""
import json
import os
import signal
import socket
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import fabric_harness as harness  # noqa: E402

NAME = "mrinct"  # its own fabric: never the bench's default (mrincast) run by hand
AF_XDP = 44
CLIENTS = 2


def have_af_xdp():
    try:
        socket.socket(AF_XDP, socket.SOCK_RAW).close()
    except OSError as e:
        print("skip: no AF_XDP sockets (%s)" % e)
        return False
    return True


def leftovers():
    p = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    return [line.split()[0] for line in p.stdout.splitlines()
            if line.startswith("mrf-%s-" % NAME)]


def main():
    if len(sys.argv) != 6:
        sys.stderr.write(__doc__)
        return 2
    bench, metaroced, mrctl, mrperf, mrfabric = sys.argv[1:]
    if not (harness.have_root() and harness.have_netns() and
            harness.have_tools("nsenter", "taskset", "tc") and have_af_xdp()):
        return harness.SKIP
    env = dict(os.environ, METAROCED=metaroced, MRCTL=mrctl, MRPERF=mrperf, MRFABRIC=mrfabric)
    harness.interrupt_on_sigterm()
    fabric = harness.Fabric(mrfabric, NAME)
    f = harness.Failures(width=72, flush=True)
    proc = None
    try:
        fabric.down()  # a leftover of an earlier run
        proc = subprocess.Popen([sys.executable, bench, "--skip-sim", "--clients", str(CLIENTS),
                                 "--seconds", "2", "--fabric-name", NAME],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=env)
        out, err = proc.communicate(timeout=240)
    except (KeyboardInterrupt, subprocess.TimeoutExpired) as e:
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # the bench tears its fabric down on SIGTERM
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        f.append("aborted: %s" % type(e).__name__)
        fabric.down()
        return f.finish()
    # The bench must have taken its fabric down itself: looked at before the safety net.
    left = leftovers()
    fabric.down()
    lines = out.strip().splitlines()
    print("\n".join(lines[:-1]))  # the tables (the JSON line follows, in short, below)
    sys.stderr.write(err)
    try:
        doc = json.loads(lines[-1])
    except (ValueError, IndexError):
        print("no JSON on the bench's last line (exit %d)" % proc.returncode)
        return harness.FAIL
    print(json.dumps({k: v for k, v in doc.items() if k.startswith("fabric") or
                      k in ("data_errors", "errors", "notes")}))
    f.check(proc.returncode == 0, "the bench exits 0 (exit %d)" % proc.returncode)
    f.check(not doc.get("errors"), "the bench reports no error (%s)" % doc.get("errors"))
    fab = (doc.get("raw") or {}).get("fabric") or {}
    f.check(doc.get("fabric_incast_failed_ops") == 0,
            "no failed operation in the incast (%s)" % doc.get("fabric_incast_failed_ops"))
    f.check(fab.get("single_failed_ops") == 0,
            "no failed operation in the unloaded run (%s)" % fab.get("single_failed_ops"))
    f.check(doc.get("data_errors") == 0, "no data error (%s)" % doc.get("data_errors"))
    for phase, count in (("single", 1), ("incast", CLIENTS)):
        p = fab.get(phase) or {}
        clients, servers = p.get("clients", []), p.get("servers", [])
        f.check(len(clients) == count and len(servers) == count,
                "%s: %d client(s) and %d server(s) ran (%d, %d)" % (phase, count, count,
                                                                   len(clients), len(servers)))
        for c in clients + servers:
            f.check(c.get("json") and c.get("exit") == 0,
                    "%s: %s on host %d wrote its JSON and exited 0 (exit %s)" % (
                        phase, c.get("role"), c.get("host", -1), c.get("exit")))
        for c in clients:
            f.check((c.get("iterations") or 0) > 0 and (c.get("bytes") or 0) > 0,
                    "%s: client on host %d moved data (%s messages, %s bytes)" % (
                        phase, c.get("host", -1), c.get("iterations"), c.get("bytes")))
            f.check(c.get("connections") == 8 and c.get("failed_ops") == 0 and
                    c.get("connections_in_error") == 0,
                    "%s: client on host %d: 8 connections, none in error, no failed operation"
                    % (phase, c.get("host", -1)))
    f.check(not left, "the bench left no namespace of fabric %s (%s)" % (NAME, left))
    return f.finish()


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Privileged end-to-end test on an IPv6-only fabric: mrperf, and two metaroced peering.

Brings up `mrfabric up --ipv6` (2 hosts x 2 planes x 2 spines), then removes every IPv4 address
of the hosts' plane interfaces, so that the hosts have IPv6 alone (fd00:6d72:P:H::2). Then:
  - mrperf write_bw --verify, server on host 1 with no address (its control listener is a
    wildcard: it must answer on IPv6), client on host 0 naming host 1 as fd00:6d72:0:1::2, both
    with their IPv6 addresses per plane (--local-ip): the client connects, every message is
    verified, no failed operation, no data error. Before issue 36 the wildcard listener was
    0.0.0.0 and the client got "no mrperf server at fd00:6d72:0:1::2:18620 (Connection
    refused)".
  - one metaroced per host with its default control_bind (every address) and local_ips the
    IPv6 ones: `conn add fd00:6d72:0:1::2` on host 0 connects the daemons (ready, and host 1's
    daemon lists it with host 0's IPv6 address as the peer), then `conn del`.
The fabric is always torn down.

usage: perf_ipv6_test.py MRPERF MRFABRIC METAROCED MRCTL    exit 0 pass, 1 fail, 77 skip
"""
import ipaddress
import json
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import fabric_harness as harness  # noqa: E402

NAME = "mrp6"
SECONDS = "2"
PORT = "18620"


def v6(plane, host):
    """Host `host`'s address on plane `plane` (tools/fabric/mrfabric: fd00:6d72:P:H::2), in
    its canonical text (as the daemon names peers: fd00:6d72::2 for plane 0, host 0)."""
    return str(ipaddress.IPv6Address("fd00:6d72:%x:%x::2" % (plane, host)))


def wait_listening(netns, port, proc, timeout_s=30):
    """True once a TCP listener on `port` in `netns` is a dual-stack one ([::], or * as ss
    prints it), False when none appears (or only an IPv4 one) before proc exits or the timeout."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and proc.poll() is None:
        out = subprocess.run(["ip", "netns", "exec", netns, "ss", "-Hltn", "sport", "=", ":" + port],
                             capture_output=True, text=True).stdout
        if out.strip():
            return "[::]:" + port in out or "*:" + port in out
        time.sleep(0.1)
    return False


def main():
    if len(sys.argv) != 5:
        sys.stderr.write(__doc__)
        return 2
    mrperf, mrfabric, metaroced, mrctl = sys.argv[1:]
    if not (harness.have_root() and harness.have_netns()):
        return harness.SKIP
    fabric = harness.Fabric(mrfabric, NAME, whole_command_in_errors=True)
    ns = fabric.ns
    f = harness.Failures(width=76, flush=True)
    tmp = harness.make_tmp("mrperf-ipv6-")
    local = {h: "%s,%s" % (v6(0, h), v6(1, h)) for h in (0, 1)}
    md = harness.Daemons(metaroced, mrctl, ns, tmp, json_version=1)
    procs = []
    fabric.prepare()
    try:
        fabric.up("--ipv6")
        for h in (0, 1):
            for dev in ("pl0", "pl1"):
                subprocess.run(["ip", "-n", ns(h), "-4", "addr", "flush", "dev", dev], check=True)
        left = subprocess.run(["ip", "-n", ns(0), "-4", "-o", "addr", "show", "dev", "pl0"],
                              capture_output=True, text=True, check=True).stdout.strip()
        f.check(not left, "host 0's pl0 has no IPv4 address (%s)" % (left or "none"))
        ping = fabric("ping", "0", "1", "--ipv6", "--plane", "all", "-c", "2", check=False)
        f.check(ping.returncode == 0, "the hosts reach each other over IPv6 (mrfabric ping -6)")

        # mrperf: the server with no address, the client naming host 1's IPv6 address.
        cjson = os.path.join(tmp, "client.json")
        common = ["write_bw", "--interface", "pl0,pl1", "-D", SECONDS, "-p", PORT, "--verify"]
        server = subprocess.Popen(["ip", "netns", "exec", ns(1), mrperf] + common +
                                  ["--local-ip", local[1]], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True)
        procs.append(server)
        listening = wait_listening(ns(1), PORT, server)
        f.check(listening, "the mrperf server listens on [::]:%s, every address of both "
                "families" % PORT)
        client = subprocess.run(["ip", "netns", "exec", ns(0), mrperf] + common +
                                ["--local-ip", local[0], "--out_json", cjson, v6(0, 1)],
                                capture_output=True, text=True, timeout=120)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass  # killed below
        f.check(client.returncode == 0, "mrperf client to [%s] exits 0 (exit %d: %s)" % (
            v6(0, 1), client.returncode, client.stderr.strip()[-300:]))
        if os.path.exists(cjson):
            with open(cjson) as fh:
                doc = json.load(fh)
            s, r = doc["summary"], doc["results"][0]
            print("mrperf over IPv6: %d messages, %d verified, %.2f Gb/s" %
                  (r["iterations"], r["verified"], r["bw_avg_gbps"]))
            f.check(r["iterations"] > 0 and r["verified"] >= r["iterations"],
                    "every message verified (%d of %d)" % (r["verified"], r["iterations"]))
            f.check(s["failed_ops"] == 0 and s["data_errors"] == 0,
                    "no failed operation, no data error (%d, %d)" %
                    (s["failed_ops"], s["data_errors"]))
        else:
            f.check(False, "mrperf client wrote its JSON")
        harness.stop(server)  # SIGTERM: mrperf detaches its XDP program as it leaves
        procs.clear()
        for h in (0, 1):  # whatever a killed server left attached, the daemons' would refuse
            for dev in ("pl0", "pl1"):
                subprocess.run(["ip", "-n", ns(h), "link", "set", "dev", dev, "xdp", "off"],
                               check=False)

        # Two daemons peering over IPv6, control_bind left at its default.
        md.extra_args = []
        for h in (0, 1):
            md.extra_args = ["--local-ip", local[h]]
            md.start(h)
        added = md.ctl_json(0, "conn", "add", v6(0, 1), "paths", "4").get("conn", {})
        f.check(added.get("state") == "ready" and added.get("paths") == 4,
                "conn add %s: ready, 4 paths (%s)" % (v6(0, 1), added))
        theirs = md.ctl_json(1, "conn", "show").get("connections", [])
        f.check(len(theirs) == 1 and theirs[0].get("peer") == v6(0, 0),
                "host 1's daemon lists it, peer %s (%s)" %
                (v6(0, 0), [c.get("peer") for c in theirs]))
        if added.get("id") is not None:
            md.ctl_json(0, "conn", "del", str(added["id"]))
    except harness.ABORTS + (KeyError, IndexError, ValueError) as e:
        f.abort(e, md)
    finally:
        harness.kill_all(procs)
        md.kill_all()
        fabric.down()
        shutil.rmtree(tmp, ignore_errors=True)
    return f.finish()


if __name__ == "__main__":
    sys.exit(main())

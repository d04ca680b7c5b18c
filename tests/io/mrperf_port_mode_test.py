#!/usr/bin/env python3
"""Privileged check that mrperf reports how its AF_XDP ports are really bound.

On veth the driver refuses AF_XDP zero-copy (EOPNOTSUPP) and the ports fall back to copy mode,
with a description that says "copy-mode (zero-copy refused: ...)". mrperf's JSON `zero_copy` must
then be false: it is asked of the ports (AfXdpPort::zero_copy()), and a description that
mentions zero-copy must not make it true. Runs write_bw (the stack, embedded engine) and raw_bw
(the raw AF_XDP baseline) for one second each on a namespace fabric (tools/fabric/mrfabric), and
write_bw over kernel UDP ports (zero_copy false, no AF_XDP port at all). Then the fabric at MTU
9000: write_bw --verify over AF_XDP ports (multi-buffer) and over kernel UDP ports, the payload
per packet taken from the link MTU, every message verified.

usage: mrperf_port_mode_test.py MRPERF MRFABRIC     exit 0 pass, 1 fail, 77 skip (not root)
"""
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

NAME = "mrpm"
PEER = "198.18.0.6"  # host 1 on plane 0


def run_pair(mrperf, ns, test, flags):
    """Server in host 1, client in host 0; returns the client's JSON document or raises."""
    tmp = tempfile.mkdtemp(prefix="mrperf-port-mode-")
    try:
        out = os.path.join(tmp, "client.json")
        common = [test, "--interface", "pl0,pl1", "-D", "1", "-p", "18620"] + flags
        server = subprocess.Popen(["ip", "netns", "exec", ns(1), mrperf] + common,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            time.sleep(0.5)
            client = subprocess.run(["ip", "netns", "exec", ns(0), mrperf] + common +
                                    ["--out_json", out, PEER],
                                    capture_output=True, text=True, timeout=60)
        finally:
            try:
                server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                server.send_signal(signal.SIGINT)
                server.wait(timeout=10)
        if not os.path.exists(out):
            raise RuntimeError("%s: no JSON (client exit %d: %s; server: %s)" %
                               (test, client.returncode, client.stderr.strip()[-800:],
                                server.stderr.read().strip()[-800:]))
        with open(out) as f:
            return json.load(f)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def configs(doc):
    """The client's config and, when the document carries it, the server's."""
    out = [("client", doc.get("config", {}))]
    server = doc.get("server")
    if isinstance(server, dict) and isinstance(server.get("config"), dict):
        out.append(("server", server["config"]))
    return out


def main():
    if len(sys.argv) != 3:
        sys.stderr.write(__doc__)
        return 2
    mrperf, mrfabric = sys.argv[1:]
    if not (harness.have_root() and harness.have_netns()):
        return harness.SKIP
    f = harness.Failures(width=72, flush=True)
    fabric = harness.Fabric(mrfabric, NAME, whole_command_in_errors=True)
    fabric.prepare()
    try:
        fabric.up()
        for label, test, flags, af_xdp in [
                ("write_bw, AF_XDP ports (embedded engine)", "write_bw", [], True),
                ("raw_bw, AF_XDP ports", "raw_bw", ["--workers", "1"], True),
                ("write_bw, kernel UDP ports", "write_bw", ["--port-kind", "udp"], False)]:
            doc = run_pair(mrperf, fabric.ns, test, flags)
            for side, config in configs(doc):
                descriptions = config.get("port_descriptions", [])
                if af_xdp:
                    f.check(bool(descriptions) and
                            all(d.startswith("af_xdp") and " copy-mode" in d
                                for d in descriptions),
                            "%s, %s: every port in copy mode (%d ports)" %
                            (label, side, len(descriptions)))
                    # The case that used to pass by accident: the refusal's own words.
                    f.check(any("zero-copy refused" in d for d in descriptions),
                            "%s, %s: the descriptions mention the refused zero-copy" %
                            (label, side))
                f.check(config.get("zero_copy") is False,
                        "%s, %s: zero_copy is false (got %r)" %
                        (label, side, config.get("zero_copy")))
        # Jumbo frames: the same fabric at MTU 9000; AF_XDP ports are multi-buffer and every
        # port kind carries verified data at the payload the link MTU gives.
        fabric.down()
        fabric.up("--mtu", "9000")
        for label, flags, af_xdp in [
                ("write_bw --verify, MTU 9000, AF_XDP ports", ["--verify"], True),
                ("write_bw --verify, MTU 9000, kernel UDP ports",
                 ["--verify", "--port-kind", "udp"], False)]:
            doc = run_pair(mrperf, fabric.ns, "write_bw", flags)
            config, result = doc.get("config", {}), (doc.get("results") or [{}])[0]
            descriptions = config.get("port_descriptions", [])
            if af_xdp:
                f.check(bool(descriptions) and all("multi-buffer" in d for d in descriptions),
                        "%s: every port multi-buffer (%s)" % (label, descriptions[:1]))
            f.check(config.get("mtu", 0) > 8000,
                    "%s: payload per packet from the link MTU (got %r)" % (label,
                                                                         config.get("mtu")))
            f.check(result.get("iterations", 0) > 0 and result.get("data_errors") == 0 and
                    result.get("failed_ops") == 0,
                    "%s: messages completed, verified, none failed (%r)" %
                    (label, {k: result.get(k) for k in ("iterations", "data_errors",
                                                         "failed_ops", "verified")}))
    except (RuntimeError, subprocess.TimeoutExpired, KeyboardInterrupt) as e:
        f.append("aborted: %s" % e)
        print("aborted: %s" % e)
    finally:
        fabric.down()
    return harness.finish(f)


if __name__ == "__main__":
    sys.exit(main())

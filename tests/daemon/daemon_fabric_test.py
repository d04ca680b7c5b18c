#!/usr/bin/env python3
"""Privileged end-to-end test of metaroced and mrctl on a namespace fabric (tools/fabric/mrfabric).

Brings up 2 hosts x 2 planes x 2 spines and one metaroced per host (each with its own control
socket in a temporary directory), then checks, through mrctl (text and -j):
  - daemon show / link show / stat show answer with the documented keys;
  - conn add connects the daemons (both sides list the connection, 8 paths on distinct ports);
  - path rotate moves exactly that path to a new port and path events records it (reason manual);
  - bad requests are refused with a reason and the daemon stays up: malformed JSON (the same
    socket keeps working), an unknown method, unknown parameters, a wrong version, an over-long
    line (answered, then closed), an unknown connection; a user who is not allowed is refused;
  - conn del removes the connection on both daemons;
  - a conn add to a peer that does not answer (its daemon stopped) holds up no other request,
    then fails with one line naming the peer;
  - a peer daemon killed with SIGKILL is detected: its connections go to error, naming the peer;
  - SIGTERM stops a daemon with exit 0 and leaves no XDP program, socket file or listener.
The fabric and the daemons are always torn down.

usage: daemon_fabric_test.py METAROCED MRCTL MRFABRIC     exit 0 pass, 1 fail, 77 skip (not root)
"""
import os
import shutil
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import fabric_harness as harness  # noqa: E402

NAME = "mrdt"
PEER_OF_H0 = "198.18.0.6"  # host 1 on plane 0


def main():
    if len(sys.argv) != 4:
        sys.stderr.write(__doc__)
        return 2
    metaroced, mrctl, mrfabric = sys.argv[1:]
    if not (harness.have_root() and harness.have_netns()):
        return harness.SKIP
    fabric = harness.Fabric(mrfabric, NAME)
    ns = fabric.ns
    tmp = harness.make_tmp("metaroced-test-")
    md = harness.Daemons(metaroced, mrctl, ns, tmp, json_version=1)
    sock, daemons, ctl, ctl_json = md.sock, md.procs, md.ctl, md.ctl_json
    f = harness.Failures(width=66)

    def raw(h, lines, read_lines):
        return harness.control_exchange(sock[h], lines, read_lines)

    error_code = harness.error_code

    fabric.prepare()
    try:
        fabric.up()
        md.start_all()

        d = ctl_json(0, "daemon", "show")
        f.check(d.get("protocol") == 1 and d.get("port_kind") == "af_xdp" and
                all(k in d.get("versions", {}) for k in ("kernel", "libbpf", "libxdp", "liburing"))
                and all(k in d.get("features", {}) for k in
                        ("zero_copy", "need_wakeup", "busy_poll", "multi_buffer")),
                "daemon show: protocol, port kind, versions, features")
        # Taken from the ports themselves (PacketPort::features): veth refuses zero-copy, the
        # ports ask for need_wakeup, and the fabric's MTU needs no multi-buffer.
        feats = d.get("features", {})
        f.check(feats.get("zero_copy") is False and feats.get("need_wakeup") is True and
                feats.get("multi_buffer") is False,
                "daemon show: features as the ports opened (copy mode, need_wakeup) %s" % feats)
        links = ctl_json(0, "link", "show").get("links", [])
        f.check([l.get("name") for l in links] == ["pl0", "pl1"] and
                all(l.get("xdp", {}).get("attached") for l in links),
                "link show: pl0 and pl1, XDP attached")
        # Each link's own ports' features: what the host's are made of.
        f.check(all(l.get("features") == feats for l in links),
                "link show: each plane's features as its ports opened %s" %
                [l.get("features") for l in links])
        f.check("    features need_wakeup\n" in ctl(0, "link", "show").stdout,
                "link show (text): a features line")
        stats = ctl_json(0, "stat", "show").get("links", [])
        f.check(len(stats) == 2 and all("rx_ring_full" in s and "fill_ring_empty" in s
                                        for s in stats), "stat show: AF_XDP ring health per link")
        f.check(ctl(0, "stat", "show").stdout.startswith("link pl0 "),
                "stat show (text): rdma-statistic shape")

        # Connections between the daemons.
        added = ctl_json(0, "conn", "add", PEER_OF_H0, "paths", "8").get("conn", {})
        cid = added.get("id")
        f.check(added.get("state") == "ready" and added.get("paths") == 8 and
                added.get("peer") == PEER_OF_H0, "conn add: ready, 8 paths, peer recorded")
        time.sleep(0.3)
        theirs = ctl_json(1, "conn", "show").get("connections", [])
        f.check(len(theirs) == 1 and theirs[0].get("peer_id") == cid and
                theirs[0].get("paths") == 8, "the peer daemon lists the connection")
        paths = ctl_json(0, "path", "show", str(cid)).get("paths", [])
        ports = [p.get("src_port") for p in paths]
        f.check(len(paths) == 8 and len(set(ports)) == 8 and
                all(p.get("state") in ("active", "probing") for p in paths),
                "path show: 8 paths on 8 distinct source ports")
        text = ctl(0, "path", "show", str(cid))
        f.check(text.returncode == 0 and len(text.stdout.strip().splitlines()) >= 9,
                "path show (text): a header and a line per path")

        # Operator rotation: exactly that path moves.
        rot = ctl_json(0, "path", "rotate", str(cid), "3")
        after = ctl_json(0, "path", "show", str(cid)).get("paths", [])
        moved = [p["path_id"] for p, q in zip(paths, after) if p["src_port"] != q["src_port"]]
        f.check(rot.get("old_port") == ports[3] and rot.get("new_port") != ports[3] and
                moved == [3], "path rotate 3: path 3 alone on a new port")
        events = ctl_json(0, "path", "events", str(cid)).get("events", [])
        f.check(any(e.get("kind") == "rotation" and e.get("path_id") == 3 and
                    e.get("reason") == "manual" for e in events),
                "path events: the rotation, reason manual")

        # Bad requests: refused with a reason, the daemon stays up.
        out, closed = raw(0, ['{"version":1,"id":5,"method":"daemon.show"\n',
                              '{"version":1,"id":6,"method":"daemon.show","params":{}}\n'], 2)
        f.check(len(out) == 2 and error_code(out[0]) == "invalid_argument" and
                "result" in out[1] and not closed,
                "malformed JSON: invalid_argument, same socket keeps working")
        out, _ = raw(0, ['{"version":1,"id":7,"method":"conn.frobnicate"}\n'], 1)
        f.check(len(out) == 1 and error_code(out[0]) == "unimplemented",
                "unknown method: unimplemented")
        out, _ = raw(0, ['{"version":1,"id":8,"method":"conn.show","params":{"idd":1}}\n'], 1)
        f.check(len(out) == 1 and error_code(out[0]) == "invalid_argument" and
                "idd" in out[0]["error"].get("message", ""), "unknown parameter: named")
        out, _ = raw(0, ['{"version":2,"id":9,"method":"daemon.show"}\n'], 1)
        f.check(len(out) == 1 and error_code(out[0]) == "invalid_argument",
                "version 2: refused")
        out, closed = raw(0, [b"[" * (2 << 20)], 1)
        f.check(len(out) == 1 and error_code(out[0]) == "resource_exhausted" and closed,
                "over-long line: resource_exhausted, then closed")
        p = ctl(0, "conn", "show", "99999")
        f.check(p.returncode == 1 and p.stderr.startswith("Error:") and
                len(p.stderr.strip().splitlines()) == 1, "unknown connection: one-line error, exit 1")
        p = ctl(0, "daemon", "show", user=65534)
        f.check(p.returncode != 0 and "ermission" in p.stderr, "user 65534: refused")
        f.check(daemons[0].poll() is None and ctl(0, "daemon", "show").returncode == 0,
                "the daemon is still up")

        # conn del tears down both sides.
        second = ctl_json(0, "conn", "add", PEER_OF_H0, "paths", "2").get("conn", {}).get("id")
        p = ctl(0, "conn", "del", str(second))
        time.sleep(0.5)
        f.check(p.returncode == 0 and
                [c["id"] for c in ctl_json(0, "conn", "show")["connections"]] == [cid] and
                len(ctl_json(1, "conn", "show")["connections"]) == 1,
                "conn del: gone on both daemons")

        # A peer that does not answer holds up its own conn.add only. With host 1's daemon
        # stopped (SIGSTOP) its kernel accepts the TCP connection and nothing more, so conn.add
        # waits for exchange_timeout; conn.show is answered meanwhile.
        os.kill(daemons[1].pid, signal.SIGSTOP)
        try:
            pending = subprocess.Popen(
                ["ip", "netns", "exec", ns(0), mrctl, "-s", sock[0], "conn", "add", PEER_OF_H0,
                 "paths", "2"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            time.sleep(0.5)  # its exchange has started
            shown = ctl_json(0, "conn", "show")
            answered_meanwhile = pending.poll() is None
            _, err = pending.communicate(timeout=60)
        finally:
            os.kill(daemons[1].pid, signal.SIGCONT)
        f.check(answered_meanwhile and
                [c["id"] for c in shown.get("connections", [])] == [cid],
                "peer not answering: conn show answered while conn add waits")
        f.check(pending.returncode == 1 and err.startswith("Error:") and PEER_OF_H0 in err and
                len(err.strip().splitlines()) == 1,
                "... then conn add fails with one line naming the peer")

        # A dead peer daemon is detected.
        daemons[1].kill()
        daemons[1].wait(timeout=10)
        deadline = time.monotonic() + 10
        state = None
        while time.monotonic() < deadline:
            c = ctl_json(0, "conn", "show", str(cid))["connections"][0]
            state = c.get("state")
            if state == "error":
                break
            time.sleep(0.2)
        f.check(state == "error" and "peer" in c.get("error_reason", ""),
                "peer daemon killed: connection in error, reason names the peer")

        # SIGTERM: clean stop.
        daemons[0].send_signal(signal.SIGTERM)
        rc = daemons[0].wait(timeout=20)
        xdp = subprocess.run(["ip", "netns", "exec", ns(0), "ip", "-d", "link", "show"],
                             capture_output=True, text=True).stdout
        listeners = subprocess.run(["ip", "netns", "exec", ns(0), "ss", "-ltnH"],
                                   capture_output=True, text=True).stdout
        f.check(rc == 0, "SIGTERM: exit 0")
        f.check("prog/xdp" not in xdp and "xdp" not in xdp.replace("xdpgeneric off", ""),
                "SIGTERM: no XDP program left on host 0's interfaces")
        f.check(not os.path.exists(sock[0]), "SIGTERM: socket file removed")
        f.check(":4793" not in listeners, "SIGTERM: control port closed")
    except harness.ABORTS as e:
        f.abort(e, md)
    finally:
        md.kill_all()
        fabric.down()
        shutil.rmtree(tmp, ignore_errors=True)
    return f.finish()


if __name__ == "__main__":
    sys.exit(main())

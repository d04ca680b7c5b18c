#!/usr/bin/env python3
"""Privileged end-to-end test: a spine, or a whole plane, blackholed under traffic.

Brings up 2 hosts x 2 planes x 4 spines and one metaroced per host, runs `mrperf write_bw
--verify` from host 0 to host 1 through the daemons, and mid-run blackholes (MetaRoCE's UDP port
only), in mode `spine`, the spine that most of the connection's paths cross, in both planes; in
mode `plane`, every spine of plane 0 (the plane's paths all fall silent at once and stay so,
which the sender must tell from a plane stalled for a moment). Which paths are affected is read
from the leaves' FIBs (`mrfabric route`) for the data (host 0 -> 1) and the ACKs (host 1 -> 0,
same ports), or is every path of plane 0. Then checks, through `mrctl -j`:
  - every affected path was rotated (its rotation counter and a path event with reason
    `failed`), and no other path was (the path manager steers exactly the affected paths);
  - mode spine: after the rotations no path that carries data (Active or Suspect) crosses the
    dead spine, either way. A path whose new port crossed it again (7 chances in 16 a rotation:
    data or ACKs) is Probing there, carrying nothing, and probes at a backed-off pace
    (docs/spec/paths-and-recovery.md §8: PTO x 2^b, b counting the probes since its last reply,
    not reset by a rotation, up to 10, while another path of the connection is Active), so it
    may take seconds per further dead port to leave: that is the protocol, not a failure;
  - mrperf finished with no failed operation and no data error (traffic continued).

usage: blackhole_test.py [--mode spine|plane] METAROCED MRCTL MRFABRIC MRPERF
exit 0 pass, 1 fail, 77 skip (not root)
"""
import json
import os
import shutil
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import fabric_harness as harness  # noqa: E402

NAME = "mrbh"
SPINES = 4
PEER_OF_H0 = "198.18.0.6"  # host 1 on plane 0
PERF_PORT = 18519
# The fault's own work before the blackhole (conn show, path show, two `mrfabric route`, each a
# Python process) takes seconds on a loaded 2-vCPU machine, and the traffic must outlast it and
# SETTLE_S: with 6 s a CI run read the events of a connection that had already ended.
SECONDS = 12
FAULT_AFTER_S = 2.0
SETTLE_S = 2.5  # after the fault: rotations (and re-rotations off the dead spine) are done
# A path whose new port happens to cross the dead spine again (one chance in four each way) is
# rotated again once its probes go unanswered; a CI run read the paths while one was in that
# second episode. The "afterwards" reading is retried this many times, 0.5 s apart, while traffic
# flows, until no path that carries data crosses the dead spine.
AFTER_READS = 4
# States of a path that carries no data: it may sit on a dead route while its probes back off.
NO_DATA_STATES = ("probing", "failed")


def main():
    args = sys.argv[1:]
    mode = "spine"
    if args[:1] == ["--mode"] and len(args) >= 2:
        mode, args = args[1], args[2:]
    if len(args) != 4 or mode not in ("spine", "plane"):
        sys.stderr.write(__doc__)
        return 2
    metaroced, mrctl, mrfabric, mrperf = args
    if not (harness.have_root() and harness.have_netns()):
        return harness.SKIP
    fabric = harness.Fabric(mrfabric, NAME)
    ns = fabric.ns
    tmp = harness.make_tmp("metaroced-blackhole-")
    md = harness.Daemons(metaroced, mrctl, ns, tmp, json_version=1)
    ctl_json = md.ctl_json
    f = harness.Failures(width=72)
    state = {}
    procs = []

    def crossing(paths):
        """path id -> the spines its data (host 0 -> 1) and ACKs (1 -> 0, same ports) cross."""
        out = {p["path_id"]: set() for p in paths}
        for src in (0, 1):
            args = ["route", str(src), str(1 - src), "--dport", "4792", "-j"]
            for p in paths:
                args += ["--sport", str(p["src_port"])]
            doc = json.loads(fabric(*args).stdout)
            spine = {(pl["plane"], e["sport"]): e["spine"] for pl in doc["planes"]
                     for e in pl["ports"]}
            for p in paths:
                if spine[(p["plane"], p["src_port"])] is None:
                    raise RuntimeError("mrfabric route: no spine for port %d" % p["src_port"])
                out[p["path_id"]].add(spine[(p["plane"], p["src_port"])])
        return out

    def fault():
        try:
            conns = [c for c in ctl_json(0, "conn", "show")["connections"]
                     if c.get("owner") != "daemon"]
            state["conn"] = conns[0]["id"]
            paths = ctl_json(0, "path", "show", str(state["conn"]))["paths"]
            state["before"] = paths
            if mode == "spine":
                crosses = crossing(paths)
                # The spine most paths cross: the test is never vacuous.
                spine = max(range(SPINES), key=lambda s: sum(s in c for c in crosses.values()))
                state["affected"] = {pid for pid, c in crosses.items() if spine in c}
                fabric("fault", str(spine), "--udp-dport", "4792", "blackhole", "on")
            else:
                spine = "all"
                state["affected"] = {p["path_id"] for p in paths if p["plane"] == 0}
                fabric("fault", "all", "--plane", "0", "--udp-dport", "4792", "blackhole", "on")
            state["spine"] = spine
            # The daemon keeps a connection's last 1024 events, and paths flapping between
            # active and suspect on this shared machine can fill that in a few seconds: read
            # them often and keep every rotation seen.
            state["rotations"] = {}
            deadline = time.monotonic() + SETTLE_S
            while True:
                for e in ctl_json(0, "path", "events", str(state["conn"]))["events"]:
                    if e.get("kind") == "rotation":
                        state["rotations"][(e["monotonic_ns"], e["path_id"])] = e
                if time.monotonic() >= deadline:
                    break
                time.sleep(0.2)
            for attempt in range(AFTER_READS):
                state["after"] = ctl_json(0, "path", "show", str(state["conn"]))["paths"]
                state["after_reads"] = attempt + 1
                by_id = {p["path_id"]: p for p in state["after"]}
                if mode != "spine" or not any(
                        spine in c and by_id[pid]["state"] not in NO_DATA_STATES
                        for pid, c in crossing(state["after"]).items()):
                    break
                time.sleep(0.5)
        except harness.ABORTS + (KeyError, IndexError, ValueError) as e:
            state["error"] = "%s: %s" % (type(e).__name__, e)

    fabric.prepare()
    try:
        fabric.up("--spines", str(SPINES))
        md.start_all()
        common = ["write_bw", "-p", str(PERF_PORT), "-D", str(SECONDS), "--verify",
                  "--report_gbits"]
        server = subprocess.Popen(["ip", "netns", "exec", ns(1), mrperf] + common +
                                  ["--daemon-socket", md.sock[1]], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True)
        procs.append(server)
        time.sleep(0.7)
        out_json = os.path.join(tmp, "client.json")
        timer = threading.Timer(FAULT_AFTER_S, fault)
        timer.start()
        client = subprocess.run(["ip", "netns", "exec", ns(0), mrperf] + common +
                                ["--daemon-socket", md.sock[0], "--out_json", out_json,
                                 PEER_OF_H0], capture_output=True, text=True,
                                timeout=120 + 4 * SECONDS)
        timer.join()
        server.wait(timeout=30)
        if "error" in state:
            raise RuntimeError("during the fault: " + state["error"])
        with open(out_json) as fh:
            summary = json.load(fh).get("summary", {})

        spine, affected = state["spine"], state["affected"]
        before = {p["path_id"]: p for p in state["before"]}
        after = {p["path_id"]: p for p in state["after"]}
        rotated = {pid for pid, p in after.items() if p["rotations"] > before[pid]["rotations"]}
        failed_events = {e["path_id"] for e in state["rotations"].values()
                         if e.get("reason") == "failed"}
        print("%s blackholed; affected paths %s, rotated %s (paths read %d times after)" %
              ("plane 0" if mode == "plane" else "spine %d" % spine, sorted(affected),
               sorted(rotated), state["after_reads"]))
        f.check(affected and affected <= rotated and affected <= failed_events,
                "every affected path rotated (counter and event, reason failed)")
        f.check(rotated <= affected, "no unaffected path rotated")
        if mode == "spine":
            on_dead = sorted(pid for pid, c in crossing(list(after.values())).items()
                             if spine in c)
            probing = [pid for pid in on_dead if after[pid]["state"] in NO_DATA_STATES]
            still = [pid for pid in on_dead if pid not in probing]
            if probing:
                print("on spine %d, carrying no data, probing at a backed-off pace: %s" %
                      (spine, [(pid, after[pid]["state"], after[pid]["rotations"])
                               for pid in probing]))
            f.check(not still, "afterwards no path that carries data crosses spine %d either "
                    "way%s" % (spine, "" if not still else " (still: %s)" % [
                        (pid, after[pid]["state"], after[pid]["rotations"]) for pid in still]))
        f.check(client.returncode == 0 and summary.get("failed_ops") == 0 and
                summary.get("data_errors") == 0,
                "mrperf through the daemons: no failed operation, no data error")
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

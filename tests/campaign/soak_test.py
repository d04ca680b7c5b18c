#!/usr/bin/env python3
"""Privileged: `tools/campaign soak --minutes 1` must find nothing and prove every fault acted.

Runs the soak campaign (tools/campaigns/soak.py) with the binaries of this build and checks its
JSON summary: no data error, no unexpected failed operation, every daemon restart survived, and
each fault injected and proven (blackhole flaps by the fault program's drop_blackhole counter,
the lossy spine by drop_random, connections added and deleted, an application SIGKILLed and its
connections dropped by its daemon, a daemon restarted), operations completed, and the campaign's
exit status 0. The campaign tears its fabric down itself; SIGTERM (meson's timeout) is passed on
to it so that it does.

usage: soak_test.py CAMPAIGN METAROCED MRCTL MRPERF MRFABRIC [MINUTES]
exit 0 pass, 1 fail, 77 skip (not root, no network namespaces, no AF_XDP, no bpftool/nsenter)
"""
import json
import os
import signal
import socket
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import fabric_harness as harness  # noqa: E402

AF_XDP = 44


def have_af_xdp():
    try:
        socket.socket(AF_XDP, socket.SOCK_RAW).close()
    except OSError as e:
        print("skip: no AF_XDP sockets (%s)" % e)
        return False
    return True


def main():
    args = sys.argv[1:]
    if len(args) not in (5, 6):
        sys.stderr.write(__doc__)
        return 2
    campaign, metaroced, mrctl, mrperf, mrfabric = args[:5]
    minutes = args[5] if len(args) == 6 else "1"
    if not (harness.have_root() and harness.have_netns() and
            harness.have_tools("nsenter", "bpftool", "tc") and have_af_xdp()):
        return harness.SKIP
    env = dict(os.environ, METAROCED=metaroced, MRCTL=mrctl, MRPERF=mrperf, MRFABRIC=mrfabric)
    harness.interrupt_on_sigterm()
    f = harness.Failures(width=72, flush=True)
    # A fabric name of its own: a soak run by hand (mrsoak) is never torn down by the test.
    proc = subprocess.Popen([sys.executable, campaign, "soak", "--minutes", minutes,
                             "--name", "mrsoakt"],
                            stdout=subprocess.PIPE, text=True, env=env)
    try:
        out, _ = proc.communicate(timeout=60 * float(minutes) + 600)
    except (KeyboardInterrupt, subprocess.TimeoutExpired) as e:
        proc.send_signal(signal.SIGTERM)  # the campaign tears its fabric down on SIGTERM
        try:
            proc.wait(timeout=120)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        f.append("aborted: %s" % type(e).__name__)
        return f.finish()
    try:
        s = json.loads(out)
    except ValueError:
        print("no JSON summary on stdout (exit %d):\n%s" % (proc.returncode, out[-2000:]))
        return harness.FAIL
    faults = s.get("faults", {})
    print(json.dumps({k: s.get(k) for k in (
        "minutes", "data_errors", "failed_ops_unexpected", "failed_ops_explained",
        "rss_growth_kib", "fd_growth", "restarts", "restarts_survived", "ops_completed",
        "verified", "logs")}))
    print("faults: " + json.dumps(faults))
    for u in s.get("unexpected", []):
        print("unexpected: " + json.dumps(u))
    f.check(proc.returncode == 0, "the campaign exits 0 (exit %d)" % proc.returncode)
    f.check(s.get("fatal") is None, "no daemon died unasked, nothing aborted (%s)" %
            s.get("fatal"))
    f.check(s.get("ops_completed", 0) > 0, "operations completed (%s)" % s.get("ops_completed"))
    f.check(s.get("data_errors") == 0, "no data error (%s)" % s.get("data_errors"))
    f.check(s.get("failed_ops_unexpected") == 0,
            "no unexpected failed operation (%s)" % s.get("failed_ops_unexpected"))
    f.check(s.get("restarts", 0) >= 1 and s.get("restarts_survived") == s.get("restarts"),
            "every daemon restart survived (%s of %s)" % (s.get("restarts_survived"),
                                                          s.get("restarts")))
    flaps, proven = faults.get("blackhole_flaps", 0), faults.get("blackhole_flaps_proven", 0)
    f.check(flaps > 0 and proven == flaps and not s.get("faults_unproven"),
            "every blackhole flap dropped packets (%d of %d)" % (proven, flaps))
    f.check(faults.get("loss_proven") is True and faults.get("loss_dropped_packets", 0) > 0,
            "the lossy spine dropped packets (%s)" % faults.get("loss_dropped_packets"))
    f.check(faults.get("conn_added", 0) > 0 and faults.get("conn_deleted", 0) > 0,
            "connections churned (+%s/-%s)" % (faults.get("conn_added"),
                                              faults.get("conn_deleted")))
    kills = faults.get("app_kills", 0)
    f.check(kills > 0 and faults.get("app_kills_cleaned_up") == kills,
            "applications SIGKILLed and their connections dropped (%s of %d)" %
            (faults.get("app_kills_cleaned_up"), kills))
    f.check(faults.get("daemon_restarts", 0) > 0,
            "daemon restarted (%s)" % faults.get("daemon_restarts"))
    f.check(s.get("faults_proven") is True, "the campaign counts every fault proven")
    return f.finish()


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Privileged end-to-end test of applications attached to metaroced (api::Context::Attach).

Brings up 2 hosts x 2 planes x 2 spines (tools/fabric/mrfabric) and one metaroced per host whose
control socket's group is `nogroup`, then runs attach_pingpong, a small attached application, as
the unprivileged user nobody (uid/gid 65534, no capabilities) on each host:
  - a verified exchange: every byte of 200 iterations of a Write-with-immediate and a Send each
    way, through rings and registered memory shared with the daemons;
  - afterwards neither daemon holds anything for applications (conn show, daemon show);
  - a user outside the socket's group is refused;
  - the operator manages an application's connection as the daemon's own, while its messages
    flow: `path show` lists its paths, `path rotate ID 0` moves path 0 to a new port with no
    failed operation in the application (which checks every byte), `path events` records the
    rotation while the application still receives its own event, `stat show` counts its
    messages, and `conn del` on both hosts flushes both applications' outstanding work
    (WR_FLUSH_ERR): each says so, destroys its connection and exits 3;
  - an application killed with SIGKILL while its messages flow: its daemon lists the connection
    (owner: pid and name) before, and after the kill no connection, session or memory of it is
    left; the same for its peer application; the daemons stay up.
The applications, the daemons and the fabric are always torn down.

usage: attach_test.py METAROCED MRCTL MRFABRIC ATTACH_PINGPONG     exit 0 pass, 1 fail, 77 skip
"""
import grp
import os
import shutil
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import fabric_harness as harness  # noqa: E402

NAME = "mrat"
NOBODY = 65534


def ns(host):
    return harness.host_ns(NAME, host)


class App:
    """attach_pingpong in a host's namespace, as nobody; its output lines collected."""

    def __init__(self, pingpong, host, sock, args, gid=NOBODY):
        cmd = ["nsenter", "--net=/run/netns/" + ns(host), "setpriv", "--reuid=%d" % NOBODY,
               "--regid=%d" % gid, "--clear-groups", pingpong, "--socket", sock] + args
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True)
        self.lines = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, text, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(text in l for l in self.lines):
                return True
            if self.proc.poll() is not None:
                self.reader.join(timeout=2)
                return any(text in l for l in self.lines)
            time.sleep(0.05)
        return False

    def finish(self, timeout):
        try:
            rc = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait(timeout=10)
        self.reader.join(timeout=2)
        return rc

    def output(self):
        return "\n".join(self.lines[-20:])

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=10)


def main():
    if len(sys.argv) != 5:
        sys.stderr.write(__doc__)
        return 2
    metaroced, mrctl, mrfabric, pingpong_built = sys.argv[1:]
    if not (harness.have_root() and harness.have_tools("ip", "nsenter", "setpriv") and
            harness.have_netns()):
        return harness.SKIP
    try:
        grp.getgrgid(NOBODY)
    except KeyError:
        print("skip: no group %d to give the control socket to" % NOBODY)
        return harness.SKIP
    group = grp.getgrgid(NOBODY).gr_name

    tmp = harness.make_tmp("metaroced-attach-")
    # The application runs from a copy the unprivileged user can surely reach.
    pingpong = os.path.join(tmp, "attach_pingpong")
    shutil.copy(pingpong_built, pingpong)
    os.chmod(pingpong, 0o755)
    conf = os.path.join(tmp, "metaroced.conf")
    with open(conf, "w") as c:
        c.write("[daemon]\nsocket_group = %s\n" % group)
    fabric = harness.Fabric(mrfabric, NAME)
    md = harness.Daemons(metaroced, mrctl, ns, tmp, config=conf, log_tail=3000)
    sock, daemons, ctl, ctl_json, log_of = md.sock, md.procs, md.ctl, md.ctl_json, md.log_of
    apps = []
    f = harness.Failures(width=66)

    def app(h, *args):
        a = App(pingpong, h, sock[h], list(args))
        apps.append(a)
        return a

    def app_connections(h):
        return [c for c in ctl_json(h, "conn", "show").get("connections", [])
                if isinstance(c.get("owner"), dict)]

    def applications(h):
        return ctl_json(h, "daemon", "show").get("applications", {})

    def flowing(h, messages, timeout=10):
        """The host's one application connection once it completed `messages` (or None)."""
        listed, deadline = [], time.monotonic() + timeout
        while time.monotonic() < deadline:
            listed = app_connections(h)
            if (len(listed) == 1 and
                    listed[0].get("counters", {}).get("messages_completed", 0) >= messages):
                return listed[0]
            time.sleep(0.1)
        print("  host %d application connections: %r" % (h, listed))
        return None

    def nothing_left(h, timeout=5):
        deadline = time.monotonic() + timeout
        while True:
            a = applications(h)
            if (not app_connections(h) and a.get("sessions") == 0 and
                    a.get("connections") == 0 and a.get("memory_bytes") == 0):
                return True
            if time.monotonic() > deadline:
                print("  host %d still holds: %r" % (h, a))
                return False
            time.sleep(0.1)

    fabric.prepare()
    try:
        fabric.up()
        md.start_all()
        server_addr = ctl_json(0, "link", "show")["links"][0]["address"]
        f.check(os.stat(sock[0]).st_gid == NOBODY and (os.stat(sock[0]).st_mode & 0o777) == 0o660,
                "control socket: group %s, mode 0660" % group)
        f.check("applications" in ctl_json(0, "daemon", "show"),
                "daemon show: an applications summary")

        # A verified exchange between two unprivileged applications.
        server = app(0, "--server", "--port", "18515", "--iterations", "200")
        f.check(server.wait_for("listening", 20), "server application attached and listening")
        client = app(1, "--client", server_addr, "--port", "18515", "--iterations", "200")
        rc_client, rc_server = client.finish(120), server.finish(30)
        ok = rc_client == 0 and rc_server == 0
        f.check(ok and all(any("verified 200 iterations" in l for l in a.lines)
                           for a in (client, server)),
                "200 iterations of Write+Send each way, every byte verified")
        f.check(all(any("attached: uid %d" % NOBODY in l for l in a.lines)
                    for a in (client, server)), "both applications ran as uid %d" % NOBODY)
        for who, a in (("client", client), ("server", server)):
            print("  %s: %s" % (who, next((l for l in a.lines if "verified" in l), "-")))
        if not ok:
            print("--- client (exit %s):\n%s\n--- server (exit %s):\n%s" %
                  (rc_client, client.output(), rc_server, server.output()))
        f.check(nothing_left(0) and nothing_left(1),
                "after they exit: no application connection, session or memory left")

        # A user outside the socket's group is refused before anything is made.
        outsider = App(pingpong, 1, sock[1], ["--client", server_addr], gid=1)
        rc = outsider.finish(30)
        f.check(rc == 1 and "ermission" in outsider.output(),
                "uid %d without group %s: refused (permission denied)" % (NOBODY, group))

        # The operator's view of a running application's connection.
        server = app(0, "--server", "--port", "18517", "--iterations", "100000000")
        f.check(server.wait_for("listening", 20), "operator's pair: server listening")
        client = app(1, "--client", server_addr, "--port", "18517", "--iterations", "100000000")
        f.check(client.wait_for("connected", 30), "operator's pair: client connected")
        conn = flowing(1, 100)
        if conn is None:
            raise RuntimeError("the operator's pair's messages do not flow:\n--- client:\n%s\n"
                               "--- server:\n%s" % (client.output(), server.output()))
        cid = conn["id"]
        paths = ctl_json(1, "path", "show", str(cid)).get("paths", [])
        f.check(len(paths) == 4 and all("srtt_us" in p and "src_port" in p and "state" in p
                                        for p in paths),
                "path show of an application's connection: 4 paths")
        old_port = paths[0]["src_port"] if paths else None
        rot = ctl_json(1, "path", "rotate", str(cid), "0")
        after = ctl_json(1, "path", "show", str(cid), "0").get("paths", [{}])[0]
        f.check(rot.get("old_port") == old_port and rot.get("deferred") is False and
                rot.get("new_port") != old_port and after.get("src_port") == rot.get("new_port"),
                "path rotate ID 0: path 0 on a new source port")
        done = conn["counters"]["messages_completed"]
        later = flowing(1, done + 200)
        f.check(later is not None and client.proc.poll() is None and server.proc.poll() is None,
                "after the rotation: 200 more messages verified, no failure")
        events = ctl_json(1, "path", "events", str(cid)).get("events", [])
        f.check(any(e.get("kind") == "rotation" and e.get("path_id") == 0 and
                    e.get("reason") == "manual" and e.get("old_port") == old_port
                    for e in events), "path events: the application's rotation, manual")
        stat = ctl_json(1, "stat", "show").get("links", [{}])[0]
        f.check(stat.get("messages_completed", 0) >= done + 200,
                "stat show: counters include the application's connection")
        server_conn = app_connections(0)
        sid = server_conn[0]["id"] if len(server_conn) == 1 else None
        # Both halves, back to back: either application alone would wait for its peer.
        deleted = [ctl(1, "conn", "del", str(cid)), ctl(0, "conn", "del", str(sid))]
        rc_client, rc_server = client.finish(30), server.finish(30)
        f.check(all(p.returncode == 0 for p in deleted),
                "conn del ID of both application connections")
        for who, a, rc in (("client", client, rc_client), ("server", server, rc_server)):
            f.check(rc == 3 and any("WR_FLUSH_ERR" in l for l in a.lines) and
                    any("destroyed the flushed connection" in l for l in a.lines),
                    "conn del: %s flushed (WR_FLUSH_ERR), destroyed it, exit 3" % who)
            print("  %s: %s" % (who, next((l for l in a.lines if "flushed:" in l), "-")))
            if rc != 3:
                print("--- %s (exit %s):\n%s" % (who, rc, a.output()))
        f.check(any("path events:" in l and "1 manual rotation" in l for l in client.lines),
                "the client application got its own rotation event too")
        f.check(nothing_left(0) and nothing_left(1),
                "after conn del and exit: nothing left on either host")

        # An application killed mid-run: the exchange runs until the kill.
        server = app(0, "--server", "--port", "18516", "--iterations", "100000000")
        f.check(server.wait_for("listening", 20), "second server listening")
        client = app(1, "--client", server_addr, "--port", "18516", "--iterations", "100000000")
        f.check(client.wait_for("connected", 30), "second client connected")
        conn = flowing(1, 100)
        listed = [conn] if conn is not None else app_connections(1)
        owner = listed[0].get("owner", {}) if len(listed) == 1 else {}
        f.check(len(listed) == 1 and owner.get("pid") == client.proc.pid and
                owner.get("name") == "pingpong-client" and listed[0].get("state") == "ready",
                "conn show lists the running application's connection with its owner")
        f.check(len(listed) == 1 and
                listed[0].get("counters", {}).get("messages_completed", 0) >= 100,
                "its messages are flowing (>= 100 completed) when it is killed")
        if client.proc.poll() is not None or server.proc.poll() is not None:
            print("--- client:\n%s\n--- server:\n%s" % (client.output(), server.output()))
        before = applications(1)
        f.check(before.get("sessions") == 1 and before.get("memory_bytes", 0) > 0,
                "daemon show: one session holding shared memory")
        client.proc.send_signal(signal.SIGKILL)
        client.finish(10)
        f.check(nothing_left(1), "SIGKILL: its connection, session and memory are gone")
        server.proc.send_signal(signal.SIGKILL)
        server.finish(10)
        f.check(nothing_left(0), "the peer application killed too: nothing left on host 0")
        f.check(all(d.poll() is None for d in daemons.values()) and
                ctl(0, "daemon", "show").returncode == 0 and
                ctl(1, "daemon", "show").returncode == 0, "both daemons are still up")
        log1 = log_of(1)
        f.check("pingpong-client" in log1 and "detached" in log1,
                "the daemon logged the session's end")
    except harness.ABORTS + (KeyError, IndexError) as e:
        f.abort(e, md)
    finally:
        for a in apps:
            a.kill()
        md.kill_all()
        fabric.down()
        shutil.rmtree(tmp, ignore_errors=True)
    return f.finish()


if __name__ == "__main__":
    sys.exit(main())

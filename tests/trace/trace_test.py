#!/usr/bin/env python3
"""Privileged end-to-end test of the USDT probes and the bpftrace tools in tools/trace.

Brings up 2 hosts x 2 planes x 2 spines (tools/fabric/mrfabric, fabric `mrtr`), one metaroced per
host, and runs every tools/trace/*.bt against host 0's live daemon (bpftrace -p PID) while
mrperf write_bw runs through the daemons (attached, --daemon) with 3 % loss on spine 0, an
operator rotation (mrctl path rotate) happens, and, at the end, host 0's daemon is stopped for
half a second under a flood of MetaRoCE-shaped datagrams (its AF_XDP RX ring overflows). Each
script is then stopped with SIGINT and its output checked against what mrctl reports:
  - mrpathrtt: RTT histograms with counts for the mrperf connection's paths, summing to the
    sample counts the script printed;
  - mrretrans: gap retransmissions with the loss, at least the daemon's retransmit counter as
    read mid-run;
  - mrrotate: one line naming the rotated connection and path, and the old and new ports that
    `mrctl path rotate` answered and `mrctl path show` lists, reason manual;
  - mrmsglat: a write latency histogram with counts, at least the daemon's completed messages as
    read mid-run;
  - mrxskdrops: ring drops reported, no more than the daemon's XDP_STATISTICS counters grew.
Exit 0 pass, 1 fail, 77 skip (not root, no bpftrace, probes missing from the build, or bpftrace
cannot attach uprobes on this kernel).

usage: trace_test.py METAROCED MRCTL MRPERF MRFABRIC TRACE_DIR
(TRACE_TEST_OUTPUT_DIR=DIR keeps each script's output as DIR/NAME.out)
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import traceback

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import fabric_harness as harness  # noqa: E402

NAME = "mrtr"
H0_PLANE0 = "198.18.0.2"
H1_PLANE0 = "198.18.0.6"
SCRIPTS = ["mrpathrtt", "mrretrans", "mrrotate", "mrmsglat", "mrxskdrops"]
ROTATED_PATH = 2
SECONDS = 12


def hist_counts(text, name):
    """{key tuple: total count} of every histogram `@name[k, ...]:` in bpftrace output."""
    out, key = {}, None
    for line in text.splitlines():
        m = re.match(r"@%s\[(.*)\]:\s*$" % re.escape(name), line)
        if m:
            key = tuple(k.strip() for k in m.group(1).split(","))
            out[key] = 0
            continue
        m = re.match(r"[\[(].*[\])]\s+(\d+)\s+\|", line)
        if key is not None and m:
            out[key] += int(m.group(1))
        elif line.strip() == "" or line.startswith("@"):
            key = None
    return out


def scalars(text, name):
    """{key tuple: value} of `@name[k, ...]: value` lines."""
    out = {}
    for m in re.finditer(r"^@%s\[(.*)\]: (-?\d+)$" % re.escape(name), text, re.M):
        out[tuple(k.strip() for k in m.group(1).split(","))] = int(m.group(2))
    return out


def skip_unless_failed(failures, reason):
    """The exit status for a run that cannot go on here: 77 (skip) with `reason`, unless a check
    already failed; a failure recorded before the skip was found still fails the test."""
    if failures:
        print("not skipped (%s): %d check(s) had already failed" % (reason, len(failures)))
        return 1
    print("skip: %s" % reason)
    return harness.SKIP


def main():
    if len(sys.argv) != 6:
        sys.stderr.write(__doc__)
        return 2
    metaroced, mrctl, mrperf, mrfabric, trace_dir = sys.argv[1:]
    if not harness.have_root("namespaces, XDP, uprobes"):
        return harness.SKIP
    bpftrace = shutil.which("bpftrace")
    if bpftrace is None:
        print("skip: bpftrace is not installed")
        return harness.SKIP
    if not harness.have_netns():
        return harness.SKIP
    notes = subprocess.run(["readelf", "-n", metaroced], capture_output=True, text=True).stdout
    if "Provider: metaroce" not in notes:
        print("skip: %s carries no metaroce probes (built without <sys/sdt.h>)" % metaroced)
        return harness.SKIP

    f = harness.Failures(width=70, flush=True)
    listed = subprocess.run([bpftrace, "-l", "usdt:%s:metaroce:*" % metaroced],
                            capture_output=True, text=True, timeout=60)
    for probe in ("packet_sent", "packet_received", "sack_gap", "retransmit", "rtt_sample",
                  "timer_fired", "path_state", "port_rotated", "msg_completed", "rnr",
                  "nak_sent", "access_error", "xsk_ring_drops", "xsk_tx_ring_full",
                  "xsk_rx_dropped", "worker_drop"):
        if ("usdt:%s:metaroce:%s" % (metaroced, probe)) not in listed.stdout.split():
            f.append("bpftrace -l does not list metaroce:%s" % probe)
    f.check(not f, "bpftrace -l lists every metaroce probe of metaroced")

    fabric = harness.Fabric(mrfabric, NAME)
    ns = fabric.ns
    tmp = harness.make_tmp("metaroce-trace-test-")
    md = harness.Daemons(metaroced, mrctl, ns, tmp)
    sock, daemons, ctl_json = md.sock, md.procs, md.ctl_json
    tracers, perf = {}, []

    def ring_drops(h):
        links = ctl_json(h, "stat", "show").get("links", [])
        return sum(l.get(k, 0) for l in links
                   for k in ("rx_kernel_dropped", "rx_ring_full", "fill_ring_empty"))

    def start_tracer(script):
        out = open(os.path.join(tmp, script + ".out"), "w+")
        # stderr to a file too: a pipe nobody reads until the end could fill and block it.
        err = open(os.path.join(tmp, script + ".err"), "w+")
        p = subprocess.Popen([bpftrace, "-p", str(daemons[0].pid),
                              os.path.join(trace_dir, script + ".bt")],
                             stdout=out, stderr=err, text=True)
        tracers[script] = (p, out, err)

    def wait_attached(script, timeout=60):
        p, out, _ = tracers[script]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            out.flush()
            out.seek(0)
            if "Hit Ctrl-C to end." in out.read():
                return True
            if p.poll() is not None:
                return False
            time.sleep(0.2)
        return False

    def kernel_state(pid):
        """Where a process that does not exit sits: its wait channel, syscall and kernel stack."""
        parts = []
        for what in ("wchan", "syscall", "stack"):
            try:
                with open("/proc/%d/%s" % (pid, what)) as f:
                    parts.append("%s: %s" % (what, " | ".join(f.read().split("\n")[:8])))
            except OSError as e:
                parts.append("%s: %s" % (what, e.strerror))
        return "; ".join(parts)

    def stop_tracers(scripts):
        """Ctrl-C to every tracer at once, as a user stopping them; a tracer still running
        20 s later gets a second Ctrl-C (bpftrace acts on it like the first), and one still
        running 40 s later is killed. Returns {script: (exit code, stdout, stderr, notes)}."""
        procs = {s: tracers.pop(s) for s in scripts}
        for p, _, _ in procs.values():
            p.send_signal(signal.SIGINT)
        notes = {s: [] for s in scripts}
        start = time.monotonic()
        second_sent = False
        while any(p.poll() is None for p, _, _ in procs.values()):
            waited = time.monotonic() - start
            if waited > 20 and not second_sent:
                second_sent = True
                for s, (p, _, _) in procs.items():
                    if p.poll() is None:
                        notes[s].append("still running 20 s after SIGINT (%s); second SIGINT"
                                        % kernel_state(p.pid))
                        p.send_signal(signal.SIGINT)
            if waited > 40:
                for s, (p, _, _) in procs.items():
                    if p.poll() is None:
                        notes[s].append("still running 40 s after SIGINT (%s); killed"
                                        % kernel_state(p.pid))
                        p.kill()
                break
            time.sleep(0.1)
        results = {}
        for s, (p, out, err_file) in procs.items():
            p.wait()
            err_file.seek(0)
            err = err_file.read()
            err_file.close()
            out.flush()
            out.seek(0)
            text = out.read()
            out.close()
            with open(os.path.join(tmp, s + ".out"), "w") as keep:
                keep.write(text)
            results[s] = (p.returncode, text, err, notes[s])
        return results

    fabric.prepare()
    try:
        fabric.up()
        md.start_all()

        # Can this kernel and bpftrace attach a USDT probe to the daemon at all?
        probe = subprocess.run(
            [bpftrace, "-p", str(daemons[0].pid), "-e",
             "usdt:*:metaroce:timer_fired { @n = count(); } interval:ms:300 { exit(); }"],
            capture_output=True, text=True, timeout=60)
        if probe.returncode != 0:
            basic = subprocess.run([bpftrace, "-e", "BEGIN { exit(); }"], capture_output=True,
                                   text=True, timeout=60)
            if basic.returncode != 0 or not os.path.exists("/sys/bus/event_source/devices/uprobe"):
                return skip_unless_failed(f, "bpftrace cannot attach here: %s" %
                                          probe.stderr.strip()[-500:])
            f.check(False, "bpftrace attaches a USDT probe to metaroced: %s" %
                    probe.stderr.strip()[-500:])
            return 1

        for s in SCRIPTS:
            start_tracer(s)
        for s in SCRIPTS:
            if not f.check(wait_attached(s), "%s.bt attached to metaroced (pid %d)" %
                           (s, daemons[0].pid)):
                p, _, err_file = tracers[s]
                p.poll()
                err_file.seek(0)
                print("  %s: %s" % (s, err_file.read()[-800:] if p.returncode is not None else ""))
                return 1

        fabric("fault", "0", "--udp-dport", "4792", "drop", "3")
        common = ["write_bw", "--daemon", "-D", str(SECONDS), "-p", "18710", "-s", "65536"]
        server = subprocess.Popen(
            ["ip", "netns", "exec", ns(1), mrperf] + common + ["--daemon-socket", sock[1]],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        perf.append(server)
        time.sleep(0.5)
        client = subprocess.Popen(
            ["ip", "netns", "exec", ns(0), mrperf] + common +
            ["--daemon-socket", sock[0], H1_PLANE0],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        perf.append(client)

        # The client's connection on host 0's daemon: an attached application's.
        cid, deadline = None, time.monotonic() + 20
        while cid is None and time.monotonic() < deadline and client.poll() is None:
            for c in ctl_json(0, "conn", "show").get("connections", []):
                if isinstance(c.get("owner"), dict) and c.get("state") == "ready":
                    cid = c.get("id")
            time.sleep(0.2)
        if not f.check(cid is not None, "mrperf's connection listed by host 0's daemon"):
            raise RuntimeError("mrperf: %s" % (client.communicate(timeout=60)[0][-1500:]))

        time.sleep(3)
        rot = ctl_json(0, "path", "rotate", str(cid), str(ROTATED_PATH))
        shown = ctl_json(0, "path", "show", str(cid)).get("paths", [])
        shown_port = next((p.get("src_port") for p in shown if p.get("path_id") == ROTATED_PATH),
                          None)
        f.check(rot.get("new_port") not in (None, rot.get("old_port")) and
                shown_port == rot.get("new_port"),
                "mrctl path rotate %d %d: %s -> %s, path show agrees" %
                (cid, ROTATED_PATH, rot.get("old_port"), rot.get("new_port")))

        time.sleep(SECONDS / 2 - 3)
        mid = {}
        for link in ctl_json(0, "stat", "show").get("links", [])[:1]:
            # Connection counters are per host, repeated on every link's line.
            mid = {k: link.get(k, 0) for k in ("retransmits", "messages_completed")}

        out_c, _ = client.communicate(timeout=SECONDS + 60)
        out_s, _ = server.communicate(timeout=60)
        f.check(client.returncode == 0 and server.returncode == 0,
                "mrperf write_bw through the daemons with 3 %% loss (client %d, server %d)" %
                (client.returncode, server.returncode))
        if client.returncode != 0:
            print(out_c[-1500:])
        if server.returncode != 0:
            print(out_s[-1500:])
        fabric("fault", "0", "clear")

        # AF_XDP RX ring overflow: the daemon stopped, a flood of MetaRoCE-shaped datagrams
        # (version 1, an unknown connection) to its plane-0 address.
        before = ring_drops(0)
        flood = ("import socket,struct\n"
                 "s=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n"
                 "h=struct.pack('!BBHIHHIQ',1,1,0,0xfffffff0,0,0,0,0)\n"
                 "for i in range(30000): s.sendto(h,('%s',4792))\n" % H0_PLANE0)
        os.kill(daemons[0].pid, signal.SIGSTOP)
        try:
            subprocess.run(["ip", "netns", "exec", ns(1), "python3", "-c", flood], timeout=60,
                           check=True)
            time.sleep(0.2)
        finally:
            os.kill(daemons[0].pid, signal.SIGCONT)
        time.sleep(1.5)
        grown = ring_drops(0) - before
        f.check(grown > 0, "flood while stopped: daemon's AF_XDP drop counters grew by %d" % grown)
        total_drops = ring_drops(0)

        results = stop_tracers(SCRIPTS)
        keep = os.environ.get("TRACE_TEST_OUTPUT_DIR")  # for tools/trace/*_example.txt
        if keep:
            for s, (_, text, _, _) in results.items():
                with open(os.path.join(keep, s + ".out"), "w") as out:
                    out.write(text)
        for s, (rc, text, err, notes) in results.items():
            f.check(rc == 0 and "Hit Ctrl-C to end." in text,
                    "%s.bt ran and exited cleanly on SIGINT (exit %s)" % (s, rc))
            for note in notes:
                print("  %s.bt: %s" % (s, note))
            if rc != 0:
                print("  stderr: %s" % err.strip()[-800:])
        key = str(cid)

        # mrpathrtt: histograms per [conn, path] with counts, consistent with @samples.
        text = results["mrpathrtt"][1]
        hist = {k: v for k, v in hist_counts(text, "rtt_us").items() if k[0] == key}
        samples = {k: v for k, v in scalars(text, "samples").items() if k[0] == key}
        f.check(len(hist) >= 4 and all(v > 0 for v in hist.values()),
                "mrpathrtt: RTT histograms with counts for %d paths of conn %s" % (len(hist), key))
        f.check(bool(samples) and hist == samples,
                "mrpathrtt: histogram counts equal the sample counts")

        # mrretrans: gap retransmissions with the loss, no fewer than the daemon counted mid-run.
        text = results["mrretrans"][1]
        retrans = scalars(text, "retransmits")
        ours = {k: v for k, v in retrans.items() if k[0] == key}
        gap = sum(v for k, v in ours.items() if k[2] == "gap")
        total = sum(retrans.values())
        f.check(gap > 0 and all(k[2] in ("gap", "timeout", "gbn", "rnr", "reroute", "hedge", "tailprobe")
                                for k in retrans),
                "mrretrans: %d gap retransmissions on conn %s (%d in all)" % (gap, key, total))
        f.check(0 < mid.get("retransmits", 0) <= total,
                "mrretrans: total %d >= daemon's retransmits mid-run (%d)" %
                (total, mid.get("retransmits", 0)))
        f.check(re.search(r"^\d\d:\d\d:\d\d [1-9]\d*$", text, re.M) is not None,
                "mrretrans: per-second lines with retransmissions")

        # mrrotate: the operator's rotation, as mrctl reported it.
        text = results["mrrotate"][1]
        want = r"^\d\d:\d\d:\d\d +%s +%d +%d->%d +manual +\w+$" % (
            key, ROTATED_PATH, rot.get("old_port", -1), rot.get("new_port", -1))
        f.check(re.search(want, text, re.M) is not None,
                "mrrotate: conn %s path %d %s->%s manual" %
                (key, ROTATED_PATH, rot.get("old_port"), rot.get("new_port")))

        # mrmsglat: write latencies, no fewer messages than the daemon had completed mid-run.
        text = results["mrmsglat"][1]
        lat = hist_counts(text, "latency_us").get(("write",), 0)
        msgs = scalars(text, "messages")
        f.check(lat > 0 and lat == sum(v for k, v in msgs.items() if k == ("write",)),
                "mrmsglat: write latency histogram with %d messages" % lat)
        f.check(0 < mid.get("messages_completed", 0) <= lat,
                "mrmsglat: %d >= daemon's completed messages mid-run (%d)" %
                (lat, mid.get("messages_completed", 0)))

        # mrxskdrops: the overflow reported, within what the daemon's counters say.
        text = results["mrxskdrops"][1]
        reported = 0
        for m in re.finditer(r"^\d\d:\d\d:\d\d +(\d+) +(\d+) +(\d+) +(\d+) +(\d+) +\d+$",
                             text, re.M):
            reported += int(m.group(3)) + int(m.group(4)) + int(m.group(5))
        f.check(0 < reported <= total_drops,
                "mrxskdrops: %d ring drops reported (daemon's counters: %d)" %
                (reported, total_drops))
    except Exception:  # noqa: BLE001 - report, then clean up
        traceback.print_exc()
        f.append("exception")
    except KeyboardInterrupt:
        f.append("interrupted")
    finally:
        for s in list(tracers):
            p, out, err_file = tracers.pop(s)
            p.kill()
            p.wait()
            out.close()
            err_file.close()
        harness.kill_all(perf, timeout=None)
        md.terminate_all(timeout=20)
        fabric.down()
        md.close_logs()
        if not f:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print("outputs and logs kept in %s" % tmp)

    print("FAILED: %s" % "; ".join(f) if f else "all trace checks passed")
    return 1 if f else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Privileged end-to-end test of mriut, this stack's implementation-under-test driver
(docs/spec/driver.md), on a namespace fabric (tools/fabric/mrfabric, 2 hosts x 2 planes x 2
spines): one mriut per host over the UDP port, driven from host 0's namespace through the driver
protocol only, as a compliance suite drives an implementation:
  - hello on both;
  - a set-up between the two, host 1 listening and accepting, host 0 connecting: each side's
    `peer` is the other's half (ids, 16-digit tokens, 4 paths, 2 planes);
  - a Write of 40,000 bytes lands byte for byte in host 1's region, completing SUCCESS;
  - a Send into a posted receive (byte_len, data) and a Write-with-immediate (its imm);
  - a Write with a wrong rkey completes REM_ACCESS_ERR and leaves the region untouched;
  - a set-up whose path counts differ is refused on both sides, code `incompatible`;
  - requests the driver refuses (unknown op, missing parameter, no such region) say why, and the
    session goes on; stats name the counters; destroy removes the connection;
  - read_mr of 2^20 bytes fits one line of at most 4 MiB, 2^20 + 1 is refused, and so is a
    larger write_mr; stats without a connection give the host-level drop counters by name.
The fabric and both mriut are always torn down.

usage: driver_test.py MRIUT MRFABRIC      exit 0 pass, 1 fail, 77 skip
"""
import ctypes
import hashlib
import json
import os
import socket
import subprocess
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import fabric_harness as harness  # noqa: E402

# The fabric's name, distinct per checkout: the same test run from two worktrees at once on one
# machine would otherwise share (and tear down) one fabric, and its processes with it.
NAME = "mrcd" + hashlib.sha1(os.path.realpath(__file__).encode()).hexdigest()[:6]
CLONE_NEWNET = 0x40000000


class DriverClient:
    """One driver session: request() sends a request and returns its response; send() and
    receive() split it, for operations that wait while the tester acts."""

    def __init__(self, host, port):
        self.sock = socket.create_connection((host, port), timeout=30)
        self.file = self.sock.makefile("rb")
        self.next_id = 1

    def send(self, op, **params):
        req = {"id": self.next_id, "op": op}
        req.update(params)
        self.next_id += 1
        self.sock.sendall((json.dumps(req) + "\n").encode())
        return req["id"]

    def receive(self, want_id):
        line = self.file.readline()
        if not line:
            raise RuntimeError("the driver closed the session")
        resp = json.loads(line)
        if resp.get("id") != want_id:
            raise RuntimeError(f"response id {resp.get('id')}, expected {want_id}")
        return resp

    def request(self, op, **params):
        return self.receive(self.send(op, **params))

    def ok(self, op, **params):
        resp = self.request(op, **params)
        if not resp.get("ok"):
            raise RuntimeError(f"{op} refused: {resp.get('error')}")
        return resp


def setns(path):
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    fd = os.open(path, os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), "setns " + path)
    finally:
        os.close(fd)


def start_mriut(mriut, netns, driver, planes, log):
    args = ["nsenter", "--net=/run/netns/" + netns, mriut, "--driver", driver]
    for ifname in planes:
        args += ["--plane", ifname]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=log, text=True)
    line = proc.stdout.readline()  # "mriut: driver on HOST:PORT, set-ups on ADDR"
    if not line.startswith("mriut: driver on"):
        proc.kill()
        raise RuntimeError(f"mriut did not start: {line!r}")
    port = int(line.split()[3].rstrip(",").rsplit(":", 1)[1])
    threading.Thread(target=proc.stdout.read, daemon=True).start()
    return proc, port


def pattern(n, seed):
    return bytes((i * 7 + seed) & 0xFF for i in range(n))


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    mriut, mrfabric = sys.argv[1:]
    if not (harness.have_root("namespaces") and harness.have_tools("ip", "nsenter")
            and harness.have_netns()):
        return harness.SKIP
    failures = harness.Failures(60)
    check = failures.check
    fabric = harness.Fabric(mrfabric, NAME)
    fabric.prepare()
    procs = []
    tmp = harness.make_tmp("mrcd")
    try:
        fabric.up("--no-bpf")
        view = fabric.view()
        hosts = view["hosts"]
        netns = [h["netns"] for h in hosts]
        ifnames = [[pl["ifname"] for pl in h["planes"]] for h in hosts]
        addr1 = hosts[1]["planes"][0]["ipv4"].split("/")[0]
        log = open(os.path.join(tmp, "mriut.log"), "w")
        pa, port_a = start_mriut(mriut, netns[0], "127.0.0.1:0", ifnames[0], log)
        procs.append(pa)
        pb, port_b = start_mriut(mriut, netns[1], addr1 + ":0", ifnames[1], log)
        procs.append(pb)
        setns("/run/netns/" + netns[0])  # the tester speaks from host 0's namespace
        a = DriverClient("127.0.0.1", port_a)
        b = DriverClient(addr1, port_b)

        ha, hb = a.ok("hello"), b.ok("hello")
        check(ha["driver_version"] == 1 and ha["setup_versions"] == [1] and
              len(ha["planes"]) == 2 and "metaroce" in ha["profiles"],
              "hello: driver version 1, set-up version 1, 2 planes, metaroce")
        check(hb["setup_address"] == addr1, "hello: host 1 takes set-ups on its plane 0 address")

        src = a.ok("reg_mr", length=65536, access=["local_write"])
        dst = b.ok("reg_mr", length=65536, access=["local_write", "remote_write"])
        port = b.ok("listen")["port"]
        acc = b.send("accept", timeout_ms=10000, paths=4, max_send_queue=32)
        con = a.ok("connect", host=hb["setup_address"], port=port, timeout_ms=10000, paths=4,
                   private_data="6869")
        accd = b.receive(acc)
        check(accd.get("ok") is True, f"set-up: accepted ({accd.get('error', '')})")
        ca, cb = con["conn"], accd["conn"]
        check(con["peer"]["conn_id"] == cb and accd["peer"]["conn_id"] == ca,
              "set-up: each side's peer id is the other's connection")
        check(len(con["peer"]["token"]) == 16 and con["peer"]["token"] != accd["peer"]["token"],
              "set-up: 64-bit tokens, one per side")
        check(con["peer"]["path_count"] == 4 and len(con["peer"]["planes"]) == 2 and
              len(set(con["peer"]["initial_ports"])) == 4,
              "set-up: 4 paths on 2 planes, 4 distinct source ports")
        check(accd["peer"]["private_data"] == "6869" and con["peer"]["max_send_queue"] == 32,
              "set-up: private data and queue depths carried")

        data = pattern(40000, 3)
        a.ok("write_mr", lkey=src["lkey"], offset=0, data=data.hex())
        a.ok("post_send", conn=ca, wr_id=1, opcode="write", lkey=src["lkey"], offset=0,
             length=len(data), remote_addr=dst["addr"], rkey=dst["rkey"])
        wc = a.ok("poll", max=4, timeout_ms=5000)["completions"]
        check(len(wc) == 1 and wc[0]["wr_id"] == 1 and wc[0]["status"] == "SUCCESS" and
              wc[0]["opcode"] == "RDMA_WRITE", f"write: completes SUCCESS ({wc})")
        landed = bytes.fromhex(b.ok("read_mr", lkey=dst["lkey"], offset=0,
                                    length=len(data))["data"])
        check(landed == data, "write: 40,000 bytes landed byte for byte")

        msg = pattern(5000, 11)
        b.ok("post_recv", conn=cb, wr_id=7, lkey=dst["lkey"], offset=45056, length=8192)
        a.ok("write_mr", lkey=src["lkey"], offset=40960, data=msg.hex())
        a.ok("post_send", conn=ca, wr_id=2, opcode="send", lkey=src["lkey"], offset=40960,
             length=len(msg))
        rc = b.ok("poll", max=4, timeout_ms=5000)["completions"]
        check(len(rc) == 1 and rc[0]["wr_id"] == 7 and rc[0]["opcode"] == "RECV" and
              rc[0]["byte_len"] == 5000, f"send: the receive completes with 5,000 bytes ({rc})")
        got = bytes.fromhex(b.ok("read_mr", lkey=dst["lkey"], offset=45056, length=5000)["data"])
        check(got == msg, "send: the message is in the receive's buffer")
        a.ok("poll", max=4, timeout_ms=5000)

        b.ok("post_recv", conn=cb, wr_id=8, lkey=dst["lkey"], offset=0, length=0)
        a.ok("post_send", conn=ca, wr_id=3, opcode="write_imm", lkey=src["lkey"], offset=0,
             length=64, remote_addr=dst["addr"] + 1024, rkey=dst["rkey"], imm=0xABCDEF)
        rc = b.ok("poll", max=4, timeout_ms=5000)["completions"]
        check(len(rc) == 1 and rc[0]["opcode"] == "RECV_RDMA_WITH_IMM" and
              rc[0].get("imm") == 0xABCDEF, f"write_imm: the receive carries the imm ({rc})")
        a.ok("poll", max=4, timeout_ms=5000)

        before = b.ok("read_mr", lkey=dst["lkey"], offset=60000, length=4096)["data"]
        a.ok("post_send", conn=ca, wr_id=4, opcode="write", lkey=src["lkey"], offset=0,
             length=4096, remote_addr=dst["addr"] + 60000, rkey=dst["rkey"] ^ 0x5A5A)
        wc = a.ok("poll", max=4, timeout_ms=5000)["completions"]
        check(len(wc) == 1 and wc[0]["status"] == "REM_ACCESS_ERR",
              f"bad rkey: completes REM_ACCESS_ERR ({wc})")
        after = b.ok("read_mr", lkey=dst["lkey"], offset=60000, length=4096)["data"]
        check(after == before, "bad rkey: the region is untouched")

        port = b.ok("listen")["port"]
        acc = b.send("accept", timeout_ms=10000, paths=4)
        con = a.request("connect", host=hb["setup_address"], port=port, timeout_ms=10000, paths=8)
        accd = b.receive(acc)
        check(not con["ok"] and "incompatible" in con["error"] and "path counts" in con["error"],
              f"refused set-up: the client learns why ({con.get('error')})")
        check(not accd["ok"] and "path counts" in accd["error"],
              f"refused set-up: the server says why ({accd.get('error')})")

        r = a.request("no_such_op")
        check(not r["ok"] and "unknown op" in r["error"], "driver: an unknown op is refused")
        r = a.request("read_mr", lkey=src["lkey"], offset=0)
        check(not r["ok"] and "length" in r["error"], "driver: a missing parameter is named")
        r = a.request("read_mr", lkey=999999, offset=0, length=1)
        check(not r["ok"] and "no region" in r["error"], "driver: an unknown region is refused")
        # driver.md §1-§2: a line is at most 4 MiB; read_mr and write_mr move at most 2^20
        # bytes (a 2^20-byte read is a line of 2^21 hex digits and its envelope).
        big = a.ok("reg_mr", length=(1 << 20) + 4096, access=["local_write"])
        a.sock.sendall((json.dumps({"id": a.next_id, "op": "read_mr", "lkey": big["lkey"],
                                    "offset": 0, "length": 1 << 20}) + "\n").encode())
        a.next_id += 1
        line = a.file.readline()
        check(len(line) <= 4 << 20 and len(json.loads(line)["data"]) == 2 << 20,
              f"read_mr of 2^20 bytes: one line within 4 MiB ({len(line)} bytes)")
        r = a.request("read_mr", lkey=big["lkey"], offset=0, length=(1 << 20) + 1)
        check(not r["ok"] and "length" in r["error"], "read_mr: more than 2^20 bytes is refused")
        r = a.request("write_mr", lkey=big["lkey"], offset=0, data="00" * ((1 << 20) + 1))
        check(not r["ok"] and "at most" in r["error"], "write_mr: more than 2^20 bytes is refused")
        # driver.md §2: stats without conn, the host-level drops of wire-format §9 by name.
        host = a.ok("stats")["host"]
        check(all(isinstance(host.get(k), int) for k in (
            "truncated", "bad_version", "bad_opcode", "length_mismatch", "bad_range",
            "bad_syndrome", "unknown_connection")), f"stats: host counters by name: {host}")
        features = a.ok("hello")["features"]
        check("host_counters" in features, f"hello: host_counters in features: {features}")
        stats = a.ok("stats", conn=ca)["stats"]
        check(stats["counters"]["messages_completed"] >= 3 and
              stats["counters"].get("bad_token", 0) == 0, "stats: counters by name")
        a.ok("destroy", conn=ca)
        r = a.request("stats", conn=ca)
        check(not r["ok"] and "no connection" in r["error"], "destroy: the connection is gone")
    except harness.ABORTS + (OSError, KeyError, json.JSONDecodeError) as e:
        failures.append(f"aborted: {e}")
        print(f"aborted: {e}")
    finally:
        harness.kill_all(procs)
        fabric.down()
        try:
            print(open(os.path.join(tmp, "mriut.log")).read()[-2000:], end="")
        except OSError:
            pass
        subprocess.run(["rm", "-rf", tmp])
    return harness.finish(failures)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Privileged test of the MetaRoCE Wireshark dissector (tools/wireshark/metaroce.lua) on real traffic.

1. Crafted packets (no fabric): the spec's worked examples (docs/spec/wire-format.md section 10)
   and hand-made malformed datagrams (truncated base / data / ACK header, bad version, unknown
   opcode, payload_len mismatch, bad range, bad syndrome, reserved flag bits set, SACK bitmap across
   the PSN wrap) and the pull pacer's flags (WANTS_PULL, PULLED, PULL) and ACK field (pull_seq)
   are written to a pcap from Python and decoded by tshark with the dissector: tshark must not fail
   or raise a Lua error, every malformed packet must carry the expected expert info
   (metaroce.expert.*) and well-formed ones none, the new flags and pull_seq must show their values
   (fields, tree, Info); the dissector's port preference is checked too.
2. Real traffic: brings up a namespace fabric (tools/fabric/mrfabric, 2 hosts x 2 planes x 2
   spines, name "mrws"), captures with tshark on host 0's link in each plane's leaf namespace (the
   host's AF_XDP sockets bypass the kernel's packet taps inside the host namespace, so the host's
   top-of-rack router is where its traffic is visible), and runs mrperf --embedded between the two
   hosts: write_bw (WRITE), write_bw --verify (WRITE_IMM: verified Writes carry an immediate),
   send_bw --verify (SEND), write_bw --verify with 3 % loss of MetaRoCE datagrams on every spine
   (SACK gaps, retransmissions) and with spine 1 blackholed for MetaRoCE for its first 0.2 s (path rotations, PROBEs; a rotated path may draw a port that crosses the dead spine
   again, so the blackhole ends mid-run and every probing path then gets its probe replies).
3. Every MetaRoCE datagram in both captures is parsed here, independently of the Lua code, from
   the raw pcap bytes (Ethernet/IPv4/UDP, then the spec's layouts with struct) and compared field
   by field with what tshark reports (-T fields): every field of every header, the flag bits, the
   payload bytes, the SACK bitmap and its decoded PSN list, count and ranges, the Info column's
   key values, and the expert infos (none expected on real traffic). The opcodes seen must include
   WRITE, WRITE_IMM, SEND and ACK; ACKs with SACK bits and RETRANSMIT packets must appear; PROBE and
   probe replies must appear when mrperf reports a rotation.

The fabric is always torn down and the temporary directory removed.

usage: dissector_test.py MRPERF MRFABRIC METAROCE_LUA       exit 0 pass, 1 fail, 77 skip
"""
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import fabric_harness as harness  # noqa: E402

NAME = "mrws"
PORT = 4792
CONTROL_PORT = "18790"
HOST_NS = [harness.host_ns(NAME, 0), harness.host_ns(NAME, 1)]
SERVER_IP = "198.18.0.6"  # host 1, plane 0

OPCODES = {0x01: "WRITE", 0x02: "WRITE_IMM", 0x03: "SEND", 0x04: "SEND_IMM", 0x10: "ACK",
           0x11: "PROBE"}
SYNDROMES = {0: "ACK", 1: "RNR_NAK", 2: "SEQ_ERR_NAK", 3: "REM_ACCESS_NAK", 4: "INV_REQ_NAK",
             5: "REM_OP_NAK"}
FLAG_BITS = [("ack_req", 0x0001), ("retransmit", 0x0002), ("filler", 0x0004),
             ("wants_pull", 0x0008), ("delayed_ack", 0x0010), ("probe_reply", 0x0020),
             ("pulled", 0x0040), ("pull", 0x0080),
         ("pulling", 0x0100), ("cnp", 0x0200)]
RESERVED_FLAGS = 0xfc00
EXPERTS = ["truncated", "bad_version", "bad_opcode", "length_mismatch", "bad_range",
           "bad_syndrome", "reserved_nonzero"]

# Every field the test compares, with how tshark prints it: int (decimal or 0x hex), bytes
# (hex digits), str, flag (an expert info: present or not).
FIELDS = (
    [("metaroce.base.version", "int"), ("metaroce.base.opcode", "int"),
     ("metaroce.base.flags", "int")] +
    [("metaroce.base.flags." + n, "int") for n, _ in FLAG_BITS] +
    [("metaroce.base.flags.reserved", "int"),
     ("metaroce.base.dest_conn", "int"), ("metaroce.base.path_id", "int"),
     ("metaroce.base.payload_len", "int"), ("metaroce.base.psn", "int"),
     ("metaroce.base.token", "int"),
     ("metaroce.data.msg_seq", "int"), ("metaroce.data.msg_len", "int"),
     ("metaroce.data.offset", "int"), ("metaroce.data.rkey", "int"),
     ("metaroce.data.remote_addr", "int"), ("metaroce.data.recv_seq", "int"),
     ("metaroce.data.imm", "int"), ("metaroce.payload", "bytes"),
     ("metaroce.ack.cum_psn", "int"), ("metaroce.ack.ack_psn", "int"),
     ("metaroce.ack.ce_count", "int"), ("metaroce.ack.window_hint", "int"),
     ("metaroce.ack.syndrome", "int"), ("metaroce.ack.pull_seq", "int"),
     ("metaroce.ack.rnr_delay_us", "int"), ("metaroce.ack.msg_seq", "int"),
     ("metaroce.ack.sack", "bytes"), ("metaroce.ack.sack.count", "int"),
     ("metaroce.ack.sack.psn", "int"), ("metaroce.ack.sack.ranges", "str")] +
    [("metaroce.expert." + x, "flag") for x in EXPERTS])


# ---------------------------------------------------------------- independent parser (the spec)

def sack_psns(cum, sack):
    """PSNs the 32-byte bitmap acknowledges: bit k (byte k/8, LSB first) is PSN cum+1+k."""
    return [(cum + 1 + k) & 0xffffffff for k in range(256) if sack[k // 8] >> (k % 8) & 1]


def psn_ranges(psns):
    out, i = [], 0
    while i < len(psns):
        j = i
        while j + 1 < len(psns) and psns[j + 1] == (psns[j] + 1) & 0xffffffff:
            j += 1
        out.append(str(psns[i]) if i == j else "%d-%d" % (psns[i], psns[j]))
        i = j + 1
    return ",".join(out)


def expect(udp_payload):
    """What the dissector must show for one datagram: {field: [values]} and the Info column's
    key=value words, following docs/spec/wire-format.md (validity checks 1-8 in order)."""
    b = udp_payload
    n = len(b)
    exp = {}
    info = []

    def put(field, value):
        exp.setdefault(field, []).append(value)

    # Base fields that lie within the datagram (a truncated base shows what fits).
    base = [("version", 0, "!B"), ("opcode", 1, "!B"), ("flags", 2, "!H"), ("dest_conn", 4, "!I"),
            ("path_id", 8, "!H"), ("payload_len", 10, "!H"), ("psn", 12, "!I"),
            ("token", 16, "!Q")]
    for name, off, fmt in base:
        if off + struct.calcsize(fmt) <= n:
            put("metaroce.base." + name, struct.unpack_from(fmt, b, off)[0])
            if name == "flags":
                flags = exp["metaroce.base.flags"][0]
                for fname, mask in FLAG_BITS:
                    put("metaroce.base.flags." + fname, 1 if flags & mask else 0)
                put("metaroce.base.flags.reserved", flags & RESERVED_FLAGS)
                if flags & RESERVED_FLAGS:
                    put("metaroce.expert.reserved_nonzero", True)
    if n < 24:
        put("metaroce.expert.truncated", True)
        return exp, ["Truncated"]
    version, opcode, flags, conn, path, plen, psn, token = struct.unpack_from("!BBHIHHIQ", b, 0)
    if version != 1:
        put("metaroce.expert.bad_version", True)
        return exp, ["bad version %d" % version]
    if opcode not in OPCODES:
        put("metaroce.expert.bad_opcode", True)
        return exp, ["conn=%d" % conn, "path=%d" % path]
    is_data = 1 <= opcode <= 4
    hlen = 56 if is_data else 80 if opcode == 0x10 else 24
    if n < hlen:
        put("metaroce.expert.truncated", True)
        return exp, [OPCODES[opcode], "conn=%d" % conn]
    if plen != n - hlen or (not is_data and plen != 0):
        put("metaroce.expert.length_mismatch", True)
    info = ["conn=%d" % conn, "path=%d" % path]
    if is_data:
        msg_seq, msg_len, offset, rkey, addr, recv_seq, imm = struct.unpack_from("!IIIIQII", b, 24)
        for name, v in [("msg_seq", msg_seq), ("msg_len", msg_len), ("offset", offset),
                        ("rkey", rkey), ("remote_addr", addr), ("recv_seq", recv_seq),
                        ("imm", imm)]:
            put("metaroce.data." + name, v)
        if offset + plen > msg_len:
            put("metaroce.expert.bad_range", True)
        if n > hlen:
            put("metaroce.payload", b[hlen:].hex())
        info = [OPCODES[opcode]] + info + ["psn=%d" % psn, "len=%d" % plen]
    elif opcode == 0x10:
        cum, ack_psn, ce, win, syn, pull_seq, rnr, msg_seq = struct.unpack_from(
            "!IIIIBBHI", b, 24)
        sack = b[48:80]
        for name, v in [("cum_psn", cum), ("ack_psn", ack_psn), ("ce_count", ce),
                        ("window_hint", win), ("syndrome", syn), ("pull_seq", pull_seq),
                        ("rnr_delay_us", rnr), ("msg_seq", msg_seq)]:
            put("metaroce.ack." + name, v)
        if syn > 5:
            put("metaroce.expert.bad_syndrome", True)
        put("metaroce.ack.sack", sack.hex())
        psns = sack_psns(cum, sack)
        put("metaroce.ack.sack.count", len(psns))
        if psns:
            put("metaroce.ack.sack.ranges", psn_ranges(psns))
        for p in psns:
            put("metaroce.ack.sack.psn", p)
        info = [SYNDROMES.get(syn, "NAK_%d" % syn)] + info + ["cum=%d" % cum]
        if psns:
            info.append("sack=" + psn_ranges(psns))
    else:
        info = ["PROBE"] + info + ["psn=%d" % psn]
    return exp, info


# ---------------------------------------------------------------- pcap reading and writing

def read_pcap(path):
    """[(frame number, UDP payload)] of every IPv4 UDP datagram to PORT in a libpcap file."""
    with open(path, "rb") as f:
        data = f.read()
    magic = data[:4]
    if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
        endian = "<"
    elif magic in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
        endian = ">"
    else:
        raise RuntimeError("%s: not a libpcap file" % path)
    linktype = struct.unpack_from(endian + "I", data, 20)[0]
    if linktype != 1:
        raise RuntimeError("%s: link type %d, expected Ethernet" % (path, linktype))
    out, pos, number = [], 24, 0
    while pos + 16 <= len(data):
        _, _, incl, orig = struct.unpack_from(endian + "IIII", data, pos)
        frame = data[pos + 16:pos + 16 + incl]
        pos += 16 + incl
        number += 1
        if incl != orig:
            raise RuntimeError("%s: frame %d cut by the snap length" % (path, number))
        off, ethertype = 14, struct.unpack_from("!H", frame, 12)[0]
        while ethertype in (0x8100, 0x88a8):
            ethertype = struct.unpack_from("!H", frame, off + 2)[0]
            off += 4
        if ethertype != 0x0800 or frame[off + 9] != 17:
            continue
        ihl = (frame[off] & 0x0f) * 4
        if struct.unpack_from("!H", frame, off + 6)[0] & 0x3fff:
            continue  # IP fragment (MetaRoCE never fragments)
        udp = off + ihl
        dport, ulen = struct.unpack_from("!HH", frame, udp + 2)
        if dport != PORT:
            continue
        out.append((number, bytes(frame[udp + 8:udp + ulen])))
    return out


def ip_checksum(b):
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16:
        s = (s & 0xffff) + (s >> 16)
    return ~s & 0xffff


def udp_frame(payload, dport=PORT, sport=49152):
    udp = struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0x02, 20 + len(udp), 1, 0x4000, 64, 17, 0,
                     bytes([198, 18, 0, 2]), bytes([198, 18, 0, 6]))
    ip = ip[:10] + struct.pack("!H", ip_checksum(ip)) + ip[12:]
    return bytes.fromhex("026d72000001026d72000002") + b"\x08\x00" + ip + udp


def write_pcap(path, frames):
    with open(path, "wb") as f:
        f.write(struct.pack("<IHHiIII", 0xa1b2c3d4, 2, 4, 0, 0, 65535, 1))
        for i, fr in enumerate(frames):
            f.write(struct.pack("<IIII", 1700000000 + i, 0, len(fr), len(fr)) + fr)


def base_hdr(opcode, flags=0, conn=7, path=3, plen=0, psn=42, token=0x0123456789abcdef,
             version=1):
    return struct.pack("!BBHIHHIQ", version, opcode, flags, conn, path, plen, psn, token)


def data_hdr(msg_seq=5, msg_len=12288, offset=8192, rkey=0x5a5a0100, addr=0x00007f0000102000,
             recv_seq=0, imm=0):
    return struct.pack("!IIIIQII", msg_seq, msg_len, offset, rkey, addr, recv_seq, imm)


def ack_hdr(cum=41, ack_psn=44, ce=3, win=131072, syn=0, pull_seq=0, rnr=0, msg_seq=0,
            sack=b"\x05" + bytes(31)):
    return struct.pack("!IIIIBBHI", cum, ack_psn, ce, win, syn, pull_seq, rnr, msg_seq) + sack


# ---------------------------------------------------------------- tshark and comparison

class Tshark:
    def __init__(self, lua):
        self.lua = lua

    def run(self, args, timeout=600):
        cmd = ["tshark", "-n", "-X", "lua_script:" + self.lua] + args
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if p.returncode != 0:
            raise RuntimeError("%s: exit %d: %s" % (" ".join(cmd), p.returncode, p.stderr.strip()))
        return p.stdout

    def fields(self, pcap, extra=()):
        """{frame number: {field: [raw strings]}} plus the Info column. Fails if the dissector
        raised a Lua error or an exception on any frame (both become expert infos)."""
        thrown = self.run(["-r", pcap, "-Y", '_ws.expert.message contains "Lua Error" || '
                           '_ws.expert.message contains "Exception occurred" || '
                           '_ws.expert.message contains "Dissector bug"',
                           "-T", "fields", "-e", "frame.number"]).split()
        if thrown:
            raise RuntimeError("%s: dissector threw on frames %s" % (pcap, thrown[:10]))
        names = [name for name, _ in FIELDS] + ["_ws.col.Info"]
        args = ["-r", pcap, "-Y", "metaroce", "-T", "fields", "-E", "separator=/t",
                "-E", "occurrence=a", "-E", "aggregator=;", "-E", "quote=n",
                "-e", "frame.number"] + list(extra)
        for name in names:
            args += ["-e", name]
        out = {}
        for line in self.run(args).splitlines():
            cols = line.split("\t")
            if len(cols) != len(names) + 1:
                raise RuntimeError("tshark printed %d columns, expected %d: %r" %
                                   (len(cols), len(names) + 1, line[:200]))
            out[int(cols[0])] = {n: (c.split(";") if c != "" else [])
                                 for n, c in zip(names, cols[1:])}
            out[int(cols[0])]["_ws.col.Info"] = cols[-1]
        return out


def normalize(kind, raw):
    if kind == "int":
        if raw in ("True", "False"):
            return 1 if raw == "True" else 0
        return int(raw, 0)
    if kind == "bytes":
        return raw.replace(":", "").lower()
    if kind == "flag":
        return True
    return raw


def compare(label, packets, shown):
    """Compares each datagram's independent parse with tshark's fields; returns problems."""
    problems = []
    for number, payload in packets:
        exp, info_words = expect(payload)
        got = shown.get(number)
        if got is None:
            problems.append("%s frame %d: not dissected as MetaRoCE" % (label, number))
            continue
        for name, kind in FIELDS:
            want = exp.get(name, [])
            have = [normalize(kind, v) for v in got[name]]
            if have != want:
                w, h = repr(want), repr(have)
                problems.append("%s frame %d: %s: tshark %s, spec parse %s" %
                                (label, number, name, h[:120], w[:120]))
        info = got["_ws.col.Info"]
        for word in info_words:
            if (word not in info) if " " in word else (word not in info.split()):
                problems.append("%s frame %d: Info %r lacks %r" % (label, number, info, word))
        if len(problems) > 40:
            problems.append("... (stopped after 40)")
            break
    return problems


# ---------------------------------------------------------------- part 1: crafted packets

def crafted_test(ts, tmp):
    problems = []
    write = base_hdr(0x01, flags=0x0001, plen=4096) + data_hdr() + bytes(range(256)) * 16
    ack = base_hdr(0x10, conn=9, psn=0, token=0xfedcba9876543210) + ack_hdr()
    cases = [  # (description, UDP payload, expert infos expected)
        ("spec example WRITE", write, []),
        ("spec example ACK", ack, []),
        ("WRITE_IMM", base_hdr(0x02, flags=0x0003, plen=100) +
         data_hdr(msg_len=100, offset=0, recv_seq=17, imm=0xdeadbeef) + bytes(100), []),
        ("SEND_IMM", base_hdr(0x04, plen=8) +
         data_hdr(msg_len=8, offset=0, rkey=0, addr=0, recv_seq=3, imm=1) + bytes(8), []),
        ("FILLER", base_hdr(0x01, flags=0x0007, plen=0) +
         data_hdr(msg_len=8192, offset=8192, rkey=0, addr=0), []),
        ("PROBE", base_hdr(0x11, psn=1000), []),
        ("probe reply across the PSN wrap", base_hdr(0x10, flags=0x0030, psn=0) +
         ack_hdr(cum=0xfffffffe, ack_psn=1000, sack=b"\x0f" + bytes(30) + b"\x80"), []),
        ("RNR NAK", base_hdr(0x10, psn=0) + ack_hdr(syn=1, rnr=250, msg_seq=77, sack=bytes(32)),
         []),
        ("3 bytes", b"\x01\x01\x00", ["truncated"]),
        ("23 bytes", base_hdr(0x11)[:23], ["truncated"]),
        ("bad version 2", base_hdr(0x01, version=2, plen=4096) + data_hdr() + bytes(4096),
         ["bad_version"]),
        ("bad version 0, short", base_hdr(0x11, version=0), ["bad_version"]),
        ("unknown opcode 0x7f", base_hdr(0x7f) + bytes(40), ["bad_opcode"]),
        ("unknown opcode 0x05", base_hdr(0x05, plen=0) + data_hdr(), ["bad_opcode"]),
        ("WRITE header cut at 40", (base_hdr(0x01, plen=4096) + data_hdr())[:40], ["truncated"]),
        ("ACK header cut at 60", ack[:60], ["truncated"]),
        ("WRITE payload_len too large", base_hdr(0x01, plen=4096) + data_hdr() + bytes(100),
         ["length_mismatch"]),
        ("ACK with a payload", base_hdr(0x10, plen=4) + ack_hdr() + bytes(4),
         ["length_mismatch"]),
        ("PROBE with trailing bytes", base_hdr(0x11) + bytes(8), ["length_mismatch"]),
        ("bad range", base_hdr(0x03, plen=64) + data_hdr(msg_len=100, offset=64) + bytes(64),
         ["bad_range"]),
        ("bad syndrome 9", base_hdr(0x10) + ack_hdr(syn=9), ["bad_syndrome"]),
        ("reserved flag bits", base_hdr(0x11, flags=0x8008), ["reserved_nonzero"]),
        ("reserved flag bit 14", base_hdr(0x10, flags=0x4000) + ack_hdr(), ["reserved_nonzero"]),
        # The pull pacer (congestion.md section 6): a data packet that asks for a pull and was
        # sent on one, a pull with the ACK of the asking packet, a deferred pull on its own.
        ("WANTS_PULL | PULLED", base_hdr(0x01, flags=0x0048, plen=64) +
         data_hdr(msg_len=64, offset=0) + bytes(64), []),
        ("ACK with PULL, pull_seq 200", base_hdr(0x10, flags=0x0080) + ack_hdr(pull_seq=200),
         []),
        ("deferred pull, pull_seq 255", base_hdr(0x10, flags=0x0190) +
         ack_hdr(pull_seq=255, sack=bytes(32)), []),
        ("RNR NAK with pull_seq 7", base_hdr(0x10) +
         ack_hdr(syn=1, pull_seq=7, rnr=20, msg_seq=3, sack=bytes(32)), []),
        ("every flag bit", base_hdr(0x11, flags=0xffff), ["reserved_nonzero"]),
    ]
    pcap = os.path.join(tmp, "crafted.pcap")
    write_pcap(pcap, [udp_frame(payload) for _, payload, _ in cases])
    shown = ts.fields(pcap)
    packets = [(i + 1, payload) for i, (_, payload, _) in enumerate(cases)]
    problems += compare("crafted", packets, shown)
    for i, (desc, payload, experts) in enumerate(cases):
        got = shown.get(i + 1)
        if got is None:
            continue
        have = sorted(x for x in EXPERTS if got["metaroce.expert." + x])
        if have != sorted(experts):
            problems.append("crafted %r: expert infos %s, expected %s" % (desc, have, experts))
    # Values from the spec's worked examples and the pull cases, spelled out rather than parsed.
    w, a = shown.get(1, {}), shown.get(2, {})
    index = {desc: i + 1 for i, (desc, _, _) in enumerate(cases)}
    wp = shown.get(index["WANTS_PULL | PULLED"], {})
    pl = shown.get(index["ACK with PULL, pull_seq 200"], {})
    dp = shown.get(index["deferred pull, pull_seq 255"], {})
    allf = shown.get(index["every flag bit"], {})
    golden = [(w, "metaroce.base.token", "0x0123456789abcdef"),
              (w, "metaroce.data.remote_addr", "0x00007f0000102000"),
              (w, "metaroce.data.rkey", "0x5a5a0100"), (w, "metaroce.data.msg_len", "12288"),
              (a, "metaroce.ack.sack.psn", "42;44"), (a, "metaroce.ack.cum_psn", "41"),
              (a, "metaroce.ack.window_hint", "131072"), (a, "metaroce.ack.pull_seq", "0"),
              (wp, "metaroce.base.flags.wants_pull", "1"),
              (wp, "metaroce.base.flags.pulled", "1"), (wp, "metaroce.base.flags.pull", "0"),
              (wp, "metaroce.base.flags.reserved", "0x0000"),
              (pl, "metaroce.base.flags.pull", "1"), (pl, "metaroce.ack.pull_seq", "200"),
              (pl, "metaroce.base.flags.delayed_ack", "0"),
              (dp, "metaroce.base.flags.pull", "1"), (dp, "metaroce.ack.pull_seq", "255"),
              (dp, "metaroce.base.flags.delayed_ack", "1"),
              (dp, "metaroce.base.flags.pulling", "1"), (pl, "metaroce.base.flags.pulling", "0"),
              (allf, "metaroce.base.flags.reserved", "0xfc00")]
    for got, name, want in golden:
        if ";".join(got.get(name, [])) != want:
            problems.append("spelled out: %s is %r, expected %s" % (name, got.get(name), want))
    # The flag summary in the Info column names the new flags.
    for desc, words in [("WANTS_PULL | PULLED", "[WANTS_PULL,PULLED]"),
                        ("deferred pull, pull_seq 255", "[DELAYED_ACK,PULL,PULLING]"),
                        ("every flag bit", "[ACK_REQ,RETRANSMIT,FILLER,WANTS_PULL,DELAYED_ACK,"
                         "PROBE_REPLY,PULLED,PULL,PULLING,CNP]")]:
        info = shown.get(index[desc], {}).get("_ws.col.Info", "")
        if words not in info:
            problems.append("crafted %r: Info %r lacks %s" % (desc, info, words))
    # Names in the tree, the whole tree printed without a Lua error or an exception.
    text = ts.run(["-r", pcap, "-V", "-O", "metaroce"])
    for needle in ["Opcode: WRITE (0x01)", "Opcode: ACK (0x10)", "Opcode: PROBE (0x11)",
                   "Syndrome: RNR_NAK (1)", "= ACK_REQ", "= PROBE_REPLY", "= WANTS_PULL (",
                   "= PULLED (", "= PULL (", "= PULLING (", "Pulls granted (mod 256): 200",
                   "Expert Info (Error/Malformed)", "Expert Info (Warning/Protocol)"]:
        if needle not in text:
            problems.append("tshark -V: %r not shown" % needle)
    for bad in ["Lua Error", "Malformed Packet", "Dissector bug"]:
        if bad in text:
            problems.append("tshark -V shows %r" % bad)
    # The port is a preference: the same datagram on port 5000 is MetaRoCE only when asked.
    other = os.path.join(tmp, "port5000.pcap")
    write_pcap(other, [udp_frame(ack, dport=5000)])
    if ts.run(["-r", other, "-Y", "metaroce"]).strip():
        problems.append("port 5000 decoded as MetaRoCE without the preference")
    if "ACK conn=9 path=3 cum=41" not in ts.run(["-o", "metaroce.udp_port:5000", "-r", other]):
        problems.append("-o metaroce.udp_port:5000 did not decode port 5000")
    print("%-44s %s" % ("crafted packets (%d)" % len(cases), "FAIL" if problems else "ok"))
    return problems


# ---------------------------------------------------------------- part 2: real traffic

class Capture:
    """tshark capturing UDP port PORT on one interface inside one namespace, to a pcap file."""

    def __init__(self, netns, ifname, path):
        self.path = path
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", netns, "tshark", "-n", "-q", "-i", ifname, "-B", "64",
             "-f", "udp dst port %d" % PORT, "-F", "pcap", "-w", path],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.err = []
        ready = threading.Event()

        def reader():
            for line in self.proc.stderr:
                self.err.append(line.rstrip())
                if "Capturing on" in line:
                    ready.set()
            ready.set()

        self.thread = threading.Thread(target=reader, daemon=True)
        self.thread.start()
        if not ready.wait(30) or self.proc.poll() is not None:
            self.stop()
            raise RuntimeError("tshark on %s/%s did not start: %s" %
                               (netns, ifname, " | ".join(self.err)))

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.thread.join(timeout=5)


SERVER_START_S = 1.0  # the server mrperf's head start


def traffic_test(ts, tmp, mrperf, mrfabric):
    problems = []
    fabric = harness.Fabric(mrfabric, NAME, timeout=180, whole_command_in_errors=True)

    rotations = 0

    def mrperf_run(label, test, flags):
        nonlocal rotations
        cjson = os.path.join(tmp, "client-%s.json" % label.replace(" ", "_"))
        common = [test, "--embedded", "--interface", "pl0,pl1", "-p", CONTROL_PORT,
                  "--timeout", "20"] + flags
        server = subprocess.Popen(["ip", "netns", "exec", HOST_NS[1], mrperf] + common,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        time.sleep(SERVER_START_S)
        client = subprocess.run(["ip", "netns", "exec", HOST_NS[0], mrperf] + common +
                                ["--out_json", cjson, SERVER_IP], capture_output=True,
                                text=True, timeout=180)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.send_signal(signal.SIGINT)
            server.wait(timeout=10)
        if client.returncode != 0 or not os.path.exists(cjson):
            problems.append("mrperf %s: client exit %d: %s; server: %s" %
                            (label, client.returncode, client.stderr.strip()[-300:],
                             server.stderr.read().strip()[-300:]))
            return
        with open(cjson) as f:
            doc = json.load(f)
        s = doc["summary"]
        rot = sum(p.get("rotations", 0) for c in doc.get("connections", [])
                  for p in c.get("paths", []))
        rotations += rot
        print("%-44s %6d messages, %5d retransmits, %d rotations" %
              ("mrperf " + label, doc["results"][0]["iterations"], s.get("retransmits", 0), rot))
        if s["failed_ops"] or s["data_errors"]:
            problems.append("mrperf %s: %d failed ops, %d data errors" %
                            (label, s["failed_ops"], s["data_errors"]))

    captures = []
    fabric.down()
    try:
        fabric.up()
        for plane in (0, 1):
            captures.append(Capture(harness.leaf_ns(NAME, plane), "h0",
                                    os.path.join(tmp, "plane%d.pcap" % plane)))
        mrperf_run("write_bw", "write_bw", ["-n", "60", "-s", "32768"])
        mrperf_run("write_bw --verify", "write_bw", ["-n", "60", "-s", "32768", "--verify"])
        mrperf_run("send_bw --verify", "send_bw", ["-n", "60", "-s", "32768", "--verify"])
        # Loss on every spine (MetaRoCE datagrams only), so that it hits whichever spines the
        # paths' source ports hash to: SACK gaps and retransmissions.
        fabric("fault", "all", "--udp-dport", str(PORT), "drop", "3")
        mrperf_run("write_bw --verify, 3 % drop", "write_bw",
                   ["-n", "150", "-s", "32768", "--verify"])
        fabric("fault", "all", "clear")
        # Spine 1 blackholed for the client's first 0.2 s. With two spines a rotated
        # path's new port crosses the dead spine again one time in two or more (each direction
        # hashes on its own), and its probes back off, so only the end of the fault makes a
        # probe reply certain; one message outstanding keeps the capture small.
        fabric("fault", "1", "--udp-dport", str(PORT), "blackhole", "on")
        clear = threading.Timer(SERVER_START_S + 0.2,
                                lambda: fabric("fault", "all", "clear", check=False))
        clear.start()
        try:
            mrperf_run("send_bw --verify, spine 1 dead 0.2 s", "send_bw",
                       ["-D", "0.6", "-t", "1", "-s", "4096", "--verify"])
        finally:
            clear.cancel()
            clear.join()
        fabric("fault", "all", "clear")
    finally:
        for c in captures:
            c.stop()
        fabric.down()

    seen_ops, sack_acks, retransmits, probe_replies, total = set(), 0, 0, 0, 0
    for plane, c in enumerate(captures):
        packets = read_pcap(c.path)
        total += len(packets)
        shown = ts.fields(c.path)
        extra = set(shown) - {n for n, _ in packets}
        if extra:
            problems.append("plane %d: tshark saw MetaRoCE in frames the parser did not: %s" %
                            (plane, sorted(extra)[:10]))
        problems += compare("plane %d" % plane, packets, shown)
        for _, p in packets:
            op, flags = p[1], struct.unpack_from("!H", p, 2)[0]
            seen_ops.add(OPCODES.get(op, hex(op)))
            if op == 0x10 and any(p[48:80]):
                sack_acks += 1
            if op == 0x10 and flags & 0x0020:
                probe_replies += 1
            if flags & 0x0002:
                retransmits += 1
        stats = "; ".join(x.strip() for x in c.err if "captured" in x or "dropped" in x)
        print("%-44s %6d datagrams compared field by field (tshark: %s)" %
              ("capture plane %d (leaf of host 0)" % plane, len(packets), stats))
    print("%-44s %s; %d ACKs with SACK bits, %d RETRANSMIT, %d probe replies" %
          ("opcodes seen", ",".join(sorted(seen_ops)), sack_acks, retransmits, probe_replies))
    for op in ["WRITE", "WRITE_IMM", "SEND", "ACK"] + (["PROBE"] if rotations else []):
        if op not in seen_ops:
            problems.append("no %s packet in the captures" % op)
    if sack_acks == 0:
        problems.append("no ACK with SACK bits (loss run)")
    if retransmits == 0:
        problems.append("no RETRANSMIT packet (loss run)")
    if rotations and probe_replies == 0:
        problems.append("%d rotations but no probe reply" % rotations)
    if not rotations:
        print("note: mrperf reported no rotation; PROBE not required")
    if total < 1000:
        problems.append("only %d MetaRoCE datagrams captured" % total)
    return problems


def main():
    if len(sys.argv) != 4:
        sys.stderr.write(__doc__)
        return 2
    mrperf, mrfabric, lua = sys.argv[1:]
    if not harness.have_root("namespaces, XDP, capture"):
        return harness.SKIP
    if shutil.which("tshark") is None:
        print("skip: tshark not installed")
        return harness.SKIP
    if not harness.have_netns():
        return harness.SKIP

    harness.interrupt_on_sigterm()
    ts = Tshark(os.path.abspath(lua))
    tmp = harness.make_tmp("mrws-test-")  # mode 0755: dumpcap may drop privileges to write
    problems = []
    try:
        problems += crafted_test(ts, tmp)
        problems += traffic_test(ts, tmp, mrperf, mrfabric)
    except (RuntimeError, subprocess.TimeoutExpired, KeyboardInterrupt) as e:
        problems.append("aborted: %s" % e)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return harness.finish(problems)


if __name__ == "__main__":
    sys.exit(main())

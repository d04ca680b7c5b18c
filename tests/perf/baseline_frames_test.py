#!/usr/bin/env python3
"""Unit test of mrperf's raw ceiling (no root: the in-process memory port): a message of -s bytes
leaves as the stack would send it, cut at the MTU, its last datagram carrying what is left, so
that the receiver counts -s bytes a message. Before, every datagram was full and a 64 KiB
"message" at a payload of 8,916 bytes carried 71,328 bytes in eight datagrams where the stack
sends 65,536.

usage: baseline_frames_test.py MRPERF        exit 0 pass, 1 fail (unittest)
"""
import json
import subprocess
import sys
import unittest

MRPERF = None


def run(*flags):
    out = subprocess.run([MRPERF, *flags, "--port-kind", "memory", "--json"], capture_output=True,
                         text=True, timeout=120)
    if out.returncode != 0:
        raise AssertionError("mrperf %s: exit %d: %s" % (" ".join(flags), out.returncode,
                                                        out.stderr[-500:]))
    return json.loads(out.stdout[out.stdout.index("{"):])


class MessageFramesTest(unittest.TestCase):
    def check(self, size, mtu, messages):
        doc = run("raw_bw", "-s", str(size), "--mtu", str(mtu), "-n", str(messages))
        r = doc["results"][0]
        # The memory port loses nothing: every message arrives, -s bytes each.
        self.assertEqual(r["bytes"], size * messages, r)
        self.assertEqual(r["iterations"], messages, r)
        frames = -(-size // mtu)
        self.assertEqual(r["received_packets"], frames * messages, r)

    def test_a_message_that_does_not_fill_its_last_datagram(self):
        self.check(10000, 4096, 300)  # 4096 + 4096 + 1808

    def test_a_message_of_whole_datagrams(self):
        self.check(8192, 4096, 300)

    def test_a_message_below_one_datagram(self):
        self.check(100, 4096, 300)


if __name__ == "__main__":
    MRPERF = sys.argv.pop(1)
    unittest.main()

#!/usr/bin/env python3
"""Unit test of tools/bench/scale's accounting and exit status (no root, no mrsim run of
minutes): a run's peak resident memory is that process's own, not the largest of every child the
bench reaped before it (RUSAGE_CHILDREN's, which it once reported); a crashed run fails the
bench (exit 1, listed under "failures") where it once only went to not_measured with exit 0.

usage: bench_scale_test.py        exit 0 pass, 1 fail (unittest)
"""
import importlib.machinery
import importlib.util
import json
import os
import subprocess
import sys
import unittest

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "bench",
                     "scale")
MIB = 1 << 20


def load_bench():
    loader = importlib.machinery.SourceFileLoader("bench_scale", BENCH)
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(module)  # defines; main() runs only as a script
    return module


def python_holding(mib):
    """A real process that touches `mib` MiB, then prints a line."""
    return [sys.executable, "-c",
            "b = bytearray(%d); b[::4096] = b'x' * len(b[::4096]); print('held')" % (mib * MIB)]


class OwnPeakTest(unittest.TestCase):
    def setUp(self):
        self.bench = load_bench()

    def test_each_run_has_its_own_peak(self):
        code, out, big = self.bench.run_own_peak(python_holding(300))
        self.assertEqual((code, out.strip()), (0, "held"))
        self.assertGreaterEqual(big, 300 * MIB)
        # After a 300 MiB child, a small one's peak is its own (tens of MiB), not 300 MiB.
        code, out, small = self.bench.run_own_peak(python_holding(1))
        self.assertEqual(code, 0)
        self.assertLess(small, 200 * MIB)

    def test_exit_status_of_a_crash(self):
        code, _, _ = self.bench.run_own_peak([sys.executable, "-c", "import os; os.abort()"])
        self.assertLess(code, 0)  # the signal, negated as subprocess does


class ExitStatusTest(unittest.TestCase):
    def test_a_crashed_cluster_run_fails_the_bench(self):
        # `false` as mrsim: every run of it exits 1, printing nothing.
        env = dict(os.environ, MRSIM="/bin/false")
        run = subprocess.run([sys.executable, BENCH, "--only", "hosts"], env=env,
                             capture_output=True, text=True, timeout=120)
        self.assertEqual(run.returncode, 1, run.stderr)
        doc = json.loads(run.stdout.strip().splitlines()[-1])
        self.assertTrue(any(f.startswith("hosts_8192:") for f in doc["failures"]), doc)
        self.assertIn("hosts_8192_wall_s", doc["not_measured"])


if __name__ == "__main__":
    unittest.main(verbosity=2)

#!/usr/bin/env python3
"""Test of tools/bench/spray (no root): a real run of its smallest scenario through the real mrsim
gives its figures and exits 0; a run that loses data, fails messages or prints no JSON fails the
bench (exit 1) and is named, never counted in a median.

usage: bench_spray_test.py MRSIM     exit 0 pass, 1 fail (unittest)
"""
import json
import os
import stat
import subprocess
import sys
import tempfile
import unittest

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "tools",
                     "bench", "spray")
MRSIM = None


def run_bench(mrsim, *args):
    env = dict(os.environ, MRSIM=mrsim, BENCH_SEEDS="1")
    proc = subprocess.run([sys.executable, BENCH, "--jobs", "1", *args], capture_output=True,
                          text=True, env=env, timeout=600)
    doc = json.loads(proc.stdout.strip().splitlines()[-1])
    return proc.returncode, doc


def fake_mrsim(directory, document, heap=1000):
    """An mrsim that prints this document for a cluster run and `heap` as the pair's state."""
    path = os.path.join(directory, "mrsim")
    with open(path, "w") as f:
        f.write("#!/usr/bin/env python3\nimport json, sys\n"
                "if '--measure' in sys.argv:\n"
                f"    print(json.dumps({{'measured': {{'core_heap_bytes_per_connection': {heap}}}}}))\n"
                f"else:\n    print(json.dumps({document!r}))\n")
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR)
    return path


class SprayBenchTest(unittest.TestCase):
    def test_real_run_gives_its_figures(self):
        code, doc = run_bench(MRSIM, "--only", "alltoall_128")
        self.assertEqual(code, 0, doc.get("failures"))
        self.assertGreater(doc["alltoall_128_vs_ideal"], 0.3)
        self.assertLessEqual(doc["alltoall_128_vs_ideal"], 1.0)
        self.assertGreater(doc["paths_256_idle_state_bytes"], 0)
        self.assertIsNone(doc["dcqcn_perm_1024_1m_vs_ideal"])  # not run (--only)
        self.assertIn("dcqcn_perm_1024_1m_vs_ideal", doc["not_measured"])
        self.assertIsNone(doc["perm_1024_1m_vs_ideal"])  # not run: null, and said why
        self.assertIn("perm_1024_1m_vs_ideal", doc["not_measured"])
        self.assertFalse(doc["passes"]["perm_1024_1m_vs_ideal"])

    def test_lost_data_fails_the_bench(self):
        with tempfile.TemporaryDirectory() as d:
            bad = fake_mrsim(d, {"stop_reason": "done", "messages_failed": 0, "data_errors": 3,
                                 "vs_ideal": 0.99})
            code, doc = run_bench(bad, "--only", "alltoall_128")
        self.assertEqual(code, 1)
        self.assertIsNone(doc["alltoall_128_vs_ideal"])
        self.assertTrue(any("data errors" in f for f in doc["failures"]))

    def test_uncounted_heap_is_not_a_figure(self):
        # Under a sanitizer mrsim counts no heap: 0 bytes must not pass the state target.
        with tempfile.TemporaryDirectory() as d:
            bad = fake_mrsim(d, {"stop_reason": "done", "messages_failed": 0, "data_errors": 0,
                                 "vs_ideal": 0.9}, heap=0)
            code, doc = run_bench(bad, "--only", "alltoall_128")
        self.assertEqual(code, 1)
        self.assertIsNone(doc["paths_256_idle_state_bytes"])
        self.assertFalse(doc["passes"]["paths_256_idle_state_bytes"])

    def test_dcqcn_run_without_cnps_fails_the_bench(self):
        # DCQCN that never sent a CNP never acted: not a figure of RoCE as deployed.
        with tempfile.TemporaryDirectory() as d:
            bad = fake_mrsim(d, {"stop_reason": "done", "messages_failed": 0, "data_errors": 0,
                                 "vs_ideal": 0.2, "cnps": 0, "config": {"cc": "dcqcn"}})
            code, doc = run_bench(bad, "--only", "dcqcn_perm_1024_1m")
        self.assertEqual(code, 1)
        self.assertIsNone(doc["dcqcn_perm_1024_1m_vs_ideal"])
        self.assertTrue(any("no CNP" in f for f in doc["failures"]))

    def test_unfinished_run_fails_the_bench(self):
        with tempfile.TemporaryDirectory() as d:
            bad = fake_mrsim(d, {"stop_reason": "duration_cap", "messages_failed": 0,
                                 "data_errors": 0, "vs_ideal": 0.5})
            code, doc = run_bench(bad, "--only", "alltoall_128")
        self.assertEqual(code, 1)
        self.assertIsNone(doc["alltoall_128_vs_ideal"])


if __name__ == "__main__":
    MRSIM = sys.argv.pop(1)
    unittest.main()

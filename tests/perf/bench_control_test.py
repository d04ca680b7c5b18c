#!/usr/bin/env python3
"""Unit test of tools/bench/control's verdict on its blackhole run (no root, no fabric): the
daemon rotated exactly the affected paths only when some path was affected; an empty affected
set (no application connection found) was once reported as an exact match.

usage: bench_control_test.py        exit 0 pass, 1 fail (unittest)
"""
import importlib.machinery
import importlib.util
import os
import unittest

BENCH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "bench",
                     "control")


def load_bench():
    loader = importlib.machinery.SourceFileLoader("bench_control", BENCH)
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(module)  # defines; main() runs only as a script
    return module


class RotationVerdictTest(unittest.TestCase):
    def setUp(self):
        self.verdict = load_bench().rotation_verdict

    def test_nothing_affected_is_not_a_match(self):
        exact, why = self.verdict(set(), set())
        self.assertFalse(exact)
        self.assertIn("no affected path", why)

    def test_exactly_the_affected(self):
        self.assertEqual(self.verdict({1, 5}, {5, 1}), (True, None))

    def test_unread_events_are_not_a_match(self):
        exact, why = self.verdict({1}, set(), events_error="no connection 2")
        self.assertFalse(exact)
        self.assertIn("no connection 2", why)

    def test_names_the_paths_that_differ(self):
        exact, why = self.verdict({1, 5}, {5, 6})
        self.assertFalse(exact)
        self.assertIn("never rotated: [1]", why)
        self.assertIn("not affected: [6]", why)


if __name__ == "__main__":
    unittest.main(verbosity=2)

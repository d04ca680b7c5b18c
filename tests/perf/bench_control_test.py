#!/usr/bin/env python3
"""Unit test of tools/bench/control's verdicts (no root, no fabric): the daemon rotated exactly
the affected paths only when some path was affected (an empty affected set, no application
connection found, was once reported as an exact match); a headline figure that came out null
fails the bench (rotation_rtts null once exited 0); listings are read whole, following `next`
(the client once read only the first page); a connection's path events are read while it lives
and kept once it is gone (they were once read after the connection ended: none).

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


class ScriptedDaemon:
    """The control socket's answers, scripted: a list of (method, params) -> result or
    exception, consumed in order (the real daemon needs root and a fabric: the privileged runs of
    the bench cover it; this pins down the client's side of the protocol)."""

    def __init__(self, script):
        self.script = list(script)
        self.asked = []

    def __call__(self, method, **params):
        self.asked.append((method, params))
        result = self.script.pop(0)
        if isinstance(result, Exception):
            raise result
        return result


class FiguresTest(unittest.TestCase):
    def setUp(self):
        self.bench = load_bench()

    def figures(self, **changes):
        out = {k: 1 for k in self.bench.HEADLINE}
        out.update(changes)
        return out

    def test_every_figure_measured(self):
        self.assertEqual(self.bench.missing_figures(self.figures()), [])

    def test_a_null_rotation_time_is_missing(self):
        self.assertEqual(self.bench.missing_figures(self.figures(rotation_rtts=None)),
                         ["rotation_rtts"])

    def test_zero_is_a_figure(self):
        self.assertEqual(self.bench.missing_figures(self.figures(leaked_bytes=0)), [])

    def test_an_unreported_count_is_not_zero(self):
        docs = ({"summary": {"failed_ops": 0}}, {"summary": {}})
        self.assertIsNone(self.bench.summary_sum(docs, "failed_ops"))
        docs = ({"summary": {"failed_ops": 2}}, {"summary": {"failed_ops": 3}})
        self.assertEqual(self.bench.summary_sum(docs, "failed_ops"), 5)


class LeakTest(unittest.TestCase):
    def setUp(self):
        self.leak = load_bench().leak_per_round

    def test_a_step_that_settles_is_no_leak(self):
        # Measured: host 0's heap stepped 2,912 bytes once, then stayed (issue 36).
        self.assertEqual(self.leak([[3475232, 3478144, 3478144, 3478144],
                                    [3478352, 3478416, 3478432, 3478432]]), 0)

    def test_growth_every_round_is_a_leak(self):
        self.assertEqual(self.leak([[1000, 1100, 1200, 1290], [5, 5, 5, 5]]), 90)

    def test_a_heap_that_shrinks_is_no_leak(self):
        self.assertEqual(self.leak([[1000, 990, 990], [7, 7, 7]]), 0)
        self.assertEqual(self.leak([[1000, 990, 980], [7, 6, 5]]), 0)


class ListingTest(unittest.TestCase):
    def setUp(self):
        self.bench = load_bench()

    def control(self, script):
        ctl = self.bench.Control.__new__(self.bench.Control)  # no socket: call is scripted
        ctl.call = ScriptedDaemon(script)
        return ctl

    def test_follows_next(self):
        ctl = self.control([{"connections": [{"id": 1}], "next": 1},
                            {"connections": [{"id": 2}], "next": 2},
                            {"connections": [{"id": 3}]}])
        self.assertEqual([c["id"] for c in ctl.call_all("conn.show", "connections")], [1, 2, 3])
        self.assertEqual([p for _, p in ctl.call.asked], [{}, {"after": 1}, {"after": 2}])

    def test_a_next_that_does_not_advance_is_an_error(self):
        ctl = self.control([{"connections": [], "next": 5}, {"connections": [], "next": 5}])
        with self.assertRaises(RuntimeError):
            ctl.call_all("conn.show", "connections")

    def test_events_read_while_the_connection_lives_are_kept(self):
        gone = RuntimeError("path.events: no connection 2")
        ctl = self.control([{"events": [{"seq": 1}, {"seq": 2}]},
                            {"events": [{"seq": 3}], "next": 3},
                            {"events": [{"seq": 4}]},
                            {"events": []},
                            gone])
        reader = self.bench.EventReader(ctl, 2)
        reader.follow(period_s=0, timeout_s=60)
        self.assertEqual([e["seq"] for e in reader.events], [1, 2, 3, 4])
        self.assertIsNone(reader.error)
        self.assertEqual(reader.reads, 3)
        # Each read starts after the last event read.
        self.assertEqual([p.get("after") for _, p in ctl.call.asked],
                         [None, 2, 3, 4, 4])

    def test_a_connection_gone_before_the_first_read_is_an_error(self):
        ctl = self.control([RuntimeError("path.events: no connection 2")])
        reader = self.bench.EventReader(ctl, 2)
        reader.follow(period_s=0, timeout_s=60)
        self.assertEqual(reader.events, [])
        self.assertIn("no connection 2", reader.error)

    def test_other_errors_are_raised(self):
        ctl = self.control([RuntimeError("path.events: permission_denied")])
        with self.assertRaises(RuntimeError):
            self.bench.EventReader(ctl, 2).follow(period_s=0, timeout_s=60)


if __name__ == "__main__":
    unittest.main(verbosity=2)

#!/usr/bin/env python3
"""Unit test of tools/bench/incast's verdicts (no root, no simulator, no fabric): checks that
once passed by accident. A side of a fabric run without mrperf JSON (or whose JSON lacks a count)
made its failed_ops, rotations, failed_paths and data_errors 0 and passed; all_pass skipped the
figures not measured and ignored errors, so that `--skip-sim --skip-fabric`, which measures
nothing, printed "all_pass": true.

usage: incast_verdict_test.py BENCH        exit 0 pass, 1 fail (unittest)
"""
import importlib.machinery
import importlib.util
import json
import subprocess
import sys
import unittest

BENCH = None


def load_bench():
    loader = importlib.machinery.SourceFileLoader("bench_incast", BENCH)
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(module)  # defines; main() runs only as a script
    return module


def mrperf_json(failed_ops=0, data_errors=0, **summary):
    s = dict(summary, failed_ops=failed_ops, data_errors=data_errors, retransmits=0,
             connections_in_error=0)
    return {"results": [{"bw_avg_gbps": 1.0, "bytes": 1, "iterations": 1, "seconds": 1,
                         "size": 65536}],
            "summary": s, "config": {"mtu": 1500, "engine": "embedded"},
            "connections": [{"paths": [{"state": "active", "rotations": 0}]}]}


class SidesTest(unittest.TestCase):
    def setUp(self):
        self.bench = load_bench()

    def side(self, doc):
        return self.bench.side_figures("client", 1, 0 if doc else 1, doc, "", "", 1.0)

    def test_a_side_without_json_leaves_the_counts_unknown(self):
        sides = [self.side(mrperf_json()), self.side(None)]
        for key in ("failed_ops", "rotations", "failed_paths", "data_errors"):
            self.assertIsNone(self.bench.count_sum(sides, key), key)

    def test_a_count_the_json_lacks_is_unknown(self):
        doc = mrperf_json()
        del doc["summary"]["failed_ops"]
        self.assertIsNone(self.bench.count_sum([self.side(doc)], "failed_ops"))

    def test_counts_of_every_side_add_up(self):
        sides = [self.side(mrperf_json(failed_ops=2)), self.side(mrperf_json(failed_ops=3))]
        self.assertEqual(self.bench.count_sum(sides, "failed_ops"), 5)
        self.assertEqual(self.bench.count_sum(sides, "data_errors"), 0)

    def test_no_side_is_unknown(self):
        self.assertIsNone(self.bench.count_sum([], "failed_ops"))


class AllPassTest(unittest.TestCase):
    def setUp(self):
        self.all_pass = load_bench().all_pass

    def test_every_figure_met(self):
        self.assertTrue(self.all_pass({"a": True}, {"b": True}, []))

    def test_a_figure_not_measured_is_not_a_pass(self):
        self.assertFalse(self.all_pass({"a": True, "c": None}, {"b": True}, []))

    def test_errors_are_not_a_pass(self):
        self.assertFalse(self.all_pass({"a": True}, {"b": True}, ["fabric: no mrperf JSON"]))

    def test_nothing_measured_is_not_a_pass(self):
        self.assertFalse(self.all_pass({"a": None}, {"b": None}, []))
        self.assertFalse(self.all_pass({}, {}, []))


class NothingRunTest(unittest.TestCase):
    def test_skipping_both_parts_does_not_pass(self):
        run = subprocess.run([sys.executable, BENCH, "--skip-sim", "--skip-fabric"],
                             capture_output=True, text=True, timeout=120)
        doc = json.loads(run.stdout.strip().splitlines()[-1])
        self.assertFalse(doc["all_pass"])
        self.assertIsNone(doc["data_errors"])
        self.assertEqual(doc["not_measured"].get("loss1_retention"), "--skip-sim")
        self.assertEqual(doc["not_measured"].get("fabric_incast_failed_ops"), "--skip-fabric")


if __name__ == "__main__":
    BENCH = sys.argv.pop(1)
    unittest.main(verbosity=2)

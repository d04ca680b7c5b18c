#!/usr/bin/env python3
"""Unit test of fabric_harness.py's faults (no root, no fabric): a side thread's exception reaches
the caller, a fault set after the traffic or one that dropped nothing fails, and a fault is
cleared on every exit path. mrfabric is a recording fake.

usage: fabric_harness_test.py        exit 0 pass, 1 fail (unittest)
"""
import os
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fabric_harness as harness  # noqa: E402


class FakeFabric:
    """Records mrfabric commands; drops() answers from `readings` in turn (the last one stays);
    a command whose verb is in `fail` raises as Fabric does when mrfabric fails."""

    def __init__(self, readings, fail=()):
        self.readings = list(readings)
        self.fail = set(fail)
        self.commands = []
        self.lock = threading.Lock()

    def __call__(self, *args, check=True):
        with self.lock:
            self.commands.append((list(args), check))
        if check and args[-1] in self.fail:
            raise RuntimeError("mrfabric %s: failed" % args[0])

    def drops(self):
        return self.readings.pop(0) if len(self.readings) > 1 else self.readings[0]


def show_document(counters):
    """A `mrfabric show -j` document's planes: counters {(plane, spine): fault counters|None}."""
    planes = {}
    for (p, s), c in sorted(counters.items()):
        planes.setdefault(p, []).append({"index": s, "counters": {"fault": c}})
    return {"planes": [{"plane": p, "spines": spines} for p, spines in sorted(planes.items())]}


def fault_counters(random=0, blackhole=0):
    return {"unmatched": 7, "passed": 100, "ce_marked": 0, "ce_not_ect": 0,
            "drop_random": random, "drop_blackhole": blackhole}


class SideThreadTest(unittest.TestCase):
    def test_join_reraises_what_the_thread_raised(self):
        # threading.Thread and Timer print this and return normally from join().
        def fault():
            raise RuntimeError("mrfabric fault: no such spine")
        side = harness.SideThread("blackhole spine 9", fault).start()
        with self.assertRaises(harness.SideThreadFailed) as caught:
            side.join()
        self.assertIn("blackhole spine 9", str(caught.exception))
        self.assertIn("no such spine", str(caught.exception))
        self.assertIsInstance(caught.exception.__cause__, RuntimeError)
        self.assertIsInstance(caught.exception, harness.ABORTS)

    def test_join_returns_the_result(self):
        self.assertEqual(harness.SideThread("answer", lambda: 42).start().join(), 42)

    def test_leaving_the_block_reraises_any_exception(self):
        def fault():
            raise KeyError("conn")
        with self.assertRaises(harness.SideThreadFailed) as caught:
            with harness.SideThread("read the connection", fault):
                pass
        self.assertIsInstance(caught.exception.__cause__, KeyError)

    def test_block_that_ends_within_the_delay_fails_and_fn_never_runs(self):
        ran = threading.Event()
        with self.assertRaisesRegex(harness.SideThreadFailed, "never ran"):
            with harness.SideThread("blackhole mid-run", ran.set, delay_s=30):
                pass
        self.assertFalse(ran.is_set())

    def test_the_blocks_own_exception_wins_and_cancels_a_pending_fn(self):
        ran = threading.Event()
        with self.assertRaisesRegex(ValueError, "client died"):
            with harness.SideThread("blackhole mid-run", ran.set, delay_s=30):
                raise ValueError("client died")
        self.assertFalse(ran.is_set())

    def test_waits_for_its_delay(self):
        ran = threading.Event()
        with harness.SideThread("soon", ran.set, delay_s=0.05):
            self.assertTrue(ran.wait(10))


class FaultDropsTest(unittest.TestCase):
    def test_fault_drops_reads_show_json(self):
        view = show_document({(0, 0): fault_counters(3, 4), (0, 1): None,
                              (1, 0): fault_counters(0, 0)})
        self.assertEqual(harness.fault_drops(view), {(0, 0): 7, (1, 0): 0})

    def test_require_counts_only_the_named_spines(self):
        fabric = FakeFabric([{(0, 0): 5, (0, 1): 5, (1, 1): 0},
                             {(0, 0): 9, (0, 1): 5, (1, 1): 2}])
        drops = harness.FaultDrops(fabric)
        self.assertEqual(drops.require("spine 1", spine=1), 2)
        self.assertEqual(drops.require("spine 0, plane 0", spine="0", plane=0), 4)
        with self.assertRaisesRegex(harness.FaultNotProved, "never acted"):
            drops.require("spine 1 of plane 0", spine=1, plane=0)

    def test_no_drops_is_not_proof(self):
        fabric = FakeFabric([{(0, 1): 10, (1, 1): 10}])
        with self.assertRaisesRegex(harness.FaultNotProved, "spine 1 blackholed"):
            harness.FaultDrops(fabric).require("spine 1 blackholed", spine=1)

    def test_no_fault_program_is_not_proof(self):
        fabric = FakeFabric([{}])
        with self.assertRaisesRegex(harness.FaultNotProved, "no fault program"):
            harness.FaultDrops(fabric).require("drop 5 %", spine=0)


class SpineFaultTest(unittest.TestCase):
    def test_proved_fault_is_set_then_cleared(self):
        fabric = FakeFabric([{(0, 1): 0, (1, 1): 0}, {(0, 1): 30, (1, 1): 12}])
        with harness.SpineFault(fabric, 1, "blackhole", "on", udp_dport=4792) as fault:
            pass
        self.assertEqual(fault.dropped, 42)
        self.assertEqual(fabric.commands, [
            (["fault", "1", "--plane", "all", "--udp-dport", "4792", "blackhole", "on"], True),
            (["fault", "1", "--plane", "all", "clear"], True)])

    def test_mid_run_fault_that_dropped_nothing_fails_and_is_cleared(self):
        fabric = FakeFabric([{(0, 1): 5, (1, 1): 5}])
        with self.assertRaisesRegex(harness.FaultNotProved, r"in effect [0-9.]+ s after"):
            with harness.SpineFault(fabric, 1, "blackhole", "on", delay_s=0.01):
                while not fabric.commands:  # the traffic outlasts the delay
                    time.sleep(0.01)
        self.assertEqual(fabric.commands[-1], (["fault", "1", "--plane", "all", "clear"], False))

    def test_mid_run_fault_whose_command_failed_fails(self):
        fabric = FakeFabric([{(0, 0): 0}, {(0, 0): 100}], fail={"on"})
        with self.assertRaisesRegex(harness.SideThreadFailed, "mrfabric fault"):
            with harness.SpineFault(fabric, 0, "blackhole", "on", delay_s=0):
                while not fabric.commands:
                    time.sleep(0.01)
        self.assertEqual(fabric.commands[-1][0][-1], "clear")

    def test_mid_run_fault_after_the_traffic_fails(self):
        fabric = FakeFabric([{(0, 0): 0}])
        with self.assertRaisesRegex(harness.SideThreadFailed, "never ran"):
            with harness.SpineFault(fabric, 0, "drop", "5", delay_s=30):
                pass
        self.assertEqual([c[0][-1] for c in fabric.commands], ["clear"])


if __name__ == "__main__":
    unittest.main(verbosity=2)

#!/usr/bin/env python3
"""Unit test of how the conformance tools judge a run (no root, no fabric): each judge is fed the
results that used to pass by accident and must refuse them.
  - tools/conform/mutations: a mutant's named test that fails on another check than its rule's,
    or for a crash, a closed driver or a timeout, is not caught; a mutant that died during the
    test or exits non-zero on SIGTERM is not caught; an unbroken or no-op run with a skip, a
    failure or a named test missing is not clean.
  - tools/conform/run: a skip counts only for a feature the IUT is known to lack.
  - tools/conform/mrconform: a RETRY_EXC_ERR completion fails a test (it used to skip it), and a
    check that names its rule says so first in its message.
  - tools/conform/must_table: a statement is checked only by the tests tied to it: the five
    statements issue 36 found checked by nothing are each tied to their own test, and none to
    the tests that merely name their section.

usage: judges_test.py      exit 0 pass, 1 fail
"""
import importlib.machinery
import importlib.util
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
failures = []


def load(name):
    path = os.path.join(ROOT, "tools", "conform", name)
    spec = importlib.util.spec_from_loader(name, importlib.machinery.SourceFileLoader(name, path))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def check(cond, what):
    print(f"{what:70} {'ok' if cond else 'FAILED'}")
    if not cond:
        failures.append(what)


def summary(*results):
    return {"tests": len(results), "results": [dict(r) for r in results]}


def result(name, status, message="", feature=None):
    r = {"name": name, "status": status, "message": message}
    if feature:
        r["feature"] = feature
    return r


def mutations_judges():
    mu = load("mutations")
    t, rule = "sack_bits_name_the_psns_above_a_gap", "wire §8"
    check(mu.judge_mutant(summary(result(t, "fail", "wire §8: PSN 2 is bit 1 ...")), t, rule)
          is None, "mutant: its rule's check failed: caught")
    check(mu.judge_mutant(summary(result(t, "fail", "two ACKs: [None]")), t, rule) is not None,
          "mutant: another check failed: not caught")
    check(mu.judge_mutant(summary(result(t, "fail", "ConnectionError: the driver closed the "
                                                    "session")), t, rule) is not None,
          "mutant: the driver closed (a crash): not caught")
    check(mu.judge_mutant(summary(result(t, "pass")), t, rule) is not None,
          "mutant: the test passed: not caught")
    check(mu.judge_mutant(summary(result(t, "skip", "x", "min_timeout_ms")), t, rule)
          is not None, "mutant: the test skipped: not caught")
    check(mu.judge_mutant({"error": "mrconform printed no summary"}, t, rule) is not None,
          "mutant: no summary (a timeout): not caught")
    check(mu.clean_run(summary(result("a", "pass"), result("b", "pass"))) is None,
          "clean run: every test passed")
    check(mu.clean_run(summary(result("a", "pass"), result("b", "skip", "x", "gbn")))
          is not None, "clean run: a skip is not clean")
    check(mu.clean_run(summary(result("a", "pass")), names=["a", "b"]) is not None,
          "clean run: a named test that did not run is not clean")
    check(mu.clean_run({"error": "x"}) is not None, "clean run: no results is not clean")
    # stop_iut on real processes: alive and exiting 0 on SIGTERM; dead before; killed.
    graceful = subprocess.Popen([sys.executable, "-c",
                                 "import signal,sys,time\n"
                                 "signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))\n"
                                 "print('up', flush=True)\ntime.sleep(60)"],
                                stdout=subprocess.PIPE, text=True)
    graceful.stdout.readline()
    check(mu.stop_iut(graceful) is None, "mutant alive, exits 0 on SIGTERM: fine")
    died = subprocess.Popen([sys.executable, "-c", "import sys; sys.exit(3)"])
    died.wait()
    check(mu.stop_iut(died) is not None, "mutant that ended during the test: not fine")
    crashing = subprocess.Popen([sys.executable, "-c",
                                 "import signal,sys,time\n"
                                 "signal.signal(signal.SIGTERM, lambda *a: sys.exit(1))\n"
                                 "print('up', flush=True)\ntime.sleep(60)"],
                                stdout=subprocess.PIPE, text=True)
    crashing.stdout.readline()
    check(mu.stop_iut(crashing) is not None, "mutant exiting non-zero on SIGTERM: not fine")


def run_judge():
    run = load("run")
    s = summary(result("a", "pass"), result("p", "skip", "no min_timeout_ms", "min_timeout_ms"))
    check(not run.unexpected_skips(s, "daemon"), "run: daemon skips for min_timeout_ms: expected")
    check(run.unexpected_skips(s, "embedded-udp"), "run: embedded skips for it: unexpected")
    s = summary(result("a", "skip", "gave up", None))
    check(run.unexpected_skips(s, "daemon"), "run: a skip naming no feature: unexpected")
    check(run.unexpected_skips({"tests": 3}, "daemon"), "run: no per-test results: unexpected")


class FakeDriver:
    def __init__(self, completions):
        self.completions = completions

    def __call__(self, op, **params):
        assert op == "poll"
        out, self.completions = self.completions, []
        return {"ok": True, "completions": out}


class FakeSuite:
    def __init__(self, completions):
        self.driver = FakeDriver(completions)


class FakeConn:
    iut_conn = 7


def mrconform_judges():
    mc = load("mrconform")
    s = FakeSuite([{"conn": 7, "wr_id": 1, "status": "RETRY_EXC_ERR", "status_code": 12}])
    try:
        mc.completion(s, FakeConn(), "acknowledged", timeout_ms=0)
        outcome = "returned"
    except mc.Skip:
        outcome = "skip"
    except AssertionError as e:
        outcome = "fail: " + str(e)
    check(outcome.startswith("fail") and "RETRY_EXC_ERR" in outcome,
          "mrconform: RETRY_EXC_ERR fails the test, not a skip")
    try:
        mc.expect(False, "what", rule="[R7]")
        msg = ""
    except AssertionError as e:
        msg = str(e)
    check(msg == "[R7]: what", "mrconform: a check naming its rule starts with it")


def must_table_ties():
    mt = load("must_table")
    rows, tests = mt.table()
    stale = mt.stale_ties(rows, tests)
    check(not stale, f"must_table: CHECKS in step with the spec and mrconform {stale}")

    def tests_of(phrase):
        hits = [r for r in rows if phrase in r["text"]]
        return hits[0]["tests"] if len(hits) == 1 else None
    for phrase, test in (
            ("A receiver MUST ignore the DSCP", "a_receiver_ignores_the_dscp"),
            ("A flag set on a packet type it does not apply to MUST be ignored",
             "flags_of_other_packet_types_on_data_are_ignored"),
            ("The server MUST NOT send packets on the connection before it has received CONFIRM",
             "setup_the_server_takes_packets_after_its_reply_and_sends_nothing_of_its_own"),
            ("A side that sends a REJECT MUST then close the TCP connection",
             "setup_a_server_that_rejects_closes_the_channel"),
            ("27 | 1 | reserved", "setup_reserved_body_fields_are_sent_as_0_and_ignored")):
        got = tests_of(phrase)
        check(got is not None and test in got, f"must_table: {test} checks its statement")
    # The tests that only name wire §1 (as the old table counted them) do not check the DSCP.
    got = tests_of("A receiver MUST ignore the DSCP") or []
    check("the_iuts_data_is_ect0" not in got and
          "acks_come_back_on_the_paths_plane_from_its_port" not in got,
          "must_table: a test naming the section does not check the DSCP statement")


def main():
    mutations_judges()
    run_judge()
    mrconform_judges()
    must_table_ties()
    print("all passed" if not failures else f"{len(failures)} failed: {failures}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Unit check of trace_test.py's verdict when the run cannot go on (bpftrace cannot attach): a
check that failed before that point must fail the test, not vanish into a skip.

usage: trace_skip_test.py     exit 0 pass, 1 fail
"""
import contextlib
import io
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import trace_test  # noqa: E402
harness = trace_test.harness


def verdict(failures):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        rc = trace_test.skip_unless_failed(failures, "bpftrace cannot attach here: EPERM")
    return rc, out.getvalue()


def main():
    bad = []

    clean = harness.Failures()
    rc, out = verdict(clean)
    if rc != harness.SKIP or "skip: bpftrace cannot attach here" not in out:
        bad.append("no failure recorded: want exit %d and the reason, got %d %r" %
                   (harness.SKIP, rc, out))

    failed = harness.Failures()
    with contextlib.redirect_stdout(io.StringIO()):
        failed.check(False, "bpftrace -l lists every metaroce probe of metaroced")
    rc, out = verdict(failed)
    if rc != 1:
        bad.append("a failure recorded before the skip: want exit 1, got %d %r" % (rc, out))

    for b in bad:
        print("FAIL: %s" % b)
    if not bad:
        print("a recorded failure wins over a later skip")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Checks how the tests are registered (meson-info/intro-tests.json of the build):
  - every GoogleTest program runs with protocol 'gtest': meson then passes --gtest_output=xml
    and a GTEST_SKIP shows as a skipped test case in meson-logs/testlog.junit.xml; with the
    default protocol it is indistinguishable from a pass;
  - the `probes` test is registered in every build (it skips, saying why, without <sys/sdt.h>).

A GoogleTest program is a test command whose executable carries GoogleTest (its UnitTest
symbol, or the text of its --gtest_output flag when statically linked and stripped). Programs not
built yet are listed and not checked (`meson test --suite unit` builds only the unit tests'
dependencies); fewer than 10 GoogleTest programs in all means the detection is broken.

usage: registration_test.py BUILD_ROOT     exit 0 pass, 1 fail
"""
import json
import os
import sys

GTEST_MARKERS = (b"_ZN7testing8UnitTest11GetInstanceEv", b"gtest_output")

ALWAYS_REGISTERED = ["probes"]


def is_gtest_program(path):
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        return None
    if not data.startswith(b"\x7fELF"):
        return False
    return any(m in data for m in GTEST_MARKERS)


def main():
    if len(sys.argv) != 2:
        sys.stderr.write(__doc__)
        return 2
    intro = os.path.join(sys.argv[1], "meson-info", "intro-tests.json")
    with open(intro) as f:
        tests = json.load(f)
    failures = []
    unbuilt = []
    gtest_programs = 0
    for t in tests:
        name, cmd = t["name"], t["cmd"]
        if not cmd:
            continue
        kind = is_gtest_program(cmd[0])
        if kind is None:
            # `meson test --suite unit` builds only what the unit tests need: the privileged
            # programs are checked in a run that built them (a full build, or their suite).
            unbuilt.append(name)
            continue
        if not kind:
            continue
        gtest_programs += 1
        if t["protocol"] == "gtest":
            continue
        failures.append("%s: a GoogleTest program registered with protocol '%s': add "
                        "protocol: 'gtest' to its test() so a GTEST_SKIP is not a pass" %
                        (name, t["protocol"]))
    names = {t["name"] for t in tests}
    for name in ALWAYS_REGISTERED:
        if name not in names:
            failures.append("test '%s' is not registered in this build" % name)
    if gtest_programs < 10:
        failures.append("only %d GoogleTest programs found among %d tests: the detection is "
                        "broken" % (gtest_programs, len(tests)))
    if unbuilt:
        print("not built here, not checked: %s" % ", ".join(unbuilt))
    for f in failures:
        print("FAIL: %s" % f)
    if not failures:
        print("%d GoogleTest programs, all with protocol 'gtest'; %s registered" %
              (gtest_programs, ", ".join(ALWAYS_REGISTERED)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

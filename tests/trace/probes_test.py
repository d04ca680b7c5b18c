#!/usr/bin/env python3
"""Unit check of the USDT probes: each binary carries every probe docs/tracing.md documents
(provider metaroce, read with `readelf -n`), and documents every probe it carries.

usage: probes_test.py TRACING_MD BINARY...     exit 0 pass, 1 fail, 77 skip (no readelf)
"""
import re
import shutil
import subprocess
import sys


def main():
    if len(sys.argv) < 3:
        sys.stderr.write(__doc__)
        return 2
    if shutil.which("readelf") is None:
        print("skip: no readelf (binutils)")
        return 77
    doc = open(sys.argv[1]).read()
    documented = set(re.findall(r"^\| `([a-z_]+)` \| [a-z]", doc, re.M))
    failures = []
    if len(documented) < 10:
        failures.append("docs/tracing.md: only %d probes found in its tables" % len(documented))
    for binary in sys.argv[2:]:
        notes = subprocess.run(["readelf", "-n", binary], capture_output=True, text=True,
                               check=True).stdout
        carried = set()
        for provider, name in re.findall(r"Provider: (\S+)\s+Name: (\S+)", notes):
            if provider == "metaroce":
                carried.add(name)
        missing, undocumented = documented - carried, carried - documented
        print("%s: %d metaroce probes" % (binary, len(carried)))
        if missing:
            failures.append("%s lacks %s" % (binary, ", ".join(sorted(missing))))
        if undocumented:
            failures.append("%s carries undocumented %s" % (binary, ", ".join(sorted(undocumented))))
    for f in failures:
        print("FAIL: %s" % f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

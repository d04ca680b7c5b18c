#!/usr/bin/env python3
"""Unit check of the USDT probes: each binary carries every probe docs/tracing.md documents
(provider metaroce, read with `readelf -n`), and documents every probe it carries.

usage: probes_test.py [--built-without-sdt] TRACING_MD BINARY...
exit 0 pass, 1 fail, 77 skip (no readelf, or --built-without-sdt: meson found no <sys/sdt.h>,
so the probes compiled to nothing)
"""
import re
import shutil
import subprocess
import sys


def main():
    args = sys.argv[1:]
    without_sdt = args[:1] == ["--built-without-sdt"]
    if without_sdt:
        args = args[1:]
    if len(args) < 2:
        sys.stderr.write(__doc__)
        return 2
    if without_sdt:
        print("skip: built without <sys/sdt.h>: the USDT probes are no-ops "
              "(apt-get install systemtap-sdt-dev, then reconfigure: meson setup --reconfigure)")
        return 77
    if shutil.which("readelf") is None:
        print("skip: no readelf (binutils)")
        return 77
    doc = open(args[0]).read()
    documented = set(re.findall(r"^\| `([a-z_]+)` \| [a-z]", doc, re.M))
    failures = []
    if len(documented) < 10:
        failures.append("docs/tracing.md: only %d probes found in its tables" % len(documented))
    for binary in args[1:]:
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

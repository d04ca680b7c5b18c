#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""End-to-end test of tools/fabric/mrfabric (meson suite 'privileged').

Brings up a fabric (2 hosts, 2 planes, 4 spines), checks echo on every plane, that source ports
spread over several spines, that `fault SPINE drop 100` drops exactly the flows the port map puts
on that spine, blackhole on/off, ECN marking, that `down` leaves no namespace, link, pin or state,
and that a failed `up` cleans up after itself. Exit 77 (skip) without root or network namespaces.

Usage: fabric_test.py [PATH-TO-mrfabric]   (MRFABRIC_BPF_OBJ names the fault program object)
"""

import json
import os
import re
import subprocess
import sys
import tempfile

SKIP = 77
HERE = os.path.dirname(os.path.realpath(__file__))
TOOL = (sys.argv[1] if len(sys.argv) > 1 else
        os.path.join(HERE, "..", "..", "tools", "fabric", "mrfabric"))
NAME = "t%d" % (os.getpid() % 100000)  # its own fabric: never touches a developer's
failures = []


def mrf(*args, check=True):
    cp = subprocess.run([sys.executable, TOOL] + list(args), capture_output=True, text=True,
                        timeout=120)
    if check and cp.returncode != 0:
        raise AssertionError(f"mrfabric {' '.join(args)} exited {cp.returncode}: "
                             f"{cp.stderr.strip()}")
    return cp


def expect(cond, what):
    print(("ok    " if cond else "FAIL  ") + what, flush=True)
    if not cond:
        failures.append(what)


def leftovers(name):
    """What a fabric can leave behind: namespaces, root-namespace links, pins, state."""
    found = []
    ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    found += [l.split()[0] for l in ns.splitlines() if l.startswith(f"mrf-{name}-")]
    links = json.loads(subprocess.run(["ip", "-j", "link", "show"], capture_output=True,
                                      text=True).stdout or "[]")
    found += [l["ifname"] for l in links  # mrfabric names its links so; none live here
              if re.fullmatch(r"(pl|l|s|h)\d+", l.get("ifname", ""))]
    for path in (f"/sys/fs/bpf/mrfabric/{name}", f"/run/mrfabric/{name}"):
        if os.path.exists(path):
            found.append(path)
    return found


def probe(plane, count=4, **kw):
    args = ["probe", "--name", NAME, "0", "1", "--plane", str(plane), "-c", str(count), "-j"]
    if kw.get("ect"):
        args.append("--ect")
    doc = json.loads(mrf(*args).stdout)
    return doc["planes"][0]["ports"]


def check_only_spine_loses(ports, spine, plane, what):
    on = [e for e in ports if e["spine"] == spine]
    off = [e for e in ports if e["spine"] != spine]
    expect(on and all(e["received"] == 0 for e in on),
           f"{what}: plane {plane}: all {len(on)} flows on spine {spine} lost")
    expect(off and all(e["received"] == e["sent"] for e in off),
           f"{what}: plane {plane}: all {len(off)} flows on other spines delivered")


def main():
    if os.geteuid() != 0:
        print("skip: needs root")
        return SKIP
    probe_ns = f"mrf-{NAME}-probe"
    if subprocess.run(["ip", "netns", "add", probe_ns], capture_output=True).returncode != 0:
        print("skip: ip netns add failed (no network namespaces here)")
        return SKIP
    subprocess.run(["ip", "netns", "del", probe_ns], capture_output=True)
    bpf_obj = os.environ.get("MRFABRIC_BPF_OBJ")
    if bpf_obj and not os.path.isfile(bpf_obj):
        print(f"FAIL  MRFABRIC_BPF_OBJ={bpf_obj}: no such file")
        return 1
    obj_args = ["--bpf-obj", bpf_obj] if bpf_obj else []

    mrf("down", "--name", NAME)
    try:
        # A failed up removes what it made: a real failure half way (the fault program object is
        # not an object), and the test hook that fails after the fault programs are attached.
        with tempfile.NamedTemporaryFile(suffix=".o") as bogus:
            bogus.write(b"not an ELF object\n")
            bogus.flush()
            cp = mrf("up", "--name", NAME, "--bpf-obj", bogus.name, check=False)
            expect(cp.returncode != 0, "up with a bad fault program fails")
            expect(leftovers(NAME) == [], f"failed up leaves nothing ({leftovers(NAME)})")
        cp = mrf("up", "--name", NAME, "--fail-after", "bpf", *obj_args, check=False)
        expect(cp.returncode != 0, "up --fail-after bpf fails")
        expect(leftovers(NAME) == [], f"failed up (after bpf) leaves nothing ({leftovers(NAME)})")

        mrf("up", "--name", NAME, "--hosts", "2", "--planes", "2", "--spines", "4", "--ipv6",
            *obj_args)
        show = json.loads(mrf("show", "--name", NAME, "-j").stdout)
        expect(show["version"] == 1 and len(show["hosts"]) == 2 and len(show["planes"]) == 2,
               "show -j: version 1, 2 hosts, 2 planes")
        expect(all(pl["gateway"]["mac"] and pl["ipv4"] and pl["ipv6"] for h in show["hosts"]
                   for pl in h["planes"]), "show -j: every host plane has addresses and gateway MAC")
        bpf = all(sp["bpf_attached"] for pl in show["planes"] for sp in pl["spines"])

        for args in (["0", "1"], ["1", "0"], ["0", "1", "-6"]):
            cp = mrf("ping", "--name", NAME, *args, "-c", "2", check=False)
            expect(cp.returncode == 0, f"echo host {args[0]} -> host {args[1]} on every plane "
                                       f"{'ipv6' if '-6' in args else 'ipv4'}: {cp.stdout.strip()!r}")

        pm = show["port_map"]["ipv4"]
        for pl in pm["planes"]:
            expect(all(e["spine"] is not None for e in pl["ports"]),
                   f"port map plane {pl['plane']}: every port measured on exactly one spine")
            expect(len(pl["spines_used"]) > 1,
                   f"port map plane {pl['plane']}: ports spread over {pl['spines_used']}")
            expect(pl["route_get_agrees"] == len(pl["ports"]),
                   f"port map plane {pl['plane']}: ip route get agrees "
                   f"({pl['route_get_agrees']}/{len(pl['ports'])})")
            # `route` answers from the same FIB: for every port, the spine the probes measured.
            args = ["route", "--name", NAME, "0", "1", "--plane", str(pl["plane"]), "-j"]
            for e in pl["ports"]:
                args += ["--sport", str(e["sport"])]
            routed = json.loads(mrf(*args).stdout)["planes"][0]["ports"]
            expect([r["spine"] for r in routed] == [e["spine"] for e in pl["ports"]],
                   f"route plane {pl['plane']}: the measured spine for every port")
        # The mapping is a function of the seed: a second look gives the same spine.
        for pl in (0, 1):
            ports = probe(pl, count=2)
            expect(all(e["received"] == e["sent"] for e in ports), f"plane {pl}: no loss at rest")

        if not bpf:
            print("skip: fault program not attached (build build/bpf/fabric_fault.bpf.o or set "
                  "MRFABRIC_BPF_OBJ): drop/blackhole/ecn checks skipped")
        else:
            victim = pm["planes"][0]["ports"][0]["spine"]
            mrf("fault", "--name", NAME, str(victim), "--plane", "0", "drop", "100")
            check_only_spine_loses(probe(0), victim, 0, f"drop 100 on spine {victim}")
            ports = probe(1)
            expect(all(e["received"] == e["sent"] for e in ports),
                   "drop 100 on plane 0 only: plane 1 untouched")
            mrf("fault", "--name", NAME, str(victim), "clear")
            expect(all(e["received"] == e["sent"] for e in probe(0)), "clear: plane 0 delivers all")

            mrf("fault", "--name", NAME, str(victim), "blackhole", "on")
            for pl in (0, 1):
                check_only_spine_loses(probe(pl), victim, pl, f"blackhole on spine {victim}")
            cnt = json.loads(mrf("show", "--name", NAME, "-j").stdout)
            sp = cnt["planes"][0]["spines"][victim]
            expect(sp["fault"]["blackhole"] and sp["counters"]["fault"]["drop_blackhole"] > 0,
                   "show -j: blackhole set and counted")
            mrf("fault", "--name", NAME, str(victim), "blackhole", "off")
            for pl in (0, 1):
                expect(all(e["received"] == e["sent"] for e in probe(pl)),
                       f"blackhole off: plane {pl} delivers all")

            mrf("fault", "--name", NAME, str(victim), "--plane", "0", "ecn", "100")
            ports = probe(0, ect=True)
            on = [e for e in ports if e["spine"] == victim]
            off = [e for e in ports if e["spine"] != victim]
            expect(all(e["ce"] == e["received"] == e["sent"] for e in on) and
                   all(e["ce"] == 0 and e["received"] == e["sent"] for e in off),
                   f"ecn 100 on spine {victim}: exactly its flows arrive CE-marked")
            mrf("fault", "--name", NAME, "all", "clear")

        mrf("fault", "--name", NAME, "0", "rate", "1")
        qd = subprocess.run(["ip", "netns", "exec", f"mrf-{NAME}-p0s0", "tc", "qdisc", "show",
                             "dev", "l0"], capture_output=True, text=True).stdout
        expect("tbf" in qd and "1Gbit" in qd, "rate 1: tbf 1Gbit on the spine's links")
        mrf("fault", "--name", NAME, "0", "clear")
        qd = subprocess.run(["ip", "netns", "exec", f"mrf-{NAME}-p0s0", "tc", "qdisc", "show",
                             "dev", "l0"], capture_output=True, text=True).stdout
        expect("tbf" not in qd, "clear: tbf removed")
        expect(mrf("fault", "--name", NAME, "9", "drop", "1", check=False).returncode != 0,
               "fault on a spine that does not exist fails")
    except AssertionError as e:
        expect(False, str(e))
    finally:
        mrf("down", "--name", NAME, check=False)
    expect(leftovers(NAME) == [], f"down leaves nothing ({leftovers(NAME)})")
    expect(mrf("down", "--name", NAME, check=False).returncode == 0, "down twice succeeds")

    print(f"{len(failures)} failed" if failures else "all passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

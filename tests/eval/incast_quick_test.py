#!/usr/bin/env python3
"""Runs tools/eval/incast --quick into a temporary directory and checks its outputs: incast.md,
incast.json, every run's JSON (a cluster result with a timeline) and command, every plot (script
with title and labelled axes, data, SVG, shown in the report with its source JSON); then that the
summary is what the runs say: each run's figures read again from its JSON, the timeline figures
recomputed here (time with a queue full, when one first filled and the bytes in flight then), the
start-up runs equal to the whole runs' first part, bin for bin, and the conclusions (which runs
meet issue 13's targets, whether the hints cut the drops) recomputed; and that --report-only
rebuilds the same report and refuses runs made with other flags. Exit 77 (skip) when gnuplot is
missing.

usage: incast_quick_test.py TOOLS_EVAL_INCAST MRSIM
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile


def main():
    incast, mrsim = sys.argv[1], sys.argv[2]
    if not (os.environ.get("GNUPLOT") or shutil.which("gnuplot")):
        print("gnuplot missing: skipped")
        return 77
    failures = []

    def expect(cond, what):
        if not cond:
            failures.append(what)

    out = tempfile.mkdtemp(prefix="incast-quick-")
    try:
        # A file of another tool in OUTDIR must survive (docs/results/incast holds bench.txt).
        with open(os.path.join(out, "bench.txt"), "w") as fh:
            fh.write("kept\n")
        env = dict(os.environ, MRSIM=mrsim)
        proc = subprocess.run([incast, out, "--quick"], env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            print(proc.stderr)
            print("FAIL: tools/eval/incast exited %d" % proc.returncode)
            return 1
        expect(open(os.path.join(out, "bench.txt")).read() == "kept\n",
               "another file in OUTDIR was left alone")
        summary = json.load(open(os.path.join(out, "incast.json")))
        report = open(os.path.join(out, "incast.md")).read()
        runs = summary["runs"]
        shapes = summary["connections"]
        expect(shapes == [16, 64], "quick runs 16 and 64 connections (%s)" % shapes)
        expect(len(runs) == 8, "8 runs (got %d)" % len(runs))
        commands = open(os.path.join(out, "runs", "incast_commands.txt")).read()
        raw = {}
        for name, s in runs.items():
            r = json.load(open(os.path.join(out, "runs", name + ".json")))
            raw[name] = r
            expect(r.get("schema") == "mrsim.cluster.v1", "%s is a cluster result" % name)
            expect(name + ": mrsim " in commands, "incast_commands.txt has %s" % name)
            expect(r["data_errors"] == 0, "%s: no data error" % name)
            hints_off = "--receive-budget-kb=0" in commands.split(name + ": ", 1)[1].split("\n")[0]
            expect(hints_off == (s["hints"] == "off"), "%s: hints %s as its command says" % (
                name, s["hints"]))
            expect((r["config"]["receive_budget_bytes"] == 0) == hints_off,
                   "%s: receive_budget_bytes matches the hints" % name)
            f = s["figures"]
            for key, raw_key in (("vs_link", "goodput_vs_receiver_link"),
                                 ("drop_fraction", "data_drop_fraction"),
                                 ("paths_failed", "paths_failed"),
                                 ("rotations", "port_rotations"),
                                 ("p99_vs_ideal", "p99_vs_ideal"), ("jain", "jain_over_senders"),
                                 ("timeouts", "timeouts")):
                expect(f[key] == r.get(raw_key), "%s: %s is the run's %s" % (name, key, raw_key))
            # The timeline figures, recomputed.
            tl, t = r["timeline"], s["timeline"]
            qone = r["config"]["queue_kb"]
            idx = [i for i, x in enumerate(tl["t_us"]) if x <= r["sim_time_us"] + 1e-9] or [0]
            full = [i for i in idx if tl["queue_kb_max"][i] >= 0.9 * qone]
            expect(abs(t["time_queue_full"] - round(len(full) / len(idx), 4)) < 1e-9,
                   "%s: time with a queue full recomputed" % name)
            first = tl["t_us"][full[0]] if full else None
            expect(t["first_full_us"] == first, "%s: first full at %s, recomputed %s" % (
                name, t["first_full_us"], first))
            if full:
                expect(t["inflight_at_first_full_kb"] == tl["inflight_kb_total"][full[0]],
                       "%s: bytes in flight when a queue first filled" % name)
        # The start-up runs are the whole runs' beginning: same samples where the bins meet.
        for n in shapes:
            for hints in ("on", "off"):
                whole = raw["incast_%d_hints_%s" % (n, hints)]
                start = raw["incast_%d_hints_%s_start" % (n, hints)]
                a, b = whole["timeline"], start["timeline"]
                k = int(round(a["bin_us"] / b["bin_us"]))
                limit = min(whole["sim_time_us"], start["sim_time_us"]) - a["bin_us"]
                compared = 0
                for i, t_end in enumerate(a["t_us"]):
                    if t_end > limit:
                        break
                    j = (i + 1) * k - 1
                    if j >= len(b["t_us"]):
                        break
                    compared += 1
                    same = (abs(b["t_us"][j] - t_end) < 1e-6 and
                            abs(a["inflight_kb_total"][i] - b["inflight_kb_total"][j]) < 1e-6 and
                            abs(a["queue_kb_max"][i] - b["queue_kb_max"][j]) < 1e-6 and
                            abs(a["rx_gbps"][i] - sum(b["rx_gbps"][j - k + 1:j + 1]) / k) < 1e-3)
                    if not same:
                        failures.append("incast_%d_hints_%s: the start-up run differs from the "
                                        "whole run at %s us" % (n, hints, t_end))
                        break
                expect(compared > 0, "incast_%d_hints_%s: start-up compared with the run" % (
                    n, hints))
        # Conclusions, recomputed.
        for n in shapes:
            on = runs["incast_%d_hints_on" % n]["figures"]
            off = runs["incast_%d_hints_off" % n]["figures"]
            met = (on["vs_link"] >= 0.9 and on["drop_fraction"] <= 0.01 and
                   on["paths_failed"] == 0 and on["rotations"] == 0 and
                   on["p99_vs_ideal"] <= 2 and on["jain"] >= 0.95)
            said = "%d connections with the hints %s issue 13's targets" % (
                n, "meets" if met else "misses")
            expect(any(c.startswith(said) for c in summary["conclusions"]),
                   "conclusions say: %s" % said)
            expect(said in report, "the report says: %s" % said)
            if on["drop_fraction"] == 0 and off["drop_fraction"] > 0:
                expect("%d connections: the hints removed the drops" % n in report,
                       "the report says the hints removed the drops at %d" % n)
        # Plots: script with a title and labelled axes (a unit), data, SVG; shown with sources.
        figures = re.findall(r"!\[[^\]]*\]\((plots/[^)]+\.svg)\)", report)
        expect(len(figures) == 2 * len(shapes), "two figures per incast (%d)" % len(figures))
        for fig in figures:
            gp = os.path.join(out, fig[:-4] + ".gp")
            text = open(gp).read()
            for setting in ("title", "xlabel", "ylabel"):
                expect(re.search(r"^set %s \"[^\"]+\"" % setting, text, re.M),
                       "%s sets %s" % (gp, setting))
            expect(re.search(r"^set ylabel \"[^\"]*\([^)]*\)", text, re.M),
                   "%s: an axis unit in parentheses" % gp)
            svg = os.path.join(out, fig)
            expect(os.path.getsize(svg) > 1000 and "<svg" in open(svg).read(2000),
                   "%s rendered" % fig)
            expect(os.path.exists(os.path.join(out, fig[:-4] + ".dat")), "%s has data" % fig)
            m = re.search(re.escape(fig) + r"\)\n\n\*[^\n]*Source JSON: ([^\n]*?)\. Script",
                          report)
            expect(m is not None, "the report names the source JSON of %s" % fig)
            if m:
                for src in re.findall(r"`(runs/[^`]+\.json)`", m.group(1)):
                    expect(os.path.isfile(os.path.join(out, src)), "%s exists" % src)
            expect(fig in summary["figures"], "incast.json lists %s" % fig)
        # --report-only: the same report from the runs; refuses runs of other flags.
        proc = subprocess.run([incast, out, "--quick", "--report-only"], env=env,
                              capture_output=True, text=True)
        expect(proc.returncode == 0, "--report-only exited %d: %s" % (proc.returncode,
                                                                     proc.stderr))
        expect(open(os.path.join(out, "incast.md")).read() == report,
               "--report-only wrote the same report")
        proc = subprocess.run([incast, out, "--report-only"], env=env, capture_output=True,
                              text=True)
        expect(proc.returncode != 0 and "not in runs/incast_commands.txt" in proc.stderr,
               "--report-only refused quick runs for a full report")
    finally:
        shutil.rmtree(out, ignore_errors=True)
    for f in failures:
        print("FAIL: " + f)
    print("incast quick: %d problems" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

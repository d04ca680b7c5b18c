#!/usr/bin/env python3
"""Runs tools/eval/run --quick --no-test-run into a temporary directory and checks its outputs:
report.md, summary.json (the headline keys, numeric), the raw JSON of every run, and every plot
(an SVG per gnuplot script; each script sets a title, xlabel and ylabel, and the report names the
figure's source JSON files, which exist). Exit 77 (skip) when gnuplot is missing.

usage: eval_quick_test.py TOOLS_EVAL_RUN MRSIM
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile


def main():
    run, mrsim = sys.argv[1], sys.argv[2]
    gnuplot = os.environ.get("GNUPLOT") or shutil.which("gnuplot")
    if not gnuplot:
        print("SKIP: gnuplot not found")
        return 77
    failures = []

    def expect(cond, what):
        if not cond:
            failures.append(what)
            print("FAIL: " + what)

    with tempfile.TemporaryDirectory(prefix="eval_quick_") as out:
        env = dict(os.environ, MRSIM=mrsim, GNUPLOT=gnuplot)
        proc = subprocess.run([sys.executable, run, "--quick", "--no-test-run", out], env=env,
                              capture_output=True, text=True)
        sys.stdout.write(proc.stdout)
        sys.stderr.write(proc.stderr)
        if proc.returncode != 0:
            print("FAIL: tools/eval/run exited %d" % proc.returncode)
            return 1

        report_path = os.path.join(out, "report.md")
        summary_path = os.path.join(out, "summary.json")
        expect(os.path.isfile(report_path), "report.md written")
        expect(os.path.isfile(summary_path), "summary.json written")
        if failures:
            return 1
        report = open(report_path).read()
        summary = json.load(open(summary_path))

        for key in ("p99_step_loss1_vs_lossless", "gbn_vs_metaroce_p99_loss1"):
            v = summary.get(key)
            expect(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0,
                   "summary.json %s is a positive number (got %r)" % (key, v))
            expect(key in summary.get("pass", {}), "summary.json pass.%s present" % key)
        expect(summary.get("data_errors_all_runs") == 0, "no data errors in any run")

        # Every section, and the machine.
        for heading in ("## Machine", "## 1. Telemetry", "## 2. No reorder buffer",
                        "## 3. Conformance"):
            expect(heading in report, "report has section %r" % heading)
        for item in ("uname", "cpu", "nproc", "date_utc", "git_describe"):
            expect("- %s: `" % item in report, "report states %s" % item)
        expect("not run (--no-test-run)" in report, "conformance section says tests were not run")
        expect("wire_packet" in report or "no meson build directory" in report,
               "conformance section lists the wire tests (or says there is no build)")

        # Raw JSON of every run, each a complete mrsim result.
        runs = os.path.join(out, "runs")
        run_files = [f for f in os.listdir(runs) if f.endswith(".json")]
        expect(len(run_files) >= 20, "at least 20 raw run files (got %d)" % len(run_files))
        commands = open(os.path.join(runs, "commands.txt")).read()
        for f in run_files:
            r = json.load(open(os.path.join(runs, f)))
            expect(r.get("schema") == "mrsim.result.v1", "%s is an mrsim result" % f)
            expect(f[:-5] + ": mrsim " in commands, "commands.txt has the command of %s" % f)
            if f.startswith("step_"):
                st = r.get("step_us")
                expect(isinstance(st, dict) and st.get("count", 0) > 0 and st["p99"] >= st["p50"],
                       "%s has step_us" % f)
        for needed in ("step_metaroce_lossless.json", "step_metaroce_spine_loss_1.json",
                       "step_gbn_spine_loss_1.json", "step_reorder_spine_loss_1.json",
                       "step_metaroce_spine_loss_1_ordered.json", "tel_blackhole.json",
                       "tel_ce_mark.json", "tel_slow.json"):
            expect(needed in run_files, "run %s present" % needed)
        # The telemetry runs show what they are there to show: the blackholed path fails and is
        # rotated with no message lost to it.
        if "tel_blackhole.json" in run_files:
            bh = json.load(open(os.path.join(runs, "tel_blackhole.json")))
            events = bh.get("path_events", {})
            expect(events.get("port_rotations", 0) >= 1 and
                   events.get("by_reason", {}).get("failed", 0) >= 1,
                   "tel_blackhole: the blackholed path failed and was rotated (%r)" % events)
            expect(bh.get("messages_failed") == 0 and bh.get("messages_completed", 0) > 0,
                   "tel_blackhole: every message completed")

        # Plots: a script, data and non-empty SVG each; labelled axes and a title.
        plots = os.path.join(out, "plots")
        scripts = sorted(f for f in os.listdir(plots) if f.endswith(".gp"))
        expect(len(scripts) >= 8, "at least 8 figures (got %d)" % len(scripts))
        figures = re.findall(r"!\[[^\]]*\]\((plots/[^)]+\.svg)\)", report)
        for gp in scripts:
            text = open(os.path.join(plots, gp)).read()
            for setting in ("xlabel", "ylabel", "title"):
                expect(re.search(r"^set %s \"[^\"]+\"" % setting, text, re.M),
                       "%s sets %s" % (gp, setting))
            expect(re.search(r"^set (x|y)label \"[^\"]*\([^)]*\)", text, re.M) is not None,
                   "%s gives an axis unit in parentheses" % gp)
            svg = os.path.join(plots, gp[:-3] + ".svg")
            expect(os.path.isfile(svg) and os.path.getsize(svg) > 1000 and
                   "<svg" in open(svg).read(2000), "%s rendered to SVG" % gp)
            expect("plots/" + gp[:-3] + ".svg" in figures, "report shows %s" % gp[:-3])
        # Every figure names its source JSON files, right after it, and they exist.
        for fig in figures:
            m = re.search(re.escape(fig) + r"\)\n\n\*[^\n]*Source JSON: ([^\n]*?)\. Script", report)
            expect(m is not None, "report names the source JSON of %s" % fig)
            if m:
                srcs = re.findall(r"`(runs/[^`]+\.json)`", m.group(1))
                expect(len(srcs) > 0, "%s has at least one source file" % fig)
                for s in srcs:
                    expect(os.path.isfile(os.path.join(out, s)), "%s source %s exists" % (fig, s))
            expect(fig in summary.get("figures", {}), "summary.json lists %s" % fig)

    if failures:
        print("%d check(s) failed" % len(failures))
        return 1
    print("eval quick: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

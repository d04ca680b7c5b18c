#!/usr/bin/env python3
"""Runs tools/eval/run --quick --no-test-run into a temporary directory and checks its outputs:
report.md, summary.json (the headline keys, numeric), the raw JSON of every run, and every plot
(an SVG per gnuplot script; each script sets a title, xlabel and ylabel, and the report names the
figure's source JSON files, which exist). Exit 77 (skip) when gnuplot is missing.

Then it checks that the report's conclusions are what the figures say: the wording of section 2
against ratios recomputed here from the raw runs, once as measured and once with runs doctored to
say the opposite (rebuilt with --report-only), and section 4's fault and verification wording
against a made-up tools/bench/datapath output (its JSON and log) in both shapes.

usage: eval_quick_test.py TOOLS_EVAL_RUN MRSIM
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

SAME_WITHIN = 0.05  # tools/eval/run's: closer than this is "about the same"


def word(a, b):
    if a > b * (1 + SAME_WITHIN):
        return "more"
    if a < b * (1 - SAME_WITHIN):
        return "less"
    return "same"


def load_run(out, name):
    with open(os.path.join(out, "runs", name + ".json")) as fh:
        return json.load(fh)


def save_run(out, name, doc):
    with open(os.path.join(out, "runs", name + ".json"), "w") as fh:
        json.dump(doc, fh)


def report_only(run, env, out, expect, what):
    proc = subprocess.run([sys.executable, run, "--quick", "--no-test-run", "--report-only", out],
                          env=env, capture_output=True, text=True)
    expect(proc.returncode == 0, "%s: --report-only exited %d: %s" % (
        what, proc.returncode, proc.stderr.strip()[-500:]))
    with open(os.path.join(out, "report.md")) as fh:
        report = fh.read()
    with open(os.path.join(out, "summary.json")) as fh:
        return report, json.load(fh)


def check_section2(out, report, expect, what):
    """Section 2's conclusions against the figures of the runs in OUT, recomputed here."""
    step = lambda n: load_run(out, n)["step_us"]["p99"]
    msg = lambda n: load_run(out, n)["completion_us"]["p99"]
    r1 = step("step_reorder_spine_loss_1") / step("step_metaroce_spine_loss_1")
    r5 = step("step_reorder_spine_loss_5") / step("step_metaroce_spine_loss_5")
    trend = {"more": "grows", "less": "shrinks", "same": "stays about the same"}
    for w, phrase in trend.items():
        said = "its p99 step against MetaRoCE's %s" % phrase in report
        expect(said == (w == word(r5, r1)),
               "%s: the report %s that the reorder buffer's gap %s with loss (x%.3f at 1 %%, "
               "x%.3f at 5 %%)" % (what, "says" if said else "does not say", phrase, r1, r5))
    m1 = msg("step_reorder_spine_loss_1") / msg("step_metaroce_spine_loss_1")
    rel = {"more": "more than", "less": "less than", "same": "about the same as"}[word(m1, r1)]
    expect("MetaRoCE's, %s its step p99" % rel in report,
           "%s: message p99 ratio x%.3f is '%s' the step p99 ratio x%.3f in the report" % (
               what, m1, rel, r1))
    scen = ("lossless", "spine_loss_1")
    steps = {s: step("step_metaroce_%s_ordered" % s) / step("step_metaroce_%s" % s) for s in scen}
    msgs = {s: msg("step_metaroce_%s_ordered" % s) / msg("step_metaroce_%s" % s) for s in scen}
    same = all(word(v, 1.0) == "same" for v in steps.values())
    expect(("within 5 % of unordered everywhere" in report) == same and
           ("more than 5 % from unordered in" in report) == (not same),
           "%s: ordered vs unordered step p99 %r: the report says %s" % (
               what, steps, "the same" if same else "they differ"))
    costs = any(word(v, 1.0) == "more" for v in msgs.values())
    expect(("ordering costs x" in report) == costs and
           ("no cost beyond 5 % in message completion time" in report) == (not costs),
           "%s: ordered vs unordered message p99 %r: the report says ordering %s" % (
               what, msgs, "costs" if costs else "costs nothing"))


def datapath_output(out, loss1_spine, verify_all):
    """A made-up tools/bench/datapath result (its JSON and log, as tools/eval/run saves them)."""
    runs = [("raw_bw", "raw AF_XDP bandwidth", "raw_bw -D 4 --report_gbits", None),
            ("write_bw", "MetaRoCE write bandwidth", "write_bw -D 4 -s 65536 --report_gbits",
             None),
            ("clean_verify", "MetaRoCE write bandwidth, verified",
             "write_bw -D 4 --verify --report_gbits", None),
            ("loss1", "1 % loss", "write_bw -D 4 --verify --report_gbits",
             "mrfabric fault %s --plane all drop 1" % loss1_spine),
            ("blackhole", "spine 1 blackholed mid-run", "write_bw -D 5 --verify --report_gbits",
             "mrfabric fault 1 --plane all blackhole on --udp-dport 4792"),
            ("metaroce_loss1", "MetaRoCE, 1 % loss on every spine",
             "write_bw -D 4 --verify --report_gbits --paths 8", "mrfabric fault all --plane all "
             "drop 1"),
            ("gbn_loss1", "go-back-N, 1 % loss on every spine",
             "write_bw -D 4 --verify --report_gbits --transport gbn -q 8 --paths 1",
             "mrfabric fault all --plane all drop 1")]
    log, dropped = [], {}
    for i, (key, label, args, fault) in enumerate(runs):
        if verify_all and "--verify" not in args:
            args += " --verify"
        log.append("== %s: mrperf %s --interface pl0,pl1 -p 18515" % (label, args))
        if fault:
            dropped[key] = 100 + 17 * i
            log.append("%s: %d packets dropped (the fault program's counters)" % (fault,
                                                                                 dropped[key]))
        log.append(" #bytes     #iterations    BW peak[Gb/sec]")
    gbps = {k + "_gbps": 1.0 + i / 10 for i, (k, _, _, _) in enumerate(runs)}
    gbps["udp_bw_gbps"] = 0.5
    doc = {"version": 1, "bw_vs_raw": 0.9, "lat_vs_raw": 1.2, "loss1_vs_clean": 0.8,
           "metaroce_vs_gbn_loss1": 2.5, "blackhole_failed_ops": 0, "data_errors": 0,
           "raw": dict(gbps, fault_dropped=dropped, retransmits={}),
           "eval_command": "BENCH_SECONDS=4 tools/bench/datapath"}
    save_run(out, "fabric_datapath", doc)
    with open(os.path.join(out, "runs", "fabric_datapath.log"), "w") as fh:
        fh.write("\n".join(log) + "\n")


def check_conclusions(run, env, out, expect):
    with open(os.path.join(out, "report.md")) as fh:
        check_section2(out, fh.read(), expect, "as measured")

    # The same figures doctored to say the opposite: the wording must follow them.
    r1 = load_run(out, "step_reorder_spine_loss_1")["step_us"]["p99"] / \
        load_run(out, "step_metaroce_spine_loss_1")["step_us"]["p99"]
    for name, field, factor in (
            # the reorder buffer's gap at 5 % becomes half (or double) the gap at 1 %
            ("step_reorder_spine_loss_5", "step_us", None),
            # ordering now lengthens the lossless step by half, and costs messages nothing
            ("step_metaroce_lossless_ordered", "step_us", 1.5),
            ("step_metaroce_spine_loss_1_ordered", "completion_us", 1.0),
            ("step_metaroce_lossless_ordered", "completion_us", 1.0)):
        doc = load_run(out, name)
        if factor is None:
            m5 = load_run(out, "step_metaroce_spine_loss_5")["step_us"]["p99"]
            r5 = doc["step_us"]["p99"] / m5
            doc["step_us"]["p99"] = m5 * r1 * (0.5 if word(r5, r1) != "less" else 2.0)
        else:
            base = load_run(out, name.replace("_ordered", ""))[field]["p99"]
            doc[field]["p99"] = base * factor
        save_run(out, name, doc)
    report, summary = report_only(run, env, out, expect, "doctored runs")
    check_section2(out, report, expect, "doctored runs")
    expect(summary.get("ordered_vs_unordered", {}).get("step_same") is False,
           "doctored runs: summary.json says ordered steps differ")

    # Section 4 from a made-up datapath bench output: loss on one spine, runs without --verify.
    datapath_output(out, 0, verify_all=False)
    report, summary = report_only(run, env, out, expect, "fabric, one spine, partly verified")
    report = report[report.find("## 4."):report.find("## Runs")]
    expect("goodput with 1 % loss on spine 0 of each plane vs clean" in report,
           "section 4 places the loss1 fault on spine 0 of each plane")
    expect("every spine" not in re.sub(r"MetaRoCE vs go-back-N goodput, [^|]*", "", report),
           "section 4 says 'every spine' only where the fault was on every spine")
    expect("not in raw AF_XDP bandwidth, MetaRoCE write bandwidth" in report and
           "every run verified" not in report and "every byte" not in report,
           "section 4 names the runs that did not verify their bytes")
    expect((summary.get("fabric") or {}).get("faults", {}).get("loss1", {}).get("words") ==
           "1 % loss on spine 0 of each plane", "summary.json has the loss1 fault's place")
    # ... and on every spine, every run verified.
    datapath_output(out, "all", verify_all=True)
    report, _ = report_only(run, env, out, expect, "fabric, every spine, all verified")
    report = report[report.find("## 4."):report.find("## Runs")]
    expect("goodput with 1 % loss on every spine of every plane vs clean" in report,
           "section 4 says every spine when the loss1 fault was on every spine")
    expect("every run verified its bytes" in report, "section 4 says every run verified")


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
        expect("not run (--no-test-run" in report, "conformance section says the suite was not run")
        conf = summary.get("conformance") or {}
        expect(conf.get("tests", 0) >= 80 and conf.get("musts", {}).get("statements", 0) > 0,
               "summary.json conformance counts mrconform's tests and the spec's MUSTs (got %r)"
               % {k: conf.get(k) for k in ("tests", "musts")})
        expect("mrconform" in report and "are checked" in report,
               "conformance section reports mrconform and the MUSTs it checks")

        # Raw JSON of every run, each a complete mrsim result.
        runs = os.path.join(out, "runs")
        run_files = [f for f in os.listdir(runs) if f.endswith(".json")]
        expect(len(run_files) >= 20, "at least 20 raw run files (got %d)" % len(run_files))
        commands = open(os.path.join(runs, "commands.txt")).read()
        # Section 5's runs (tools/eval/scale) are cluster results with their own command list;
        # tests/eval/scale_quick_test.py checks them and their report.
        # Section 6's (tools/eval/incast) likewise; tests/eval/incast_quick_test.py checks them.
        scale_commands = open(os.path.join(runs, "scale_commands.txt")).read()
        incast_commands = open(os.path.join(runs, "incast_commands.txt")).read()
        for f in run_files:
            r = json.load(open(os.path.join(runs, f)))
            for prefix, listed, listing in (("scale_", scale_commands, "scale_commands.txt"),
                                            ("incast_", incast_commands, "incast_commands.txt")):
                if f.startswith(prefix):
                    expect(r.get("schema") == "mrsim.cluster.v1",
                           "%s is an mrsim cluster result" % f)
                    expect(f[:-5] + ": mrsim " in listed,
                           "%s has the command of %s" % (listing, f))
                    break
            else:
                prefix = None
            if prefix:
                continue
            expect(r.get("schema") == "mrsim.result.v1", "%s is an mrsim result" % f)
            expect(f[:-5] + ": mrsim " in commands, "commands.txt has the command of %s" % f)
            if f.startswith("step_"):
                st = r.get("step_us")
                expect(isinstance(st, dict) and st.get("count", 0) > 0 and st["p99"] >= st["p50"],
                       "%s has step_us" % f)
        expect(summary.get("scale") is not None and "## 5. At scale" in report,
               "section 5 (scale) is in the report and in summary.json")
        expect(summary.get("incast") is not None and "## 6. Incast over time" in report,
               "section 6 (incast) is in the report and in summary.json")
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

        check_conclusions(run, env, out, expect)

    if failures:
        print("%d check(s) failed" % len(failures))
        return 1
    print("eval quick: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Runs tools/eval/scale --quick into a temporary directory and checks its outputs: scale.md,
scale.json, every run's JSON and every plot; then that the report's conclusions are what the
figures say: the MetaRoCE / baseline ratios recomputed here from the raw runs, the lists of
cases where MetaRoCE wins and loses, the runs that did not complete, and the data errors; and
that --report-only rebuilds the same report from the runs. Exit
77 (skip) when gnuplot is missing.

usage: scale_quick_test.py TOOLS_EVAL_SCALE MRSIM
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile


def main():
    scale, mrsim = sys.argv[1], sys.argv[2]
    if not (os.environ.get("GNUPLOT") or shutil.which("gnuplot")):
        print("gnuplot missing: skipped")
        return 77
    failures = []
    out = tempfile.mkdtemp(prefix="scale-quick-")
    try:
        env = dict(os.environ, MRSIM=mrsim)
        proc = subprocess.run([scale, out, "--quick"], env=env, capture_output=True, text=True)
        if proc.returncode != 0:
            print(proc.stderr)
            print("FAIL: tools/eval/scale exited %d" % proc.returncode)
            return 1
        with open(os.path.join(out, "scale.json")) as fh:
            summary = json.load(fh)
        report = open(os.path.join(out, "scale.md")).read()
        runs = summary["runs"]
        if len(runs) != 3 * 6 * 3:
            failures.append("expected 54 runs, got %d" % len(runs))
        data_errors = 0
        for name, fig in runs.items():
            with open(os.path.join(out, "runs", name + ".json")) as fh:
                raw = json.load(fh)
            data_errors += raw["data_errors"]
            if raw["step_us"]["p99"] != fig["step_p99_us"]:
                failures.append("%s: summary's p99 is not the run's" % name)
            if raw["bytes_verified"] == 0:
                failures.append("%s: verified no byte" % name)
        if data_errors != summary["data_errors_all_runs"]:
            failures.append("data errors: summary %d, runs %d" % (
                summary["data_errors_all_runs"], data_errors))
        if "Data errors over all 54 runs: %d." % data_errors not in report:
            failures.append("the report misstates the data errors")
        # The ratios and the win / lose lists, recomputed.
        wins, loses = 0, 0
        for base, key in (("gbn_pfc", "metaroce_vs_gbn_pfc_step_p99"),
                          ("reorder", "metaroce_vs_reorder_step_p99")):
            for w, per in summary[key].items():
                for s, r in per.items():
                    m = runs["scale_%s_%s_metaroce" % (w, s)]
                    b = runs["scale_%s_%s_%s" % (w, s, base)]
                    if not (m["completed_all"] and b["completed_all"]):
                        if r is not None:
                            failures.append("%s/%s vs %s: a ratio for an incomplete run" % (w, s, base))
                        continue
                    want = round(m["step_p99_us"] / b["step_p99_us"], 3)
                    if r != want:
                        failures.append("%s/%s vs %s: ratio %s, recomputed %s" % (w, s, base, r, want))
                    wins += want < 0.95
                    loses += want > 1.05
        if wins != len(summary["metaroce_wins"]) or loses != len(summary["metaroce_loses"]):
            failures.append("wins/loses: summary %d/%d, recomputed %d/%d" % (
                len(summary["metaroce_wins"]), len(summary["metaroce_loses"]), wins, loses))
        for label, n in (("faster than", wins), ("slower than", loses)):
            said = ("%s the baseline (by more than 5 %%) in %d case%s" % (label, n, "" if n == 1 else "s")
                    if n else "never %s a baseline" % label)
            if said not in report:
                failures.append("the report does not say MetaRoCE is %s in %d cases" % (label, n))
        incomplete = sorted(k for k, f in runs.items() if not f["completed_all"])
        if len(incomplete) != len(summary["did_not_complete"]):
            failures.append("did_not_complete does not match the runs")
        for w in ("permutation", "alltoall", "allreduce"):
            svg = os.path.join(out, "plots", "scale_%s.svg" % w)
            if not os.path.exists(svg) or os.path.getsize(svg) == 0:
                failures.append("no plot %s" % svg)
            if "plots/scale_%s.svg" % w not in report:
                failures.append("the report does not show plots/scale_%s.svg" % w)
        # --report-only rebuilds the same report from the runs, running nothing; and refuses
        # runs whose recorded command is not the one it would run.
        proc = subprocess.run([scale, out, "--quick", "--report-only"], env=env,
                              capture_output=True, text=True)
        if proc.returncode != 0:
            failures.append("--report-only exited %d: %s" % (proc.returncode, proc.stderr))
        elif open(os.path.join(out, "scale.md")).read() != report:
            failures.append("--report-only wrote another report")
        proc = subprocess.run([scale, out, "--report-only"], env=env, capture_output=True,
                              text=True)
        if proc.returncode == 0 or "not in runs/scale_commands.txt" not in proc.stderr:
            failures.append("--report-only accepted quick runs for a full report")
    finally:
        shutil.rmtree(out, ignore_errors=True)
    for f in failures:
        print("FAIL: " + f)
    print("scale quick: %d problems" % len(failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

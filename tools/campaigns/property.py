"""The property test of the protocol core over a seed range, on every CPU.

Runs $MRPROPERTY (default build/tests/property/connection_property_test) over [FROM, FROM+SEEDS)
in chunks, JOBS processes at a time, with no stop at any number of failures; runs the named
regression seeds (Connection_Property.RegressionSeedsPass) once alongside. JSON summary last on
stdout:
  seeds, from, jobs, chunk      what was asked and how it was split
  seeds_completed               seeds a chunk reported as run ("property: N seeds from S")
  failures                      failing seeds + crashed chunks
  failing_seeds                 [{seed, reason}], from the test's "seed S: reason" lines
  crashed_chunks                [{from, seeds, reason}]: a chunk killed by a signal, timed out,
                                or exiting without the lines that account for its exit status;
                                rerun with MR_PROPERTY_FROM=from MR_PROPERTY_SEEDS=seeds
  regression_seeds_passed       bool; regression_failures [{seed, what, reason}]
  wall_s, seeds_per_s
A failure reproduces alone: MR_PROPERTY_SEED=S (MR_PROPERTY_VERBOSE=1 for the packet trace).
"""
import concurrent.futures
import os
import re
import signal
import subprocess
import sys
import time

from campaigns import common

SWEEP_FILTER = "Connection_Property.EveryMessageCompletesOnceWithTheRightBytes"
REGRESSION_FILTER = "Connection_Property.RegressionSeedsPass"

SEED_LINE = re.compile(r"^seed (\d+): (.*)$")
SUMMARY_LINE = re.compile(r"^property: (\d+) seeds from (\d+), (\d+) failed$")
REGRESSION_LINE = re.compile(r"^regression seed (\d+) \((.*)\)$")
WHICH_IS_LINE = re.compile(r'^\s*Which is: "(.*)"$')


def add_arguments(parser):
    parser.add_argument("--seeds", type=common.positive_int, required=True,
                        help="how many seeds")
    parser.add_argument("--from", dest="first", type=common.positive_int, default=1,
                        help="first seed (default 1)")
    parser.add_argument("--jobs", "-j", type=common.positive_int, default=common.default_jobs(),
                        help="parallel processes (default: every CPU)")
    parser.add_argument("--chunk", type=common.positive_int, default=None,
                        help="seeds per process (default: about 20 chunks per job, at most 5000)")
    parser.add_argument("--chunk-timeout", type=float, default=1800.0,
                        help="seconds before a chunk counts as hung and crashed (default 1800)")
    parser.add_argument("--no-regression", action="store_true",
                        help="skip the named regression seeds")


def describe_exit(returncode):
    if returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit status {returncode}"


def last_lines(text, n=3):
    lines = [l for l in text.splitlines() if l.strip()]
    return " | ".join(lines[-n:]) or "(no output)"


def run_process(binary, env_extra, gtest_filter, timeout):
    env = dict(os.environ)
    env.update(env_extra)
    proc = subprocess.Popen([binary, f"--gtest_filter={gtest_filter}"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            errors="replace")
    try:
        out, err = proc.communicate(timeout=timeout)
        return proc.returncode, out, err, False
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        return proc.returncode, out, err, True


def run_chunk(binary, first, count, timeout):
    """Runs seeds [first, first+count); returns (seeds run, [(seed, reason)], crash or None).

    A chunk is trusted only when its output accounts for its exit status: the summary line names
    exactly the range asked for, one "seed S: reason" line per failure it counts, and the status
    is 0 with no failure or 1 (gtest's) with some. Anything else is a crash of the whole range.
    """
    rc, out, err, timed_out = run_process(
        binary, {"MR_PROPERTY_FROM": str(first), "MR_PROPERTY_SEEDS": str(count),
                 "MR_PROPERTY_MAX_FAILURES": "0"},
        SWEEP_FILTER, timeout)
    failing = []
    summary = None
    for line in err.splitlines():
        m = SEED_LINE.match(line)
        if m:
            failing.append((int(m.group(1)), m.group(2)))
            continue
        m = SUMMARY_LINE.match(line)
        if m:
            summary = tuple(int(g) for g in m.groups())
    crash = None
    if timed_out:
        crash = f"timed out after {timeout:.0f} s"
    elif summary is None:
        crash = (f"{describe_exit(rc)} without the summary line; "
                 f"last output: {last_lines(err or out)}")
    elif summary[:2] != (count, first):
        crash = (f"ran {summary[0]} seeds from {summary[1]}, asked {count} from {first} "
                 f"({describe_exit(rc)})")
    elif summary[2] != len(failing):
        crash = f"counted {summary[2]} failures but named {len(failing)} ({describe_exit(rc)})"
    elif (rc == 0) != (summary[2] == 0) or rc not in (0, 1):
        crash = (f"{describe_exit(rc)} with {summary[2]} failures; "
                 f"last output: {last_lines(err or out)}")
    seeds_run = summary[0] if summary is not None and crash is None else 0
    return seeds_run, failing, crash


def run_regression(binary, timeout):
    """(passed, [{seed, what, reason}], problem or None) of RegressionSeedsPass."""
    rc, out, err, timed_out = run_process(binary, {}, REGRESSION_FILTER, timeout)
    failures = []
    reason = None
    for line in out.splitlines():
        m = WHICH_IS_LINE.match(line)
        if m:
            reason = m.group(1)
            continue
        m = REGRESSION_LINE.match(line)
        if m:
            failures.append({"seed": int(m.group(1)), "what": m.group(2), "reason": reason})
            reason = None
    ran = "[  PASSED  ] 1 test." in out or "[  FAILED  ] 1 test," in out
    problem = None
    if timed_out:
        problem = f"timed out after {timeout:.0f} s"
    elif not ran:
        problem = (f"the regression test did not run ({describe_exit(rc)}): "
                   f"{last_lines(err or out)}")
    elif rc not in (0, 1) or (rc == 1) != bool(failures):
        problem = f"{describe_exit(rc)} with {len(failures)} failing seeds named"
    passed = rc == 0 and ran and not failures and problem is None
    return passed, failures, problem


def run(args):
    binary = common.from_env("MRPROPERTY", "build", "tests", "property",
                             "connection_property_test")
    if not os.access(binary, os.X_OK):
        print(f"campaign property: {binary} not found: build it with `meson compile -C build "
              f"tests/property/connection_property_test` (or set MRPROPERTY to the binary)",
              file=sys.stderr)
        return common.EXIT_CANNOT_RUN
    jobs = args.jobs
    chunk = args.chunk or max(1, min(5000, -(-args.seeds // (jobs * 20))))
    ranges = [(s, min(chunk, args.first + args.seeds - s))
              for s in range(args.first, args.first + args.seeds, chunk)]

    progress = common.Progress("property")
    progress.note(f"{args.seeds} seeds from {args.first} in {len(ranges)} chunks of up to "
                  f"{chunk}, {jobs} processes, {binary}")
    start = time.monotonic()
    done = 0
    completed = 0
    failing = []
    crashed = []
    regression = None
    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {}
        if not args.no_regression:
            futures[pool.submit(run_regression, binary, args.chunk_timeout)] = None
        for r in ranges:
            futures[pool.submit(run_chunk, binary, r[0], r[1], args.chunk_timeout)] = r
        try:
            for future in concurrent.futures.as_completed(futures):
                r = futures[future]
                if r is None:
                    regression = future.result()
                    passed, failures, problem = regression
                    progress.note("regression seeds: " + (
                        "passed" if passed else
                        f"{len(failures)} failed ({', '.join(str(f['seed']) for f in failures)})"
                        + (f"; {problem}" if problem else "")))
                    continue
                seeds_run, chunk_failing, crash = future.result()
                done += r[1]
                completed += seeds_run
                for seed, reason in chunk_failing:
                    progress.note(f"seed {seed}: {reason}")
                failing.extend(chunk_failing)
                if crash is not None:
                    progress.note(f"chunk of {r[1]} seeds from {r[0]} crashed: {crash}")
                    crashed.append({"from": r[0], "seeds": r[1], "reason": crash})
                rate, left = common.rate_and_eta(done, args.seeds, time.monotonic() - start)
                progress.update(
                    f"{done}/{args.seeds} seeds ({100.0 * done / args.seeds:.0f} %), "
                    f"{len(failing) + len(crashed)} failed, {rate:.0f} seeds/s"
                    + (f", {common.format_duration(left)} left" if left is not None else ""),
                    force=done == args.seeds)
        except BaseException:
            for f in futures:
                f.cancel()
            raise
    progress.finish()
    wall = time.monotonic() - start
    failing.sort()
    summary = {
        "mode": "property",
        "binary": binary,
        "seeds": args.seeds,
        "from": args.first,
        "jobs": jobs,
        "chunk": chunk,
        "seeds_completed": completed,
        "failures": len(failing) + len(crashed),
        "failing_seeds": [{"seed": s, "reason": r} for s, r in failing],
        "crashed_chunks": sorted(crashed, key=lambda c: c["from"]),
        "regression_seeds_passed": None if regression is None else regression[0],
        "regression_failures": [] if regression is None else regression[1],
        "regression_problem": None if regression is None else regression[2],
        "wall_s": round(wall, 3),
        "seeds_per_s": round(args.seeds / wall, 1) if wall > 0 else None,
    }
    common.emit_summary(summary)
    found = summary["failures"] > 0 or (regression is not None and not regression[0])
    return common.EXIT_FOUND if found else common.EXIT_CLEAN

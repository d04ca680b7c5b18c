"""Every libFuzzer target, one after the other, each on every CPU.

Runs the *_fuzzer binaries of $FUZZ_BUILD/tests/fuzz/ (default build-fuzz/, docs/fuzzing.md says
how to build it; this command builds nothing) for MINUTES in all, split between the targets in
proportion to their --weight (1 each by default). Each target runs as JOBS libFuzzer processes on
one corpus (--engine workers, the default: plain processes that reload each other's new inputs,
each restarted after a crash for the time left) or as libFuzzer's -fork=JOBS -ignore_crashes=1
(--engine fork). A crash is recorded and fuzzing goes on. The corpus lives outside the source
tree, in $FUZZ_WORK (default /var/tmp/metaroce-fuzz)/<target>/corpus, seeded from
tests/fuzz/corpus/<target>/ and kept between campaigns; crashes, timeouts and out-of-memory
inputs land in <target>/artifacts/, libFuzzer's output in <target>/fuzz-<worker>.log (workers) or
<target>/fuzz.log (fork). JSON summary last on stdout, per target:
  execs, execs_per_s, seconds     executions of the target's entry point (libFuzzer's count)
  crashes, crash_files            crash-* and leak-* inputs written during this campaign
  timeouts, ooms                  the same for timeout-* / oom-* (listed apart; they fail the
                                  campaign too: an input that hangs or grows without bound is a
                                  defect of the code under test, or of the harness)
  coverage {cov, ft}              libFuzzer's edge coverage and features at the end
  corpus_size, new_inputs         files in the corpus after / added during the campaign
and totals. A crash reproduces with `build-fuzz/tests/fuzz/<target>_fuzzer FILE`.
Undefined behaviour is a crash: the targets run with UBSAN_OPTIONS=halt_on_error=1 (and the build
hint adds -fno-sanitize-recover=all), so UBSan stops at its first report and libFuzzer keeps the
input, where by default it would print and go on, uncounted. Exit status 1 when any target
crashed, timed out, ran out of memory or ended without a status.
"""
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time

from campaigns import common

BUILD_HINT = ("CXX=clang++ CC=clang meson setup build-fuzz --wrap-mode=nodownload -Dfuzzers=true "
              "-Dbuildtype=debugoptimized -Db_sanitize=address,undefined -Db_lundef=false "
              "-Dcpp_args=-fno-sanitize-recover=all && meson compile -C build-fuzz "
              "(docs/fuzzing.md)")

# Sanitizer settings of every libFuzzer process: undefined behaviour stops the run like a crash
# (UBSan's default is to print and go on), with a stack; the caller's own options come after.
SANITIZER_ENV = {
    "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1",
    "ASAN_OPTIONS": "abort_on_error=1",
}


def fuzz_environment():
    env = dict(os.environ)
    for name, value in SANITIZER_ENV.items():
        env[name] = value + (":" + env[name] if env.get(name) else "")
    return env

# Fork mode's status line, printed by the parent each time a job ends:
#   #123456: cov: 1234 ft: 5678 corp: 901 exec/s 2345 oom/timeout/crash: 0/0/0 time: 61s job: 7 ...
FORK_STATUS = re.compile(
    r"^#(\d+): cov: (\d+) ft: (\d+) corp: (\d+) exec/s:? (\d+) "
    r"oom/timeout/crash: (\d+)/(\d+)/(\d+) time: (\d+)s")
ARTIFACT_KINDS = {"crash": "crashes", "leak": "crashes", "timeout": "timeouts", "oom": "ooms"}


def add_arguments(parser):
    parser.add_argument("--minutes", type=float, required=True,
                        help="the whole campaign's duration, split evenly between the targets")
    parser.add_argument("--jobs", "-j", type=common.positive_int, default=common.default_jobs(),
                        help="libFuzzer -fork processes per target (default: every CPU)")
    parser.add_argument("--targets", nargs="+", metavar="TARGET",
                        help="only these targets (names without _fuzzer, e.g. parse connection)")
    parser.add_argument("--weight", action="append", default=[], metavar="TARGET=W",
                        help="give TARGET W shares of the time (default 1 each), e.g. "
                             "--weight connection=4: slow targets need more (repeatable)")
    parser.add_argument("--engine", choices=("workers", "fork"), default="workers",
                        help="workers: JOBS plain libFuzzer processes on one corpus, restarted "
                             "after a crash (default; no per-job start-up); fork: libFuzzer's "
                             "-fork=JOBS -ignore_crashes=1")
    parser.add_argument("--timeout", type=int, default=30,
                        help="seconds one input may take before it counts as a timeout "
                             "(default 30)")
    parser.add_argument("--work", default=None,
                        help="work directory (default $FUZZ_WORK, else /var/tmp/metaroce-fuzz)")
    parser.add_argument("--extra", action="append", default=[], metavar="FLAG",
                        help="one more libFuzzer flag, e.g. --extra=-max_len=4096 (repeatable)")


def find_targets(fuzz_dir, wanted):
    if not os.path.isdir(fuzz_dir):
        raise common.CannotRun(f"{fuzz_dir} does not exist: build the fuzzers first: {BUILD_HINT}")
    found = sorted(n[:-len("_fuzzer")] for n in os.listdir(fuzz_dir)
                   if n.endswith("_fuzzer") and os.access(os.path.join(fuzz_dir, n), os.X_OK))
    if not found:
        raise common.CannotRun(f"no *_fuzzer binary in {fuzz_dir}: build them: {BUILD_HINT}")
    if not wanted:
        return found
    missing = [t for t in wanted if t not in found]
    if missing:
        raise common.CannotRun(f"no such target(s) in {fuzz_dir}: {', '.join(missing)} "
                               f"(there: {', '.join(found)})")
    return list(wanted)


def parse_weights(specs, targets):
    weights = {t: 1.0 for t in targets}
    for spec in specs:
        name, _, value = spec.partition("=")
        if name not in weights:
            raise common.CannotRun(f"--weight {spec}: no target {name} in this campaign "
                                   f"({', '.join(targets)})")
        try:
            weights[name] = float(value)
        except ValueError:
            raise common.CannotRun(f"--weight {spec}: expected TARGET=NUMBER") from None
        if weights[name] <= 0:
            raise common.CannotRun(f"--weight {spec}: the weight must be positive")
    return weights


def list_files(directory):
    try:
        return {n for n in os.listdir(directory) if os.path.isfile(os.path.join(directory, n))}
    except FileNotFoundError:
        return set()


def seed_corpus(seed_dir, corpus_dir):
    """Copies the seed inputs the work corpus lacks; returns how many there are."""
    os.makedirs(corpus_dir, exist_ok=True)
    seeds = sorted(list_files(seed_dir))
    for name in seeds:
        dest = os.path.join(corpus_dir, name)
        if not os.path.exists(dest):
            shutil.copyfile(os.path.join(seed_dir, name), dest)
    return len(seeds)


class TargetRun:
    """One target's libFuzzer process: reads its output as it comes (for progress and figures)."""

    def __init__(self, name, binary, work, seconds, args):
        self.name = name
        self.binary = binary
        self.seconds = seconds
        self.dir = os.path.join(work, name)
        self.corpus = os.path.join(self.dir, "corpus")
        self.artifacts = os.path.join(self.dir, "artifacts")
        self.log_path = os.path.join(self.dir, "fuzz.log")
        os.makedirs(self.artifacts, exist_ok=True)
        self.seeds = seed_corpus(common.repo_path("tests", "fuzz", "corpus", name), self.corpus)
        self.corpus_before = len(list_files(self.corpus))
        self.artifacts_before = list_files(self.artifacts)
        self.command = [binary, f"-fork={args.jobs}", "-ignore_crashes=1", "-ignore_timeouts=1",
                        "-ignore_ooms=1", f"-max_total_time={max(1, int(seconds))}",
                        f"-timeout={args.timeout}", f"-artifact_prefix={self.artifacts}/",
                        "-print_final_stats=1", *args.extra, self.corpus]
        self.status = None  # the last fork status line's figures
        self.engine = "fork"

    def run(self, progress, label):
        start = time.monotonic()
        # Our own deadline past libFuzzer's: a job stuck beyond it is killed with its group.
        deadline = start + self.seconds + max(60, args_timeout_grace(self.seconds))
        with open(self.log_path, "w") as log:
            log.write(" ".join(self.command) + "\n")
            proc = subprocess.Popen(self.command, cwd=self.dir, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True, errors="replace",
                                    start_new_session=True, env=fuzz_environment())
            killer = threading.Timer(max(0, deadline - time.monotonic()),
                                     lambda: os.killpg(proc.pid, signal.SIGKILL))
            killer.daemon = True
            killer.start()
            try:
                for line in proc.stdout:
                    log.write(line)
                    m = FORK_STATUS.match(line)
                    if m:
                        self.status = [int(g) for g in m.groups()]
                    elapsed = time.monotonic() - start
                    progress.update(self.describe(label, elapsed))
                proc.wait()
            except BaseException:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                raise
            finally:
                killer.cancel()
        self.returncode = proc.returncode
        self.wall = time.monotonic() - start

    def describe(self, label, elapsed):
        text = (f"{label} {common.format_duration(elapsed)} of "
                f"{common.format_duration(self.seconds)}")
        if self.status:
            execs, cov, ft, corp, rate, oom, timeout, crash = self.status[:8]
            text += (f", {common.format_count(execs)} execs, {rate} exec/s, cov {cov} ft {ft}, "
                     f"corpus {corp}, crash/timeout/oom {crash}/{timeout}/{oom}")
        return text

    def figures(self):
        """(executions, {cov, ft} or None) from the last fork status line."""
        if not self.status:
            return 0, None
        return self.status[0], {"cov": self.status[1], "ft": self.status[2]}

    def summary(self):
        new_artifacts = sorted(list_files(self.artifacts) - self.artifacts_before)
        counts = {"crashes": [], "timeouts": [], "ooms": []}
        for name in new_artifacts:
            kind = ARTIFACT_KINDS.get(name.split("-", 1)[0])
            if kind:
                counts[kind].append(os.path.join(self.artifacts, name))
        execs, coverage = self.figures()
        problem = None
        if coverage is None:
            problem = (f"libFuzzer reported no status ({describe_exit(self.returncode)}); "
                       f"see {self.log_path}")
        elif self.returncode not in (0,) and not counts["crashes"]:
            problem = f"libFuzzer ended with {describe_exit(self.returncode)}; see {self.log_path}"
        corpus_after = len(list_files(self.corpus))
        return {
            "binary": self.binary,
            "engine": self.engine,
            "seconds": round(self.wall, 1),
            "execs": execs,
            "execs_per_s": round(execs / self.wall, 1) if self.wall > 0 else None,
            "crashes": len(counts["crashes"]),
            "crash_files": counts["crashes"],
            "timeouts": len(counts["timeouts"]),
            "ooms": len(counts["ooms"]),
            "artifact_files": counts["timeouts"] + counts["ooms"],
            "coverage": coverage,
            "corpus_size": corpus_after,
            "new_inputs": corpus_after - self.corpus_before,
            "corpus_dir": self.corpus,
            "log": self.log_path,
            "problem": problem,
        }


class WorkersRun(TargetRun):
    """JOBS plain libFuzzer processes on one corpus directory (each reloads what the others add),
    each restarted after a crash for the time left: no fork-mode job overhead, exact counts."""

    NORMAL = re.compile(r"^#(\d+)\s+\w+\s+cov: (\d+) ft: (\d+) ")
    FINAL = re.compile(r"^stat::number_of_executed_units: (\d+)")

    def __init__(self, name, binary, work, seconds, args):
        super().__init__(name, binary, work, seconds, args)
        self.engine = "workers"
        self.jobs = args.jobs
        self.base = [binary, f"-timeout={args.timeout}", f"-artifact_prefix={self.artifacts}/",
                     "-print_final_stats=1", *args.extra, self.corpus]
        self.lock = threading.Lock()
        self.done_execs = 0          # of finished processes
        self.running = {}            # worker -> executions its current process reported so far
        self.cov = self.ft = None
        self.failures = []           # exits that were neither a clean end nor a crash with a file

    def worker(self, index, deadline):
        log_path = os.path.join(self.dir, f"fuzz-{index}.log")
        with open(log_path, "w") as log:
            while True:
                left = int(deadline - time.monotonic())
                if left < 1:
                    return
                before = list_files(self.artifacts)
                cmd = [self.base[0], f"-max_total_time={left}", *self.base[1:]]
                log.write(" ".join(cmd) + "\n")
                started = time.monotonic()
                proc = subprocess.Popen(cmd, cwd=self.dir, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True, errors="replace",
                                        start_new_session=True, env=fuzz_environment())
                killer = threading.Timer(left + 60, lambda: os.killpg(proc.pid, signal.SIGKILL))
                killer.daemon = True
                killer.start()
                seen = final = 0
                try:
                    for line in proc.stdout:
                        log.write(line)
                        m = self.NORMAL.match(line)
                        if m:
                            seen = int(m.group(1))
                            with self.lock:
                                self.running[index] = seen
                                self.cov = max(self.cov or 0, int(m.group(2)))
                                self.ft = max(self.ft or 0, int(m.group(3)))
                        m = self.FINAL.match(line)
                        if m:
                            final = int(m.group(1))
                    proc.wait()
                finally:
                    killer.cancel()
                    if proc.poll() is None:
                        os.killpg(proc.pid, signal.SIGKILL)
                        proc.wait()
                with self.lock:
                    self.running[index] = 0
                    self.done_execs += max(seen, final)
                crashed = bool(list_files(self.artifacts) - before)
                if proc.returncode != 0 and not crashed:
                    self.failures.append(f"worker {index}: {describe_exit(proc.returncode)}, "
                                         f"no artifact; see {log_path}")
                    if time.monotonic() - started < 5:
                        return  # would fail again at once

    def execs_so_far(self):
        with self.lock:
            return self.done_execs + sum(self.running.values())

    def run(self, progress, label):
        start = time.monotonic()
        deadline = start + self.seconds
        threads = []
        errors = []

        def guarded(i):
            try:
                self.worker(i, deadline)
            except BaseException as e:  # re-raised below: a lost worker must not pass silently
                errors.append(e)

        for i in range(self.jobs):
            t = threading.Thread(target=guarded, args=(i,), daemon=True)
            t.start()
            threads.append(t)
        while any(t.is_alive() for t in threads):
            for t in threads:
                t.join(timeout=1.0)
            progress.update(self.describe(label, time.monotonic() - start))
        if errors:
            raise errors[0]
        self.returncode = 0 if not self.failures else 1
        self.wall = time.monotonic() - start
        with open(self.log_path, "w") as log:
            log.write("".join(f"{f}\n" for f in self.failures) or "see fuzz-<worker>.log\n")

    def describe(self, label, elapsed):
        execs = self.execs_so_far()
        text = (f"{label} {common.format_duration(elapsed)} of "
                f"{common.format_duration(self.seconds)}, {common.format_count(execs)} execs, "
                f"{execs / elapsed if elapsed > 0 else 0:.0f} exec/s")
        if self.cov is not None:
            text += f", cov {self.cov} ft {self.ft}"
        return text

    def figures(self):
        if self.cov is None:
            return self.done_execs, None
        return self.done_execs, {"cov": self.cov, "ft": self.ft}


def args_timeout_grace(seconds):
    # libFuzzer lets its running jobs finish after max_total_time; they are bounded by it too.
    return seconds * 0.1


def describe_exit(returncode):
    if returncode is not None and returncode < 0:
        try:
            return f"killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"killed by signal {-returncode}"
    return f"exit status {returncode}"


def run(args):
    fuzz_dir = os.path.join(common.from_env("FUZZ_BUILD", "build-fuzz"), "tests", "fuzz")
    work = args.work or os.environ.get("FUZZ_WORK") or "/var/tmp/metaroce-fuzz"
    try:
        targets = find_targets(fuzz_dir, args.targets)
    except common.CannotRun as e:
        print(f"campaign fuzz: {e}", file=sys.stderr)
        return common.EXIT_CANNOT_RUN
    try:
        weights = parse_weights(args.weight, targets)
    except common.CannotRun as e:
        print(f"campaign fuzz: {e}", file=sys.stderr)
        return common.EXIT_CANNOT_RUN
    total_weight = sum(weights.values())
    seconds = {t: args.minutes * 60.0 * weights[t] / total_weight for t in targets}
    progress = common.Progress("fuzz")
    progress.note(f"{len(targets)} target(s): "
                  + ", ".join(f"{t} {common.format_duration(seconds[t])}" for t in targets)
                  + f"; {args.jobs} processes each ({args.engine}), work in {work}")
    start = time.monotonic()
    results = {}
    for i, name in enumerate(targets):
        engine = WorkersRun if args.engine == "workers" else TargetRun
        target = engine(name, os.path.join(fuzz_dir, name + "_fuzzer"), work, seconds[name],
                        args)
        label = f"{name} ({i + 1}/{len(targets)})"
        progress.note(f"{label}: {target.corpus_before} inputs in the corpus "
                      f"({target.seeds} seeds)")
        target.run(progress, label)
        results[name] = target.summary()
        r = results[name]
        progress.note(f"{label}: {r['execs']} execs, {r['execs_per_s']} exec/s, "
                      f"{r['crashes']} crashes, {r['timeouts']} timeouts, {r['ooms']} ooms, "
                      f"corpus {r['corpus_size']} (+{r['new_inputs']})"
                      + (f"; {r['problem']}" if r["problem"] else ""))
        for f in r["crash_files"]:
            progress.note(f"{label}: crash {f}")
    progress.finish()
    summary = {
        "mode": "fuzz",
        "minutes": args.minutes,
        "seconds_per_target": {t: round(v, 1) for t, v in seconds.items()},
        "jobs": args.jobs,
        "engine": args.engine,
        "work": work,
        "targets": results,
        "total_execs": sum(r["execs"] for r in results.values()),
        "total_crashes": sum(r["crashes"] for r in results.values()),
        "wall_s": round(time.monotonic() - start, 1),
    }
    common.emit_summary(summary)
    summary["total_timeouts"] = sum(r["timeouts"] for r in results.values())
    summary["total_ooms"] = sum(r["ooms"] for r in results.values())
    found = (summary["total_crashes"] + summary["total_timeouts"] + summary["total_ooms"] > 0 or
             any(r["problem"] for r in results.values()))
    return common.EXIT_FOUND if found else common.EXIT_CLEAN

"""Soak: two metaroced on a namespace fabric under flapping spines, loss, churn and restarts (root).

Brings up `mrfabric up --name NAME --hosts 2 --planes 2 --spines 4` and one metaroced per host
(tests/support/fabric_harness.py), then for --minutes keeps everything below going at once,
timed by a seeded RNG (--seed), and tears it all down on every exit path:

  applications  two loops of mrperf pairs attached to the daemons, each run -D --run-seconds
                with --verify and a random size: write_bw host 0 -> host 1 and send_bw
                host 1 -> host 0; a run that ends is followed by the next
  flaps         spine 0 or 1, of plane 0, 1 or both, blackholed (MetaRoCE's UDP port) on and off
                at random intervals; an episode proves it acted when the fault program's
                drop_blackhole counter of that spine grew (it stays on, up to 15 s more, until
                it has)
  loss          5 % random loss on spine 3 of both planes for the whole run (drop_random grows)
  churn         daemon connections added and deleted with `mrctl conn add/del` both ways, a few
                open at a time; one long-lived connection host 0 -> host 1 besides
  app kills     now and then one process of a running pair SIGKILLed; the pair is restarted, and
                its daemon must drop the dead application's connections within 10 s
  restarts      host 1's daemon stopped with SIGTERM and started again; survived when its peer
                (host 0's daemon, same pid) made the long-lived connection again and each loop
                then completed a clean verified run, within 60 s of the restart

Failed operations are explained only by a deliberate kill or restart: a run that overlapped one
(from the SIGKILL or SIGTERM to 5 s after the daemon answered again). Any other failed
operation, failed conn.add/del or connection found in error is unexpected. Data errors are never
explained.

Memory and descriptors: at checkpoints (after the warm-up, about 8 more spread over the run but
at least 2 minutes apart, 30 s after each restart's survival, and at the end) the applications
pause, churned connections are deleted and both daemons settle to the long-lived connection
alone; then each daemon's open descriptors (/proc/PID/fd), resident size (/proc/PID/statm) and
heap in use (daemon.show) are read. Growth is per daemon instance, from its first checkpoint to
the end, for the instances alive at the end (host 0's lives the whole run; host 1's last one is
measured from its first checkpoint at least 30 s after its restart, and not at all when none
came before the end).
rss_growth_kib and fd_growth are the worst over those instances. The daemons run with glibc's
per-thread malloc caches off (GLIBC_TUNABLES, as tools/bench/control does) so that their heap
count is exact; --tcache runs them as deployed.

JSON summary last on stdout: data_errors, failed_ops_unexpected, rss_growth_kib, fd_growth,
heap_growth_bytes, restarts, restarts_survived, faults (each fault's count and proof),
faults_proven, ops_completed, verified, minutes, per-loop runs, per-instance footprints and the
details of every unexpected failure. Logs and failing runs' files stay in the directory named by
`logs` when anything failed (or with --keep-logs).
Environment: METAROCED, MRCTL, MRPERF (default build/...), MRFABRIC (tools/fabric/mrfabric),
MRFABRIC_BPF_OBJ (default build/bpf/fabric_fault.bpf.o).
"""
import importlib.machinery
import importlib.util
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time

if __package__ in (None, ""):  # run as `python3 tools/campaigns/soak.py`
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from campaigns import common  # noqa: E402

sys.path.insert(0, common.repo_path("tests", "support"))
import fabric_harness as harness  # noqa: E402

SPINES = 4
FLAP_SPINES = (0, 1)
LOSS_SPINE = 3
LOSS_PCT = 5
UDP_DPORT = 4792
HOST_ADDR = {0: "198.18.0.2", 1: "198.18.0.6"}  # plane 0
RESTARTED_HOST = 1
PERSISTENT_PATHS = 8
CHURN_MAX_OPEN = 4
SIZES = (4096, 16384, 65536)
FLAP_ON_S = (0.5, 4.0)
FLAP_OFF_S = (1.0, 8.0)
FLAP_PROOF_EXTRA_S = 15.0  # an episode that dropped nothing yet stays on this much longer
CHURN_EVERY_S = (0.5, 3.0)
RESTART_GRACE_S = 5.0      # runs starting this long after the daemon answers must be clean
SURVIVAL_DEADLINE_S = 60.0
APP_CLEANUP_S = 10.0
CHECKPOINT_MIN_EVERY_S = 120.0
RUN_SLACK_S = 60.0         # a run lasting -D plus this much is hung: killed and unexpected
PARTNER_WAIT_S = 15.0      # one side of a pair failed: the other is killed this long after
SETTLE_S = 30.0
RESTARTED_WARMUP_S = 30.0  # a restarted daemon's checkpoints count from this long after its start
PERSISTENT_CHECK_S = 2.0
MAX_DETAILS = 30


def add_arguments(parser):
    parser.add_argument("--minutes", type=float, required=True,
                        help="how long the faults and applications run (warm-up included)")
    parser.add_argument("--seed", type=int, default=1, help="RNG seed of every timing (default 1)")
    parser.add_argument("--run-seconds", type=float, default=5.0,
                        help="-D of each mrperf run (default 5)")
    parser.add_argument("--name", default="mrsoak", help="fabric name (default mrsoak)")
    parser.add_argument("--keep-logs", action="store_true",
                        help="keep the daemons' logs and runs' files even when all went well")
    parser.add_argument("--tcache", action="store_true",
                        help="daemons keep glibc's per-thread malloc caches, as deployed (their "
                             "heap count then moves by tens of KB with what each thread freed "
                             "last; by default the caches are off and the count is exact)")


def load_script(module_name, path):
    """A Python script without the .py suffix (mrfabric, tools/bench/control) as a module."""
    loader = importlib.machinery.SourceFileLoader(module_name, path)
    spec = importlib.util.spec_from_loader(module_name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def tail(path, n=1500):
    try:
        with open(path, errors="replace") as f:
            return f.read()[-n:].strip()
    except OSError:
        return ""


def exit_text(rc):
    if rc is None:
        return "running"
    if rc < 0:
        try:
            return "killed by " + signal.Signals(-rc).name
        except ValueError:
            return "killed by signal %d" % -rc
    return "exit %d" % rc


class Soak:
    def __init__(self, args, bins, tmp):
        self.args = args
        self.bins = bins
        self.tmp = tmp
        self.rng = random.Random(args.seed)
        self.progress = common.Progress("soak")
        self.fabric = harness.Fabric(bins["mrfabric"], args.name)
        self.md = harness.Daemons(bins["metaroced"], bins["mrctl"], self.fabric.ns, tmp,
                                  json_version=1)
        self.mrfabric_lib = load_script("mrfabric_lib", bins["mrfabric"])
        self.bench_control = load_script("bench_control",
                                         common.repo_path("tools", "bench", "control"))
        self.fabric_state = None
        self.control = {}          # host -> bench Control client of its daemon
        self.instances = []        # per daemon instance: host, index, pid, samples
        self.instance_of = {}      # host -> its live instance
        self.disruptions = []      # deliberate: {kind, start, end, loop}
        self.unexpected = []       # details of unexpected failures
        self.failed_ops_unexpected = 0
        self.failed_ops_explained = 0
        self.data_errors = 0
        self.ops = 0
        self.verified = 0
        self.faults = {"blackhole_flaps": 0, "blackhole_flaps_proven": 0,
                       "blackhole_dropped_packets": 0, "loss_spine": LOSS_SPINE,
                       "loss_pct": LOSS_PCT, "loss_dropped_packets": 0, "loss_proven": False,
                       "conn_added": 0, "conn_deleted": 0, "app_kills": 0,
                       "app_kills_cleaned_up": 0, "daemon_restarts": 0,
                       "persistent_conn_remade": 0}
        self.unproven = []
        self.restarts = []
        self.fatal = None
        self.t0 = None
        self.minutes = None
        self.last_kill_s = float("-inf")
        self.paused = False
        self.run_seq = 0
        self.loops = [
            {"name": "write", "test": "write_bw", "server": 1, "client": 0, "port": 18561},
            {"name": "send", "test": "send_bw", "server": 0, "client": 1, "port": 18562},
        ]
        for lp in self.loops:
            lp.update(run=None, runs=0, clean=0, failed_explained=0, failed_unexpected=0,
                      last_clean_start=None)
        self.flap = None
        self.next_flap = None
        self.churn_open = []       # (host, conn id, peer host)
        self.next_churn = None
        self.persistent = None     # conn id on host 0
        self.next_persistent_check = 0.0
        self.persistent_seen_ready_s = 0.0
        self.pending_cleanups = []
        self.loss_before = None
        self.checkpoints = []      # (at, label), soonest first

    # ------------------------------------------------------------ time and events

    def now(self):
        return time.monotonic() - self.t0

    def note(self, text):
        self.progress.note("%7.1fs %s" % (self.now(), text))

    def explain(self, start, end, loop=None):
        """The deliberate disruption a span [start, end] overlapped, or None."""
        for d in self.disruptions:
            if d["loop"] not in (None, loop):
                continue
            d_end = d["end"] if d["end"] is not None else float("inf")
            if start <= d_end and end >= d["start"]:
                return d["kind"]
        return None

    def unexpected_failure(self, what, count=1, **detail):
        self.failed_ops_unexpected += count
        if len(self.unexpected) < MAX_DETAILS:
            self.unexpected.append(dict(detail, what=what, at_s=round(self.now(), 1)))
        self.note("UNEXPECTED: %s %s" % (what, json.dumps(detail)[:400]))

    # ------------------------------------------------------------ daemons

    def ctl_json(self, h, *args):
        return self.md.ctl_json(h, *args)

    def connect_control(self, h):
        if h in self.control:
            self.control[h].close()
        self.control[h] = self.bench_control.Control(self.md.sock[h])

    def start_daemon(self, h):
        # Daemons.start passes this process's environment on: set the daemon's malloc tunables
        # for the start alone.
        saved = os.environ.get("GLIBC_TUNABLES")
        if not self.args.tcache:
            os.environ["GLIBC_TUNABLES"] = self.bench_control.exact_heap_env()["GLIBC_TUNABLES"]
        try:
            self.md.start(h)
        finally:
            if saved is None:
                os.environ.pop("GLIBC_TUNABLES", None)
            else:
                os.environ["GLIBC_TUNABLES"] = saved
        self.connect_control(h)
        inst = {"host": h, "instance": sum(i["host"] == h for i in self.instances),
                "pid": self.md.procs[h].pid, "started_s": round(self.now(), 1), "samples": []}
        if h in self.instance_of:
            # A restarted daemon's first minutes are its warm-up: a checkpoint falling in them
            # (a periodic one may come seconds after the restart) is no baseline.
            inst["warm_from_s"] = inst["started_s"] + RESTARTED_WARMUP_S
        self.instances.append(inst)
        self.instance_of[h] = inst

    def check_daemons_alive(self):
        for h, p in self.md.procs.items():
            if p.poll() is not None:
                self.fatal = "metaroced on host %d exited unasked (%s); log: %s" % (
                    h, exit_text(p.returncode), self.md.log_of(h)[-1500:])
                self.note(self.fatal)
                return False
        return True

    def restart_daemon(self, h):
        old = self.md.procs[h]
        d = {"kind": "daemon_restart", "start": self.now(), "end": None, "loop": None}
        self.disruptions.append(d)
        self.faults["daemon_restarts"] += 1
        peer_pid = self.md.procs[1 - h].pid
        self.note("daemon restart: SIGTERM host %d's metaroced (pid %d)" % (h, old.pid))
        harness.stop(old, timeout=20)
        stopped = old.returncode
        self.control.pop(h).close()
        # Keep the stopped instance's log beside the new one's (Daemons.start truncates hH.log).
        self.md.logs[h].close()
        os.replace(os.path.join(self.tmp, "h%d.log" % h),
                   os.path.join(self.tmp, "h%d.instance%d.log" % (h, self.instance_of[h]["instance"])))
        self.instance_of[h]["ended_s"] = round(self.now(), 1)
        self.start_daemon(h)
        d["end"] = self.now() + RESTART_GRACE_S
        # The churned connections that had this daemon at one end are gone or dead with it.
        for entry in list(self.churn_open):
            if h in (entry[0], entry[2]):
                self.churn_open.remove(entry)
                if entry[0] != h:
                    self.md.ctl(entry[0], "conn", "del", str(entry[1]))
        self.restarts.append({"host": h, "sigterm_s": round(d["start"], 1),
                              "up_s": round(self.now(), 1), "old_pid": old.pid,
                              "new_pid": self.md.procs[h].pid, "clean_stop": stopped == 0,
                              "stop_status": exit_text(stopped), "peer_pid": peer_pid,
                              "persistent_remade_s": None, "loops_clean": {},
                              "survived": None, "why_not": None})
        if stopped != 0:
            self.unexpected_failure("daemon did not stop cleanly on SIGTERM", host=h,
                                    status=exit_text(stopped))
        self.next_persistent_check = 0.0

    def evaluate_restarts(self, final=False):
        for r in self.restarts:
            if r["survived"] is not None:
                continue
            since = self.now() - r["up_s"]
            if self.md.procs[1 - r["host"]].pid != r["peer_pid"] or \
                    self.md.procs[1 - r["host"]].poll() is not None:
                r["survived"], r["why_not"] = False, "the peer daemon did not live through"
            for lp in self.loops:
                if lp["last_clean_start"] is not None and \
                        lp["last_clean_start"] >= r["up_s"] and lp["name"] not in r["loops_clean"]:
                    r["loops_clean"][lp["name"]] = round(lp["last_clean_start"], 1)
            if r["survived"] is None and r["persistent_remade_s"] is not None and \
                    len(r["loops_clean"]) == len(self.loops):
                r["survived"] = True
                r["survived_after_s"] = round(since, 1)
                self.note("restart of host %d survived in %.1f s" % (r["host"], since))
                self.schedule_checkpoint(self.now() + 30.0, "after restart")
            elif r["survived"] is None and (since > SURVIVAL_DEADLINE_S or final):
                r["survived"] = False
                r["why_not"] = "within %.0f s: persistent connection remade %s, clean runs %s" % (
                    since, r["persistent_remade_s"] is not None, sorted(r["loops_clean"]))
            if r["survived"] is False:
                self.note("restart of host %d NOT survived: %s" % (r["host"], r["why_not"]))

    def restart_pending(self):
        return any(r["survived"] is None for r in self.restarts)

    # ------------------------------------------------------------ the long-lived connection

    def add_persistent(self):
        conn = self.ctl_json(0, "conn", "add", HOST_ADDR[1], "paths", str(PERSISTENT_PATHS))
        self.persistent = conn["conn"]["id"] if "conn" in conn else conn["id"]

    def check_persistent(self):
        if self.now() < self.next_persistent_check:
            return
        self.next_persistent_check = self.now() + PERSISTENT_CHECK_S
        p = self.md.ctl(0, "-j", "conn", "show")
        if p.returncode != 0:
            if self.explain(self.now() - 1, self.now()) is None:
                self.unexpected_failure("mrctl conn show failed", stderr=p.stderr.strip())
            return
        conns = {c["id"]: c for c in json.loads(p.stdout)["connections"]}
        c = conns.get(self.persistent)
        if c is not None and c.get("state") == "ready":
            self.persistent_seen_ready_s = self.now()
            return
        # Explained by a restart since it was last seen ready (or in the last 10 s).
        why = self.explain(min(self.persistent_seen_ready_s, self.now() - 10), self.now())
        if why is None:
            self.unexpected_failure("the long-lived connection is %s" % (
                "gone" if c is None else "in error (%s)" % c.get("error_status_name")),
                conn=self.persistent)
        if c is not None:
            self.md.ctl(0, "conn", "del", str(self.persistent))
        try:
            self.add_persistent()
        except RuntimeError as e:
            if self.explain(self.now() - 10, self.now()) is None:
                self.unexpected_failure("conn add of the long-lived connection", error=str(e))
            return
        self.faults["persistent_conn_remade"] += 1
        for r in self.restarts:
            if r["survived"] is None and r["persistent_remade_s"] is None:
                r["persistent_remade_s"] = round(self.now(), 1)
        self.note("long-lived connection remade (id %d)" % self.persistent)

    # ------------------------------------------------------------ applications

    def start_run(self, lp):
        self.run_seq += 1
        size = self.rng.choice(SIZES)
        base = os.path.join(self.tmp, "runs", "%s-%05d" % (lp["name"], self.run_seq))
        common_args = [lp["test"], "-p", str(lp["port"]), "-s", str(size),
                       "-D", "%g" % self.args.run_seconds, "--verify", "--timeout", "10"]

        def launch(h, role, extra):
            err = open(base + "." + role + ".err", "w")
            argv = ["nsenter", "--net=/run/netns/" + self.fabric.ns(h), self.bins["mrperf"]] + \
                common_args + ["--daemon-socket", self.md.sock[h],
                               "--out_json", base + "." + role + ".json"] + extra
            try:
                return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err)
            finally:
                err.close()

        run = {"base": base, "size": size, "start": self.now(), "killed": None}
        run["server"] = launch(lp["server"], "server", [])
        run["client"] = launch(lp["client"], "client", [HOST_ADDR[lp["server"]]])
        run["deadline"] = run["start"] + self.args.run_seconds + RUN_SLACK_S
        lp["run"] = run
        lp["runs"] += 1

    def poll_loop(self, lp):
        run = lp["run"]
        if run is None:
            if not self.paused:
                self.start_run(lp)
            return
        procs = (run["server"], run["client"])
        if any(p.poll() is None for p in procs):
            failed = [p for p in procs if p.poll() not in (None, 0)]
            if failed and "partner_failed_s" not in run:
                run["partner_failed_s"] = self.now()
            if self.now() > run["deadline"]:
                harness.kill_all(procs)
                run["hung"] = True
            elif failed and self.now() - run["partner_failed_s"] > PARTNER_WAIT_S:
                # A server waits for its client as long as it takes (perftest's way): once one
                # side has failed, the other is ended rather than left to the run's deadline.
                harness.kill_all(procs)
            else:
                return
        self.finish_run(lp, run)
        lp["run"] = None

    def read_doc(self, path):
        try:
            with open(path) as f:
                return json.load(f)
        except (OSError, ValueError):
            return None

    def finish_run(self, lp, run):
        end = self.now()
        client = self.read_doc(run["base"] + ".client.json")
        server = self.read_doc(run["base"] + ".server.json")
        doc = client or server
        summary = (doc or {}).get("summary", {})
        failed = summary.get("failed_ops", 0)
        errors = summary.get("data_errors", 0)
        if client is not None:
            for r in client.get("results", []):
                self.ops += r.get("iterations", 0)
                self.verified += r.get("verified", 0)
        rcs = (run["server"].returncode, run["client"].returncode)
        # Every message checked at the receiver, not merely some (--verify).
        unverified = sum(max(0, r.get("iterations", 0) - r.get("verified", 0))
                         for r in (client or {}).get("results", []))
        clean = client is not None and rcs == (0, 0) and failed == 0 and errors == 0 and \
            unverified == 0 and not run.get("hung")
        self.data_errors += errors
        keep = not clean
        if clean:
            lp["clean"] += 1
            lp["last_clean_start"] = run["start"]
        else:
            why = None if run.get("hung") else self.explain(run["start"], end, lp["name"])
            if run["killed"] is not None:
                why = why or "app_kill"
            count = max(failed, 1)
            detail = {"loop": lp["name"], "size": run["size"], "start_s": round(run["start"], 1),
                      "end_s": round(end, 1), "server": exit_text(rcs[0]),
                      "client": exit_text(rcs[1]), "failed_ops": failed, "data_errors": errors,
                      "unverified": unverified,
                      "hung": bool(run.get("hung")), "files": run["base"] + ".*",
                      "client_stderr": tail(run["base"] + ".client.err", 400),
                      "server_stderr": tail(run["base"] + ".server.err", 400)}
            if why is None:
                lp["failed_unexpected"] += 1
                self.unexpected_failure("mrperf run failed", count=count, **detail)
            else:
                lp["failed_explained"] += 1
                self.failed_ops_explained += count
                keep = errors > 0
        if errors > 0:
            self.note("DATA ERRORS: %d in %s run %s" % (errors, lp["name"], run["base"]))
        if not keep and not self.args.keep_logs:
            for role in ("client", "server"):
                for ext in ("json", "err"):
                    try:
                        os.remove("%s.%s.%s" % (run["base"], role, ext))
                    except FileNotFoundError:
                        pass

    def kill_app(self):
        running = [lp for lp in self.loops
                   if lp["run"] is not None and self.now() - lp["run"]["start"] > 1.5 and
                   all(p.poll() is None for p in (lp["run"]["server"], lp["run"]["client"]))]
        if not running:
            return False
        lp = self.rng.choice(running)
        role = self.rng.choice(("server", "client"))
        proc = lp["run"][role]
        host = lp[role]
        self.disruptions.append({"kind": "app_kill", "start": self.now(), "end": self.now(),
                                 "loop": lp["name"]})
        proc.kill()
        proc.wait(timeout=10)
        lp["run"]["killed"] = role
        self.last_kill_s = self.now()
        self.faults["app_kills"] += 1
        self.pending_cleanups.append({"host": host, "pid": proc.pid, "at": self.now(),
                                      "daemon_pid": self.md.procs[host].pid,
                                      "killed_by_sigkill": proc.returncode == -signal.SIGKILL})
        self.note("app kill: SIGKILL %s of the %s loop (pid %d, host %d)" %
                  (role, lp["name"], proc.pid, host))
        return True

    def check_cleanups(self):
        for c in list(self.pending_cleanups):
            if self.md.procs[c["host"]].pid != c["daemon_pid"]:
                # Its daemon restarted before the check: the cleanup stays unproven.
                self.pending_cleanups.remove(c)
                continue
            p = self.md.ctl(c["host"], "-j", "conn", "show")
            owned = None
            if p.returncode == 0:
                owned = [x["id"] for x in json.loads(p.stdout)["connections"]
                         if isinstance(x.get("owner"), dict) and x["owner"].get("pid") == c["pid"]]
            if owned == [] and c["killed_by_sigkill"]:
                self.faults["app_kills_cleaned_up"] += 1
                self.pending_cleanups.remove(c)
            elif self.now() - c["at"] > APP_CLEANUP_S:
                self.pending_cleanups.remove(c)
                self.unexpected_failure("a SIGKILLed application's connections outlived it",
                                        host=c["host"], pid=c["pid"], connections=owned,
                                        killed_by_sigkill=c["killed_by_sigkill"])

    # ------------------------------------------------------------ fabric faults

    def fault_counter(self, spine, planes, name):
        total = 0
        for p in planes:
            c = self.mrfabric_lib.bpf_read_counters(self.fabric_state, p, spine)
            if c is None:
                raise RuntimeError("no fault program counters on spine %d plane %d: mrfabric "
                                   "needs the fault program (MRFABRIC_BPF_OBJ)" % (spine, p))
            total += c[name]
        return total

    def flap_tick(self, start_new=True, force_off=False):
        """Starts an episode when one is due (start_new), ends the current one when its time is
        over and it has dropped something (or its extra time is over too), or at once
        (force_off: cut short, it proves nothing and fails nothing unless already overdue)."""
        now = self.now()
        if self.flap is None:
            if not start_new or force_off or now < self.next_flap:
                return
            spine = self.rng.choice(FLAP_SPINES)
            plane = self.rng.choice(("0", "1", "all"))
            planes = (0, 1) if plane == "all" else (int(plane),)
            before = self.fault_counter(spine, planes, "drop_blackhole")
            self.fabric("fault", str(spine), "--plane", plane, "--udp-dport", str(UDP_DPORT),
                        "blackhole", "on")
            self.flap = {"spine": spine, "plane": plane, "planes": planes, "before": before,
                         "on_s": now, "off_at": now + self.rng.uniform(*FLAP_ON_S)}
            self.faults["blackhole_flaps"] += 1
            return
        if now < self.flap["off_at"] and not force_off:
            return
        f = self.flap
        dropped = self.fault_counter(f["spine"], f["planes"], "drop_blackhole") - f["before"]
        if dropped == 0 and not force_off and now < f["off_at"] + FLAP_PROOF_EXTRA_S:
            return  # nothing crossed it yet: stay on until something did
        self.fabric("fault", str(f["spine"]), "--plane", f["plane"], "--udp-dport",
                    str(UDP_DPORT), "blackhole", "off")
        self.faults["blackhole_dropped_packets"] += dropped
        if dropped > 0:
            self.faults["blackhole_flaps_proven"] += 1
        elif not force_off or now >= f["off_at"]:
            self.unproven.append({"fault": "blackhole", "spine": f["spine"], "plane": f["plane"],
                                  "on_s": round(f["on_s"], 1), "off_s": round(now, 1)})
            self.note("blackhole of spine %d plane %s dropped nothing in %.1f s" %
                      (f["spine"], f["plane"], now - f["on_s"]))
        else:
            # Ended before its time by a checkpoint or the end: neither proven nor a failure.
            self.faults["blackhole_flaps"] -= 1
        self.flap = None
        self.next_flap = now + self.rng.uniform(*FLAP_OFF_S)

    def churn_tick(self):
        if self.paused or self.now() < self.next_churn:
            return
        self.next_churn = self.now() + self.rng.uniform(*CHURN_EVERY_S)
        start = self.now()
        if self.churn_open and (len(self.churn_open) >= CHURN_MAX_OPEN or self.rng.random() < 0.4):
            entry = self.churn_open.pop(self.rng.randrange(len(self.churn_open)))
            p = self.md.ctl(entry[0], "conn", "del", str(entry[1]))
            if p.returncode == 0:
                self.faults["conn_deleted"] += 1
            elif self.explain(start, self.now()) is None:
                self.unexpected_failure("mrctl conn del failed", host=entry[0], conn=entry[1],
                                        stderr=p.stderr.strip())
            return
        h = self.rng.choice((0, 1))
        p = self.md.ctl(h, "-j", "conn", "add", HOST_ADDR[1 - h], "paths",
                        str(self.rng.choice((1, 4, 8))))
        if p.returncode == 0:
            self.churn_open.append((h, json.loads(p.stdout)["conn"]["id"], 1 - h))
            self.faults["conn_added"] += 1
        elif self.explain(start, self.now()) is None:
            self.unexpected_failure("mrctl conn add failed", host=h, stderr=p.stderr.strip())

    # ------------------------------------------------------------ checkpoints

    def schedule_checkpoint(self, at, label):
        self.checkpoints.append((at, label))
        self.checkpoints.sort()

    def daemon_conns(self, h):
        return self.ctl_json(h, "conn", "show")["connections"]

    def checkpoint(self, label):
        """Quiesces (no runs, no churned connections, no blackhole), lets both daemons settle
        to the long-lived connection alone, and samples every live daemon instance."""
        self.note("checkpoint (%s): quiescing" % label)
        # The blackhole under way ends as it would have, with the applications still running,
        # so that it can prove itself; no new one starts until the checkpoint is over.
        deadline = time.monotonic() + FLAP_ON_S[1] + FLAP_PROOF_EXTRA_S + 5
        while self.flap is not None and time.monotonic() < deadline:
            for lp in self.loops:
                self.poll_loop(lp)
            self.flap_tick(start_new=False)
            time.sleep(0.1)
        self.flap_tick(force_off=True)
        self.paused = True
        deadline = time.monotonic() + self.args.run_seconds + RUN_SLACK_S + 10
        while any(lp["run"] is not None for lp in self.loops) and time.monotonic() < deadline:
            for lp in self.loops:
                self.poll_loop(lp)
            time.sleep(0.1)
        for h, conn, _ in self.churn_open:
            if self.md.ctl(h, "conn", "del", str(conn)).returncode == 0:
                self.faults["conn_deleted"] += 1
        self.churn_open = []
        self.next_persistent_check = 0.0
        self.check_persistent()
        deadline = time.monotonic() + SETTLE_S
        settled = False
        while time.monotonic() < deadline:
            counts = [len(self.daemon_conns(h)) for h in (0, 1)]
            if counts == [1, 1]:
                settled = True
                break
            time.sleep(0.2)
        self.check_cleanups()
        if not settled:
            self.unexpected_failure("daemons did not settle to the long-lived connection alone",
                                    connections={h: self.daemon_conns(h) for h in (0, 1)})
        for h in (0, 1):
            fds, heap, rss = self.bench_control.footprint(self.md.procs[h].pid, self.control[h])
            self.instance_of[h]["samples"].append(
                {"at_s": round(self.now(), 1), "label": label, "fds": fds,
                 "rss_kib": rss // 1024, "heap_bytes": heap, "settled": settled})
        loss = self.fault_counter(LOSS_SPINE, (0, 1), "drop_random")
        self.faults["loss_dropped_packets"] = loss - self.loss_before
        self.faults["loss_proven"] = loss > self.loss_before
        s = [self.instance_of[h]["samples"][-1] for h in (0, 1)]
        self.note("checkpoint (%s): fds %s, rss KiB %s, heap %s" % (
            label, [x["fds"] for x in s], [x["rss_kib"] for x in s], [x["heap_bytes"] for x in s]))
        self.paused = False

    # ------------------------------------------------------------ the run

    def progress_line(self, end_at):
        f = self.faults
        left = max(0.0, end_at - self.now())
        self.progress.update(
            "%s elapsed, ops %s, verified %s, data errors %d, unexpected %d; flaps %d/%d proven, "
            "churn +%d/-%d, kills %d, restarts %d/%d; %s left" % (
                common.format_duration(self.now()), common.format_count(self.ops),
                common.format_count(self.verified), self.data_errors,
                self.failed_ops_unexpected, f["blackhole_flaps_proven"], f["blackhole_flaps"],
                f["conn_added"], f["conn_deleted"], f["app_kills"],
                sum(r["survived"] is True for r in self.restarts), len(self.restarts),
                common.format_duration(left)))

    def plan(self, total_s):
        """Warm-up, then restarts, kills and checkpoints spread over the rest."""
        warmup = min(120.0, max(15.0, 0.1 * total_s))
        main = total_s - warmup
        n_restarts = max(1, int(round(total_s / 600.0)))
        restarts = [warmup + main * (i + 0.5) / n_restarts for i in range(n_restarts)]
        n_kills = max(1, int(round(total_s / 180.0)))
        kills = [warmup + main * (i + 0.25 + 0.5 * self.rng.random()) / n_kills
                 for i in range(n_kills)]
        # A kill comes at least 15 s before or after a restart: each disruption is told apart.
        kills = [k if min(abs(k - r) for r in restarts) >= 15 else
                 min(restarts, key=lambda r: abs(k - r)) - 15 for k in kills]
        return warmup, restarts, sorted(kills)

    def run(self):
        total_s = self.args.minutes * 60.0
        self.fabric.prepare()
        harness_signals()
        self.t0 = time.monotonic()
        self.progress.note("bringing up fabric %s (2 hosts, 2 planes, %d spines)" %
                           (self.args.name, SPINES))
        self.fabric.up("--spines", str(SPINES))
        self.fabric_state = self.mrfabric_lib.load_state(self.args.name)
        for h in (0, 1):
            self.start_daemon(h)
        self.add_persistent()
        self.fabric("fault", str(LOSS_SPINE), "--udp-dport", str(UDP_DPORT), "drop",
                    str(LOSS_PCT))
        self.loss_before = 0  # the fault program was loaded with the fabric: counts from 0
        self.t0 = time.monotonic()  # the soak's clock starts with the workload
        for inst in self.instances:
            inst["started_s"] = 0.0
        warmup, restarts, kills = self.plan(total_s)
        self.schedule_checkpoint(warmup, "after warm-up")
        # Enough checkpoints for a trend (about 8 a run), none closer than 2 minutes.
        every = max(CHECKPOINT_MIN_EVERY_S, (total_s - warmup) / 8)
        t = warmup + every
        while t < total_s - 60:
            self.schedule_checkpoint(t, "periodic")
            t += every
        self.next_flap = self.rng.uniform(*FLAP_OFF_S) / 2
        self.next_churn = self.rng.uniform(*CHURN_EVERY_S)
        self.progress.note("%.1f min, seed %d, warm-up %.0f s, restarts at %s s, kills at "
                           "%s s" % (self.args.minutes, self.args.seed, warmup,
                                     [round(x) for x in restarts], [round(x) for x in kills]))
        while True:
            now = self.now()
            if not self.check_daemons_alive():
                break
            for lp in self.loops:
                self.poll_loop(lp)
            # After the end, the episode under way still finishes (and proves itself).
            self.flap_tick(start_new=now < total_s)
            if now < total_s:
                self.churn_tick()
            self.check_persistent()
            self.check_cleanups()
            # A kill delayed (no run old enough, a checkpoint) may not crowd a restart either.
            if restarts and now >= restarts[0] and not self.restart_pending() and \
                    now - self.last_kill_s >= 15:
                restarts.pop(0)
                self.restart_daemon(RESTARTED_HOST)
            if kills and now >= kills[0]:
                if self.kill_app() or now > kills[0] + 30:
                    kills.pop(0)
            self.evaluate_restarts()
            # No checkpoint while a restart's survival is under way: it would pause the
            # applications whose clean runs are the survival's proof.
            if self.checkpoints and now >= self.checkpoints[0][0] and now < total_s - 20 and \
                    not self.restart_pending():
                self.checkpoint(self.checkpoints.pop(0)[1])
            if now >= total_s and not self.restart_pending() and not kills and not restarts:
                break
            if now >= total_s + SURVIVAL_DEADLINE_S + 30:
                break
            self.progress_line(total_s)
            time.sleep(0.1)
        self.minutes = self.now() / 60.0
        if self.fatal is None:
            self.checkpoint("end")
        self.evaluate_restarts(final=True)
        self.progress.finish()


def harness_signals():
    """SIGTERM and SIGHUP (a closed terminal, meson's timeout) end the soak through the finally
    that tears everything down, as Ctrl-C does."""
    harness.interrupt_on_sigterm()
    signal.signal(signal.SIGHUP, signal.getsignal(signal.SIGTERM))


def growth(inst, key):
    """From the instance's first checkpoint after its warm-up to its last."""
    samples = [x for x in inst["samples"] if x["at_s"] >= inst.get("warm_from_s", 0.0)]
    if len(samples) < 2:
        return None
    return samples[-1][key] - samples[0][key]


def summarize(soak, interrupted):
    lived = [i for i in soak.instances if "ended_s" not in i]
    figures = {}
    for key, name in (("rss_kib", "rss_growth_kib"), ("fds", "fd_growth"),
                      ("heap_bytes", "heap_growth_bytes")):
        values = [growth(i, key) for i in lived if growth(i, key) is not None]
        figures[name] = max(values) if values else None
    daemons = []
    for i in soak.instances:
        s = i["samples"]
        daemons.append({
            "host": i["host"], "instance": i["instance"], "pid": i["pid"],
            "started_s": i["started_s"], "ended_s": i.get("ended_s"),
            "lived_to_the_end": "ended_s" not in i,
            "warm_from_s": i.get("warm_from_s", 0.0),
            "measured_from_s": next((x["at_s"] for x in s
                                     if x["at_s"] >= i.get("warm_from_s", 0.0)), None),
            "measured_to_s": s[-1]["at_s"] if s else None,
            "rss_growth_kib": growth(i, "rss_kib"), "fd_growth": growth(i, "fds"),
            "heap_growth_bytes": growth(i, "heap_bytes"), "samples": s})
    f = soak.faults
    survived = sum(r["survived"] is True for r in soak.restarts)
    faults_proven = (f["blackhole_flaps"] > 0 and not soak.unproven and
                     f["blackhole_flaps_proven"] == f["blackhole_flaps"] and f["loss_proven"] and
                     f["conn_added"] > 0 and f["conn_deleted"] > 0 and f["app_kills"] > 0 and
                     f["app_kills_cleaned_up"] == f["app_kills"] and f["daemon_restarts"] > 0)
    return {
        "mode": "soak",
        "minutes": round(soak.minutes if soak.minutes is not None else
                         (soak.now() / 60.0 if soak.t0 is not None else 0.0), 2),
        "minutes_asked": soak.args.minutes,
        "seed": soak.args.seed,
        "data_errors": soak.data_errors,
        "failed_ops_unexpected": soak.failed_ops_unexpected,
        "failed_ops_explained": soak.failed_ops_explained,
        "rss_growth_kib": figures["rss_growth_kib"],
        "fd_growth": figures["fd_growth"],
        "heap_growth_bytes": figures["heap_growth_bytes"],
        "growth_measured": "per daemon instance alive at the end, from its first checkpoint to "
                           "the end (quiesced: no runs, the long-lived connection alone); the "
                           "worst instance; per instance under daemons",
        "daemon_malloc": "glibc tcache on (as deployed)" if soak.args.tcache else
                         "glibc tcache off (heap_bytes exact)",
        "restarts": len(soak.restarts),
        "restarts_survived": survived,
        "faults": f,
        "faults_proven": faults_proven,
        "faults_unproven": soak.unproven,
        "ops_completed": soak.ops,
        "verified": soak.verified,
        "runs": {lp["name"]: {"test": lp["test"], "runs": lp["runs"], "clean": lp["clean"],
                              "failed_explained": lp["failed_explained"],
                              "failed_unexpected": lp["failed_unexpected"]}
                 for lp in soak.loops},
        "restart_details": soak.restarts,
        "daemons": daemons,
        "unexpected": soak.unexpected,
        "fatal": soak.fatal,
        "interrupted": interrupted,
    }


def binaries():
    bins = {
        "metaroced": common.from_env("METAROCED", "build", "daemon", "metaroced"),
        "mrctl": common.from_env("MRCTL", "build", "tools", "ctl", "mrctl"),
        "mrperf": common.from_env("MRPERF", "build", "tools", "perf", "mrperf"),
        "mrfabric": common.from_env("MRFABRIC", "tools", "fabric", "mrfabric"),
    }
    for name, path in bins.items():
        if not os.access(path, os.X_OK):
            raise common.CannotRun("%s not found at %s: meson compile -C build, or set %s" %
                                   (name, path, name.upper()))
    obj = common.from_env("MRFABRIC_BPF_OBJ", "build", "bpf", "fabric_fault.bpf.o")
    if not os.path.isfile(obj):
        raise common.CannotRun("the fault program is not at %s: meson compile -C build, or set "
                               "MRFABRIC_BPF_OBJ" % obj)
    os.environ["MRFABRIC_BPF_OBJ"] = obj  # mrfabric loads it with the fabric
    return bins


def run(args):
    if os.geteuid() != 0:
        print("soak: needs root (network namespaces, XDP)", file=sys.stderr)
        return common.EXIT_CANNOT_RUN
    try:
        bins = binaries()
    except common.CannotRun as e:
        print("soak: %s" % e, file=sys.stderr)
        return common.EXIT_CANNOT_RUN
    tmp = harness.make_tmp("metaroce-soak-")
    os.makedirs(os.path.join(tmp, "runs"))
    soak = Soak(args, bins, tmp)
    interrupted = False
    aborted = None
    try:
        soak.run()
    except KeyboardInterrupt:
        interrupted = True
        soak.progress.note("interrupted: tearing down")
    except harness.ABORTS + (KeyError, IndexError, ValueError) as e:
        aborted = "%s: %s" % (type(e).__name__, e)
        soak.progress.note("aborted: %s" % aborted)
    finally:
        # A second signal must not cut the teardown short.
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(sig, signal.SIG_IGN)
        for lp in soak.loops:
            if lp["run"] is not None:
                harness.kill_all((lp["run"]["server"], lp["run"]["client"]))
        for c in soak.control.values():
            c.close()
        soak.md.terminate_all()
        soak.md.close_logs()
        soak.fabric.down()
    if aborted and soak.fatal is None:
        soak.fatal = aborted
    summary = summarize(soak, interrupted)
    found = (summary["data_errors"] > 0 or summary["failed_ops_unexpected"] > 0 or
             summary["restarts_survived"] < summary["restarts"] or not summary["faults_proven"] or
             soak.fatal is not None or interrupted)
    if found or args.keep_logs:
        summary["logs"] = tmp
    else:
        summary["logs"] = None
        shutil.rmtree(tmp, ignore_errors=True)
    common.emit_summary(summary)
    if interrupted:
        return 130
    return common.EXIT_FOUND if found else common.EXIT_CLEAN


if __name__ == "__main__":
    import argparse
    parser = argparse.ArgumentParser(prog="soak", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    sys.exit(run(parser.parse_args()))

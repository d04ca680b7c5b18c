"""Shared harness of the privileged end-to-end Python tests on a namespace fabric
(tools/fabric/mrfabric): daemon_fabric, daemon_attach, daemon_metrics, daemon_blackhole, trace,
dissector and perf_fabric; the benchmarks tools/bench/datapath and control run their faults
through it too. Standard library only. A test imports it with

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
    import fabric_harness as harness

(a benchmark with ROOT/tests/support, ROOT being the source tree). Unit test (no root):
fabric_harness_test.py, suite 'unit'.

What it offers, and its contracts:

  Exit codes: PASS 0, FAIL 1, SKIP 77 (meson's "skipped").

  Skips: have_root(needs), have_tools(*names), have_netns() each print one line
    "skip: ..." and return False when the requirement is missing (True otherwise); the test then
    returns SKIP. They never raise.

  Reporting: Failures is a list of failed checks. check(ok, what) prints `what` padded to the
    width given at construction, then "ok" or "FAIL", appends `what` on failure and returns ok.
    abort(e, daemons) records and prints "aborted: E", the traceback (to stdout) and the daemons'
    log tails. finish(failures) (also Failures.finish()) prints "FAILED:" and one indented line a
    failure, or "all passed", and returns FAIL or PASS.
    ABORTS is the tuple of exceptions a test treats as "aborted" (it may add its own).

  Fabric(mrfabric, name): runs `mrfabric CMD --name NAME ...` (call the object with CMD and its
    arguments); raises RuntimeError with mrfabric's message when it fails and check is true.
    up() brings up the tests' usual 2 hosts x 2 planes x 2 spines (more arguments appended);
    down() never raises on mrfabric's exit status; prepare(), called before the try whose finally
    calls down(), is interrupt_on_sigterm() and down() (a leftover fabric of the same name). Namespaces: host_ns(name, h) is host h's,
    leaf_ns(name, plane) the leaf router's of a plane. The test keeps its own fabric NAME, so
    that tests never share a fabric.

  Daemons(metaroced, mrctl, ns, tmp): one metaroced per host, started with start(h) in the host's
    namespace through `nsenter --net=/run/netns/NS` (not `ip netns exec`, which remounts /sys
    and hides bpffs from the daemon; nsenter execs the daemon, so procs[h].pid is the daemon's
    own pid), `--interface pl0,pl1 --socket TMP/hH.sock` and the test's extra arguments, output
    to TMP/hH.log; start_all() starts every host's in turn. start(h) returns once `mrctl daemon show` answers and raises RuntimeError
    (with the log's tail) when the daemon exits or does not answer within 20 s. ctl(h, ...)
    runs mrctl against host h's socket inside its namespace (optionally as another user) and
    returns the CompletedProcess; ctl_json(h, ...) runs `mrctl -j`, raises RuntimeError when
    mrctl fails (or when the document lacks the required "version") and returns the document.
    kill_all() SIGKILLs and reaps the daemons still running; terminate_all() stops them with
    SIGTERM (after SIGCONT) and SIGKILLs those that outlive the timeout. The caller owns tmp
    and removes it; Daemons never deletes files.

  Fabric.view() is the `mrfabric show -j` document; Fabric.drops() is fault_drops(view()).
    fault_drops(view): {(plane, spine): packets that spine's fault program dropped since it was
    loaded (drop_random + drop_blackhole)}; spines without the program are left out.

  Faults, proved (a fault that never acted must fail the run, not pass it):
    SideThread(what, fn, delay_s): fn() in a thread of its own, delay_s after start (or after
      entering `with`), while the caller runs its traffic. join() waits and re-raises what fn
      raised as SideThreadFailed (a RuntimeError, so in ABORTS; the original as __cause__) and
      returns fn's result; threading.Thread and Timer instead print the exception and go on.
      Leaving a `with` block cancels fn if it still waits for its delay, joins the thread and
      re-raises fn's exception, or raises SideThreadFailed when fn never ran (the block ended
      within the delay: a mid-run fault after the run); when the block itself raises, what fn
      raised is printed and the block's exception propagates.
    FaultDrops(fabric): reads every spine's drop counters when made; require(what, spine,
      plane) reads them again and returns how many packets the given spines (an index or "all"
      each) dropped since, or raises FaultNotProved (a RuntimeError) naming what when that is 0,
      or when no such spine has the fault program (nothing could prove the fault).
    SpineFault(fabric, spine, *what, plane, udp_dport, delay_s): `mrfabric fault SPINE ...` for
      a `with` block that runs traffic: set at entry or, with delay_s, by a SideThread that
      long after entry (mid-run); at exit the thread is joined (its exception re-raised), the
      spines must have dropped something since entry (FaultNotProved otherwise; `dropped` holds
      the count), and the fault is cleared (`fault SPINE --plane P clear`) whatever happened.

  Processes: kill_all(procs, timeout) SIGKILLs and reaps every process still running;
    stop(proc, timeout) sends SIGTERM (after SIGCONT) and SIGKILLs on timeout.
  interrupt_on_sigterm(): SIGTERM (meson's timeout) raises KeyboardInterrupt in the main thread,
    so that a test's finally clause tears the fabric down.
  make_tmp(prefix): a temporary directory with mode 0755 (daemons and unprivileged helpers reach
    it); the caller removes it.
  control_exchange(path, lines, read_lines): a raw JSON-lines client of a control socket (for
    requests mrctl would refuse to send); returns the decoded answers and whether the daemon
    closed the connection. error_code(answer) is an answer's error code (or None).
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

PASS, FAIL, SKIP = 0, 1, 77

# What a test reports as "aborted: ..." rather than as a crash.
ABORTS = (RuntimeError, subprocess.TimeoutExpired, KeyboardInterrupt, OSError,
          json.JSONDecodeError)


# ---------------------------------------------------------------- skips

def have_root(needs="namespaces, XDP"):
    if os.geteuid() != 0:
        print("skip: needs root (%s)" % needs)
        return False
    return True


def have_tools(*names):
    for tool in names:
        if shutil.which(tool) is None:
            print("skip: no `%s`" % tool)
            return False
    return True


def have_netns():
    if shutil.which("ip") is None or subprocess.run(["ip", "netns", "list"],
                                                    capture_output=True).returncode != 0:
        print("skip: no `ip netns`")
        return False
    return True


# ---------------------------------------------------------------- reporting

def finish(failures):
    """Prints the failures (or "all passed"); returns the exit code."""
    if failures:
        print("FAILED:\n  " + "\n  ".join(failures))
        return FAIL
    print("all passed")
    return PASS


class Failures(list):
    def __init__(self, width=66, flush=False):
        super().__init__()
        self.width = width
        self.flush = flush

    def check(self, ok, what):
        print("%-*s %s" % (self.width, what, "ok" if ok else "FAIL"), flush=self.flush)
        if not ok:
            self.append(what)
        return ok

    def abort(self, e, daemons=None):
        self.append("aborted: %s" % e)
        print("aborted: %s" % e)
        traceback.print_exc(file=sys.stdout)
        if daemons is not None:
            daemons.dump_logs()

    def finish(self):
        return finish(self)


# ---------------------------------------------------------------- the fabric

def host_ns(name, host):
    return "mrf-%s-h%d" % (name, host)


def leaf_ns(name, plane, leaf=0):
    return "mrf-%s-p%dl%d" % (name, plane, leaf)


class Fabric:
    """mrfabric for one fabric NAME. Errors name `mrfabric CMD`, or the whole command line
    when whole_command_in_errors."""

    def __init__(self, mrfabric, name, timeout=120, whole_command_in_errors=False):
        self.mrfabric = mrfabric
        self.name = name
        self.timeout = timeout
        self.whole_command_in_errors = whole_command_in_errors

    def __call__(self, *args, check=True):
        cmd = [self.mrfabric, args[0], "--name", self.name] + list(args[1:])
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=self.timeout)
        if check and p.returncode != 0:
            what = " ".join(cmd) if self.whole_command_in_errors else "mrfabric %s" % args[0]
            raise RuntimeError("%s: %s" % (what, (p.stderr or p.stdout).strip()))
        return p

    def up(self, *extra):
        return self("up", "--hosts", "2", "--planes", "2", "--spines", "2", *extra)

    def down(self):
        return self("down", check=False)

    def prepare(self):
        """Before the try that tears it down: SIGTERM raises KeyboardInterrupt, and a fabric of
        this name left over from an earlier run is torn down."""
        interrupt_on_sigterm()
        self.down()

    def ns(self, host):
        return host_ns(self.name, host)

    def view(self):
        """The `mrfabric show -j` document: topology, faults, counters."""
        return json.loads(self("show", "-j").stdout)

    def drops(self):
        return fault_drops(self.view())


def fault_drops(view):
    """{(plane, spine): packets its fault program dropped since it was loaded} from `mrfabric
    show -j`; spines without the program (counters.fault null) are left out."""
    out = {}
    for pl in view["planes"]:
        for sp in pl["spines"]:
            c = sp.get("counters", {}).get("fault")
            if c is not None:
                out[(pl["plane"], sp["index"])] = c["drop_random"] + c["drop_blackhole"]
    return out


# ---------------------------------------------------------------- faults, proved

class SideThreadFailed(RuntimeError):
    """What a SideThread's function raised, re-raised where the thread is joined."""


class SideThread:
    """fn() in a thread of its own, delay_s after start(), while the caller does something else
    (runs traffic). What fn raises is kept and re-raised by join(), never lost."""

    def __init__(self, what, fn, delay_s=0.0):
        self.what = what
        self.result = None
        self.began = False
        self._fn = fn
        self._delay_s = delay_s
        self._cancel = threading.Event()
        self._error = None
        self._thread = threading.Thread(target=self._run, name=what, daemon=True)

    def _run(self):
        if self._cancel.wait(self._delay_s):
            return  # cancelled before the delay was over: fn never runs
        self.began = True
        try:
            self.result = self._fn()
        except BaseException as e:  # noqa: B902 -- every exception, to re-raise in the joiner
            self._error = e

    def start(self):
        self._thread.start()
        return self

    def cancel(self):
        """fn will not run if it still waits for its delay (a running fn is not interrupted)."""
        self._cancel.set()

    def join(self):
        """Waits for the thread; raises SideThreadFailed from fn's exception; returns fn's result."""
        self._thread.join()
        if self._error is not None:
            e, self._error = self._error, None
            raise SideThreadFailed("%s: %s: %s" % (self.what, type(e).__name__, e)) from e
        return self.result

    def __enter__(self):
        return self.start()

    def __exit__(self, exc_type, exc, tb):
        self.cancel()
        try:
            self.join()
        except SideThreadFailed as e:
            if exc_type is None:
                raise
            sys.stderr.write("meanwhile %s\n" % e)  # the block's own exception propagates
            return False
        if exc_type is None and not self.began:
            raise SideThreadFailed("%s never ran: the block ended within its delay of %g s" %
                                   (self.what, self._delay_s))
        return False


class FaultNotProved(RuntimeError):
    """A fault whose spines dropped nothing: it never acted, and the run proves nothing."""


def _selected(key, spine, plane):
    return (spine == "all" or key[1] == int(spine)) and (plane == "all" or key[0] == int(plane))


class FaultDrops:
    """The fault program's drop counters of every spine, read when made: require() proves
    that a fault set since dropped packets."""

    def __init__(self, fabric):
        self.fabric = fabric
        self.before = fabric.drops()

    def require(self, what, spine="all", plane="all"):
        """Packets spine SPINE of plane PLANE ("all": every one) dropped since this was made;
        FaultNotProved (naming what) when none, or when no such spine has the fault program."""
        after = self.fabric.drops()
        keys = [k for k in after if _selected(k, spine, plane)]
        where = "spine %s, plane %s" % (spine, plane)
        if not keys:
            raise FaultNotProved("%s: no fault program on %s, so nothing can prove the fault: "
                                 "build bpf/fabric_fault (meson compile) or set MRFABRIC_BPF_OBJ"
                                 % (what, where))
        dropped = {k: after[k] - self.before.get(k, 0) for k in sorted(keys)}
        total = sum(dropped.values())
        if total == 0:
            raise FaultNotProved("%s: the fault never acted: its program on %s dropped nothing "
                                 "(per (plane, spine): %s)" % (what, where, dropped))
        return total


class SpineFault:
    """`mrfabric fault SPINE [--plane P] [--udp-dport D] WHAT...` over a `with` block that runs
    traffic, set at entry or delay_s after it (a SideThread: mid-run), proved by the spines'
    drop counters at exit, and cleared at exit."""

    def __init__(self, fabric, spine, *what, plane="all", udp_dport=None, delay_s=None):
        self.fabric = fabric
        self.spine = str(spine)
        self.plane = str(plane)
        self.args = (["fault", self.spine, "--plane", self.plane] +
                     (["--udp-dport", str(udp_dport)] if udp_dport is not None else []) +
                     list(what))
        self.label = "mrfabric " + " ".join(self.args)
        self.delay_s = delay_s
        self.dropped = None
        self._side = None
        self._drops = None
        self._entered = self._set_at = None

    def _set(self):
        self.fabric(*self.args)
        self._set_at = time.monotonic()

    def __enter__(self):
        self._drops = FaultDrops(self.fabric)
        self._entered = time.monotonic()
        if self.delay_s is None:
            self._set()
        else:
            self._side = SideThread(self.label, self._set, self.delay_s).start()
        return self

    def __exit__(self, exc_type, exc, tb):
        proved = False
        try:
            if self._side is not None:
                self._side.__exit__(exc_type, exc, tb)
            if exc_type is None:
                # When it took effect within the block: a fault set late acts on no traffic.
                what = "%s (in effect %.1f s after the block began, which lasted %.1f s)" % (
                    self.label, self._set_at - self._entered, time.monotonic() - self._entered)
                self.dropped = self._drops.require(what, self.spine, self.plane)
                proved = True
        finally:
            # When something already failed, that failure is the one to report.
            self.fabric("fault", self.spine, "--plane", self.plane, "clear", check=proved)
        return False


# ---------------------------------------------------------------- processes

def interrupt_on_sigterm():
    def interrupt(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)


def make_tmp(prefix):
    tmp = tempfile.mkdtemp(prefix=prefix)
    os.chmod(tmp, 0o755)
    return tmp


def kill_all(procs, timeout=10):
    """SIGKILLs and reaps every process still running (timeout None: wait as long as it takes)."""
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.wait(timeout=timeout)


def stop(p, timeout=20):
    """SIGTERM (after SIGCONT, should it be stopped); SIGKILL when it outlives the timeout."""
    if p.poll() is None:
        p.send_signal(signal.SIGCONT)
        p.terminate()
        try:
            p.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


# ---------------------------------------------------------------- metaroced and mrctl

class Daemons:
    """One metaroced per host of a fabric, each with its control socket and log in tmp."""

    def __init__(self, metaroced, mrctl, ns, tmp, hosts=(0, 1), config=None, extra_args=(),
                 log_tail=2000, json_version=None):
        self.metaroced = metaroced
        self.mrctl = mrctl
        self.ns = ns
        self.tmp = tmp
        self.config = config
        self.extra_args = list(extra_args)
        self.log_tail = log_tail
        self.json_version = json_version
        self.sock = {h: os.path.join(tmp, "h%d.sock" % h) for h in hosts}
        self.procs = {}
        self.logs = {}

    def start(self, h):
        self.logs[h] = open(os.path.join(self.tmp, "h%d.log" % h), "w+")
        # nsenter, not `ip netns exec`: the latter remounts /sys, hiding bpffs from the daemon.
        # nsenter execs the daemon: Popen's pid is the daemon's.
        config = ["--config", self.config] if self.config is not None else []
        self.procs[h] = subprocess.Popen(
            ["nsenter", "--net=/run/netns/" + self.ns(h), self.metaroced] + config +
            ["--interface", "pl0,pl1", "--socket", self.sock[h]] + self.extra_args,
            stdout=self.logs[h], stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.procs[h].poll() is not None:
                raise RuntimeError("metaroced on host %d exited %d: %s" %
                                   (h, self.procs[h].returncode, self.log_of(h)))
            if self.ctl(h, "daemon", "show").returncode == 0:
                return
            time.sleep(0.2)
        raise RuntimeError("metaroced on host %d did not answer within 20 s: %s" %
                           (h, self.log_of(h)))

    def start_all(self):
        for h in self.sock:
            self.start(h)

    def log_of(self, h):
        self.logs[h].flush()
        self.logs[h].seek(0)
        return self.logs[h].read().strip()[-self.log_tail:]

    def dump_logs(self):
        for h in self.logs:
            print("--- metaroced host %d log:\n%s" % (h, self.log_of(h)))

    def close_logs(self):
        for log in self.logs.values():
            log.close()

    def ctl(self, h, *args, user=None):
        cmd = [self.mrctl, "-s", self.sock[h]] + list(args)
        if user is not None:
            cmd = ["setpriv", "--reuid=%d" % user, "--regid=%d" % user, "--clear-groups"] + cmd
        return subprocess.run(["ip", "netns", "exec", self.ns(h)] + cmd, capture_output=True,
                              text=True, timeout=60)

    def ctl_json(self, h, *args):
        p = self.ctl(h, "-j", *args)
        if p.returncode != 0:
            raise RuntimeError("mrctl %s: exit %d: %s" % (" ".join(args), p.returncode,
                                                          p.stderr.strip()))
        doc = json.loads(p.stdout)
        if self.json_version is not None and doc.get("version") != self.json_version:
            raise RuntimeError("mrctl -j %s: no version %d in %r" %
                               (" ".join(args), self.json_version, doc))
        return doc

    def kill_all(self):
        kill_all(self.procs.values())

    def terminate_all(self, timeout=20):
        for p in self.procs.values():
            stop(p, timeout)


def control_exchange(path, lines, read_lines):
    """Sends raw lines on the control socket at path (inside the host's namespace is not
    needed: a Unix socket is a file); returns the decoded response lines and whether it closed."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(path)
    try:
        for line in lines:
            s.sendall(line if isinstance(line, bytes) else line.encode())
    except (BrokenPipeError, ConnectionResetError):
        pass  # the daemon closed while we still wrote (an over-long line): read its answer
    out, buf, closed = [], b"", False
    while len(out) < read_lines:
        try:
            chunk = s.recv(65536)
        except socket.timeout:
            break
        except ConnectionResetError:
            closed = True
            break
        if not chunk:
            closed = True
            break
        buf += chunk
        while b"\n" in buf:
            one, buf = buf.split(b"\n", 1)
            out.append(json.loads(one))
    if not closed and len(out) >= read_lines:
        s.settimeout(0.5)
        try:
            closed = s.recv(1) == b""
        except socket.timeout:
            closed = False
        except ConnectionResetError:
            closed = True  # closed with our unread bytes in its buffer: a reset
    s.close()
    return out, closed


def error_code(answer):
    return answer.get("error", {}).get("code")

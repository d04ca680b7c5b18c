"""Shared harness of the privileged end-to-end Python tests on a namespace fabric
(tools/fabric/mrfabric): daemon_fabric, daemon_attach, daemon_metrics, trace, dissector and
perf_fabric. Standard library only. A test imports it with

    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
    import fabric_harness as harness

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

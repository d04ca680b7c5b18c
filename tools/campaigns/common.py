"""What every campaign mode shares: where the repository and its builds are, progress lines on
stderr, and the JSON summary on stdout.

Progress never goes to stdout: stdout carries only the summary, so that
`tools/campaign MODE ... | jq` always reads one JSON document.
"""
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# Exit statuses of every mode (tools/campaign's header).
EXIT_CLEAN = 0
EXIT_FOUND = 1
EXIT_CANNOT_RUN = 2


class CannotRun(Exception):
    """The campaign cannot start (a binary is missing, ...); the message names the fix."""


def repo_path(*parts):
    return os.path.join(ROOT, *parts)


def from_env(variable, *default_parts):
    """$variable when set and non-empty, else the path under the repository root; absolute
    either way (campaigns run their binaries from work directories)."""
    value = os.environ.get(variable)
    return os.path.abspath(value) if value else repo_path(*default_parts)


def default_jobs():
    """Every CPU this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


def positive_int(text):
    value = int(text)
    if value <= 0:
        raise ValueError("must be positive")
    return value


def format_duration(seconds):
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds // 60 % 60:02d}m"


def format_count(n):
    for limit, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if n >= limit:
            return f"{n / limit:.1f}{suffix}"
    return str(int(n))


class Progress:
    """Progress lines on stderr: at most one every `interval` seconds (and the last one always).

    On a terminal each line overwrites the previous one; otherwise (CI logs) lines are appended,
    every `interval` seconds.
    """

    def __init__(self, label, interval=None):
        self.label = label
        self.tty = sys.stderr.isatty()
        self.interval = interval if interval is not None else (1.0 if self.tty else 10.0)
        self.start = time.monotonic()
        self.last = 0.0
        self.open_line = False

    def elapsed(self):
        return time.monotonic() - self.start

    def update(self, text, force=False):
        now = time.monotonic()
        if not force and now - self.last < self.interval:
            return
        self.last = now
        line = f"{self.label}: {text}"
        if self.tty:
            sys.stderr.write("\r\033[K" + line)
            self.open_line = True
        else:
            sys.stderr.write(line + "\n")
        sys.stderr.flush()

    def note(self, text):
        """A line that stays (a failure found, a phase begun)."""
        if self.open_line:
            sys.stderr.write("\r\033[K")
            self.open_line = False
        sys.stderr.write(f"{self.label}: {text}\n")
        sys.stderr.flush()
        self.last = 0.0  # the progress line comes back at once

    def finish(self):
        if self.open_line:
            sys.stderr.write("\n")
            sys.stderr.flush()
            self.open_line = False


def rate_and_eta(done, total, elapsed):
    """(per second, seconds left or None) from work done so far."""
    rate = done / elapsed if elapsed > 0 else 0.0
    left = (total - done) / rate if rate > 0 else None
    return rate, left


def emit_summary(summary):
    """The summary, last on stdout: one JSON object."""
    sys.stdout.write(json.dumps(summary, indent=2, sort_keys=False) + "\n")
    sys.stdout.flush()

"""A real `cubicle serve` for the tests, in a temporary directory of its own.

The binary comes from $CUBICLE_BIN (ctest sets it). As root, the daemon
runs in a mount namespace of its own (`unshare -m`): each session's
workspace is a tmpfs it mounts under its state directory, and such mounts
outlive a daemon by design, so they must never land in the mount table
other tests compare; the namespace, and every mount in it, ends with the
daemon. Every wait here is a bound for failures, never a measurement.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import unittest
from typing import Dict, List, Optional, Tuple

BINARY = os.environ.get("CUBICLE_BIN", "")
ROOT = os.geteuid() == 0

ADMIN_KEY = "admin-" + "0123456789abcdef" * 2
HEALTH_KEY = "health-" + "0123456789abcdef" * 2
SIGNING_NAME = "signer"
SIGNING_SECRET = "signer-secret-" + "fedcba9876543210" * 2

# The repository's example skills, served by name.
EXAMPLE_SKILLS = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "..", "examples", "skills"))

# Small pools, so that a daemon is up and warm quickly; limits, so that
# every sandbox has a cgroup (whose removal the cleanup test checks).
CONFIG = {
    "profiles": {
        "shell": {"limits": {"memory": "256M", "pids": 64}, "timeout_ms": 30000, "max_timeout_ms": 60000,
                  "pool": {"min_idle": 1, "max_idle": 2, "max_total": 8}},
        "python": {"limits": {"memory": "256M", "pids": 64}, "timeout_ms": 30000, "max_timeout_ms": 60000,
                   "pool": {"min_idle": 1, "max_idle": 2, "max_total": 8},
                   "interpreter": {"argv": ["python3", "-I"], "preload": ["json"]}},
    },
    "sessions": {"max_sessions": 8, "workspace_bytes": "16M"},
    "skills": {"dir": EXAMPLE_SKILLS},
}


def require_binary() -> None:
    if not BINARY or not os.access(BINARY, os.X_OK):
        raise unittest.SkipTest("CUBICLE_BIN does not name the cubicle binary (ctest sets it)")


def require_root(why: str) -> None:
    if not ROOT:
        raise unittest.SkipTest(f"needs root: {why}")


def isolation_prefix() -> List[str]:
    """Runs the daemon in a private mount namespace as root (see the module's doc)."""
    return ["unshare", "--mount", "--propagation", "private"] if ROOT else []


def write_json(path: str, value: object, mode: int = 0o644) -> str:
    with open(path, "w") as f:
        json.dump(value, f)
    os.chmod(path, mode)
    return path


class Workdir:
    """A temporary directory with the daemon's config, keys and state dir."""

    def __init__(self, config: Optional[dict] = None) -> None:
        self.path = tempfile.mkdtemp(prefix="itest-pyclient-")
        self.state = os.path.join(self.path, "state")
        os.mkdir(self.state, 0o700)
        self.roots = os.path.join(self.path, "roots")
        os.mkdir(self.roots, 0o755)
        cfg = dict(config or CONFIG)
        if ROOT:
            cfg["workspace_roots"] = [self.roots]
        self.config = write_json(self.join("config.json"), cfg)
        self.keys = write_json(self.join("keys.json"), {"keys": [
            {"name": "admin", "key": ADMIN_KEY},
            {"name": "health-only", "key": HEALTH_KEY, "methods": ["health"]},
            {"name": SIGNING_NAME, "key": SIGNING_SECRET},
        ]}, 0o600)
        self.log = self.join("daemon.log")

    def join(self, *parts: str) -> str:
        return os.path.join(self.path, *parts)

    def log_text(self) -> str:
        try:
            with open(self.log, errors="replace") as f:
                return f.read()[-4000:]
        except OSError:
            return ""

    def remove(self) -> None:
        shutil.rmtree(self.path)


def process_start(pid: int) -> Optional[str]:
    """A process's start time (field 22 of /proc/PID/stat): with the pid, who it is."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def descendants(pid: int) -> List[Tuple[int, str]]:
    """The processes below `pid`, each with its start time."""
    children: Dict[int, List[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue  # gone meanwhile
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [pid]
    while todo and len(found) < 10000:
        for child in children.get(todo.pop(), []):
            start = process_start(child)
            if start is not None:
                found.append((child, start))
                todo.append(child)
    return found


def alive(processes: List[Tuple[int, str]]) -> List[int]:
    """Those of `processes` that still run (the same pid with the same start time)."""
    return [pid for pid, start in processes if process_start(pid) == start]


def cgroups_made_by(pids: List[int]) -> List[str]:
    """Directories under /sys/fs/cgroup that these processes made: cubicle names
    them cubicle-PID-N (cgroups/)."""
    prefixes = tuple(f"cubicle-{pid}-" for pid in pids)
    found: List[str] = []
    for root, dirs, _ in os.walk("/sys/fs/cgroup"):
        if root.count("/") > 40:
            dirs[:] = []
            continue
        found.extend(os.path.join(root, d) for d in dirs if d.startswith(prefixes))
    return found


class SocketDaemon:
    """`cubicle serve --socket` and `--listen 127.0.0.1:0`, keys and a state dir."""

    def __init__(self, workdir: Workdir, http: bool = True, prefix: Optional[List[str]] = None) -> None:
        """`prefix` replaces isolation_prefix() (it must isolate as well)."""
        require_binary()
        self.workdir = workdir
        self.socket = workdir.join("rpc.sock")
        self.port: Optional[int] = None
        port_file = workdir.join("port")
        argv = [*(isolation_prefix() if prefix is None else prefix), BINARY, "serve", "--socket", self.socket, "--config", workdir.config,
                "--state-dir", workdir.state]
        if http:
            argv += ["--listen", "127.0.0.1:0", "--listen-port-file", port_file, "--keys-file", workdir.keys]
        with open(workdir.log, "ab") as log:
            self.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log)
        if not self._wait_until_up(port_file if http else None):
            self.stop()
            raise AssertionError(f"the daemon did not come up: {workdir.log_text()}")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _wait_until_up(self, port_file: Optional[str]) -> bool:
        for _ in range(2000):  # at most 20 s
            if self.process.poll() is not None:
                return False
            if self._accepts() and (port_file is None or self._read_port(port_file)):
                return True
            time.sleep(0.01)
        return False

    def _accepts(self) -> bool:
        with socket.socket(socket.AF_UNIX) as s:
            try:
                s.connect(self.socket)
                return True
            except OSError:
                return False

    def _read_port(self, port_file: str) -> bool:
        try:
            with open(port_file) as f:
                self.port = int(f.read().strip())
            return True
        except (OSError, ValueError):
            return False

    def stop(self) -> int:
        """SIGTERM (a drain), then its exit status; SIGKILL only past 60 s."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.process.kill()
            return self.process.wait()


def leftovers(pid: int, below: List[Tuple[int, str]]) -> List[str]:
    """What a daemon that has exited left: its processes, its cgroups."""
    left = [f"process {p}" for p in alive(below)]
    left += cgroups_made_by([pid] + [p for p, _ in below])
    return left


def workspace_mounts(pid: int, under: str) -> List[str]:
    """The session workspaces (cubicle-workspace tmpfs) mounted below `under`
    in the mount namespace of process `pid`."""
    try:
        with open(f"/proc/{pid}/mountinfo") as f:
            lines = f.read().splitlines()
    except OSError:
        return []
    return [line.split()[4] for line in lines
            if "cubicle-workspace" in line and line.split()[4].startswith(under + "/")]

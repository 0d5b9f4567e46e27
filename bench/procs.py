"""Child processes of the bench: start, stop, and read their CPU time and memory from /proc (Linux)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

REPO = Path(__file__).resolve().parent.parent
_TICKS = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass(frozen=True, slots=True)
class ProcStats:
    """CPU seconds (user + system) so far, resident memory now and at its peak, in MiB."""

    cpu_s: float
    rss_mib: float
    peak_rss_mib: float


def proc_stats(pid: int) -> ProcStats:
    """Read /proc/PID/stat and /proc/PID/status."""
    with open(f"/proc/{pid}/stat") as f:
        # The command name (field 2) may hold spaces; everything after its ')' is space separated.
        fields = f.read().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / _TICKS  # utime, stime (fields 14 and 15)
    rss = peak = 0.0
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) / 1024
            elif line.startswith("VmHWM:"):
                peak = int(line.split()[1]) / 1024
    return ProcStats(cpu, rss, peak)


class Child:
    """One child process with its output in a log file; stopped with SIGTERM, then SIGKILL."""

    def __init__(self, name: str, argv: list[str], log_path: Path, *, env: dict[str, str] | None = None,
                 cwd: Path | None = None, prefix: list[str] | None = None) -> None:
        self.name = name
        self.argv = argv
        # Run before argv, which it must exec in place (same pid): e.g. `taskset -c 1` (bench.pi).
        self.prefix = list(prefix or [])
        self.log_path = log_path
        self._env = env
        self._cwd = cwd
        self.proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self.started_at = 0.0

    def start(self) -> None:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **(self._env or {})}
        env.pop("NOTIFY_SOCKET", None)
        self.started_at = time.monotonic()
        self.proc = subprocess.Popen([*self.prefix, *self.argv], stdin=subprocess.DEVNULL, stdout=self._log,
                                     stderr=subprocess.STDOUT, env=env, cwd=self._cwd)

    @property
    def pid(self) -> int:
        assert self.proc is not None, f"{self.name} was not started"
        return self.proc.pid

    def stats(self) -> ProcStats:
        return proc_stats(self.pid)

    def check_alive(self) -> None:
        """Raise with the end of the log if the process has exited."""
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{self.log_tail()}")

    def stop(self, timeout_s: float = 10.0) -> int | None:
        proc = self.proc
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
        if self._log is not None:
            self._log.close()
            self._log = None
        return proc.returncode

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


def python_child(name: str, module: str, args: list[str], log_path: Path, **kwargs: object) -> Child:
    """`python -m module args` with the repository on the path."""
    path = [str(REPO), os.environ.get("PYTHONPATH", "")]
    env = {"PYTHONPATH": os.pathsep.join(p for p in path if p)}
    return Child(name, [sys.executable, "-m", module, *args], log_path, env=env, **kwargs)  # type: ignore[arg-type]


def wait_port(port: int, timeout_s: float = 10.0, child: Child | None = None) -> None:
    """Wait until 127.0.0.1:port accepts connections."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if child is not None:
            child.check_alive()
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.02)
    raise RuntimeError(f"nothing listens on port {port} after {timeout_s} s")


class Broker:
    """A mosquitto for the bench: loopback, TCP_NODELAY, no persistence, a raised in-flight window."""

    def __init__(self, workdir: Path, *, max_inflight: int) -> None:
        self.port = free_port()
        binary = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
        if not Path(binary).exists():
            raise RuntimeError("mosquitto is not installed (apt-get install mosquitto)")
        config = workdir / "mosquitto.conf"
        workdir.mkdir(parents=True, exist_ok=True)
        lines = [
            "user root" if os.geteuid() == 0 else "",
            f"listener {self.port} 127.0.0.1",
            "allow_anonymous true",
            "set_tcp_nodelay true",
            # Sessions live in memory: the broker is never restarted during a run.
            "persistence false",
            # hubd acknowledges a QoS 1 message only after its SQLite commit, so this window bounds how
            # many messages one commit can cover (mosquitto's default is 20).
            f"max_inflight_messages {max_inflight}",
            "max_queued_messages 1000000",
            "max_queued_bytes 0",
            "log_dest stderr",
            "log_type error",
            "log_type warning",
        ]
        config.write_text("\n".join(line for line in lines if line) + "\n")
        self.child = Child("mosquitto", [binary, "-c", str(config)], workdir / "mosquitto.log")

    def start(self) -> None:
        self.child.start()
        wait_port(self.port, child=self.child)

    def stop(self) -> None:
        self.child.stop()

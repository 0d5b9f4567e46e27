"""podman on the host, set up for a systemd container on a host without systemd: runc (crun refuses hybrid
cgroups), cgroupfs, file events, storage under the cache directory, explicit ulimits (podman's defaults may
exceed the host's hard limits), no network. `Container` runs commands in a booted container and waits for
systemd's answers with a deadline. Imports nothing from hubd.
"""

from __future__ import annotations

import json
import resource
import subprocess
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import IO, Any

from tests.system.cache import HostCommandFailed, cache_dir, host_run

BOOT_TIMEOUT_S = 120.0
EXEC_TIMEOUT_S = 120.0
POLL_S = 0.2  # between two looks at a condition
CONTAINER_NOFILE = 20000  # hubd's unit asks for 4096
CONTAINER_NPROC = 32768


class Podman:
    """The podman command with this project's storage and runtime."""

    def __init__(self) -> None:
        root = cache_dir() / "podman"
        self.argv = ["podman", "--root", str(root / "storage"), "--runroot", str(root / "run"),
                     "--storage-driver", "overlay", "--cgroup-manager", "cgroupfs", "--events-backend", "file",
                     "--runtime", "runc"]

    def run_host(self, args: Sequence[str], *, what: str, timeout_s: float,
                 stdin_from: IO[bytes] | None = None) -> str:
        """One podman command on the host; its stdout."""
        if stdin_from is None:
            return host_run([*self.argv, *args], what=what, timeout_s=timeout_s)
        result = subprocess.run([*self.argv, *args], stdin=stdin_from, capture_output=True, timeout=timeout_s,
                                check=False)
        if result.returncode != 0:
            raise HostCommandFailed(f"{what} failed: {result.stderr.decode(errors='replace')[-2000:]}")
        return result.stdout.decode()

    def image_exists(self, tag: str) -> bool:
        """Whether the storage holds the image."""
        return subprocess.run([*self.argv, "image", "exists", tag], capture_output=True, check=False).returncode == 0

    def images(self, name: str) -> list[str]:
        """The tags of `name` in the storage."""
        out = self.run_host(["images", "--format", "json", name], what="podman images", timeout_s=60)
        return [n for image in json.loads(out or "[]") for n in image.get("Names") or []]

    def boot(self, name: str, image: str, *, mounts: Sequence[tuple[Path, str]]) -> Container:
        """Start `image` with systemd as PID 1 and wait until the boot is over."""
        self.remove(name)
        # podman's defaults (a million) exceed hosts' hard limits, and runc refused more processes than this
        # on a host whose hard limit was 96365: enough for systemd and a few services, never above the host's.
        nofile = min(_hard_limit(resource.RLIMIT_NOFILE), CONTAINER_NOFILE)
        nproc = min(_hard_limit(resource.RLIMIT_NPROC), CONTAINER_NPROC)
        volumes = [arg for host, guest in mounts for arg in ("-v", f"{host}:{guest}:ro")]
        self.run_host(["run", "-d", "--name", name, "--systemd=always", "--network", "none",
                       # SYS_ADMIN: the units' mount namespaces (ProtectSystem=...); SYS_PTRACE: a test stalls
                       # hubd's event loop alone by stopping its thread with ptrace.
                       "--cap-add", "SYS_ADMIN", "--cap-add", "SYS_PTRACE",
                       "--ulimit", f"nofile={nofile}:{nofile}", "--ulimit", f"nproc={nproc}:{nproc}",
                       *volumes, image, "/sbin/init"], what="podman run", timeout_s=120)
        container = Container(self, name)
        container.wait_booted()
        return container

    def remove(self, name: str) -> None:
        """Remove the container (stopping it first); nothing if there is none."""
        subprocess.run([*self.argv, "rm", "-f", "-t", "2", name], capture_output=True, timeout=120, check=False)


class Container:
    """A booted systemd container: commands in it, systemd's properties, waiting for them."""

    def __init__(self, podman: Podman, name: str) -> None:
        self.podman = podman
        self.name = name

    def run(self, argv: Sequence[str], *, check: bool = True, input_text: str | None = None,
            timeout_s: float = EXEC_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
        """Run argv in the container (as root); AssertionError with its output when `check` and it fails."""
        result = subprocess.run([*self.podman.argv, "exec", *(["-i"] if input_text is not None else []), self.name,
                                 *argv], input=input_text, capture_output=True, text=True, timeout=timeout_s,
                                check=False)
        if check and result.returncode != 0:
            raise AssertionError(f"{' '.join(argv)} exited {result.returncode} in the container:\n"
                                 f"{result.stdout[-2000:]}{result.stderr[-2000:]}")
        return result

    def out(self, *argv: str) -> str:
        """Run argv and return its stdout, stripped."""
        return self.run(argv).stdout.strip()

    def write(self, path: str, text: str, *, mode: str = "0644") -> None:
        """Write a file in the container."""
        self.run(["sh", "-c", 'umask 077; cat > "$1" && chmod "$2" "$1"', "write", path, mode], input_text=text)

    def show(self, unit: str, *props: str) -> dict[str, str]:
        """`systemctl show` properties of a unit."""
        out = self.out("systemctl", "show", unit, *(f"--property={p}" for p in props))
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def prop(self, unit: str, name: str) -> str:
        """One `systemctl show` property."""
        return self.show(unit, name).get(name, "")

    def main_pid(self, unit: str) -> int:
        """The unit's MainPID (0 when it has none)."""
        return int(self.prop(unit, "MainPID") or 0)

    def wait_for(self, what: str, condition: Callable[[], Any], *, timeout_s: float) -> Any:
        """Poll `condition` until it returns something true; AssertionError naming `what` at the deadline."""
        deadline = time.monotonic() + timeout_s
        while True:
            value = condition()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: not so within {timeout_s:.0f} s (last: {value!r})")
            time.sleep(POLL_S)

    def wait_state(self, unit: str, *, timeout_s: float, **wanted: str) -> dict[str, str]:
        """Wait until the unit's properties have the wanted values, e.g. ActiveState="active"."""
        def matches() -> dict[str, str] | None:
            props = self.show(unit, *wanted)
            return props if all(props.get(k) == v for k, v in wanted.items()) else None

        try:
            result: dict[str, str] = self.wait_for(f"{unit} {wanted}", matches, timeout_s=timeout_s)
        except AssertionError as err:
            raise AssertionError(f"{err}\n{self.status(unit)}") from None
        return result

    def status(self, unit: str) -> str:
        """`systemctl status` and the unit's last journal lines, for a failure's message."""
        status = self.run(["systemctl", "status", "--no-pager", "-l", unit], check=False).stdout
        return status + self.run(["journalctl", "-u", unit, "-n", "40", "--no-pager"], check=False).stdout

    def journal_cursor(self) -> str:
        """The journal's current end, to read only what comes after it."""
        out = self.run(["journalctl", "-n", "0", "--show-cursor", "--no-pager"]).stdout
        return out.rsplit("-- cursor: ", 1)[1].strip()

    def journal(self, unit: str, *, after: str) -> str:
        """The unit's messages (systemd's about it included) since the cursor."""
        return self.run(["journalctl", "-u", unit, "--after-cursor", after, "-o", "cat", "--no-pager"]).stdout

    def wait_booted(self) -> None:
        """Until systemd says the boot is over (running, or degraded: a unit this container cannot run)."""
        def booted() -> str | None:
            try:
                result = self.run(["systemctl", "is-system-running"], check=False, timeout_s=10)
            except subprocess.TimeoutExpired:
                return None
            state = result.stdout.strip()
            return state if state in ("running", "degraded") else None

        self.wait_for("systemd in the container booted", booted, timeout_s=BOOT_TIMEOUT_S)
        comm = self.out("cat", "/proc/1/comm")
        assert comm == "systemd", f"PID 1 in the container is {comm!r}, not systemd"


def _hard_limit(which: int) -> int:
    hard = resource.getrlimit(which)[1]
    return 1 << 20 if hard == resource.RLIM_INFINITY else min(hard, 1 << 20)

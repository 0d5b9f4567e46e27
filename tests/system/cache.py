"""Where the system tests keep what outlives a run (Debian root file systems, podman's storage), and the
commands they run on the host, timed and with their output kept for the error message.

CI may keep this directory between runs: `HUBD_SYSTEM_CACHE`, else `$XDG_CACHE_HOME/hubd-system-tests`, else
`~/.cache/hubd-system-tests`. Imports nothing from hubd.
"""

from __future__ import annotations

import hashlib
import logging
import os
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[2]
DEBIAN_SUITE = "bookworm"  # systemd 252, Python 3.11: Raspberry Pi OS and Debian 12
DEBIAN_MIRROR = os.environ.get("HUBD_DEBIAN_MIRROR", "http://deb.debian.org/debian")


class HostCommandFailed(Exception):
    """A command on the host failed; the message holds its output's tail."""


def cache_dir() -> Path:
    """The directory CI may keep between runs (created)."""
    configured = os.environ.get("HUBD_SYSTEM_CACHE")
    if configured:
        path = Path(configured)
    else:
        path = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "hubd-system-tests"
    path.mkdir(parents=True, exist_ok=True)
    return path


def recipe_key(*parts: str) -> str:
    """A short hash of what a cached thing was made from: a change to any part makes a new one."""
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def host_run(argv: Sequence[str], *, what: str, timeout_s: float, cwd: Path | None = None,
             env: Mapping[str, str] | None = None, stdin: bytes | None = None) -> str:
    """Run argv on the host to its end and return its stdout; HostCommandFailed with the output's tail."""
    started = time.monotonic()
    try:
        result = subprocess.run(list(argv), cwd=cwd, env=None if env is None else dict(env), input=stdin,
                                capture_output=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired as err:
        raise HostCommandFailed(f"{what}: still running after {timeout_s:.0f} s: {' '.join(argv)}") from err
    log.info("%s: %.1f s", what, time.monotonic() - started)
    out = result.stdout.decode(errors="replace")
    if result.returncode != 0:
        tail = (out + result.stderr.decode(errors="replace"))[-3000:]
        raise HostCommandFailed(f"{what} failed (exit {result.returncode}): {' '.join(argv)}\n{tail}")
    return out

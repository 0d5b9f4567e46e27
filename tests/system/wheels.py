"""hubd and its dependencies as wheels for Debian bookworm's Python (3.11) on amd64 or arm64, made on the host:
the containers and the arm64 root file system have no network.

hubd's own wheel is built from a copy of the working tree (pip builds in place); every dependency is
downloaded as a binary wheel only (`--only-binary=:all:`) for the target's platform, so a dependency without a
wheel for it fails here, by name, instead of needing a compiler on the Pi. The wheel and the platform tags are the
Debian packages' (debpkg.build): what the system tests install is what the packages carry.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from debpkg.build import TARGET_PYTHON, build_hubd_wheel, platform_tags
from tests.system.cache import host_run

WHEEL_TIMEOUT_S = 900.0


def build_wheels(out: Path, *, machine: str, extra: Sequence[str] = ()) -> Path:
    """hubd's wheel and every dependency's (plus `extra` requirements) in `out`; the path of hubd's wheel."""
    out.mkdir(parents=True, exist_ok=True)
    wheel = build_hubd_wheel(out, out.parent / f"{out.name}-source")
    pip = [sys.executable, "-m", "pip"]
    platforms = [arg for tag in platform_tags(machine) for arg in ("--platform", tag)]
    host_run([*pip, "download", "-q", "--only-binary=:all:", "--python-version", TARGET_PYTHON,
              "--implementation", "cp", *platforms, "-d", str(out), str(wheel), *extra],
             what=f"download the dependencies' wheels for {machine}", timeout_s=WHEEL_TIMEOUT_S)
    return wheel

"""hubd and its dependencies as wheels for Debian bookworm's Python (3.11) on amd64 or arm64, made on the host:
the containers and the arm64 root file system have no network.

hubd's own wheel is built from a copy of the working tree (pip builds in place); every dependency is
downloaded as a binary wheel only (`--only-binary=:all:`) for the target's platform, so a dependency without a
wheel for it fails here, by name, instead of needing a compiler on the Pi. Imports nothing from hubd.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from tests.system.cache import REPO, host_run

TARGET_PYTHON = "3.11"  # bookworm's
TARGET_GLIBC_MINOR = 36  # bookworm's glibc 2.36: any manylinux_2_N wheel with N <= 36 runs there
BUILD_FILES = ("pyproject.toml", "README.md", "hubd", "simulators")
WHEEL_TIMEOUT_S = 900.0


def platform_tags(machine: str) -> list[str]:
    """The platform tags pip may take for bookworm on `machine` (x86_64, aarch64)."""
    tags = [f"manylinux_2_{minor}_{machine}" for minor in range(TARGET_GLIBC_MINOR, 16, -1)]
    tags.append(f"manylinux2014_{machine}")
    if machine == "x86_64":
        tags += ["manylinux_2_12_x86_64", "manylinux2010_x86_64", "manylinux_2_5_x86_64", "manylinux1_x86_64"]
    return tags


def build_wheels(out: Path, *, machine: str, extra: Sequence[str] = ()) -> Path:
    """hubd's wheel and every dependency's (plus `extra` requirements) in `out`; the path of hubd's wheel."""
    out.mkdir(parents=True, exist_ok=True)
    source = out.parent / f"{out.name}-source"
    shutil.rmtree(source, ignore_errors=True)
    source.mkdir()
    for name in BUILD_FILES:
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(REPO / name, source / name)
    pip = [sys.executable, "-m", "pip"]
    host_run([*pip, "wheel", "-q", "--no-deps", "-w", str(out), str(source)], what="build hubd's wheel",
             timeout_s=WHEEL_TIMEOUT_S)
    shutil.rmtree(source)
    (wheel,) = out.glob("hubd-*.whl")
    platforms = [arg for tag in platform_tags(machine) for arg in ("--platform", tag)]
    host_run([*pip, "download", "-q", "--only-binary=:all:", "--python-version", TARGET_PYTHON,
              "--implementation", "cp", *platforms, "-d", str(out), str(wheel), *extra],
             what=f"download the dependencies' wheels for {machine}", timeout_s=WHEEL_TIMEOUT_S)
    return wheel

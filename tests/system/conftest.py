"""Fixtures of the system tests: one Debian bookworm container with systemd 252 as PID 1 for the session, hubd
installed in it from wheels built here, and the container removed at the end whatever happened.

They need root, podman, runc and debootstrap (and the Debian archive once, for the cached image). Without them
the tests are skipped, naming what is missing; under CI (`CI` set) on a machine where they can be installed
(root with apt-get, which .ci/run uses to install them) that is a failure instead.
"""

from __future__ import annotations

import os
import platform
import re
import shutil
from collections.abc import Iterator

import pytest

from tests.system.cache import REPO
from tests.system.image import ensure_image
from tests.system.installed import CONFIG, GOOD_CONFIG, install_hubd
from tests.system.podman import Container, Podman
from tests.system.wheels import build_wheels

CONTAINER_PREFIX = "hubd-system-"
STOP_TIMEOUT_S = 30.0


def _unavailable() -> str | None:
    """Why podman cannot run systemd here, or None."""
    missing = [tool for tool in ("podman", "runc", "debootstrap") if shutil.which(tool) is None]
    reasons = []
    if missing:
        reasons.append(f"{', '.join(missing)} not installed (sudo apt-get install podman runc debootstrap)")
    if os.geteuid() != 0:
        reasons.append("not root (systemd runs in a rootful podman container with cgroupfs)")
    if platform.machine() != "x86_64":
        reasons.append(f"the image is built for x86_64, this is {platform.machine()}")
    return "; ".join(reasons) or None


@pytest.fixture(scope="session")
def podman() -> Podman:
    """podman, or a skip (a failure in CI where it can be installed) saying what is missing."""
    reason = _unavailable()
    if reason is not None:
        installable = os.geteuid() == 0 and shutil.which("apt-get") is not None
        if os.environ.get("CI") and installable:
            pytest.fail(f"system tests cannot run: {reason}; .ci/run installs them, so CI must run these tests",
                        pytrace=False)
        pytest.skip(f"system tests need podman as root: {reason}")
    tool = Podman()
    _remove_leftovers(tool)
    return tool


@pytest.fixture(scope="session")
def container(podman: Podman, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Container]:
    """The booted container with hubd installed and its unit in place (not started)."""
    image = ensure_image(podman)
    wheels = tmp_path_factory.mktemp("wheels") / "x86_64"
    build_wheels(wheels, machine="x86_64")
    name = f"{CONTAINER_PREFIX}{os.getpid()}"
    try:
        booted = podman.boot(name, image, mounts=[(wheels, "/wheels"), (REPO / "systemd", "/unit")])
        install_hubd(booted)
        yield booted
    finally:
        podman.remove(name)


@pytest.fixture
def hubd(container: Container) -> Iterator[Container]:
    """The container with hubd stopped, its failures forgotten, the good config and the broker up; the same after."""
    _reset(container)
    yield container
    _reset(container)


def _reset(container: Container) -> None:
    container.run(["systemctl", "stop", "hubd"], timeout_s=STOP_TIMEOUT_S)
    container.run(["systemctl", "reset-failed", "hubd"], check=False)
    container.run(["cp", "-p", GOOD_CONFIG, CONFIG])
    container.run(["systemctl", "start", "mosquitto"])


def _remove_leftovers(podman: Podman) -> None:
    """Containers of earlier runs whose pytest is gone (killed before its teardown)."""
    out = podman.run_host(["ps", "-a", "--format", "{{.Names}}"], what="podman ps", timeout_s=60)
    for name in out.split():
        found = re.fullmatch(re.escape(CONTAINER_PREFIX) + r"(\d+)", name)
        if found and not os.path.exists(f"/proc/{found.group(1)}"):
            podman.remove(name)

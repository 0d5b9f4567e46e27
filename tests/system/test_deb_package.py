"""The amd64 package as a user meets it, under systemd 252 in podman from a fresh image: `apt install ./hubd_*.deb`,
`hubd setup` with scripted answers, READY, a user linked through the platform simulator, an upgrade to a newer
build (still linked, nothing lost, restarted), remove (stopped, data kept), purge (nothing left). And the
system-call filter that kills a 32-bit process on a 64-bit kernel, reproduced with an i386 program.

Built here: `python -m debpkg.build` twice, revisions 1 and 2 (docs/packaging.md). The steps depend on each
other, so they are one test, each step timed in the log."""

from __future__ import annotations

import base64
import json
import logging
import os
import shutil
import struct
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from debpkg.build import build
from tests.system.image import ensure_image
from tests.system.podman import Container, Podman

pytestmark = [pytest.mark.system, pytest.mark.timeout(1800)]
log = logging.getLogger(__name__)

VERSION_1, VERSION_2 = "1", "2"
HUBD = "/usr/bin/hubd"
PYTHON = "/usr/lib/hubd/venv/bin/python"
CONFIG = "/etc/hubd/config.yaml"
PLATFORM = "http://127.0.0.1:9000"
LOCAL = "http://127.0.0.1:8081"
CLIENT_ID, CLIENT_SECRET = "system-test", "system-test-secret"
PASSWORD = "a password only the owner knows"
INSTALL_TIMEOUT_S = 600.0
READY_TIMEOUT_S = 90.0
LEFT_BY_PURGE = ("/etc/hubd", "/var/lib/hubd", "/var/lib/private/hubd", "/usr/lib/hubd", "/usr/bin/hubd",
                 "/etc/credstore/hubd.client-secret", "/etc/credstore/hubd.login-password",
                 "/etc/mosquitto/conf.d/hubd.conf", "/lib/systemd/system/hubd.service",
                 "/etc/systemd/system/multi-user.target.wants/hubd.service",
                 "/etc/systemd/system/timers.target.wants/hubd-backup.timer")


@pytest.fixture(scope="module")
def debs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("debs")
    for revision in (VERSION_1, VERSION_2):
        started = time.monotonic()
        build("amd64", out=out, revision=revision)
        log.info("build hubd_0.1.0-%s_amd64.deb: %.0f s", revision, time.monotonic() - started)
    return out


@pytest.fixture(scope="module")
def fresh(podman: Podman, debs: Path) -> Iterator[Container]:
    """A fresh booted image (python3, python3-venv, mosquitto: what apt would pull in) with the packages at /debs."""
    name = f"hubd-system-deb-{os.getpid()}"
    try:
        yield podman.boot(name, ensure_image(podman), mounts=[(debs, "/debs")])
    finally:
        podman.remove(name)


def _timed(what: str, box: Container, argv: list[str], timeout_s: float = INSTALL_TIMEOUT_S) -> str:
    started = time.monotonic()
    out = box.run(argv, timeout_s=timeout_s).stdout
    log.info("%s: %.1f s", what, time.monotonic() - started)
    return out


def _users(box: Container) -> list[str]:
    done = box.run(["curl", "-sf", f"{LOCAL}/api/users"], check=False)
    return [u["userId"] for u in json.loads(done.stdout)["users"]] if done.returncode == 0 else []


def _exists(box: Container, path: str) -> bool:
    return box.run(["test", "-e", path], check=False).returncode == 0 or \
        box.run(["test", "-L", path], check=False).returncode == 0


def test_install_setup_link_upgrade_remove_purge_as_a_user_would(fresh: Container) -> None:
    box = fresh
    # Install: the venv from the bundled wheels, offline (the container has no network).
    _timed("apt install ./hubd_0.1.0-1_amd64.deb", box,
           ["env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "-q", "/debs/hubd_0.1.0-1_amd64.deb"])
    assert box.out(HUBD, "--version") == "hubd 0.1.0"
    assert box.prop("hubd.service", "UnitFileState") == "disabled"  # nothing runs before `hubd setup`
    assert "max_queued_messages" in box.out("cat", "/etc/mosquitto/conf.d/hubd.conf")
    verify = box.run(["systemd-analyze", "verify", "/lib/systemd/system/hubd.service"], check=False)
    assert verify.returncode == 0 and not (verify.stdout + verify.stderr).strip(), verify.stdout + verify.stderr

    # The platform simulator from the package's own venv (simulators ship in hubd's wheel).
    box.run(["systemd-run", "--unit=platform-sim", PYTHON, "-m", "simulators", "platform", "serve", "--port", "9000",
             "--client-id", CLIENT_ID, "--client-secret", CLIENT_SECRET])
    box.wait_for("the platform simulator answers",
                 lambda: box.run(["curl", "-s", "-o", "/dev/null", PLATFORM], check=False).returncode == 0,
                 timeout_s=60)

    # hubd setup, scripted: every answer a flag, secrets from files.
    box.write("/root/client-secret", CLIENT_SECRET + "\n", mode="0600")
    box.write("/root/password", PASSWORD + "\n", mode="0600")
    started = time.monotonic()
    setup = box.run([HUBD, "setup", "--public-url", "http://127.0.0.1:8080", "--base-url", PLATFORM, "--auth-url",
                     PLATFORM, "--client-id", CLIENT_ID, "--client-secret-file", "/root/client-secret",
                     "--password-file", "/root/password", "--yes"], timeout_s=300)
    log.info("hubd setup: %.1f s", time.monotonic() - started)
    assert "check-config: ok" in setup.stdout and "hubd is running" in setup.stdout, setup.stdout
    assert "link the hub in the platform's app" in setup.stdout
    assert box.out("stat", "-c", "%a", "/etc/credstore/hubd.client-secret") == "600"
    assert box.out("stat", "-c", "%a", "/etc/credstore/hubd.login-password") == "600"
    assert box.prop("hubd.service", "UnitFileState") == "enabled"
    box.wait_state("hubd.service", ActiveState="active", SubState="running", timeout_s=READY_TIMEOUT_S)
    assert box.prop("hubd-backup.timer", "ActiveState") == "active"

    # Link a user: the driver's login with the owner's password, then AcceptGrant.
    box.run([PYTHON, "-m", "simulators", "platform", "bind", "--hub", "http://127.0.0.1:8080", "--sim", PLATFORM,
             "--username", "owner", "--password", PASSWORD, "--user-id", "alice"], timeout_s=120)
    assert box.wait_for("alice linked", lambda: "alice" in _users(box), timeout_s=30)
    config_before = box.out("sha256sum", CONFIG, "/etc/credstore/hubd.client-secret")
    pid_before = box.main_pid("hubd.service")

    # Upgrade to a newer build: stopped, the venv made again, started; the config, secrets and database kept.
    _timed("apt install ./hubd_0.1.0-2_amd64.deb (upgrade)", box,
           ["env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "-q", "/debs/hubd_0.1.0-2_amd64.deb"])
    assert box.out("dpkg-query", "-W", "-f", "${Version}", "hubd") == "0.1.0-2"
    box.wait_state("hubd.service", ActiveState="active", SubState="running", timeout_s=READY_TIMEOUT_S)
    assert box.main_pid("hubd.service") != pid_before, "the upgrade did not restart hubd"
    assert box.wait_for("alice still linked", lambda: "alice" in _users(box), timeout_s=30)
    assert box.out("sha256sum", CONFIG, "/etc/credstore/hubd.client-secret") == config_before
    assert box.prop("hubd-backup.timer", "ActiveState") == "active"

    # Remove: stopped; the config, the secrets and the database stay for a reinstall.
    box.run(["env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "remove", "-y", "-q", "hubd"], timeout_s=300)
    assert box.prop("hubd.service", "ActiveState") in ("inactive", "")
    for kept in (CONFIG, "/etc/credstore/hubd.client-secret", "/var/lib/private/hubd/hubd.db"):
        assert _exists(box, kept), f"remove took {kept}"
    assert not _exists(box, "/usr/lib/hubd"), "remove left the venv"

    # Purge: nothing left behind.
    box.run(["env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "purge", "-y", "-q", "hubd"], timeout_s=300)
    left = [path for path in LEFT_BY_PURGE if _exists(box, path)]
    assert not left, f"purge left {left}"
    assert box.run(["dpkg-query", "-W", "hubd"], check=False).returncode != 0


def test_lintian_finds_no_error_nor_warning_left_unexplained(debs: Path) -> None:
    if shutil.which("lintian") is None:
        if os.environ.get("CI"):
            pytest.fail("lintian is not installed: .ci/run installs it", pytrace=False)
        pytest.skip("needs lintian (sudo apt-get install lintian)")
    for deb in sorted(debs.glob("*.deb")):
        done = subprocess.run(["lintian", "--fail-on", "error,warning", str(deb)], capture_output=True, text=True,
                              timeout=300, check=False)
        tags = [line for line in done.stdout.splitlines() if line[:2] in ("E:", "W:")]
        assert done.returncode == 0 and not tags, f"{deb.name}: {done.stdout}{done.stderr}"


def _i386_exit_7() -> bytes:
    """A static i386 program that only exits with status 7 (int 0x80): a 32-bit userland's first system call."""
    base, code = 0x08048000, bytes.fromhex("bb07000000" "b801000000" "cd80")  # mov ebx,7; mov eax,1; int 0x80
    size = 52 + 32 + len(code)
    header = b"\x7fELF\x01\x01\x01\x00" + bytes(8) + struct.pack("<HHIIIIIHHHHHH", 2, 3, 1, base + 84, 52, 0, 0, 52,
                                                                   32, 1, 0, 0, 0)
    return header + struct.pack("<IIIIIIII", 1, 0, base, base, size, size, 5, 0x1000) + code


def test_native_only_system_calls_kill_a_32_bit_userland_and_its_abi_named_lets_it_run(
        fresh: Container) -> None:
    # The armhf package's units say `SystemCallArchitectures=native arm` for armhf on a 64-bit kernel (a Pi 3, 4
    # or 5 under 32-bit Raspberry Pi OS); the same filter on x86 shows why: `native` alone kills it.
    box = fresh
    box.run(["sh", "-c", "base64 -d > /usr/local/bin/exit7 && chmod 0755 /usr/local/bin/exit7"],
            input_text=base64.b64encode(_i386_exit_7()).decode())
    if box.run(["/usr/local/bin/exit7"], check=False).returncode != 7:
        pytest.skip("this kernel runs no 32-bit x86 programs (no IA32 emulation)")
    native = box.run(["systemd-run", "--wait", "-p", "SystemCallArchitectures=native", "/usr/local/bin/exit7"],
                     check=False)
    said = native.stdout + native.stderr
    assert native.returncode != 0 and "code=killed/status=SYS" in said, said  # SIGSYS: the filter killed it
    named = box.run(["systemd-run", "--wait", "-p", "SystemCallArchitectures=native x86", "/usr/local/bin/exit7"],
                    check=False)
    said = named.stdout + named.stderr
    assert "status=7" in said, said

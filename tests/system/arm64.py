"""hubd on emulated arm64 (a Raspberry Pi's architecture): `python -m tests.system.arm64` (as root; about 3
minutes with the root file system cached, 6 to 12 the first time). CI runs it as a system test (test_arm64.py).

A Debian bookworm arm64 root file system (debootstrap, cached like the systemd image) runs under
qemu-aarch64-static through a binfmt_misc of its own: binfmt_misc mounted inside a new user namespace
(Linux 6.7 and newer) holds the registration, so the host's binfmt_misc is never touched, and the run checks
that it is the same after as before. qemu comes from Debian's qemu-user-static package, unpacked into the
cache, not installed. Everything runs in private mount, PID and network namespaces (loopback only).

Checked there: hubd and its dependencies install from wheels alone, with no compiler in the root file system
(every dependency has an aarch64 wheel); `hubd demo` starts, serves its status page and delivers events; a
subset of the unit tests passes (`--tests` picks others). Imports nothing from hubd.
"""

from __future__ import annotations

import argparse
import logging
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tests.system.cache import DEBIAN_SUITE, REPO, HostCommandFailed, cache_dir, host_run, recipe_key
from tests.system.image import debootstrap
from tests.system.wheels import build_wheels

log = logging.getLogger(__name__)

PACKAGES = ("python3", "python3-venv", "mosquitto", "procps", "ca-certificates")
TEST_REQUIREMENTS = ("pytest>=8.3.5", "pytest-asyncio>=0.24.0", "pytest-timeout>=2.3.1", "hypothesis>=6.100.0")
# The unit tests that run emulated: pure logic, SQLite and in-process HTTP, 480 tests (about 25 s natively,
# a few minutes under qemu). Left out: what starts hubd, a broker or Chromium per test (the rest of the suite
# takes 6 minutes natively: most of an hour emulated), and the unit file's checks (need the host's systemd).
UNIT_TESTS = (
    "tests/test_config.py",
    "tests/test_store.py",
    "tests/test_store_health.py",
    "tests/test_outbox_units.py",
    "tests/test_outbox_decisions.py",
    "tests/test_web_units.py",
    "tests/test_dialect_mapping.py",
    "tests/test_homeassistant_dialect.py",
    "tests/test_homeassistant_template_cost.py",
    "tests/test_zigbee2mqtt_dialect.py",
    "tests/test_lifecycle_units.py",
    "tests/test_driver_units.py",
    "tests/test_speaker_units.py",
    "tests/test_tokens_units.py",
    "tests/test_webhook_units.py",
    "tests/test_webhook_store.py",
    "tests/test_journal.py",
    "tests/test_metrics.py",
    "tests/test_init.py",
    "tests/test_advertiser.py",
)
HOSTS = "127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n"  # debootstrap writes none


@dataclass(frozen=True, slots=True)
class Emulated:
    """An architecture run under qemu-user: Debian's name, the kernel's, qemu's, and its binfmt_misc entry
    (Debian's qemu-user-static binfmt.d file; flag F: the interpreter is opened at registration, so it need not
    exist inside the root file system)."""

    debian: str
    machine: str
    qemu: str
    magic: str
    mask: str


ARM64 = Emulated("arm64", "aarch64", "qemu-aarch64",
                 r"\x7f\x45\x4c\x46\x02\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\xb7\x00",
                 r"\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff")
# 32-bit ARM (Raspberry Pi OS armhf; a Pi Zero 2 W, 3, 4 or 5 runs it on its 64-bit CPU too).
ARMHF = Emulated("armhf", "armv7l", "qemu-arm",
                 r"\x7f\x45\x4c\x46\x01\x01\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\x28\x00",
                 r"\xff\xff\xff\xff\xff\xff\xff\x00\xff\xff\xff\xff\xff\xff\xff\xff\xfe\xff\xff\xff")
HOST_BINFMT = Path("/proc/sys/fs/binfmt_misc")
MIN_KERNEL = (6, 7)  # binfmt_misc in a user namespace
ID_RANGE = 65536  # uids and gids mapped one to one into the user namespace (dpkg's system users among them)
CHROOT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
INSTALL_TIMEOUT_S = 1200.0
DEMO_TIMEOUT_S = 900.0
TESTS_TIMEOUT_S = 3600.0
# Runs as root of the user namespace, in new mount, PID and network namespaces: binfmt_misc of its own, the
# file systems a chroot needs, loopback up, then the command in the root file system.
SANDBOX_SCRIPT = r"""set -e
R=$1 BINFMT=$2 REGISTER=$3 WHEELS=$4; shift 4
mount -t binfmt_misc binfmt_misc "$BINFMT"
printf '%s' "$REGISTER" > "$BINFMT/register"
mount -t proc proc "$R/proc"
mount -t sysfs sysfs "$R/sys"
mount --rbind /dev "$R/dev"
mount -t tmpfs tmpfs "$R/tmp"
mkdir -p "$R/wheels" && mount --bind "$WHEELS" "$R/wheels"
ip link set lo up
exec chroot "$R" /usr/bin/env -i PATH="$CHROOT_PATH" HOME=/root LANG=C.UTF-8 "$@"
"""
# The child that makes the user namespace: it waits until its parent wrote the id maps, then execs.
USERNS_CHILD = """import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
if libc.unshare(0x10000000) != 0:  # CLONE_NEWUSER
    sys.exit(f"unshare(CLONE_NEWUSER): {os.strerror(ctypes.get_errno())}")
print("unshared", flush=True)
sys.stdin.readline()
os.execvp(sys.argv[1], sys.argv[1:])
"""


class Unavailable(Exception):
    """This host cannot run the arm64 check; the message says why."""


def main(argv: Sequence[str] | None = None) -> int:
    """Run the arm64 check; exit 0 when everything passed."""
    parser = argparse.ArgumentParser(prog="python -m tests.system.arm64", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tests", nargs="*", default=list(UNIT_TESTS), help="test files or ids to run emulated")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        require()
    except Unavailable as err:
        print(f"arm64 check not run: {err}", file=sys.stderr)
        return 2
    before = host_binfmt_state()
    started = time.monotonic()
    failure = None
    try:
        run_check(args.tests)
    except (HostCommandFailed, AssertionError) as err:
        failure = f"arm64 check FAILED: {err}"
    after = host_binfmt_state()
    if after != before:
        failure = f"{failure or 'arm64 check FAILED'}; the host's binfmt_misc changed: {before} -> {after}"
    if failure is not None:
        print(failure, file=sys.stderr)
        return 1
    print(f"arm64 check passed in {time.monotonic() - started:.0f} s; the host's binfmt_misc is unchanged ({before})")
    return 0


def run_check(tests: Sequence[str]) -> None:
    """Root file system, wheels, install, demo, tests; AssertionError or HostCommandFailed on a failure."""
    qemu = ensure_qemu()
    rootfs = ensure_rootfs(qemu)
    with tempfile.TemporaryDirectory(prefix="hubd-arm64-") as tmp:
        wheels = Path(tmp) / "wheels"
        build_wheels(wheels, machine="aarch64", extra=TEST_REQUIREMENTS)
        _copy_tests(rootfs)
        machine = _chroot(rootfs, qemu, wheels, ["uname", "-m"], what="uname -m", timeout_s=120).strip()
        assert machine == "aarch64", f"the root file system runs as {machine}, not aarch64"
        compilers = _chroot(rootfs, qemu, wheels, ["sh", "-c", "command -v gcc cc clang || true"],
                            what="look for a compiler", timeout_s=120).strip()
        assert not compilers, f"the arm64 root file system has a compiler ({compilers}): the install proves nothing"
        _chroot(rootfs, qemu, wheels, ["sh", "-c", "rm -rf /opt/hubd && python3 -m venv /opt/hubd && "
                                       "/opt/hubd/bin/pip install -q --no-index --find-links /wheels hubd "
                                       + " ".join(f"'{r}'" for r in TEST_REQUIREMENTS)],
                what="install hubd from wheels (emulated)", timeout_s=INSTALL_TIMEOUT_S)
        imports = _chroot(rootfs, qemu, wheels, ["/opt/hubd/bin/python", "-c",
                                                 "import platform, time; t = time.monotonic(); import hubd.app; "
                                                 "print(platform.machine(), f'{time.monotonic() - t:.1f}')"],
                          what="import hubd.app", timeout_s=600).split()
        print(f"hubd installed on {imports[0]}; `import hubd.app` took {imports[1]} s emulated")
        print(_chroot(rootfs, qemu, wheels, ["/opt/hubd/bin/python", "/src/tests/system/arm64_demo.py",
                                             "/opt/hubd/bin/hubd", "/tmp/demo"],
                      what="hubd demo (emulated)", timeout_s=DEMO_TIMEOUT_S).strip())
        out = _chroot(rootfs, qemu, wheels, ["sh", "-c", 'cd /src && exec /opt/hubd/bin/python -m pytest -q '
                                             '-p no:cacheprovider "$@"', "pytest", *tests],
                      what="unit tests (emulated)", timeout_s=TESTS_TIMEOUT_S)
        print(out.strip().splitlines()[-1])


def host_binfmt_state() -> tuple[bool, tuple[str, ...]]:
    """Whether the host's binfmt_misc is mounted, and its entries: what this check must leave as it was."""
    mounted = any(line.split()[1] == str(HOST_BINFMT) for line in Path("/proc/self/mounts").read_text().splitlines())
    entries = tuple(sorted(p.name for p in HOST_BINFMT.iterdir())) if mounted else ()
    return mounted, entries


def ensure_qemu(emu: Emulated = ARM64) -> Path:
    """qemu-<arch>-static: the host's if installed, else unpacked from Debian's package into the cache."""
    installed = Path(f"/usr/bin/{emu.qemu}-static")
    if installed.exists():
        return installed
    target = cache_dir() / "qemu" / f"{emu.qemu}-static"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="hubd-qemu-") as tmp:
        os.chmod(tmp, 0o755)  # noqa: S103 (apt's download sandbox user must reach it)
        try:
            host_run(["apt-get", "download", "qemu-user-static"], what="apt-get download", timeout_s=600,
                     cwd=Path(tmp))
        except HostCommandFailed:
            host_run(["apt-get", "update", "-qq"], what="apt-get update", timeout_s=600)
            host_run(["apt-get", "download", "qemu-user-static"], what="apt-get download", timeout_s=600,
                     cwd=Path(tmp))
        (deb,) = Path(tmp).glob("qemu-user-static_*.deb")
        with subprocess.Popen(["dpkg-deb", "--fsys-tarfile", str(deb)], stdout=subprocess.PIPE) as tar:
            subprocess.run(["tar", "-x", "-C", tmp, f"./usr/bin/{emu.qemu}-static"], stdin=tar.stdout, check=True)
        shutil.move(Path(tmp) / "usr" / "bin" / f"{emu.qemu}-static", target)
    return target


def ensure_rootfs(qemu: Path, emu: Emulated = ARM64) -> Path:
    """The root file system: debootstrap's first stage natively, its second stage emulated; cached."""
    key = recipe_key(emu.debian, DEBIAN_SUITE, " ".join(PACKAGES), HOSTS)
    rootfs = cache_dir() / f"rootfs-{emu.debian}-{key}"
    if (rootfs / ".complete").exists():
        log.info("%s root file system: cached", emu.debian)
        return rootfs
    for old in cache_dir().glob(f"rootfs-{emu.debian}-*"):
        if not old.name.startswith(rootfs.name):
            shutil.rmtree(old)
    staged = rootfs.with_name(rootfs.name + ".first-stage")
    debootstrap(staged, arch=emu.debian, packages=PACKAGES, foreign=True)
    # The second stage first checks that the target allows device files by making one, which a user
    # namespace may not; the chroot gets the host's /dev instead.
    functions = staged / "debootstrap" / "functions"
    functions.write_text(functions.read_text().replace("check_sane_mount () {\n",
                                                       "check_sane_mount () {\n\treturn 0\n", 1))
    (staged / "etc" / "hosts").write_text(HOSTS)
    try:
        with tempfile.TemporaryDirectory(prefix="hubd-arm64-") as empty:
            _chroot(staged, qemu, Path(empty), ["/debootstrap/debootstrap", "--second-stage"],
                    what="debootstrap --second-stage (emulated)", timeout_s=INSTALL_TIMEOUT_S, emu=emu)
    except HostCommandFailed:
        shutil.rmtree(staged)  # half configured: start again from the first stage
        raise
    (staged / "etc" / "hosts").write_text(HOSTS)
    staged.rename(rootfs)  # with the first stage's .complete
    return rootfs


def _copy_tests(rootfs: Path) -> None:
    """The repository without its package (the tests import the installed wheel) into /src."""
    src = rootfs / "src"
    shutil.rmtree(src, ignore_errors=True)
    skip = shutil.ignore_patterns(".git", ".venv", "__pycache__", "*.egg-info", "build", ".*_cache", ".cache",
                                  "results")
    shutil.copytree(REPO, src, ignore=lambda d, names: [*skip(d, names), *(
        {"hubd", "simulators"} & set(names) if Path(d) == REPO else [])])


def _chroot(rootfs: Path, qemu: Path, wheels: Path, argv: Sequence[str], *, what: str, timeout_s: float,
            emu: Emulated = ARM64) -> str:
    """Run argv in the root file system, emulated, sandboxed; its output. `wheels` is mounted at /wheels."""
    binfmt = cache_dir() / "binfmt"  # only a mount point, inside the private mount namespace
    binfmt.mkdir(exist_ok=True)
    register = f":{emu.qemu}:M::{emu.magic}:{emu.mask}:{qemu}:F"
    inner = ["unshare", "--mount", "--pid", "--net", "--fork", "--kill-child", "sh", "-c", SANDBOX_SCRIPT, "sandbox",
             str(rootfs), str(binfmt), register, str(wheels), *argv]
    started = time.monotonic()
    child = subprocess.Popen([sys.executable, "-c", USERNS_CHILD, *inner], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             env={**os.environ, "CHROOT_PATH": CHROOT_PATH})
    assert child.stdout is not None
    try:
        if child.stdout.readline() != b"unshared\n":
            raise HostCommandFailed(f"{what}: no user namespace: {child.communicate(timeout=10)[0].decode()}")
        for name in ("uid_map", "gid_map"):
            Path(f"/proc/{child.pid}/{name}").write_text(f"0 0 {ID_RANGE}\n")
        try:
            raw, _ = child.communicate(b"go\n", timeout=timeout_s)
        except subprocess.TimeoutExpired as err:
            raise HostCommandFailed(f"{what}: still running after {timeout_s:.0f} s") from err
        out, code = raw.decode(errors="replace"), child.returncode
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    log.info("%s: %.0f s", what, time.monotonic() - started)
    if code != 0:
        raise HostCommandFailed(f"{what} failed (exit {code}):\n{out[-4000:]}")
    return out


def require() -> None:
    """Unavailable naming what this host lacks for the check."""
    reasons = []
    if os.geteuid() != 0:
        reasons.append("not root")
    release = tuple(int(part) for part in platform.release().split("-")[0].split(".")[:2])
    if release < MIN_KERNEL:
        reasons.append(f"kernel {platform.release()} has no binfmt_misc for user namespaces (needs 6.7)")
    if platform.machine() != "x86_64":
        reasons.append(f"this is {platform.machine()}: the check emulates arm64 on x86_64")
    missing = [tool for tool in ("debootstrap", "unshare", "chroot", "dpkg-deb", "apt-get", "ip")
               if shutil.which(tool) is None]
    if missing:
        reasons.append(f"{', '.join(missing)} not installed (sudo apt-get install debootstrap)")
    if reasons:
        raise Unavailable("; ".join(reasons))


if __name__ == "__main__":
    sys.exit(main())

"""hubd's Debian package on emulated arm64 and armhf (32-bit Raspberry Pi OS): `python -m tests.system.deb_emulated
--arch armhf` (as root). Builds the package (`python -m debpkg.build`), installs it with dpkg in the cached
bookworm root file system of tests.system.arm64 (qemu-user, its own binfmt_misc, private namespaces; no
compiler there, no network), then checks `hubd --version`, which wheels came from where, the unit's
system-call architectures, and the demo; then purges it, leaving the root file system as it was. No systemd
runs in a chroot: the package's scripts skip systemctl there, as on an image being prepared.
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from debpkg.build import build
from tests.system.arm64 import ARM64, ARMHF, Emulated, Unavailable, _chroot, ensure_qemu, ensure_rootfs, require

log = logging.getLogger(__name__)

TARGETS = {"arm64": ARM64, "armhf": ARMHF}
INSTALL_TIMEOUT_S = 1800.0
DEMO_TIMEOUT_S = 900.0
HUBD = "/usr/bin/hubd"
PYTHON = "/usr/lib/hubd/venv/bin/python"


def run_check(emu: Emulated) -> dict[str, str]:
    """Build, install, check, purge; what was measured. AssertionError or HostCommandFailed on a failure."""
    qemu = ensure_qemu(emu)
    rootfs = ensure_rootfs(qemu, emu)
    measured: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix=f"hubd-deb-{emu.debian}-") as tmp:
        started = time.monotonic()
        deb = build(emu.debian, out=Path(tmp))
        measured["build"] = f"{time.monotonic() - started:.0f} s"
        measured["size"] = f"{deb.stat().st_size / 1e6:.1f} MB"
        demo = Path(__file__).with_name("arm64_demo.py")

        def chroot(argv: Sequence[str], what: str, timeout_s: float = INSTALL_TIMEOUT_S) -> str:
            return _chroot(rootfs, qemu, Path(tmp), argv, what=f"{what} ({emu.debian}, emulated)",
                           timeout_s=timeout_s, emu=emu)

        machine = chroot(["uname", "-m"], "uname -m").strip()
        assert machine == emu.machine, f"the root file system runs as {machine}, not {emu.machine}"
        assert not chroot(["sh", "-c", "command -v gcc cc clang || true"], "look for a compiler").strip()
        chroot(["sh", "-c", "dpkg --purge hubd >/dev/null 2>&1 || true"], "an earlier run's package")
        started = time.monotonic()
        chroot(["dpkg", "-i", f"/wheels/{deb.name}"], "dpkg -i")
        measured["install"] = f"{time.monotonic() - started:.0f} s"
        assert chroot([HUBD, "--version"], "hubd --version").strip() == "hubd 0.1.0"
        wheels = chroot(["ls", "/usr/lib/hubd/wheels"], "the bundled wheels").split()
        foreign = [w for w in wheels if not w.endswith("-none-any.whl")]
        assert all(emu.machine in w or "abi3" in w for w in foreign), foreign
        measured["compiled wheels"] = ", ".join(sorted(w.split("-")[0] for w in foreign))
        unit = chroot(["cat", "/lib/systemd/system/hubd.service"], "the unit")
        arches = next(line for line in unit.splitlines() if line.startswith("SystemCallArchitectures="))
        assert arches == ("SystemCallArchitectures=native arm" if emu is ARMHF else "SystemCallArchitectures=native")
        started = time.monotonic()
        chroot([PYTHON, "-c", "import hubd.app"], "import hubd.app")
        measured["import hubd.app"] = f"{time.monotonic() - started:.1f} s"
        (Path(tmp) / "hubd_demo.py").write_text(demo.read_text())
        measured["demo"] = chroot([PYTHON, "/wheels/hubd_demo.py", HUBD, "/tmp/hubd-demo"], "hubd demo",
                                  timeout_s=DEMO_TIMEOUT_S).strip().splitlines()[-1]
        chroot(["dpkg", "--purge", "hubd"], "dpkg --purge")
        left = chroot(["sh", "-c", "ls -d /usr/lib/hubd /etc/hubd /usr/bin/hubd 2>/dev/null || true"], "what is left")
        assert not left.strip(), f"purge left {left}"
    return measured


def main(argv: Sequence[str] | None = None) -> int:
    """Run the check for each --arch; exit 0 when all passed."""
    parser = argparse.ArgumentParser(prog="python -m tests.system.deb_emulated", description=__doc__.split("\n")[0])
    parser.add_argument("--arch", choices=sorted(TARGETS), action="append", default=None)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        require()
    except Unavailable as err:
        print(f"not run: {err}", file=sys.stderr)
        return 2
    for arch in args.arch or sorted(TARGETS):
        measured = run_check(TARGETS[arch])
        print(f"{arch}: " + "; ".join(f"{k}: {v}" for k, v in measured.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The Debian bookworm image with systemd as PID 1 and mosquitto that the systemd tests boot in podman.

Made once with debootstrap and kept in podman's storage under the cache directory, tagged with a hash of the
package list and this recipe (the units written into it, the units masked): a cache hit runs no debootstrap.
The image never touches the host kernel: the units that would (binfmt_misc, sysctls, kernel modules) are
masked in it. Imports nothing from hubd.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
from pathlib import Path

from tests.system.cache import DEBIAN_MIRROR, DEBIAN_SUITE, HostCommandFailed, cache_dir, host_run, recipe_key
from tests.system.podman import Podman

log = logging.getLogger(__name__)

# libnss-systemd: dynamic users have names (`ps`, `stat`), as on Raspberry Pi OS.
PACKAGES = ("systemd", "systemd-sysv", "libnss-systemd", "dbus", "python3", "python3-venv", "mosquitto", "procps",
            "iproute2", "curl", "ca-certificates")
IMAGE_NAME = "localhost/hubd-system"
DEBOOTSTRAP_TIMEOUT_S = 1200.0

# podman leaves / private, and systemd's LoadCredential= needs it shared (systemd makes it so itself only
# outside containers): a oneshot before sysinit.target does it.
RSHARED_UNIT = """\
[Unit]
Description=Make / rshared for LoadCredential=
DefaultDependencies=no
Before=sysinit.target local-fs.target
[Service]
Type=oneshot
ExecStart=/bin/mount --make-rshared /
[Install]
WantedBy=sysinit.target
"""
# A container's systemd must not change the host kernel: binfmt_misc registrations, sysctls, modules.
MASKED = ("systemd-binfmt.service", "systemd-sysctl.service", "proc-sys-fs-binfmt_misc.automount",
          "proc-sys-fs-binfmt_misc.mount", "systemd-modules-load.service")


def image_tag() -> str:
    """The image's name for this package list and recipe."""
    return f"{IMAGE_NAME}:{recipe_key(DEBIAN_SUITE, ' '.join(PACKAGES), RSHARED_UNIT, ' '.join(MASKED))}"


def ensure_image(podman: Podman) -> str:
    """The image's tag; debootstrap and import it first unless the cache has it."""
    tag = image_tag()
    if podman.image_exists(tag):
        log.info("image %s: cached", tag)
        return tag
    rootfs = cache_dir() / f"rootfs-amd64-{tag.rsplit(':', 1)[1]}"
    debootstrap(rootfs, arch="amd64", packages=PACKAGES)
    _prepare(rootfs)
    with subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE) as tar:
        podman.run_host(["import", "-", tag], what="podman import", timeout_s=600, stdin_from=tar.stdout)
        if tar.wait() != 0:
            raise HostCommandFailed(f"tar of {rootfs} failed")
    shutil.rmtree(rootfs)  # the image holds it now
    for old in podman.images(IMAGE_NAME):
        if old != tag:
            podman.run_host(["rmi", "-f", old], what="remove an older image", timeout_s=120)
    return tag


def debootstrap(rootfs: Path, *, arch: str, packages: tuple[str, ...], foreign: bool = False) -> None:
    """A minbase bookworm at `rootfs`, unless a complete one is there already; made under a temporary name."""
    if (rootfs / ".complete").exists():
        return
    partial = rootfs.with_name(rootfs.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    argv = ["debootstrap", f"--arch={arch}", "--variant=minbase", f"--include={','.join(packages)}"]
    if foreign:
        argv.append("--foreign")
    host_run([*argv, DEBIAN_SUITE, str(partial), DEBIAN_MIRROR], what=f"debootstrap {arch}",
             timeout_s=DEBOOTSTRAP_TIMEOUT_S)
    (partial / ".complete").touch()
    shutil.rmtree(rootfs, ignore_errors=True)
    partial.rename(rootfs)


def _prepare(rootfs: Path) -> None:
    system = rootfs / "etc" / "systemd" / "system"
    (system / "rshared-root.service").write_text(RSHARED_UNIT)
    wants = system / "sysinit.target.wants"
    wants.mkdir(parents=True, exist_ok=True)
    (wants / "rshared-root.service").unlink(missing_ok=True)
    (wants / "rshared-root.service").symlink_to("/etc/systemd/system/rshared-root.service")
    for unit in MASKED:
        (system / unit).unlink(missing_ok=True)
        (system / unit).symlink_to("/dev/null")
    # debootstrap writes no /etc/hosts; `localhost` must resolve.
    (rootfs / "etc" / "hosts").write_text("127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n")
    (rootfs / ".complete").unlink(missing_ok=True)

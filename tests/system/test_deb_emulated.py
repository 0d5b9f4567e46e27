"""hubd's Debian package on emulated arm64 and armhf, as `python -m tests.system.deb_emulated` runs it: installed
with dpkg from its bundled wheels (no compiler, no network), `hubd --version`, the demo delivering events, the
armhf unit allowing 32-bit ARM system calls, purged without a trace."""

from __future__ import annotations

import os
import shutil

import pytest

from tests.system.arm64 import Unavailable, host_binfmt_state, require
from tests.system.deb_emulated import TARGETS, run_check

pytestmark = [pytest.mark.system, pytest.mark.timeout(3600)]


@pytest.mark.parametrize("arch", sorted(TARGETS))
def test_the_package_installs_from_its_wheels_and_runs_the_demo_emulated(arch: str) -> None:
    try:
        require()
    except Unavailable as err:
        installable = os.geteuid() == 0 and shutil.which("apt-get") is not None and "kernel" not in str(err)
        if os.environ.get("CI") and installable:
            pytest.fail(f"the emulated package check cannot run: {err}", pytrace=False)
        pytest.skip(f"the emulated package check cannot run here: {err}")
    before = host_binfmt_state()
    try:
        measured = run_check(TARGETS[arch])
        print(f"{arch}: {measured}")
    finally:
        assert host_binfmt_state() == before, "the host's binfmt_misc changed"

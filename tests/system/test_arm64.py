"""hubd on emulated arm64, as `python -m tests.system.arm64` runs it: installed from wheels alone (no compiler),
its demo delivering events, the unit tests of tests.system.arm64.UNIT_TESTS passing, the host's binfmt_misc
untouched."""

from __future__ import annotations

import os
import shutil

import pytest

from tests.system.arm64 import UNIT_TESTS, Unavailable, host_binfmt_state, require, run_check

pytestmark = [pytest.mark.system, pytest.mark.timeout(3600)]


def test_hubd_installs_runs_its_demo_and_passes_its_unit_tests_on_emulated_arm64() -> None:
    try:
        require()
    except Unavailable as err:
        # Root with apt-get can install debootstrap (.ci/run does); a kernel older than 6.7 cannot be helped.
        installable = os.geteuid() == 0 and shutil.which("apt-get") is not None and "kernel" not in str(err)
        if os.environ.get("CI") and installable:
            pytest.fail(f"the arm64 check cannot run: {err}", pytrace=False)
        pytest.skip(f"the arm64 check cannot run here: {err}")
    before = host_binfmt_state()
    try:
        run_check(UNIT_TESTS)
    finally:
        assert host_binfmt_state() == before, "the host's binfmt_misc changed"

"""The backup units (hubd-backup.service started by hubd-backup.timer), as the repository's systemd/ ships them,
under a real systemd: the timer is scheduled, and the backup it starts succeeds beside a running hubd."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.system.cache import REPO
from tests.system.installed import install_unit
from tests.system.podman import Container

pytestmark = [pytest.mark.system, pytest.mark.timeout(900)]

SERVICE = "hubd-backup.service"
TIMER = "hubd-backup.timer"
BACKUP_TIMEOUT_S = 120.0


@pytest.fixture
def backup(hubd: Container) -> Iterator[Container]:
    """The backup units installed; the timer stopped and disabled after."""
    missing = [name for name in (SERVICE, TIMER) if not (REPO / "systemd" / name).exists()]
    if missing:
        pytest.skip(f"{', '.join(missing)} not in systemd/ yet (the backup issue)")
    install_unit(hubd, SERVICE)
    install_unit(hubd, TIMER)
    yield hubd
    hubd.run(["systemctl", "disable", "--now", TIMER], check=False)
    hubd.run(["systemctl", "reset-failed", SERVICE], check=False)


def test_the_backup_timer_is_scheduled_and_its_backup_succeeds(backup: Container) -> None:
    backup.run(["systemctl", "start", "hubd"], timeout_s=70)
    backup.run(["systemctl", "enable", "--now", TIMER])
    timer = backup.show(TIMER, "ActiveState", "SubState", "NextElapseUSecRealtime", "NextElapseUSecMonotonic", "Unit")
    assert timer["ActiveState"] == "active" and timer["SubState"] == "waiting", timer
    assert timer.get("NextElapseUSecRealtime") or timer.get("NextElapseUSecMonotonic", "0") != "0", timer
    assert timer["Unit"] == SERVICE, timer
    # What the timer starts, started now rather than at its time.
    backup.run(["systemctl", "start", SERVICE], timeout_s=BACKUP_TIMEOUT_S)
    done = backup.wait_state(SERVICE, Result="success", ActiveState="inactive", timeout_s=BACKUP_TIMEOUT_S)
    assert backup.prop(SERVICE, "ExecMainStatus") == "0", done
    assert backup.show("hubd", "ActiveState")["ActiveState"] == "active"
    # The backup it wrote restores: hubd stopped, `hubd restore` as the docs give it, hubd started on it again.
    [written] = backup.out("find", "/var/lib/hubd/backups/", "-name", "hubd-backup-*.tar.gz").split()
    backup.run(["systemctl", "stop", "hubd"], timeout_s=30)
    restored = backup.run(["/opt/hubd/bin/hubd", "restore", "-c", "/etc/hubd/config.yaml", written], timeout_s=120)
    assert "restored" in (restored.stdout + restored.stderr).lower(), restored
    backup.run(["systemctl", "start", "hubd"], timeout_s=70)
    assert backup.wait_state("hubd", ActiveState="active", timeout_s=70)["ActiveState"] == "active"

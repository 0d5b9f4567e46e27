"""The systemd units, read as files: `systemd-analyze verify` finds nothing, exposure scores stay low; hubd's carries
the hardening, descriptor, memory and restart limits, and the backup timer's runs `hubd backup` as hubd's own user
every night. tests/system/ starts them under a real systemd."""

from __future__ import annotations

import configparser
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hubd_proc import REPO

from hubd.cli import _parser
from hubd.mqtt.inflight import POISONS_WITHIN_START_LIMIT
from hubd.web.connections import MAX_CONNECTIONS, connection_cap

MAX_EXPOSURE = 1.5


def _analyze() -> str:
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        # .ci/run installs it, so in CI a missing systemd-analyze is a broken set-up, not a reason to skip.
        if os.environ.get("CI"):
            pytest.fail("systemd-analyze is not installed (apt-get install systemd); CI must run this test")
        pytest.skip("systemd-analyze is not installed (apt-get install systemd)")
    return analyze


def _unit(name: str = "hubd.service") -> configparser.ConfigParser:
    parser = configparser.ConfigParser(strict=False, interpolation=None, delimiters=("=",))
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string((REPO / "systemd" / name).read_text())
    return parser


def test_the_unit_exposure_stays_at_most_1_5(tmp_path: Path) -> None:
    analyze = _analyze()
    hubd_bin = shutil.which("hubd") or str(Path(sys.executable).with_name("hubd"))
    copy = tmp_path / "hubd.service"
    copy.write_text((REPO / "systemd" / "hubd.service").read_text().replace("/opt/hubd/bin/hubd", hubd_bin))
    result = subprocess.run([analyze, "security", "--offline=yes", f"--threshold={int(MAX_EXPOSURE * 10)}",
                             str(copy)], capture_output=True, text=True, check=False)
    found = re.search(r"Overall exposure level for hubd\.service: (\d+\.\d+)", result.stdout)
    assert found is not None, result.stdout + result.stderr
    assert float(found.group(1)) <= MAX_EXPOSURE and result.returncode == 0, result.stdout


def test_the_unit_raises_the_descriptor_limit_past_what_full_http_needs() -> None:
    limit = int(_unit()["Service"]["LimitNOFILE"])  # one number: soft and hard alike
    assert connection_cap(limit) == MAX_CONNECTIONS


def test_the_unit_gives_up_on_a_crash_loop() -> None:
    unit = _unit()
    interval, burst = int(unit["Unit"]["StartLimitIntervalSec"]), int(unit["Unit"]["StartLimitBurst"])
    restart_s = int(unit["Service"]["RestartSec"])
    assert unit["Service"]["Restart"] == "on-failure"
    # A process that dies as it starts is restarted every RestartSec: that many in a row trip the limit.
    assert burst * restart_s < interval
    assert burst >= 3  # a restart now and then (a broker outage, an update) never trips it


def test_the_start_limit_outlasts_the_restarts_of_the_poisons_hubd_sets_aside() -> None:
    """N poisons cost at most N + 1 restarts (hubd.mqtt.inflight): N + 2 starts, within the limit with room left."""
    unit = _unit()
    starts = POISONS_WITHIN_START_LIMIT + 2
    interval, restart_s = int(unit["Unit"]["StartLimitIntervalSec"]), int(unit["Service"]["RestartSec"])
    # They come RestartSec apart (and a few seconds of start and death each): all within one interval, so the
    # burst alone must hold them, and a restart or two besides (a broker outage, an update).
    assert starts * (restart_s + 10) < interval
    assert int(unit["Unit"]["StartLimitBurst"]) >= starts + 1


def test_a_config_error_comes_from_the_main_process_where_restarts_are_prevented() -> None:
    service = _unit()["Service"]
    # RestartPreventExitStatus= looks at the main process only: a pre-check exiting 2 would be restarted.
    assert "ExecStartPre" not in service
    assert service["RestartPreventExitStatus"] == "2"
    assert service["ExecStart"].split()[1:2] == ["run"]  # `hubd run` checks the config itself and exits 2


def test_the_unit_passes_systemd_analyze_verify_and_keeps_its_hardening(tmp_path: Path) -> None:
    analyze = _analyze()
    unit = (REPO / "systemd" / "hubd.service").read_text()
    for required in (
        "Type=notify",
        "WatchdogSec=",
        "Restart=on-failure",
        "DynamicUser=yes",
        "StateDirectory=hubd",
        "ProtectSystem=strict",
        "NoNewPrivileges=yes",
        "PrivateTmp=yes",
        "ProtectHome=yes",
        "RestrictAddressFamilies=",
        "LoadCredential=",
        "RestartPreventExitStatus=2",
        "MemoryMax=",
    ):
        assert required in unit, required
    assert "Documentation=file:" not in unit  # nothing installs a local copy of the docs
    hubd_bin = shutil.which("hubd") or str(Path(sys.executable).with_name("hubd"))
    assert Path(hubd_bin).exists(), "install the package first: pip install -e ."
    copy = tmp_path / "hubd.service"
    copy.write_text(unit.replace("/opt/hubd/bin/hubd", hubd_bin))
    result = subprocess.run([analyze, "verify", str(copy)], capture_output=True, text=True, check=False)
    # systemd-analyze exits 0 for most mistakes; any output at all is a finding.
    assert result.returncode == 0 and not (result.stdout + result.stderr).strip(), result.stdout + result.stderr


# --- the backup timer: hubd-backup.service and hubd-backup.timer ----------------------------------------------------


def test_the_backup_units_pass_systemd_analyze_verify_and_stay_hardened(tmp_path: Path) -> None:
    analyze = _analyze()
    hubd_bin = shutil.which("hubd") or str(Path(sys.executable).with_name("hubd"))
    for name in ("hubd-backup.service", "hubd-backup.timer"):  # side by side: the timer names the service
        (tmp_path / name).write_text((REPO / "systemd" / name).read_text().replace("/opt/hubd/bin/hubd", hubd_bin))
    result = subprocess.run([analyze, "verify", str(tmp_path / "hubd-backup.service"),
                             str(tmp_path / "hubd-backup.timer")], capture_output=True, text=True, check=False)
    assert result.returncode == 0 and not (result.stdout + result.stderr).strip(), result.stdout + result.stderr
    result = subprocess.run([analyze, "security", "--offline=yes", "--threshold=10",
                             str(tmp_path / "hubd-backup.service")], capture_output=True, text=True, check=False)
    found = re.search(r"Overall exposure level for hubd-backup\.service: (\d+\.\d+)", result.stdout)
    assert found is not None, result.stdout + result.stderr
    assert float(found.group(1)) <= 1.0 and result.returncode == 0, result.stdout  # no network at all


def test_the_backup_runs_as_hubds_user_on_hubds_state_and_keeps_a_week() -> None:
    hub, backup, timer = _unit(), _unit("hubd-backup.service"), _unit("hubd-backup.timer")
    service = backup["Service"]
    assert service["Type"] == "oneshot"
    # hubd.service's DynamicUser is named after the unit; the same User= shares it, so the database is readable.
    assert "User" not in hub["Service"] and service["DynamicUser"] == "yes" and service["User"] == "hubd"
    for key in ("StateDirectory", "StateDirectoryMode", "ConfigurationDirectory", "UMask"):
        assert service[key] == hub["Service"][key], key
    args = service["ExecStart"].split()[1:]
    assert args[0] == "backup" and args[-1].startswith("/var/lib/hubd/") and args[-1].endswith("/")
    parsed = _parser().parse_args(args)
    assert parsed.keep == 7 and str(parsed.config) == "/etc/hubd/config.yaml" and not parsed.with_secrets
    assert "LoadCredential" not in service  # it reads no secret
    assert timer["Timer"]["Persistent"] == "true" and timer["Timer"]["RandomizedDelaySec"]
    assert timer["Timer"]["OnCalendar"].startswith("*-*-* ")  # nightly
    assert timer["Install"]["WantedBy"] == "timers.target"

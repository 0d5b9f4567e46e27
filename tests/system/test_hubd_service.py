"""hubd's unit, exactly as systemd/hubd.service ships it, under a real systemd 252 (PID 1 in a podman container):
readiness, the dynamic user and its credentials, the state directory, the watchdog (a stopped process and a
stalled event loop), a configuration error, reload, stop, the exposure score, the memory cap, zeroconf."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from tests.system.installed import CONFIG, CREDSTORE, HTTP_PORT, LOCAL_PORT, UNITS
from tests.system.podman import Container

pytestmark = [pytest.mark.system, pytest.mark.timeout(900)]

START_TIMEOUT_S = 60.0  # the unit's TimeoutStartSec
WATCHDOG_TIMEOUT_S = 100.0  # WatchdogSec=30, then up to TimeoutAbortSec (10 s) and RestartSec (5 s), with room
FAILED_TIMEOUT_S = 30.0
STOP_LIMIT_S = 2.0  # what the issue asks of `systemctl stop`: measured 0.1-0.2 s, hubd's own budget is 4 s
MAX_EXPOSURE = 1.5
STATE_DIR = "/var/lib/private/hubd"  # where DynamicUser= keeps /var/lib/hubd
CREDENTIALS = "/run/credentials/hubd.service"
STALL_SCRIPT = Path(__file__).with_name("stall_thread.py")


def _start(c: Container) -> int:
    """`systemctl start hubd`, which returns once hubd sent READY=1; its main PID."""
    c.run(["systemctl", "start", "hubd"], timeout_s=START_TIMEOUT_S + 10)
    assert c.show("hubd", "ActiveState", "SubState") == {"ActiveState": "active", "SubState": "running"}
    return c.main_pid("hubd")


def _healthz(c: Container) -> tuple[int, dict[str, object]]:
    result = c.run(["curl", "-s", "-o", "/dev/stderr", "-w", "%{http_code}", f"http://127.0.0.1:{HTTP_PORT}/healthz"],
                   check=False)
    status = int(result.stdout or 0)
    return status, json.loads(result.stderr) if status else {}


def _proc_status(c: Container, pid: int) -> dict[str, str]:
    lines = c.out("cat", f"/proc/{pid}/status").splitlines()
    return {k: v.strip() for k, v in (line.split(":", 1) for line in lines)}


def _restarted(c: Container, old_pid: int) -> bool:
    props = c.show("hubd", "NRestarts", "ActiveState", "SubState", "MainPID")
    return (int(props["NRestarts"]) >= 1 and props["ActiveState"] == "active" and props["SubState"] == "running"
            and int(props["MainPID"]) not in (0, old_pid))


def test_enable_now_returns_once_hubd_is_ready_and_healthz_answers_200(hubd: Container) -> None:
    cursor = hubd.journal_cursor()
    hubd.run(["systemctl", "enable", "--now", "hubd"], timeout_s=START_TIMEOUT_S + 10)
    try:
        assert hubd.show("hubd", "ActiveState", "SubState") == {"ActiveState": "active", "SubState": "running"}
        status, body = _healthz(hubd)
        assert status == 200 and body["status"] == "ok", body
        journal = hubd.journal("hubd", after=cursor)
        # READY=1 goes with this line; systemd says "Started" only after it.
        assert journal.index("hubd is ready") < journal.index("Started hubd.service"), journal
    finally:
        hubd.run(["systemctl", "disable", "hubd"])


def test_hubd_stays_activating_while_the_broker_is_down_and_becomes_active_with_it(hubd: Container) -> None:
    hubd.run(["systemctl", "stop", "mosquitto"])
    hubd.run(["systemctl", "start", "--no-block", "hubd"])
    # HTTP listens before MQTT connects: a 503 means hubd runs and waits for the broker.
    hubd.wait_for("/healthz answers 503", lambda: _healthz(hubd)[0] == 503, timeout_s=START_TIMEOUT_S)
    _, body = _healthz(hubd)
    assert hubd.show("hubd", "ActiveState", "SubState") == {"ActiveState": "activating", "SubState": "start"}, body
    hubd.run(["systemctl", "start", "mosquitto"])
    hubd.wait_state("hubd", ActiveState="active", SubState="running", timeout_s=START_TIMEOUT_S)
    assert _healthz(hubd)[0] == 200
    assert hubd.prop("hubd", "NRestarts") == "0"


def test_secrets_are_readable_only_by_the_dynamic_user_and_hubd_runs_confined(hubd: Container) -> None:
    pid = _start(hubd)
    user = hubd.out("ps", "-o", "user=", "-p", str(pid))
    assert user == "hubd"  # DynamicUser= names it after the unit
    assert int(hubd.out("id", "-u", "hubd")) >= 61184  # systemd's range for dynamic users
    for name in ("hubd.client-secret",):
        mode, owner = hubd.out("stat", "-c", "%a %U", f"{CREDENTIALS}/{name}").split()
        assert (mode, owner) == ("400", "hubd")
        assert hubd.out("stat", "-c", "%a %U", f"{CREDSTORE}/{name}") == "600 root"
        # Nobody else: not another unprivileged user, and not hubd's user outside the unit's copy.
        for reader, group in (("nobody", "nogroup"), ("hubd", "hubd")):
            denied = hubd.run(["setpriv", f"--reuid={reader}", f"--regid={group}", "--clear-groups", "cat",
                               f"{CREDSTORE}/{name}"], check=False)
            assert denied.returncode != 0 and "Permission denied" in denied.stderr
        other = hubd.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "cat",
                          f"{CREDENTIALS}/{name}"], check=False)
        assert other.returncode != 0 and "Permission denied" in other.stderr
    status = _proc_status(hubd, pid)
    assert status["NoNewPrivs"] == "1" and status["Seccomp"] == "2", status  # 2: a system-call filter
    assert status["CapEff"] == "0000000000000000", status
    # The missing hubd.mqtt-password credential is skipped, not an error.
    assert hubd.out("ls", CREDENTIALS) == "hubd.client-secret"


def test_the_database_is_in_the_state_directory_owned_by_hubd_mode_0600(hubd: Container) -> None:
    _start(hubd)
    assert "path: /var/lib/hubd/hubd.db" in hubd.out("cat", CONFIG)
    assert hubd.out("readlink", "/var/lib/hubd") == "private/hubd"
    assert hubd.out("stat", "-c", "%a %U", STATE_DIR) == "700 hubd"
    assert hubd.out("stat", "-c", "%a %U", f"{STATE_DIR}/hubd.db") == "600 hubd"


def test_the_watchdog_restarts_a_stopped_process(hubd: Container) -> None:
    pid = _start(hubd)
    cursor = hubd.journal_cursor()
    hubd.run(["kill", "-STOP", str(pid)])
    hubd.wait_for("hubd restarted by the watchdog", lambda: _restarted(hubd, pid), timeout_s=WATCHDOG_TIMEOUT_S)
    assert "Watchdog timeout" in hubd.journal("hubd", after=cursor)


def test_the_watchdog_restarts_hubd_when_only_its_event_loop_stalls(hubd: Container) -> None:
    """The WATCHDOG=1 pings come from the event loop: with the loop's thread alone stopped (ptrace) while the
    other threads run, systemd must still see them stop."""
    pid = _start(hubd)
    threads = hubd.out("ls", f"/proc/{pid}/task").split()
    assert len(threads) > 1, "hubd should have threads besides the event loop's"
    hubd.write("/usr/local/lib/stall_thread.py", STALL_SCRIPT.read_text())
    cursor = hubd.journal_cursor()
    # The event loop runs in the main thread, whose id is the process's.
    hubd.run(["systemd-run", "--unit=hubd-stall", "--collect", "python3", "/usr/local/lib/stall_thread.py", str(pid)])
    try:
        def states() -> dict[str, str]:
            return {t: hubd.run(["cut", "-d", " ", "-f", "3", f"/proc/{pid}/task/{t}/stat"], check=False).stdout.strip()
                    for t in threads}

        stalled = hubd.wait_for("the event loop's thread stopped", lambda: (s := states())[str(pid)] == "t" and s,
                                timeout_s=30)
        others = {t: state for t, state in stalled.items() if t != str(pid)}
        assert all(state in "RSD" for state in others.values()), stalled  # the rest of hubd runs on
        hubd.wait_for("hubd restarted by the watchdog", lambda: _restarted(hubd, pid), timeout_s=WATCHDOG_TIMEOUT_S)
        assert "Watchdog timeout" in hubd.journal("hubd", after=cursor)
    finally:
        hubd.run(["systemctl", "stop", "hubd-stall"], check=False)


@pytest.mark.parametrize(("breakage", "problem"), [
    # Found as the file is read.
    ("s#^  client_id: .*#  client_id: CHANGE-ME#", "platform.client_id: still the placeholder"),
    # Found only as the driver starts, after the database opened.
    ('s#password: "scrypt[$].*"#password: "scrypt$broken"#', "config error: driver.accounts[0].password:"),
], ids=["when-read", "when-started"])
def test_a_config_error_fails_the_unit_without_restarts(hubd: Container, breakage: str, problem: str) -> None:
    hubd.run(["sed", "-i", breakage, CONFIG])
    cursor = hubd.journal_cursor()
    started = hubd.run(["systemctl", "start", "hubd"], check=False, timeout_s=START_TIMEOUT_S + 10)
    assert started.returncode != 0
    # A restart would show as activating (auto-restart); failed is systemd's final word.
    props = hubd.wait_state("hubd", ActiveState="failed", timeout_s=FAILED_TIMEOUT_S)
    props = hubd.show("hubd", "Result", "ExecMainStatus", "NRestarts")
    assert props == {"Result": "exit-code", "ExecMainStatus": "2", "NRestarts": "0"}, props
    journal = hubd.journal("hubd", after=cursor)
    assert problem in journal, journal
    assert "Scheduled restart job" not in journal


def test_reload_rereads_the_config_and_keeps_the_main_pid(hubd: Container) -> None:
    unit = hubd.out("cat", f"{UNITS}/hubd.service")
    if not re.search(r"^ExecReload=", unit, re.MULTILINE):
        pytest.skip("the unit has no ExecReload= yet (SIGHUP reload: the devices page issue)")
    pid = _start(hubd)
    cursor = hubd.journal_cursor()
    hubd.run(["systemctl", "reload", "hubd"], timeout_s=30)
    hubd.wait_state("hubd", ActiveState="active", SubState="running", timeout_s=30)
    assert hubd.main_pid("hubd") == pid
    assert _healthz(hubd)[0] == 200
    journal = hubd.journal("hubd", after=cursor)
    assert "Traceback" not in journal, journal


def test_stop_ends_hubd_cleanly_within_2_s(hubd: Container) -> None:
    _start(hubd)
    cursor = hubd.journal_cursor()
    started = time.monotonic()
    hubd.run(["systemctl", "stop", "hubd"], timeout_s=30)
    elapsed = time.monotonic() - started
    props = hubd.show("hubd", "ActiveState", "Result", "ExecMainStatus")
    assert props == {"ActiveState": "inactive", "Result": "success", "ExecMainStatus": "0"}, props
    assert "hubd stopped (exit code 0)" in hubd.journal("hubd", after=cursor)
    assert elapsed < STOP_LIMIT_S, f"systemctl stop took {elapsed:.2f} s"


def test_systemd_rates_the_running_units_exposure_at_most_1_5(hubd: Container) -> None:
    _start(hubd)
    report = hubd.run(["systemd-analyze", "security", "--no-pager", "hubd"], check=False).stdout
    found = re.search(r"Overall exposure level for hubd\.service: (\d+\.\d+)", report)
    assert found is not None, report
    assert float(found.group(1)) <= MAX_EXPOSURE, report


def test_hubd_runs_well_inside_its_memory_cap(hubd: Container) -> None:
    pid = _start(hubd)
    cap = int(hubd.prop("hubd", "MemoryMax"))
    assert cap == 192 * 1024 * 1024
    peak_kib = int(_proc_status(hubd, pid)["VmHWM"].split()[0])
    assert peak_kib * 1024 * 2 < cap, f"hubd peaked at {peak_kib} KiB at start"


def test_a_status_page_on_loopback_only_is_not_advertised_on_the_lan(hubd: Container) -> None:
    """`hubd init` keeps the status page on 127.0.0.1: zeroconf must not open a socket the LAN could query."""
    pid = _start(hubd)
    journal = hubd.out("journalctl", "-u", "hubd", "-o", "cat", "--no-pager", f"_PID={pid}")
    assert f"zeroconf: not advertising port {LOCAL_PORT}" in journal, journal
    sockets = hubd.out("ss", "-uanp")
    assert f"pid={pid}," not in sockets, sockets

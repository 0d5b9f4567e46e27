"""The speaker agent's unit, exactly as systemd/hubd-speaker.service ships it, under a real systemd: it runs as a
dynamic user in the `audio` group and carries out a tts command end to end, with stand-ins for the tts and the
player (the container has no sound card)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.system.installed import install_unit
from tests.system.podman import Container

pytestmark = [pytest.mark.system, pytest.mark.timeout(900)]

SPEAKER_ID = "kitchen-speaker"
COMMAND_SCRIPT = Path(__file__).with_name("speaker_command.py")
# Stand-ins: the tts writes a (not really) WAV file, the player tells the journal what it got and as whom.
STANDIN_TTS = """#!/bin/sh
printf 'RIFF-stand-in: %s' "$2" > "$1"
"""
STANDIN_PLAYER = """#!/bin/sh
logger -t standin-player "played $(wc -c < "$1") bytes as $(id -un) in groups $(id -Gn)"
"""
SPEAKER_YAML = f"""\
mqtt:
  host: 127.0.0.1
  port: 1883
id: {SPEAKER_ID}
name: Kitchen Speaker
room: Kitchen
tts:
  command: "/usr/local/bin/standin-tts {{wav}} {{text}}"
player:
  command: "/usr/local/bin/standin-player {{file}}"
"""


@pytest.fixture
def speaker(container: Container) -> Iterator[Container]:
    """The speaker's unit installed with its config and the stand-ins; stopped and disabled after."""
    container.write("/usr/local/bin/standin-tts", STANDIN_TTS, mode="0755")
    container.write("/usr/local/bin/standin-player", STANDIN_PLAYER, mode="0755")
    container.write("/etc/hubd/speaker.yaml", SPEAKER_YAML, mode="0644")
    container.write("/usr/local/lib/speaker_command.py", COMMAND_SCRIPT.read_text())
    container.run(["systemctl", "start", "mosquitto"])
    install_unit(container, "hubd-speaker.service")
    yield container
    container.run(["systemctl", "disable", "--now", "hubd-speaker"], check=False, timeout_s=30)
    container.run(["systemctl", "reset-failed", "hubd-speaker"], check=False)


def test_the_speaker_runs_in_the_audio_group_and_plays_a_tts_command(speaker: Container) -> None:
    cursor = speaker.journal_cursor()
    speaker.run(["systemctl", "enable", "--now", "hubd-speaker"], timeout_s=60)
    speaker.wait_state("hubd-speaker", ActiveState="active", SubState="running", timeout_s=30)
    pid = speaker.main_pid("hubd-speaker")
    audio_gid = speaker.out("getent", "group", "audio").split(":")[2]
    status = dict(line.split(":", 1) for line in speaker.out("cat", f"/proc/{pid}/status").splitlines())
    assert audio_gid in status["Groups"].split(), status["Groups"]
    assert speaker.out("ps", "-o", "user=", "-p", str(pid)) == "hubd-speaker"
    answer = speaker.run(["/opt/hubd/bin/python", "/usr/local/lib/speaker_command.py", SPEAKER_ID,
                          "Someone is at the front door"], check=False, timeout_s=90)
    assert answer.returncode == 0, answer.stdout + answer.stderr + speaker.status("hubd-speaker")
    result = json.loads(answer.stdout)
    assert result["status"] == "done", result

    def played() -> list[str]:
        # The player's syslog line. Read from everything after the cursor: journald may not learn the unit of a
        # process as short-lived as `logger` (so no `-u`), and `journalctl -t` finds nothing after a cursor in
        # systemd 252. The dynamic user in it exists only inside the unit.
        out = speaker.run(["journalctl", "--after-cursor", cursor, "-o", "json", "--no-pager"]).stdout
        entries = [json.loads(line) for line in out.splitlines() if line.strip()]
        return [e["MESSAGE"] for e in entries if e.get("SYSLOG_IDENTIFIER") == "standin-player"]

    lines = speaker.wait_for("the stand-in player's journal line", played, timeout_s=30)
    assert "as hubd-speaker in groups hubd-speaker audio" in lines[0], lines
    assert speaker.prop("hubd-speaker", "NRestarts") == "0"

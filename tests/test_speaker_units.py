"""The pure parts of the speaker agent: speaker.yaml, command templates, Volume and Mute, command
payloads, the announced config, which programs it picks, and the systemd unit."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hubd_proc import REPO

from hubd.errors import ConfigError
from hubd.speaker import mixer
from hubd.speaker.config import SpeakerConfig, load_speaker_config, parse_speaker_config
from hubd.speaker.fetch import shown
from hubd.speaker.reach import address_problem, url_problem
from hubd.speaker.sound import find_tools
from hubd.speaker.template import CommandTemplate, ValueRefused
from hubd.speaker.wire import CommandInvalid, Job, announcement, parse_command

MINIMAL = "id: kitchen-speaker\nname: Kitchen Speaker\n"


def _config(text: str, env: dict[str, str] | None = None) -> SpeakerConfig:
    return parse_speaker_config(text, env or {})


def _problems(text: str, env: dict[str, str] | None = None) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        _config(text, env)
    return caught.value.problems


# speaker.yaml


def test_the_example_config_is_valid_and_documents_every_key() -> None:
    config = load_speaker_config(REPO / "speaker.example.yaml")
    assert config.id == "kitchen-speaker" and config.client_id == "hubd-speaker-kitchen-speaker"
    text = (REPO / "speaker.example.yaml").read_text()

    def keys(model: type[object], prefix: str = "") -> list[str]:
        out = []
        for name, info in model.model_fields.items():  # type: ignore[attr-defined]
            sub = info.annotation
            if isinstance(sub, type) and hasattr(sub, "model_fields") and name != "log":
                out += keys(sub, f"{prefix}{name}.")
            out.append(f"{prefix}{name}")
        return out

    for key in keys(SpeakerConfig):
        if key == "mqtt.embedded":  # hubd's key, which the speaker refuses
            continue
        leaf = key.rsplit(".", 1)[-1]
        written = "token_file" if leaf == "token" else "password_file" if leaf == "password" else leaf
        assert f"{written}:" in text, f"speaker.example.yaml does not show {key}"


def test_defaults_follow_the_contract() -> None:
    config = _config(MINIMAL)
    assert config.tts.command == "espeak-ng -v en-us -w {wav} {text}"
    assert config.serial == "kitchen-speaker"  # sn defaults to id
    assert config.client_id == "hubd-speaker-kitchen-speaker"
    assert config.mqtt.base_topic == "hubd"
    assert config.player.command is None and config.volume.command is None and config.asr.forward is None
    assert config.audio.allow_local is False
    assert _config(MINIMAL + "mqtt: {client_id: kitchen-spk}\n").client_id == "kitchen-spk"


def test_errors_name_the_key_the_problem_and_the_line_all_in_one_pass() -> None:
    problems = _problems(
        "id: kitchen/speaker\n"
        "name: Kitchen 2\n"
        "tts:\n"
        "  command: 'espeak-ng {words}'\n"
        "volume: {command: amixer}\n"
        "mqtt: {client_id: hubd}\n"
        "asr: {forward: home_assistant}\n"
        "colour: red\n"
    )
    assert problems == [
        "id: must be 1 to 256 characters without '/', '+', '#' or control characters, e.g. kitchen-speaker (line 1)",
        "name: 'Kitchen 2' has digits or punctuation, which the platform refuses; write 'Kitchen Two' (line 2)",
        "tts.command: {words} is not a placeholder of this command; it takes {wav} and {text} (line 4)",
        "volume.command: must contain {percent} (this command takes {percent}) (line 5)",
        "mqtt.client_id: 'hubd' is hubd's own client id: two clients with one id throw each other off the broker; "
        "leave the key out (default hubd-speaker-<id>) (line 6)",
        "asr.url: missing: forward home_assistant needs Home Assistant's base URL, e.g. http://127.0.0.1:8123 "
        "(line 7)",
        "asr.token_file: missing: forward home_assistant needs a file holding a long-lived access token (Home "
        "Assistant: your profile, Security) (line 7)",
        "colour: unknown key (check the spelling; see speaker.example.yaml for every key) (line 8)",
    ]


@pytest.mark.parametrize(("yaml_text", "expected"), [
    ("room: 'Kids'' Room'\n", "room: \"Kids' Room\" has digits or punctuation, which the platform refuses; "
                              "write 'Kids Room' (line 3)"),
    ("tts: {command: 'espeak-ng {text}'}\n", "tts.command: must contain {wav} (this command takes {wav} and {text}) "
                                             "(line 3)"),
    ("tts: {command: 'espeak-ng \"{text}'}\n", "tts.command: cannot be split into arguments (No closing "
                                               "quotation); check the quotes (line 3)"),
    ("player: {command: '{file}'}\n", "player.command: the program itself ('{file}') cannot be a placeholder; name a "
                                      "program (line 3)"),
    ("mqtt: {embedded: true}\n", "mqtt.embedded: the speaker agent connects to hubd's broker and cannot start one; "
                                 "remove the key (line 3)"),
    ("asr: {forward: command}\n", "asr.command: missing: forward command needs a command that gets {text} and prints "
                                  "the answer (line 3)"),
    ("queue_size: 0\n", "queue_size: Input should be greater than or equal to 1 (line 3)"),
])
def test_one_problem_per_line(yaml_text: str, expected: str) -> None:
    assert _problems(MINIMAL + yaml_text) == [expected]


def test_an_id_with_a_control_character_is_a_config_error_not_a_crash() -> None:
    assert _problems('id: "kitchen\\0speaker"\nname: Kitchen Speaker\n') == [
        "id: must be 1 to 256 characters without '/', '+', '#' or control characters, e.g. kitchen-speaker (line 1)"]


def test_the_token_file_loses_its_trailing_newline(tmp_path: Path) -> None:
    token = tmp_path / "ha-token"
    token.write_text("abc.def.ghi\n")
    config = _config(MINIMAL + f"asr: {{forward: home_assistant, url: 'http://ha.local:8123/', token_file: {token}}}\n")
    assert config.asr.token is not None and config.asr.token.get_secret_value() == "abc.def.ghi"
    assert config.asr.url == "http://ha.local:8123"
    assert "abc.def" not in repr(config)  # a SecretStr
    token.write_text("\n")
    assert _problems(MINIMAL + f"asr: {{forward: home_assistant, url: 'http://h', token_file: {token}}}\n") == [
        "asr.token: the token is empty; put the long-lived access token in the file (line 3)"]


def test_env_vars_are_substituted() -> None:
    config = _config("id: ${SPK}\nname: Hall Speaker\nmqtt: {host: '${BROKER}'}\n", {"SPK": "hall", "BROKER": "pi"})
    assert (config.id, config.mqtt.host) == ("hall", "pi")


def test_the_command_line_reports_config_errors_like_check_config(tmp_path: Path) -> None:
    bad = tmp_path / "speaker.yaml"
    bad.write_text("id: kitchen-speaker\nname: Kitchen Speaker!\n")
    done = subprocess.run([sys.executable, "-m", "hubd", "speaker", "-c", str(bad)], capture_output=True, text=True,
                          cwd=REPO, timeout=60, check=False)
    assert done.returncode == 2
    assert done.stderr.strip() == ("name: 'Kitchen Speaker!' has digits or punctuation, which the platform refuses; "
                                   "write 'Kitchen Speaker' (line 2)")
    done = subprocess.run([sys.executable, "-m", "hubd", "speaker", "-c", str(tmp_path / "nope.yaml"), "--check"],
                          capture_output=True, text=True, cwd=REPO, timeout=60, check=False)
    assert done.returncode == 2 and "cannot read the speaker config" in done.stderr


# Command templates: split first, then fill; never a shell.


def test_placeholders_are_filled_into_arguments_never_interpreted() -> None:
    template = CommandTemplate.parse("espeak-ng -v en-us -w {wav} {text}", ("wav", "text"), ("wav",))
    hostile = "x; rm -rf / `id` $(id) {wav} \"quoted\" 'single'\nnext line"
    assert template.fill({"wav": "/tmp/a.wav", "text": hostile}) == [
        "espeak-ng", "-v", "en-us", "-w", "/tmp/a.wav", hostile]
    # A text that looks like an option stays an operand.
    assert template.fill({"wav": "/w.wav", "text": "-w /etc/passwd"})[-1] == " -w /etc/passwd"
    # Quotes in the config group words; placeholders inside an argument are filled there.
    quoted = CommandTemplate.parse("say --voice 'Daniel (en)' --out=file:{wav} {text}", ("wav", "text"))
    assert quoted.fill({"wav": "/x.wav", "text": "hi {text}"}) == [
        "say", "--voice", "Daniel (en)", "--out=file:/x.wav", "hi {text}"]
    assert not CommandTemplate.parse("piper --output_file {wav}", ("wav", "text")).uses("text")


@pytest.mark.parametrize("value", ["a\x00b", "\x1b[2J", "bell\x07", "del\x7f", "c1\x85", "\x00"])
def test_a_value_with_a_control_character_never_becomes_an_argument(value: str) -> None:
    template = CommandTemplate.parse("mpv {url}", ("url",), ("url",))
    with pytest.raises(ValueRefused, match=r"\{url\} has a control character \(U\+00[0-9A-F]{2}\) at position \d"):
        template.fill({"url": value})
    # Tabs and line breaks are text; a value for a placeholder the command does not use is not checked.
    assert template.fill({"url": "a\tb\r\nc", "text": "\x00"}) == ["mpv", "a\tb\r\nc"]


# Volume and Mute.


@pytest.mark.parametrize(("start", "request_body", "expected"), [
    (mixer.Level(50), {"interface": "Volume", "operation": "Set", "value": 30}, mixer.Level(30)),
    (mixer.Level(50), {"interface": "Volume", "operation": "Set", "value": 130}, mixer.Level(100)),
    (mixer.Level(50), {"interface": "Volume", "operation": "Set", "value": 33.5}, mixer.Level(34)),
    (mixer.Level(50), {"interface": "Volume", "operation": "Adjust", "delta": -20}, mixer.Level(30)),
    (mixer.Level(95), {"interface": "Volume", "operation": "Adjust"}, mixer.Level(100)),
    (mixer.Level(50), {"interface": "Volume", "operation": "Adjust", "value": 60, "delta": 10}, mixer.Level(60)),
    (mixer.Level(50), {"interface": "Volume", "operation": "SetMax"}, mixer.Level(100)),
    (mixer.Level(50), {"interface": "Volume", "operation": "SetMin"}, mixer.Level(0)),
    (mixer.Level(50), {"interface": "Mute", "operation": "On", "value": "On"}, mixer.Level(50, muted=True)),
    (mixer.Level(50, muted=True), {"interface": "Mute", "operation": "Off"}, mixer.Level(50)),
    (mixer.Level(50, muted=True), {"interface": "Volume", "operation": "Set", "value": 20}, mixer.Level(20)),
])
def test_volume_and_mute(start: mixer.Level, request_body: dict[str, object], expected: mixer.Level) -> None:
    request = mixer.parse_set(json.dumps({"id": "m-1", **request_body}).encode())
    assert mixer.apply(start, request) == expected


def test_mute_sets_the_mixer_to_zero_and_keeps_the_level() -> None:
    muted = mixer.Level(40, muted=True)
    assert muted.percent == 0 and muted.state() == {"Volume": 40, "Mute": "On"}
    assert mixer.Level(40).state() == {"Volume": 40, "Mute": "Off"}


@pytest.mark.parametrize("body", [
    b"not json", b"[]", b'{"interface": "Volume"}', b"[" * 4000,
    b'{"interface": "Brightness", "operation": "Set", "value": 3}',
    b'{"interface": "Volume", "operation": "SetRandom"}', b'{"interface": "Volume", "operation": "Set"}',
    b'{"interface": "Volume", "operation": "Set", "value": "loud"}', b'{"interface": "Mute", "operation": "Toggle"}',
])
def test_set_messages_the_speaker_cannot_carry_out(body: bytes) -> None:
    with pytest.raises(mixer.SetInvalid):
        mixer.apply(mixer.Level(50), mixer.parse_set(body))


# Command payloads and the announced config.


def test_commands_are_read_as_hubd_sends_them() -> None:
    assert parse_command(b'{"id": "c1", "type": "tts", "text": " Dinner is ready "}') == (
        "c1", Job("c1", "tts", text="Dinner is ready"))
    assert parse_command(b'{"id": "c2", "type": "audio", "url": "https://x/y.mp3"}') == (
        "c2", Job("c2", "audio", url="https://x/y.mp3"))
    for payload, command_id, problem in [
        (b"{", None, "not JSON"), (b'{"type": "tts"}', None, "id: must be a non-empty string"),
        (b'{"id": "c3", "type": "sing"}', "c3", "type: must be one of tts, audio, asr"),
        (b'{"id": "c4", "type": "asr", "text": "  "}', "c4", "text: a asr command needs a non-empty text"),
        (b'{"id": "c5", "type": "audio"}', "c5", "url: a audio command needs a non-empty url"),
        (b'{"id": "c6", "type": "tts", "text": "\\ud800"}', "c6", "unpaired surrogate"),
        (b'{"id": "c7", "type": "tts", "text": "Dinner\\u0000 is ready"}', "c7",
         "text: has a control character (U+0000) at position 7; send plain text (tabs and line breaks are fine)"),
        (b'{"id": "c8", "type": "asr", "text": "\\u001b[31mred"}', "c8", "text: has a control character (U+001B)"),
        (b'{"id": "c9", "type": "tts", "text": "next\\u0085line"}', "c9", "text: has a control character (U+0085)"),
        (b'{"id": "c10\\n", "type": "tts", "text": "hi"}', "c10\n", "id: has a control character (U+000A) at"),
        (b'{"id": "c11", "type": "audio", "url": "http://nas/a\\u0000.mp3"}', "c11",
         "url: has a control character (U+0000) at position 13; percent-encode it"),
        (b'{"id": "c12", "type": "audio", "url": "file:///etc/passwd"}', "c12",
         "url: only http:// and https:// URLs are played, not file:"),
        (b'[' * 5000, None, "the command nests more than 8 levels deep"),
    ]:
        got_id, parsed = parse_command(payload)
        assert got_id == command_id and isinstance(parsed, CommandInvalid) and problem in str(parsed), payload


def test_text_may_have_tabs_and_line_breaks() -> None:
    assert parse_command(b'{"id": "c1", "type": "tts", "text": "Two lines\\nand a\\ttab"}') == (
        "c1", Job("c1", "tts", text="Two lines\nand a\ttab"))


@pytest.mark.parametrize(("url", "problem"), [
    ("file:///etc/passwd", "only http:// and https:// URLs are played, not file:"),
    ("gopher://nas.local/1", "not gopher:"),
    ("ftp://nas.local/x.mp3", "not ftp:"),
    ("javascript:alert(1)", "not javascript:"),
    ("nas.local/chime.mp3", "not a URL without a scheme"),
    ("http:///chime.mp3", "has no valid host name or address"),
    ("http://nas.local:99999/x.mp3", "is not a valid URL"),
    ("http://[::1/x.mp3", "is not a valid URL"),
    ("http://a..b/x.mp3", "has no valid host name or address"),
    ("http://" + "a" * 64 + ".example/x.mp3", "has no valid host name or address"),
    ("http://%00/x.mp3", "has no valid host name or address"),
    ("http://nas.local/a b.mp3", "has a space at position 19; percent-encode it (a space is %20)"),
    ("http://nas.local/a\u00a0b.mp3", "has white space at position 19"),
    ("http://127.0.0.1\\@nas.local/x.mp3", "has a backslash at position 17"),
    ("http://nas.local/x.mp3\n", "has a control character (U+000A) at position 23"),
    ("http://nas.local/\x7f", "has a control character (U+007F)"),
])
def test_audio_urls_are_http_or_https_with_a_host_and_nothing_a_url_never_holds(url: str, problem: str) -> None:
    found = url_problem(url)
    assert found is not None and problem in found, found


def test_an_audio_urls_host_name_is_counted_without_its_trailing_dot() -> None:
    """hubd.config.model's host-name rule, with the DNS's count: 253 characters, and the root's dot besides."""
    name = ".".join(["a" * 63] * 3 + ["a" * 61])
    assert len(name) == 253
    assert url_problem(f"http://{name}/x.mp3") is None
    assert url_problem(f"http://{name}./x.mp3") is None
    for host in (f"{name}a", f"{name}..", "a..", "."):
        found = url_problem(f"http://{host}/x.mp3")
        assert found is not None and "has no valid host name or address" in found, host


@pytest.mark.parametrize("url", ["http://nas.local/chime.mp3", "https://example.com:8443/a/b.ogg?x=1&y=%20#f",
                                 "HTTP://NAS/x.mp3", "http://192.168.1.5/x.mp3", "http://[fd00::2]:8000/x",
                                 "http://user:pw@nas/x.mp3", "http://nas.local/Grüße.mp3", "http://bücher.example/x"])
def test_ordinary_audio_urls_pass(url: str) -> None:
    assert url_problem(url) is None


@pytest.mark.parametrize(("address", "what"), [
    ("127.0.0.1", "a loopback address (this machine itself); set audio.allow_local: true"),
    ("127.8.9.10", "a loopback address"), ("::1", "a loopback address"), ("::ffff:127.0.0.1", "a loopback address"),
    ("169.254.169.254", "a link-local address (169.254.0.0/16 or fe80::/10, where cloud metadata services answer); "
                        "set audio.allow_local: true"),
    ("fe80::1%eth0", "a link-local address"), ("::ffff:169.254.169.254", "a link-local address"),
])
def test_loopback_and_link_local_are_refused_unless_allow_local(address: str, what: str) -> None:
    problem = address_problem(address, allow_local=False)
    assert problem is not None and problem.startswith(what), problem
    assert address_problem(address, allow_local=True) is None


@pytest.mark.parametrize(("address", "what"), [
    ("0.0.0.0", "an unspecified address"), ("0.1.2.3", "an unspecified address"), ("::", "an unspecified address"),
    ("224.0.0.1", "a multicast address"), ("239.255.255.250", "a multicast address"),
    ("ff02::1", "a multicast address"),
    ("255.255.255.255", "the broadcast address"),
])
def test_unspecified_multicast_and_broadcast_are_always_refused(address: str, what: str) -> None:
    for allow_local in (False, True):
        problem = address_problem(address, allow_local=allow_local)
        assert problem is not None and problem.startswith(what) and "allow_local" not in problem, problem


@pytest.mark.parametrize("address", ["192.168.1.20", "10.0.0.5", "172.16.0.9", "fd00::2", "100.64.0.1", "8.8.8.8",
                                     "2a00:1450:4001::1", "::ffff:192.168.1.20"])
def test_lan_and_internet_addresses_are_fine(address: str) -> None:
    assert address_problem(address, allow_local=False) is None


def test_the_announcement_is_a_speaker_with_volume_and_mute_only_with_a_mixer() -> None:
    plain = announcement(_config(MINIMAL + "room: Kitchen\ntags: [announce, downstairs]\nsn: SN-1\n"))
    assert plain == {"displayName": "Kitchen Speaker", "displayType": "speaker", "sn": "SN-1",
                     "tags": ["announce", "downstairs"], "capabilities": [], "recommendRoomName": "Kitchen"}
    mixed = announcement(_config(MINIMAL + "volume: {command: 'amixer -q set Master {percent}%'}\n"))
    assert mixed["capabilities"] == [
        {"interface": "Volume", "supportedOperations": ["Set", "Adjust", "SetMax", "SetMin"],
         "proactivelyReported": True, "retrievable": True},
        {"interface": "Mute", "supportedOperations": ["On", "Off"], "proactivelyReported": True,
         "retrievable": True}]
    assert "recommendRoomName" not in mixed and mixed["sn"] == "kitchen-speaker"


def test_urls_in_messages_lose_their_query() -> None:
    assert shown("https://user:pw@ha.local:8123/api/tts_proxy/x.mp3?authSig=secret#f") == \
        "https://ha.local:8123/api/tts_proxy/x.mp3"


# Which programs the agent picks.


def _which(*installed: str) -> object:
    return lambda name: f"/usr/bin/{name}" if name in installed else None


def test_players_are_found_in_order_and_only_with_their_sound_server(tmp_path: Path) -> None:
    config = _config(MINIMAL)
    everything = _which("espeak-ng", "pw-play", "paplay", "aplay", "ffplay", "mpg123", "gst-play-1.0")
    # A system service has no PipeWire or PulseAudio session: ALSA's aplay plays.
    tools = find_tools(config, everything, {})  # type: ignore[arg-type]
    assert tools.player.template is not None and tools.player.template.text == "aplay -q {file}"
    assert [s.split(" ")[0] for s in tools.skipped] == ["pw-play", "paplay"]
    (tmp_path / "pipewire-0").touch()
    tools = find_tools(config, everything, {"XDG_RUNTIME_DIR": str(tmp_path)})  # type: ignore[arg-type]
    assert tools.player.template is not None and tools.player.template.program == "pw-play"
    # Other audio: ffplay first; mpg123 only for MP3.
    assert tools.player_for("audio/ogg") == tools.file_players[0]
    only_mpg123 = find_tools(config, _which("espeak-ng", "aplay", "mpg123"), {})  # type: ignore[arg-type]
    assert only_mpg123.player_for("audio/ogg") is None
    assert only_mpg123.player_for("audio/mpeg") is not None
    assert only_mpg123.player_for("audio/x-wav") == only_mpg123.player
    nothing = find_tools(config, _which(), {})  # type: ignore[arg-type]
    assert nothing.tts.path is None and nothing.player.template is None and nothing.mixer is None
    configured = find_tools(_config(MINIMAL + "player: {command: 'cp {file} /x/'}\n"), _which("cp"), {})  # type: ignore[arg-type]
    assert configured.player_for("audio/ogg") == configured.player and configured.file_players == ()


# The systemd unit.


def test_the_speaker_unit_verifies_and_reaches_the_sound_card(tmp_path: Path) -> None:
    unit = (REPO / "systemd" / "hubd-speaker.service").read_text()
    lines = {line.strip() for line in unit.splitlines()}
    for required in ("DynamicUser=yes", "SupplementaryGroups=audio", "ProtectSystem=strict", "ProtectHome=yes",
                     "NoNewPrivileges=yes", "PrivateTmp=yes", "Restart=on-failure", "RestartPreventExitStatus=2",
                     "ExecStart=/opt/hubd/bin/hubd speaker -c /etc/hubd/speaker.yaml", "DeviceAllow=char-alsa rw"):
        assert required in lines, required
    assert "PrivateDevices=yes" not in lines  # it would hide /dev/snd
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        if os.environ.get("CI"):
            pytest.fail("systemd-analyze is not installed (apt-get install systemd); CI must run this test")
        pytest.skip("systemd-analyze is not installed (apt-get install systemd)")
    hubd_bin = shutil.which("hubd") or str(Path(sys.executable).with_name("hubd"))
    copy = tmp_path / "hubd-speaker.service"
    copy.write_text(unit.replace("/opt/hubd/bin/hubd", hubd_bin))
    result = subprocess.run([analyze, "verify", str(copy)], capture_output=True, text=True, check=False)
    assert result.returncode == 0 and not (result.stdout + result.stderr).strip(), result.stdout + result.stderr
    security = subprocess.run([analyze, "security", "--offline=yes", "--threshold=20", str(copy)],
                              capture_output=True, text=True, check=False)
    assert security.returncode == 0, security.stdout

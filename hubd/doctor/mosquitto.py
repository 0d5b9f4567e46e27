"""The `broker-limits` check: mosquitto's own limits, where they would lose or pass what hubd needs.

mosquitto publishes none of its settings (its `$SYS` topics are counters), so they are read from its config
file where the broker runs on this machine: the mosquitto process whose listener is `mqtt.port`, found in
/proc, its `-c` file and the files that one includes (`include_dir`, `include`). Checked: `max_queued_messages`
(while hubd cannot store, it acknowledges nothing and mosquitto queues for it only this many, then drops),
`max_queued_bytes` (the same in bytes), `message_size_limit` / `max_packet_size` (unset, any client may send
up to 256 MB; below what hubd reads, zigbee2mqtt's device list is dropped) and `persistence` (off, a broker
restart loses what it queued). A broker elsewhere, or a config the doctor cannot read, gets a WARN naming the
settings to check there. Reads files only.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import socket
from dataclasses import dataclass
from pathlib import Path

from hubd.config.model import HubdConfig
from hubd.doctor.report import Result, passed, warned

LIMITS = "broker-limits"
DROP_IN = "/etc/mosquitto/conf.d/hubd.conf"
MOSQUITTO_PORT = 1883  # mosquitto's listener when its config names none
MOSQUITTO_QUEUED_MESSAGES = 1000  # mosquitto's default max_queued_messages
RECOMMENDED_QUEUED_MESSAGES = 100_000  # a flood of a few minutes while the disk is full (docs/systemd.md)
MIN_QUEUED_BYTES = 64 << 20  # max_queued_bytes below this holds too little of a flood
RECOMMENDED_MESSAGE_BYTES = 16 << 20  # the drop-in's message_size_limit
MQTT_MAX_BYTES = 256 << 20  # what MQTT lets a client send when mosquitto sets no limit
RECOMMENDED = (f"max_queued_messages {RECOMMENDED_QUEUED_MESSAGES}, max_queued_bytes 0 or at least "
               f"{MIN_QUEUED_BYTES}, message_size_limit {RECOMMENDED_MESSAGE_BYTES}, persistence true")
_MAX_INCLUDE_DEPTH = 5


@dataclass(frozen=True, slots=True)
class Broker:
    """A mosquitto process on this machine: its pid and its config file (None: it runs on its defaults)."""

    pid: int
    config: Path | None


def check_broker_limits(config: HubdConfig, proc: Path = Path("/proc")) -> Result:
    """WARN with the fix where mosquitto would drop or pass what hubd needs; PASS naming the settings found."""
    mqtt = config.mqtt
    where = f"{mqtt.host}:{mqtt.port}"
    if mqtt.embedded:
        return passed(LIMITS, "the embedded broker runs inside hubd: no broker of its own to set")
    if not _is_local(mqtt.host):
        return warned(LIMITS, f"the broker at {where} is not on this machine, so its config cannot be read here; "
                              f"if it is mosquitto, check there: {RECOMMENDED} (docs/systemd.md)")
    broker = find_mosquitto(mqtt.port, proc)
    if broker is None:
        return warned(LIMITS, f"no mosquitto process the doctor can see listens on port {mqtt.port} (another "
                              f"broker, or one in a container); check its limits: {RECOMMENDED} (docs/systemd.md)")
    try:
        settings, files = read_settings(broker.config) if broker.config is not None else ({}, [])
    except OSError as err:
        return warned(LIMITS, f"cannot read mosquitto's config ({err.filename}: {err.strerror}); run the doctor "
                              f"as root, or check by hand: {RECOMMENDED} (docs/systemd.md)")
    problems = limit_problems(settings, _needed_bytes(config))
    read = ", ".join(str(f) for f in files) if files else "no config file: mosquitto's defaults"
    if problems:
        return warned(LIMITS, f"mosquitto (pid {broker.pid}; {read}): " + "; ".join(problems)
                      + f". Put these in {DROP_IN} (docs/systemd.md has the file) and restart mosquitto")
    return passed(LIMITS, f"mosquitto (pid {broker.pid}; {read}): max_queued_messages "
                          f"{settings.get('max_queued_messages')}, max_queued_bytes "
                          f"{settings.get('max_queued_bytes', '0')}, message_size_limit "
                          f"{_size_limit(settings)}, persistence true")


def limit_problems(settings: dict[str, str], needed: tuple[int, str]) -> list[str]:
    """What in mosquitto's settings (key -> last value) would lose or pass what hubd needs, each with its fix."""
    problems: list[str] = []
    queued = _int(settings.get("max_queued_messages"), MOSQUITTO_QUEUED_MESSAGES)
    if 0 < queued < RECOMMENDED_QUEUED_MESSAGES:
        default = "" if "max_queued_messages" in settings else " (mosquitto's default)"
        problems.append(f"max_queued_messages is {queued}{default}: while hubd cannot store (a full disk) it "
                        f"acknowledges nothing, and mosquitto drops every message for it after the first {queued}; "
                        f"set max_queued_messages {RECOMMENDED_QUEUED_MESSAGES}")
    queued_bytes = _int(settings.get("max_queued_bytes"), 0)
    if 0 < queued_bytes < MIN_QUEUED_BYTES:
        problems.append(f"max_queued_bytes is {queued_bytes}: mosquitto drops what it queues for hubd beyond that; "
                        f"set max_queued_bytes 0 (no limit) or at least {MIN_QUEUED_BYTES}")
    limit = _size_limit(settings)
    needed_bytes, what = needed
    fix = f"set message_size_limit {max(RECOMMENDED_MESSAGE_BYTES, needed_bytes)}"
    if limit == 0:
        problems.append(f"message_size_limit is not set: any client may send messages of up to {MQTT_MAX_BYTES} "
                        f"bytes, which mosquitto holds and queues for hubd (it reads at most {needed_bytes}, {what}); "
                        f"{fix}")
    elif limit < needed_bytes:
        problems.append(f"message_size_limit is {limit}: mosquitto drops larger messages, and hubd reads up to "
                        f"{needed_bytes} ({what}); {fix}")
    if settings.get("persistence", "false").lower() != "true":
        problems.append("persistence is off: a restart of mosquitto loses hubd's session and every message it "
                        "queued for hubd; set persistence true (with a persistence_location)")
    return problems


def find_mosquitto(port: int, proc: Path = Path("/proc")) -> Broker | None:
    """The mosquitto process on this machine with a listener on `port`, or None."""
    for entry in sorted(proc.iterdir(), key=lambda p: p.name):
        if not entry.name.isdigit():
            continue
        try:
            argv = [a.decode("utf-8", "replace") for a in (entry / "cmdline").read_bytes().split(b"\0") if a]
        except OSError:
            continue  # gone meanwhile, or hidden
        if not argv or os.path.basename(argv[0]) != "mosquitto":
            continue
        config = _option(argv, "-c", "--config-file")
        config_path = None
        if config is not None:
            config_path = Path(config) if os.path.isabs(config) else entry / "cwd" / config
        ports = _ports(argv, config_path)
        if port in ports:
            return Broker(int(entry.name), config_path)
    return None


def read_settings(path: Path, depth: int = 0) -> tuple[dict[str, str], list[Path]]:
    """mosquitto's settings in `path` and what it includes (the last value of each key wins, as mosquitto reads
    them), and the files read; OSError for one that cannot be read. `listener` lines are kept as `listener`."""
    settings: dict[str, str] = {}
    files = [path]
    listeners: list[str] = []
    for raw in path.read_text(encoding="utf-8", errors="replace").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        key, _, value = line.partition(" ")
        value = value.strip()
        if key in ("include_dir", "include") and depth < _MAX_INCLUDE_DEPTH:
            included = sorted(Path(value).glob("*.conf")) if key == "include_dir" else [Path(value)]
            for name in included:
                more, read = read_settings(name, depth + 1)
                if "listener" in more:
                    listeners += more.pop("listener").split("\n")
                settings.update(more)
                files += read
        elif key == "listener":
            listeners.append(value)
        else:
            settings[key] = value
    if listeners:
        settings["listener"] = "\n".join(listeners)
    return settings, files


def _ports(argv: list[str], config: Path | None) -> set[int]:
    """The ports mosquitto listens on: `-p` options, else its config's listeners (or `port`), else 1883."""
    ports = {_int(argv[i + 1], -1) for i, arg in enumerate(argv[:-1]) if arg in ("-p", "--port")}
    if ports:
        return ports
    if config is not None:
        with contextlib.suppress(OSError):
            settings, _ = read_settings(config)
            found = {_int(line.split()[0], -1) for line in settings.get("listener", "").split("\n") if line.split()}
            if "port" in settings:
                found.add(_int(settings["port"], -1))
            if found:
                return found
    return {MOSQUITTO_PORT}


def _needed_bytes(config: HubdConfig) -> tuple[int, str]:
    """The largest message hubd reads, and what it is."""
    largest, what = config.mqtt.max_message_bytes, "mqtt.max_message_bytes"
    if config.zigbee2mqtt.enabled and config.zigbee2mqtt.max_devices_bytes > largest:
        largest, what = config.zigbee2mqtt.max_devices_bytes, "zigbee2mqtt.max_devices_bytes, its device list"
    return largest, what


def _size_limit(settings: dict[str, str]) -> int:
    """The largest message mosquitto takes (0: no limit of its own): message_size_limit, max_packet_size."""
    limits = [n for n in (_int(settings.get("message_size_limit"), 0), _int(settings.get("max_packet_size"), 0))
              if n > 0]
    return min(limits) if limits else 0


def _option(argv: list[str], *names: str) -> str | None:
    for i, arg in enumerate(argv[:-1]):
        if arg in names:
            return argv[i + 1]
    return None


def _int(text: str | None, default: int) -> int:
    try:
        return int(text) if text is not None else default
    except ValueError:
        return default


def _is_local(host: str) -> bool:
    """True when `host` is this machine: a loopback address, or one a socket can be bound to here."""
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError:
        return False
    for family, _, _, _, sockaddr in infos:
        address = str(sockaddr[0])
        if ipaddress.ip_address(address.partition("%")[0]).is_loopback:
            return True
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            try:
                probe.bind((address, 0))
            except OSError:
                continue
            return True
    return False


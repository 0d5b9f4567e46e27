"""The configuration file: pydantic models (every key: config.example.yaml), loading and the placeholder check.

Owns what each key means, its default and its checks, `hubd init`'s placeholder (a value still holding it
is a problem, with what to put there), and where `${CREDENTIALS_DIRECTORY}/NAME` points when systemd did not
set the variable. Reading the YAML (lines, `${ENV_VAR}`, merge keys, `<key>_file` secrets, the report) is
hubd.config.yamlfile's.
"""

from __future__ import annotations

import ipaddress
import os
import re
import ssl
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationInfo, field_validator

from hubd.config.hostnames import is_host_name
from hubd.config.paths import KeyPath, is_secret_path
from hubd.config.yamlfile import (
    SecretFile,
    UnreadSecret,
    parse_yaml_model,
    read_config_file,
    secret_files,
)

_TOPIC_SEGMENT_RE = re.compile(r"^[^#+\x00]+$")
class _Model(BaseModel):
    """Base: frozen, unknown keys are errors. `<secret>_file` keys are read by the loader (parse_config)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class StorageConfig(_Model):
    """Where hubd keeps its state."""

    path: Path = Path("./hubd.db")
    # FULL: a commit is on disk before the broker gets its PUBACK, so a power cut loses nothing either.
    synchronous: Literal["full", "normal"] = "full"


def broker_host_problem(host: str) -> str | None:
    """Why `host` is not a broker's host as hubd connects to it (a host name or an IP address alone), with the fix;
    None when it is."""
    if _is_host(host):
        return None
    shown = host[:60]
    try:
        bare = urlsplit(host if "//" in host else f"//{host}").hostname or ""
    except ValueError:  # an unclosed `[`
        bare = ""
    if _is_host(bare):
        return (f"{shown!r} is not a host name or IP address alone: write {bare!r} (the port goes in mqtt.port, TLS "
                "in mqtt.tls)")
    return (f"{shown!r} is not a host name or IP address (letters, digits, '-' and '.', punycode for other scripts; "
            "no spaces), e.g. 127.0.0.1")


MQTT_STRING_BYTES = 65_535  # MQTT's longest string or binary field (a 16-bit length)
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def broker_username_problem(username: str) -> str | None:
    """Why `username` cannot be an MQTT username (a NUL, which MQTT forbids and the broker answers by closing the
    connection, another control character, a line break; over 65,535 bytes, which no CONNECT can carry), with the fix;
    None when it can."""
    if _CONTROL_RE.search(username):
        return "holds a control character (NUL, a line break, a tab...); give the username as the broker has it"
    if not username.strip():
        return "is blank; give the broker's username, or none for anonymous"
    if len(username.encode("utf-8", errors="surrogatepass")) > MQTT_STRING_BYTES:
        return f"is over {MQTT_STRING_BYTES} bytes, MQTT's limit; give the username as the broker has it"
    return None


def _is_host(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return is_host_name(host)
    return True


class MqttConfig(_Model):
    """The broker connection."""

    host: str = "127.0.0.1"
    port: int = Field(1883, ge=1, le=65535)
    username: str | None = None
    password: SecretStr | None = None
    tls: bool = False
    ca_file: Path | None = None
    client_id: str = Field("hubd", min_length=1, max_length=23)
    base_topic: str = "hubd"
    embedded: bool = False
    keepalive_s: int = Field(30, ge=5, le=3600)
    max_message_bytes: int = Field(1 << 20, ge=1 << 16, le=1 << 24)  # 1 MiB; 64 KiB..16 MiB

    @field_validator("ca_file")
    @classmethod
    def _ca_file(cls, value: Path | None) -> Path | None:
        if value is None:
            return value
        try:
            ssl.create_default_context(cafile=str(value))
        except ssl.SSLError as err:
            raise ValueError(f"{value} holds no PEM CA certificate ({err.reason or err})") from err
        except OSError as err:
            raise ValueError(f"cannot read {value}: {err.strerror or err}") from err
        return value

    @field_validator("host")
    @classmethod
    def _host(cls, value: str) -> str:
        problem = broker_host_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    @field_validator("username")
    @classmethod
    def _username(cls, value: str | None) -> str | None:
        problem = None if value is None else broker_username_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value

    @field_validator("password")
    @classmethod
    def _password(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None and not isinstance(value, UnreadSecret) and \
                len(value.get_secret_value().encode("utf-8", errors="surrogatepass")) > MQTT_STRING_BYTES:
            raise ValueError(f"is over {MQTT_STRING_BYTES} bytes, MQTT's limit; give the password the broker has")
        return value

    @field_validator("base_topic")
    @classmethod
    def _topic(cls, value: str) -> str:
        if not value or value.startswith("/") or value.endswith("/") or not _TOPIC_SEGMENT_RE.match(value):
            raise ValueError("must be a topic prefix without '+', '#', or a leading/trailing '/', e.g. 'hubd'")
        return value


class HttpConfig(_Model):
    """Where hubd listens and how others reach it."""

    host: str = "127.0.0.1"
    port: int = Field(8080, ge=0, le=65535)
    public_url: str | None = None
    vendor_path: str = "/vendor"
    max_body_bytes: int = Field(65536, ge=1024, le=16 * 1024 * 1024)
    trusted_proxies: list[str] = Field(default_factory=list)  # may set X-Forwarded-For (hubd.web.client_address)
    # Set: the local routes (/, /api/*, /metrics, /trigger/with/*) are served there and only there (hubd.web.server).
    local_host: str = "127.0.0.1"
    local_port: int | None = Field(None, ge=0, le=65535)
    request_timeout_s: float = Field(10.0, ge=1, le=300)  # to send a request's headers, then its body
    max_connections: int | None = Field(None, ge=1, le=65535)  # unset: from the file descriptor limit
    # Host names the local routes answer besides IP addresses, localhost and the machine's own (hubd.web.hosts).
    allowed_hosts: list[str] = Field(default_factory=list)

    @field_validator("local_port")
    @classmethod
    def _local_port(cls, value: int | None, info: ValidationInfo) -> int | None:
        hosts = {info.data.get("host"), info.data.get("local_host")}
        if value and value == info.data.get("port") and (len(hosts) == 1 or hosts & {"0.0.0.0", "::"}):
            raise ValueError(f"must differ from http.port ({value}): the local routes get a listener of their own")
        return value

    @field_validator("allowed_hosts")
    @classmethod
    def _allowed_hosts(cls, value: list[str]) -> list[str]:
        for name in value:
            if not is_host_name(name):
                raise ValueError(f"{name!r} is not a host name: give names only, without scheme or port, "
                                 "e.g. [hub.home.arpa, pi.lan]")
        return value

    @field_validator("vendor_path")
    @classmethod
    def _path(cls, value: str) -> str:
        if not value.startswith("/") or " " in value:
            raise ValueError("must be an absolute URL path such as '/vendor'")
        return value

    @field_validator("public_url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^https?://[^/\s]+", value):
            raise ValueError("must be an http:// or https:// URL such as 'https://hub.example.com'")
        return value.rstrip("/") if value else value

    @property
    def base_url(self) -> str:
        """The URL the platform and browsers use to reach hubd."""
        if self.public_url:
            return self.public_url
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def host_names(self) -> list[str]:
        """The names the local routes answer (with IP addresses, localhost and the machine's names): allowed_hosts,
        public_url's host, and host and local_host where they are names."""
        names = list(self.allowed_hosts)
        if self.public_url:
            names.append(urlsplit(self.public_url).hostname or "")
        listen = (self.host, self.local_host)  # where they are names (an IPv4 address passes as one anyway)
        names += [h for h in listen if is_host_name(h) and not h.replace(".", "").isdigit()]
        return [name for name in dict.fromkeys(names) if name]

    @property
    def local_url(self) -> str:
        """The URL of the local routes (the webhook's): the local listener's when there is one, else base_url."""
        if self.local_port is None:
            return self.base_url
        host = f"[{self.local_host}]" if ":" in self.local_host else self.local_host
        return f"http://{host}:{self.local_port}"


class PlatformConfig(_Model):
    """The smart-speaker platform's APIs and the credentials it issued."""

    base_url: str | None = None
    auth_url: str | None = None
    client_id: str | None = None
    client_secret: SecretStr | None = None
    client_auth: Literal["basic", "body"] = "basic"
    namespace: str = Field("Service", pattern=r"^[A-Za-z][A-Za-z0-9]*$")
    failure_report: bool = True
    request_timeout_s: float = Field(10.0, gt=0, le=120)

    @field_validator("base_url", "auth_url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^https?://[^/\s]+", value):
            raise ValueError("must be an http:// or https:// URL")
        return value.rstrip("/") if value else value

    @property
    def reporting_enabled(self) -> bool:
        """True when everything state reporting needs is configured."""
        return bool(self.base_url and self.auth_url and self.client_id and self.client_secret)


class Account(_Model):
    """One login on the authorize page."""

    username: str = Field(min_length=1)
    password: SecretStr
    admin: bool = False  # may sign in on the devices page and change what the platform gets (hubd.owner)


class DriverConfig(_Model):
    """hubd as the brand's driver."""

    mode: Literal["oauth2", "oauth"] = "oauth2"
    accounts: list[Account] = Field(default_factory=list)
    token_ttl_s: int = Field(3600, ge=60, le=365 * 86400)
    refresh_ttl_s: int = Field(90 * 86400, ge=3600)
    # Empty: the host of platform.auth_url, or loopback only without one; ["*"]: any (hubd.driver.urls).
    callback_hosts: list[str] = Field(default_factory=list)
    hub_name: str = "hubd"


class WebhookConfig(_Model):
    """Per-token limits of the local webhook."""

    per_minute: int = Field(20, ge=1)
    per_day: int = Field(1000, ge=1)


class ZeroconfConfig(_Model):
    """mDNS advertisement."""

    enabled: bool = True


class LogConfig(_Model):
    """Logging."""

    level: Literal["debug", "info", "warning", "error"] = "info"
    # One info line per platform event delivered or given up on (`hubd.events`); false quiets them.
    events: bool = True


def _topic_prefix(value: str, what: str, example: str) -> str:
    """`value` if it is a topic prefix (no wildcard, no leading or trailing '/'); else the error naming `what`."""
    if not value or value.startswith("/") or value.endswith("/") or not _TOPIC_SEGMENT_RE.match(value):
        raise ValueError(f"must be {what}, without '+', '#', or a leading/trailing '/', e.g. '{example}'")
    return value


class DialectConfig(_Model):
    """What every dialect's section has: `enabled` [false] and the `include`/`exclude` globs (fnmatch) over its
    devices' names and identifiers. A dialect's section subclasses it with its own keys (its topic prefix) and
    says in its docstring what its globs match; `hubd.dialects.enabled` gives each section its row."""

    # The keys a reload (SIGHUP) applies live in every dialect's section; the others take a restart.
    LIVE: ClassVar[tuple[str, ...]] = ("include", "exclude")
    # A glob of the section's own, for the error of an empty pattern.
    glob_example: ClassVar[str] = "Kitchen*"

    enabled: bool = False
    include: list[str] = Field(default_factory=lambda: ["*"])
    exclude: list[str] = Field(default_factory=list)

    @field_validator("include", "exclude")
    @classmethod
    def _patterns(cls, value: list[str]) -> list[str]:
        if any(not pattern.strip() for pattern in value):
            raise ValueError(f"a pattern is empty; write a glob (fnmatch) such as 'Kitchen*' or '{cls.glob_example}'")
        return value


class HomeAssistantConfig(DialectConfig):
    """Devices announced with Home Assistant MQTT discovery; the globs match a device's name and identifiers."""

    glob_example: ClassVar[str] = "*"
    discovery_prefix: str = "homeassistant"

    @field_validator("discovery_prefix")
    @classmethod
    def _prefix(cls, value: str) -> str:
        return _topic_prefix(value, "a topic prefix", "homeassistant")


class Zigbee2MqttConfig(DialectConfig):
    """zigbee2mqtt's devices imported natively from `<base_topic>/bridge/devices`; the globs match friendly_name
    and ieee_address."""

    glob_example: ClassVar[str] = "0x00158d*"
    base_topic: str = "zigbee2mqtt"
    # bridge/devices and bridge/groups: 2,000 devices of 8 KiB each (docs/configuration.md), read within MemoryMax=192M.
    max_devices_bytes: int = Field(1 << 24, ge=1 << 20, le=1 << 24)  # 16 MiB

    @field_validator("base_topic")
    @classmethod
    def _base(cls, value: str) -> str:
        return _topic_prefix(value, "zigbee2mqtt's mqtt.base_topic", "zigbee2mqtt")


class TasmotaConfig(DialectConfig):
    """Tasmota devices imported natively from their own discovery (`<discovery_prefix>/<MAC>/config`); the globs
    match a device's names, topic, host name and MAC."""

    glob_example: ClassVar[str] = "A4CF12*"
    discovery_prefix: str = "tasmota/discovery"

    @field_validator("discovery_prefix")
    @classmethod
    def _prefix(cls, value: str) -> str:
        return _topic_prefix(value, "Tasmota's discovery prefix", "tasmota/discovery")


MAX_SHELLY_PREFIXES = 256
_MAX_SHELLY_PREFIX_CHARS = 200
GEN1_TREE = "shellies"  # where Gen1 Shellies live; a Gen2+ prefix under it is found without shelly.prefixes


def shelly_prefix_problem(prefix: str) -> str | None:
    """Why `prefix` cannot be a Gen2+ Shelly's topic prefix as written (None: it can), the fix included."""
    example = "e.g. 'home/shelly/porch', as the device's MQTT settings show it"
    if not prefix.strip():
        return f"is empty; write the device's topic prefix, {example}"
    if len(prefix) > _MAX_SHELLY_PREFIX_CHARS:
        return f"is {len(prefix)} characters; a topic prefix is at most {_MAX_SHELLY_PREFIX_CHARS}"
    if "+" in prefix or "#" in prefix or "\x00" in prefix:
        return f"holds a wildcard ('+', '#') or NUL; write the prefix itself, {example}"
    if prefix.startswith("$"):
        return "starts with '$', which names the broker's own topics, never a device's"
    if prefix.startswith("/") or prefix.endswith("/"):
        return f"has a leading or trailing '/'; write it without, {example}"
    if "" in prefix.split("/"):
        return f"has an empty level ('//'); {example}"
    if prefix.split("/")[0] == GEN1_TREE:
        return (f"is under {GEN1_TREE}/, where hubd reads Gen1 devices; a Gen2+ device at {GEN1_TREE}/<name> is "
                "found without this key: leave it out")
    return None


class ShellyConfig(DialectConfig):
    """Shelly devices imported natively from their own MQTT (Gen2+ `<prefix>/online`, RPC on `<prefix>/rpc`; Gen1
    `shellies/announce`); the globs match a device's name, id (`shellyplus1pm-a8032ab12345`), MAC and model code."""

    glob_example: ClassVar[str] = "shellyplus1pm-*"
    # Gen2+ topic prefixes the owner set by hand (`home/shelly/porch`): hubd subscribes to `<prefix>/online` and
    # `<prefix>/events/rpc` of each, which `+/online` cannot reach for a prefix of several levels. A restart applies.
    prefixes: list[str] = Field(default_factory=list)

    @field_validator("prefixes")
    @classmethod
    def _prefixes(cls, value: list[str]) -> list[str]:
        if len(value) > MAX_SHELLY_PREFIXES:
            raise ValueError(f"{len(value)} prefixes; at most {MAX_SHELLY_PREFIXES}: list only the devices whose "
                             "topic prefix you changed to several levels")
        seen: set[str] = set()
        for prefix in value:
            why = shelly_prefix_problem(prefix)
            if why is not None:
                raise ValueError(f"{prefix[:60]!r} {why}")
            if prefix in seen:
                raise ValueError(f"{prefix[:60]!r} is listed twice; list each prefix once")
            seen.add(prefix)
        return value


class DoorbellConfig(_Model):
    """A button whose press is a DoorbellPress: `device` globs over its name or identifiers, `event` is the press."""

    device: str = Field(min_length=1)
    event: str = Field(min_length=1)

    @field_validator("device", "event")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be blank; e.g. device: 'Front door*', event: 'single'")
        return value


class HubdConfig(_Model):
    """The whole configuration file."""

    storage: StorageConfig = StorageConfig()
    mqtt: MqttConfig = MqttConfig()
    http: HttpConfig = HttpConfig()
    platform: PlatformConfig = PlatformConfig()
    driver: DriverConfig = DriverConfig()
    webhook: WebhookConfig = WebhookConfig()
    zeroconf: ZeroconfConfig = ZeroconfConfig()
    log: LogConfig = LogConfig()
    homeassistant: HomeAssistantConfig = HomeAssistantConfig()
    zigbee2mqtt: Zigbee2MqttConfig = Zigbee2MqttConfig()
    tasmota: TasmotaConfig = TasmotaConfig()
    shelly: ShellyConfig = ShellyConfig()
    doorbells: list[DoorbellConfig] = Field(default_factory=list)


# Where systemd's LoadCredential=NAME finds NAME (systemd.exec(5)), in its order.
CREDENTIAL_STORES = (Path("/etc/credstore"), Path("/run/credstore"), Path("/usr/lib/credstore"))
CREDENTIALS_VAR = "CREDENTIALS_DIRECTORY"


def credential_dirs(config_path: Path) -> list[Path]:
    """Where `${CREDENTIALS_DIRECTORY}/NAME` is looked for when the variable is not set (outside systemd):
    systemd's credential stores, then the config file's directory (where `hubd init` puts the secrets
    without --secrets-dir). The first that holds NAME wins."""
    return [*CREDENTIAL_STORES, config_path.absolute().parent]


def load_config(path: str | Path, env: Mapping[str, str] | None = None, *, secrets: bool = True) -> HubdConfig:
    """Read, substitute and validate a config file; raise ConfigError with one line per problem.

    `secrets=False` for a command that uses none (the admin commands): secret files are not read, so they
    need not be readable or found; each secret is a `hubd.config.yamlfile.UnreadSecret`."""
    path = Path(path)
    text = read_config_file(path, "config file")
    return parse_config(text, env if env is not None else os.environ, source=str(path), secrets=secrets,
                        credential_search=credential_dirs(path))


def parse_config(text: str, env: Mapping[str, str], source: str = "<config>", *, secrets: bool = True,
                 credential_search: Sequence[Path] = ()) -> HubdConfig:
    """Validate YAML text; raise ConfigError with `<key.path>: <problem> (line N)` lines, all in one pass.
    `credential_search`: where `${CREDENTIALS_DIRECTORY}/NAME` is looked for when `env` does not set it."""
    return parse_yaml_model(HubdConfig, text, env, source, top_level="sections (storage, mqtt, http, ...)",
                            example="config.example.yaml", cross_checks=unfilled_placeholders,
                            read_secrets=secrets, dir_fallbacks={CREDENTIALS_VAR: credential_search})


def config_secret_files(path: Path, text: str, env: Mapping[str, str] | None = None) -> list[SecretFile]:
    """The `<secret>_file` keys of the config file at `path` (whose content is `text`), with the files they
    name, `${CREDENTIALS_DIRECTORY}` resolved as `load_config` does."""
    return secret_files(HubdConfig, text, env if env is not None else os.environ,
                        {CREDENTIALS_VAR: credential_dirs(path)})


# `hubd init` writes this where only the user knows the value; hubd refuses to run until each is replaced.
PLACEHOLDER = "CHANGE-ME"
# `hubd init` writes the login password there, beside the client secret (the config holds only its hash).
LOGIN_PASSWORD_FILE = "hubd.login-password"  # noqa: S105 (a file name)
_PLACEHOLDER_HINTS: dict[KeyPath, str] = {
    ("http", "public_url"): "the https:// URL the platform reaches this hub at, e.g. https://hub.example.com "
                            "(your reverse proxy's name for it)",
    ("platform", "base_url"): "the URL of the platform's event API (device reports), from its developer console",
    ("platform", "auth_url"): "the URL of the platform's OAuth token host, from its developer console",
    ("platform", "client_id"): "the clientId the platform's console shows once state reporting is switched on",
    ("platform", "client_secret"): "the clientSecret the platform's console shows with the clientId",
    ("mqtt", "password"): "the password of hubd's login on your broker",
}


def unfilled_placeholders(data: dict[str, Any]) -> list[tuple[KeyPath, str]]:
    """Every value that still holds `hubd init`'s placeholder, with what to put there instead."""
    found: list[tuple[KeyPath, str]] = []

    def walk(value: Any, path: KeyPath) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                walk(item, (*path, key))
        elif isinstance(value, list):
            for i, item in enumerate(value):
                walk(item, (*path, i))
        elif isinstance(value, str) and PLACEHOLDER.lower() in value.lower():
            hint = _PLACEHOLDER_HINTS.get(path, "the value this setting needs (see the comment above it)")
            where = " (here or in the file its `_file` key names)" if is_secret_path(HubdConfig, path) else ""
            found.append((path, f"still the placeholder `hubd init` wrote{where}; put here {hint}"))

    walk(data, ())
    return found

"""The HubdError hierarchy.

Adapters translate library exceptions into these at their boundary (``raise ... from err``);
nothing in hubd returns ``None`` to mean failure.
"""

from __future__ import annotations


class HubdError(Exception):
    """Base of every error hubd raises on purpose."""


class ConfigError(HubdError):
    """The configuration file is missing, unreadable or invalid."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


class StoreError(HubdError):
    """The SQLite database failed (disk full, corrupt, locked, newer schema)."""


class StorageUnavailable(StoreError):
    """The disk refused a write (full, read-only, I/O error); nothing was written: retry once
    `Database.writable()` returns."""


class DeviceMessageInvalid(HubdError):
    """An MQTT message from a device could not be understood; the text says why."""


class MqttUnavailable(HubdError):
    """The broker cannot be reached or the connection was lost."""


class MqttRejected(MqttUnavailable):
    """The broker refused us (bad credentials, not authorised, bad client id).

    `code`: the CONNACK's reason code (MQTT 5's numbering, which paho maps MQTT 3.1.1's return codes to: 0x85 client
    id, 0x86 bad username or password, 0x87 not authorised); None for a refusal other than the CONNACK's.
    """

    def __init__(self, message: str, *, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code


class MqttUnconfirmed(MqttUnavailable):
    """A QoS 1 publish was handed to the connection but not acknowledged in time: it may still be delivered."""


class CloudError(HubdError):
    """The platform's API failed."""


class CloudUnavailable(CloudError):
    """Network error, timeout or 5xx: worth retrying later."""


class CloudRejected(CloudError):
    """The platform refused the request (4xx other than 401): do not retry."""

    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"HTTP {status}: {body[:500]}")
        self.status = status
        self.body = body


class CloudAuthError(CloudError):
    """The platform rejected our token, or the token endpoint refused a grant or refresh."""

    def __init__(self, message: str, *, fatal: bool, error: str | None = None) -> None:
        super().__init__(message)
        # fatal: the grant is dead (invalid_grant, 403); the user must bind again.
        self.fatal = fatal
        # error: the token endpoint's RFC 6749 `error` field, when it sent one.
        self.error = error


class DriverError(HubdError):
    """A driver command or OAuth step failed; carries the protocol's error name."""

    def __init__(self, error_name: str, message: str, *, status: int = 1) -> None:
        super().__init__(message)
        self.error_name = error_name
        self.message = message
        self.status = status


class DirectiveError(HubdError):
    """A platform directive cannot be fulfilled; becomes an ErrorResponse."""

    def __init__(self, name: str, message: str) -> None:
        super().__init__(f"{name}: {message}")
        self.name = name
        self.message = message

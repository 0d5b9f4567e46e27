"""What the platform simulator records: accepted events, rejections, token requests and failure reports.

Owns the record types that tests, the demo and the bench read from a PlatformSimulator, and their JSON
as the /sim/* routes serve it (camelCase keys, times as ISO 8601 UTC with milliseconds). No state, no
I/O. Never imports hubd.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any


@dataclass(frozen=True, slots=True)
class EventRecord:
    """One async event the gateway accepted (202)."""

    user_id: str
    name: str
    message_id: str
    endpoint_ids: tuple[str, ...]
    message: dict[str, Any]
    received_at: float

    def to_json(self) -> dict[str, Any]:
        """The record as served by GET /sim/events."""
        return {
            "userId": self.user_id, "name": self.name, "messageId": self.message_id,
            "endpointIds": list(self.endpoint_ids), "receivedAt": iso_utc(self.received_at),
            "message": self.message,
        }


@dataclass(frozen=True, slots=True)
class Rejection:
    """A POST /async/events that did not get 202; scripted ones came from the fault script."""

    status: int
    error: str
    user_id: str | None
    scripted: bool
    received_at: float
    message_id: str | None = None  # the header's messageId, when the body had one


@dataclass(frozen=True, slots=True)
class TokenRequest:
    """One POST /oauth/token, without secrets."""

    grant_type: str | None
    client_auth: str | None  # "basic", "body" or None
    status: int
    error: str | None
    user_id: str | None
    received_at: float


@dataclass(frozen=True, slots=True)
class FailureReport:
    """One accepted POST /report/failed."""

    user_id: str
    client_id: str
    received_at: float


def camel_json(row: dict[str, Any]) -> dict[str, Any]:
    """A record's asdict() as served: snake_case keys to camelCase, `*_at` epoch times to ISO strings."""
    out = {}
    for key, value in row.items():
        head, *rest = key.split("_")
        name = head + "".join(part.capitalize() for part in rest)
        out[name] = iso_utc(value) if key.endswith("_at") and isinstance(value, float) else value
    return out


def iso_utc(epoch_s: float) -> str:
    """An epoch time as ISO 8601 UTC with milliseconds, e.g. 2025-01-02T03:04:05.678Z."""
    return datetime.fromtimestamp(epoch_s, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"

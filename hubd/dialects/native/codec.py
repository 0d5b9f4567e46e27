"""Device payloads of hubd's own topics (docs/mqtt.md) (pure): bytes in, the device model's values out.

The native dialect's reading of `B/device/ID/config|state|event|availability|command/result`: a config is
the platform's Endpoint without states, checked field by field with pydantic, then a `DeviceConfig`.
Every failure is a DeviceMessageInvalid whose text names the field and the fix; the registry logs
it with the topic.
"""

from __future__ import annotations

import math
import re
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator, model_validator

from hubd.devices.model import (
    ADDITIONAL_INFO_MAX_CHARS,
    ADDITIONAL_INFO_MAX_KEYS,
    DISPLAY_TYPES,
    CommandResult,
    DeviceConfig,
    StateSample,
    StateValue,
    format_time,
)
from hubd.dialects.payload import json_object
from hubd.errors import DeviceMessageInvalid


class _CapabilityModel(BaseModel):
    """The checks for one capability of a config."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    interface: str = Field(min_length=1)
    supportedOperations: list[str] = Field(default_factory=list)
    proactivelyReported: bool = Field(False, alias="isProactivelyReported")
    retrievable: bool = Field(False, alias="isRetrievable")

    @field_validator("interface")
    @classmethod
    def _bare(cls, value: str, info: ValidationInfo) -> str:
        # The platform takes bare interface names only: strip a namespace prefix (platform.namespace, or Service).
        namespace = (info.context or {}).get("namespace", "Service")
        for prefix in (f"{namespace}.", "Service."):
            value = value.removeprefix(prefix)
        if not value:
            raise ValueError("must name an interface after the namespace prefix, e.g. \"Switch\"")
        return value

    @field_validator("supportedOperations")
    @classmethod
    def _once_each(cls, value: list[str]) -> list[str]:
        # The platform refuses an operation listed twice; keeping the first changes nothing a device meant.
        return list(dict.fromkeys(value))


class _DeviceConfigModel(BaseModel):
    """The checks for a config published on `B/device/ID/config`; `parse_config` turns it into a DeviceConfig."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    endpointId: str | None = None
    displayName: str = Field(min_length=1, max_length=128)
    displayType: str
    recommendRoomName: str | None = None
    recommendHomeName: str | None = None
    additionalInfo: dict[str, str] = Field(default_factory=dict)
    capabilities: list[_CapabilityModel] = Field(default_factory=list)
    sn: str | None = None
    tags: list[str] = Field(default_factory=list)

    @field_validator("displayType")
    @classmethod
    def _display_type(cls, value: str) -> str:
        if value not in DISPLAY_TYPES:
            raise ValueError(f"{value!r} is not a platform displayType; use one of {', '.join(sorted(DISPLAY_TYPES))}")
        return value

    @field_validator("recommendRoomName", "recommendHomeName")
    @classmethod
    def _blank_is_none(cls, value: str | None) -> str | None:
        # The platform refuses an empty name; an empty room or home means "none".
        return value if value is None or value.strip() else None

    @field_validator("additionalInfo")
    @classmethod
    def _info(cls, value: dict[str, str]) -> dict[str, str]:
        bad = [k for k in value if "." in k or not k]
        if bad:
            raise ValueError(f"keys must be non-empty and must not contain '.': {bad}")
        if len(value) > ADDITIONAL_INFO_MAX_KEYS:
            raise ValueError(f"at most {ADDITIONAL_INFO_MAX_KEYS} keys")
        long = [k for k, v in value.items() if len(v) > ADDITIONAL_INFO_MAX_CHARS]
        if long:
            raise ValueError(f"values may have at most {ADDITIONAL_INFO_MAX_CHARS} characters: {long}")
        return value

    @model_validator(mode="after")
    def _unique_interfaces(self) -> _DeviceConfigModel:
        names = [c.interface for c in self.capabilities]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"capabilities list an interface twice: {duplicates}")
        return self


@dataclass(frozen=True, slots=True)
class StateUpdate:
    """What a device published on `B/device/ID/state`."""

    samples: tuple[StateSample, ...]
    cause: str


def parse_config(payload: bytes, namespace: str = "Service") -> DeviceConfig | None:
    """A device config, or None for an empty payload (the device is deleted); `namespace` is platform.namespace."""
    if not payload.strip():
        return None
    data = json_object(payload)
    try:
        model = _DeviceConfigModel.model_validate(data, context={"namespace": namespace})
    except ValidationError as err:
        raise DeviceMessageInvalid(_pydantic_reason(err)) from err
    return DeviceConfig.from_dict(model.model_dump(by_alias=False))


def parse_state(payload: bytes, received_at: float) -> StateUpdate:
    """Either `{"Switch": "On"}` or `{"states": [{interface, value, timeOfSample?}], "cause"?}`."""
    data = json_object(payload)
    default_time = format_time(received_at)
    cause = "PHYSICAL_INTERACTION"
    samples: list[StateSample] = []
    if isinstance(data.get("states"), list):
        unknown = set(data) - {"states", "cause"}
        if unknown:
            raise DeviceMessageInvalid(f"unknown keys {sorted(unknown)} beside 'states'; only 'cause' may be there")
        raw_cause = data.get("cause", cause)
        if isinstance(raw_cause, dict):
            raw_cause = raw_cause.get("type")
        if not isinstance(raw_cause, str) or not raw_cause:
            raise DeviceMessageInvalid("cause: must be a string such as \"PHYSICAL_INTERACTION\"")
        cause = raw_cause
        for i, item in enumerate(data["states"]):
            if not isinstance(item, dict):
                raise DeviceMessageInvalid(f"states[{i}]: must be an object {{interface, value, timeOfSample?}}")
            extra = set(item) - {"interface", "value", "timeOfSample"}
            if extra:
                raise DeviceMessageInvalid(f"states[{i}]: unknown keys {sorted(extra)}")
            interface = item.get("interface")
            if not isinstance(interface, str) or not interface:
                raise DeviceMessageInvalid(f"states[{i}].interface: must be a non-empty string")
            if "value" not in item:
                raise DeviceMessageInvalid(f"states[{i}].value: missing")
            when = item.get("timeOfSample")
            time_of_sample = default_time if when is None else _parse_time(when, f"states[{i}].timeOfSample")
            samples.append(StateSample(interface, _value(item["value"], f"states[{i}].value"), time_of_sample))
    else:
        for interface, value in data.items():
            if not interface:
                raise DeviceMessageInvalid("an interface name is empty")
            samples.append(StateSample(interface, _value(value, interface), default_time))
    if not samples:
        raise DeviceMessageInvalid("no states: publish e.g. {\"Switch\": \"On\"}")
    return StateUpdate(tuple(samples), cause)


def parse_event(payload: bytes, received_at: float) -> str:
    """A doorbell press; returns its timestamp (ISO 8601 UTC, milliseconds)."""
    data = json_object(payload)
    name = data.get("name")
    if name != "DoorbellPress":
        raise DeviceMessageInvalid(f"name: {name!r} is not a known event; the only event is \"DoorbellPress\"")
    extra = set(data) - {"name", "timestamp"}
    if extra:
        raise DeviceMessageInvalid(f"unknown keys {sorted(extra)}; an event has only name and timestamp")
    when = data.get("timestamp")
    return format_time(received_at) if when is None else _parse_time(when, "timestamp")


def parse_availability(payload: bytes) -> bool:
    """`online` → True, `offline` → False (also z2m's JSON `{"state": "online"}`)."""
    text = payload.decode("utf-8", errors="replace").strip()
    if text.startswith("{"):
        state = json_object(payload).get("state")
        text = state if isinstance(state, str) else ""
    if text.lower() == "online":
        return True
    if text.lower() == "offline":
        return False
    raise DeviceMessageInvalid(f"availability must be 'online' or 'offline', got {text[:40]!r}")


def parse_command_result(payload: bytes) -> CommandResult:
    """`{"id", "status": "done"|"error", "message"?}`."""
    data = json_object(payload)
    command_id, status, message = data.get("id"), data.get("status"), data.get("message")
    if not isinstance(command_id, str) or not command_id:
        raise DeviceMessageInvalid("id: must be the command's id string")
    if status not in ("done", "error"):
        raise DeviceMessageInvalid(f"status: must be \"done\" or \"error\", got {status!r}")
    if message is not None and not isinstance(message, str):
        raise DeviceMessageInvalid("message: must be a string")
    return CommandResult(command_id, status, message)


_BASIC_RE = re.compile(r"^(\d{4})(\d{2})(\d{2})T(\d{2}):?(\d{2}):?(\d{2})(\.\d+)?(Z|[+-]\d{2}:?\d{2})?$")


def _parse_time(value: object, field: str) -> str:
    """Lenient ISO 8601 (any fraction, offsets, the basic format) → UTC with ms."""
    if not isinstance(value, str):
        raise DeviceMessageInvalid(f"{field}: must be an ISO 8601 string such as 2024-01-31T12:00:00.000Z")
    text = value.strip()
    basic = _BASIC_RE.match(text)
    if basic:
        y, mo, d, h, mi, s, frac, tz = basic.groups()
        text = f"{y}-{mo}-{d}T{h}:{mi}:{s}{frac or ''}{tz or 'Z'}"
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError as err:
        raise DeviceMessageInvalid(f"{field}: {value!r} is not ISO 8601; use e.g. 2024-01-31T12:00:00.000Z") from err
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    try:
        return format_time(moment.timestamp())
    except (ValueError, OverflowError, OSError) as err:  # 0001-01-01T00:00+05:00 is in year 0 in UTC
        raise DeviceMessageInvalid(f"{field}: {value!r} is not a time in years 1 to 9999 UTC") from err


def _value(value: object, field: str) -> StateValue:
    if isinstance(value, bool) or value is None:
        raise DeviceMessageInvalid(f"{field}: must be a string or a number (e.g. \"On\" or 21.5), got {value!r}")
    if isinstance(value, int | float) and not _finite(value):
        raise DeviceMessageInvalid(f"{field}: must be a finite number within ±1.7e308")
    if isinstance(value, str | int | float):
        return value
    if isinstance(value, dict):
        _require_finite(value, field)
        return value
    raise DeviceMessageInvalid(f"{field}: must be a string or a number, got {type(value).__name__}")


def _finite(number: int | float) -> bool:
    """A number the platform's JSON (doubles) and hubd's arithmetic (floats) can hold: no NaN, no Infinity,
    no integer such as 1 followed by 400 zeros (JSON allows it; float() of it is an OverflowError)."""
    return math.isfinite(number) if isinstance(number, float) else abs(number) <= sys.float_info.max


def _require_finite(value: dict[str, Any], field: str) -> None:
    """Refuse a number inside an object value that is not `_finite`."""
    todo: list[object] = [value]
    while todo:
        item = todo.pop()
        if isinstance(item, int | float) and not isinstance(item, bool) and not _finite(item):
            raise DeviceMessageInvalid(f"{field}: must hold only finite numbers within ±1.7e308")
        if isinstance(item, dict):
            todo.extend(item.values())
        elif isinstance(item, list):
            todo.extend(item)


def _pydantic_reason(err: ValidationError) -> str:
    parts = []
    for e in err.errors():
        loc = ".".join(str(p) for p in e["loc"]) or "<payload>"
        msg = "unknown field" if e["type"] == "extra_forbidden" else e["msg"].removeprefix("Value error, ")
        parts.append(f"{loc}: {msg}")
    return "; ".join(parts)

"""zigbee2mqtt's payloads read and written (pure): a device's state (a JSON object), its availability (`online` /
`offline`, or `{"state": "online"}`), and a command's JSON. A payload hubd cannot use is an InputRejected naming
the topic and what zigbee2mqtt sends instead.
"""

from __future__ import annotations

import json
from typing import Any

from hubd.dialects.base import InputRejected
from hubd.dialects.payload import MAX_PAYLOAD_BYTES, json_object
from hubd.errors import DeviceMessageInvalid


def state_object(topic: str, payload: bytes) -> dict[str, Any] | InputRejected | None:
    """A device's state message as its JSON object; None for an empty one (zigbee2mqtt clears a retained state
    so)."""
    if not payload.strip():
        return None
    try:
        return json_object(payload)
    except DeviceMessageInvalid as err:
        return InputRejected("state", f"{topic}: {err}; zigbee2mqtt publishes a device's state as a JSON object "
                                      "(set its advanced.output to json or attribute_and_json)")


def online_value(topic: str, payload: bytes) -> bool | InputRejected | None:
    """An availability message: True online, False offline, None for an empty one (a retained availability
    cleared: the device was removed)."""
    text = payload.decode("utf-8", errors="replace").strip()
    if not text:
        return None
    if text.startswith("{"):
        try:
            data: Any = json.loads(text) if len(payload) <= MAX_PAYLOAD_BYTES else None
        except (ValueError, RecursionError):
            data = None
        state = data.get("state") if isinstance(data, dict) else None
        text = state if isinstance(state, str) else ""
    if text.casefold() in ("online", "offline"):
        return text.casefold() == "online"
    return InputRejected("availability", f"{topic}: {_short(payload)} is neither online/offline nor "
                                         '{"state": "online"/"offline"}, as zigbee2mqtt publishes')


def command_json(body: dict[str, Any]) -> bytes:
    """A command's payload for `<friendly_name>/set`."""
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


def _short(payload: bytes) -> str:
    text = payload[:60].decode("utf-8", errors="replace")
    return repr(text + ("..." if len(payload) > 60 else ""))

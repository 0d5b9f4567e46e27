"""MQTT topic names of hubd's own topics (README "MQTT") (pure functions). Imports only hubd.events."""

from __future__ import annotations

from hubd.events import MessageKind

_INBOUND: dict[str, MessageKind] = {
    "config": "config",
    "state": "state",
    "event": "event",
    "availability": "availability",
    "command/result": "command_result",
}

SUBSCRIBE_QOS = 1


def subscriptions(base: str) -> list[tuple[str, int]]:
    """The topic filters hubd subscribes to, all at QoS 1."""
    return [(f"{base}/device/+/{suffix}", SUBSCRIBE_QOS) for suffix in _INBOUND]


def parse(base: str, topic: str) -> tuple[str, MessageKind] | None:
    """(device_id, kind) for a device topic under `base`, or None for anything else."""
    prefix = f"{base}/device/"
    if not topic.startswith(prefix):
        return None
    device_id, sep, suffix = topic[len(prefix):].partition("/")
    if not sep or not device_id:
        return None
    kind = _INBOUND.get(suffix)
    return (device_id, kind) if kind else None


def device_topic(base: str, device_id: str, suffix: str) -> str:
    """The topic `B/device/ID/suffix`."""
    return f"{base}/device/{device_id}/{suffix}"


def status_topic(base: str) -> str:
    """hubd's own retained online/offline topic."""
    return f"{base}/status"


# The platform's endpointIds are short identifiers; a longer one is refused before it reaches the platform.
MAX_DEVICE_ID_CHARS = 256


def valid_device_id(device_id: str) -> bool:
    """An endpointId usable in a topic: no '/', '+', '#', not empty, at most MAX_DEVICE_ID_CHARS characters."""
    return 0 < len(device_id) <= MAX_DEVICE_ID_CHARS and not any(c in device_id for c in "/+#\x00")

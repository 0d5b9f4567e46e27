"""Which speakers a DeviceQuery selects (docs/webhook.md).

Speakers are devices whose config says `displayType: "speaker"`. `sn` (default: the endpointId)
matches exactly; `roomName` (the recommendRoomName) and `tag` (any of the speaker's tags) match
ignoring case and surrounding spaces; `isAll` selects every speaker; given fields combine with AND.
A speaker that said `offline` is skipped; one that never said is tried.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from hubd.devices.device import Device
from hubd.webhook.trigger import DeviceQuery, Problem


@dataclass(frozen=True, slots=True)
class Speaker:
    """A speaker as the webhook sees it."""

    endpoint_id: str
    sn: str
    room: str | None
    tags: tuple[str, ...]
    online: bool | None

    @classmethod
    def of(cls, device: Device) -> Speaker:
        """The speaker view of a registry device."""
        config = device.config
        return cls(device.device_id, config.sn or device.device_id, config.recommendRoomName, tuple(config.tags),
                   device.online)

    def as_dict(self) -> dict[str, str]:
        """The response's device item."""
        return {"endpointId": self.endpoint_id, "sn": self.sn}


@dataclass(frozen=True, slots=True)
class Selection:
    """The speakers to send to and the matching ones that are offline."""

    reachable: tuple[Speaker, ...]
    offline: tuple[Speaker, ...]


class NoMatch(Exception):
    """The query matched no speaker; `problem` names what exists."""

    def __init__(self, problem: Problem) -> None:
        self.problem = problem
        super().__init__(problem.message)


def speakers(devices: Iterable[Device]) -> list[Speaker]:
    """Every speaker, in endpointId order."""
    return sorted((Speaker.of(d) for d in devices if d.config.displayType == "speaker"), key=lambda s: s.endpoint_id)


def _same(a: str | None, b: str) -> bool:
    return a is not None and a.strip().casefold() == b.casefold()


def matches(speaker: Speaker, query: DeviceQuery) -> bool:
    """Every given field of the query holds for this speaker."""
    if query.sn is not None and speaker.sn != query.sn:
        return False
    if query.room_name is not None and not _same(speaker.room, query.room_name):
        return False
    return query.tag is None or any(_same(tag, query.tag) for tag in speaker.tags)


def select(known: list[Speaker], query: DeviceQuery) -> Selection:
    """The speakers the query selects; raise NoMatch naming the rooms and tags there are."""
    chosen = [s for s in known if matches(s, query)]
    if not chosen:
        raise NoMatch(_no_match(known, query))
    return Selection(tuple(s for s in chosen if s.online is not False),
                     tuple(s for s in chosen if s.online is False))


def _no_match(known: list[Speaker], query: DeviceQuery) -> Problem:
    if not known:
        return Problem("devices", "no speaker is known to hubd yet; a speaker appears when it publishes its config "
                                  "with \"displayType\": \"speaker\" on B/device/ID/config")
    rooms = sorted({s.room for s in known if s.room}, key=str.casefold)
    tags = sorted({t for s in known for t in s.tags}, key=str.casefold)
    serials = [s.sn for s in known]
    wanted = ", ".join(f"{k} {v!r}" if not isinstance(v, bool) else f"{k} {str(v).lower()}"
                       for k, v in query.as_dict().items())
    return Problem("devices", f"no speaker matches {wanted}; rooms: {_names(rooms)}; tags: {_names(tags)}; "
                              f"serial numbers: {_names(serials)}")


def _names(items: list[str]) -> str:
    if not items:
        return "none"
    shown = ", ".join(items[:20])
    return shown + (f" and {len(items) - 20} more" if len(items) > 20 else "")

"""The owner's edits of devices (pure): a `PATCH /api/devices/{endpointId}` body (or the bulk `PATCH /api/devices`
one) parsed and checked, and what it makes of an override.

A body holds any of `name`, `room` (strings passing the platform's name rule, or null to drop the override),
`exposed` (a boolean) and `doorbell` (an event, or null). Every problem names its field and the fix, and a name or
room the platform would refuse comes with a spelling it takes (`hubd.devices.overrides.spelling`): the routes
answer them as a 422 in hubd's error shape.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from hubd.devices.overrides import EVENT_MAX_CHARS, NAME_MAX_CHARS, Override, spelling
from hubd.untrusted.kinds import json_kind

FIELDS = ("name", "room", "exposed", "doorbell")
FIELD_LIST = "name, room, exposed or doorbell"
MAX_BULK = 500  # endpointIds in one bulk edit
_EXAMPLES = {"name": "Desk Lamp", "room": "Living Room"}
_MARKUP = frozenset("<>&\"'`\\")  # never in an event a device sends; always in markup or a script
_EVENTS_NAMED = 30  # the announced events a refusal names


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with a body: where (`path`), what and the fix, and a spelling that passes when there is one."""

    path: str
    message: str
    suggestion: str | None = None

    def as_json(self) -> dict[str, str]:
        """As the error's `details` list it."""
        out = {"path": self.path, "message": self.message}
        if self.suggestion is not None:
            out["suggestion"] = self.suggestion
        return out


class EditInvalid(ValueError):
    """A body that cannot be applied; `problems` say why, each with its field."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("; ".join(f"{p.path}: {p.message}" for p in problems))
        self.problems = problems


@dataclass(frozen=True, slots=True)
class Edit:
    """The fields a body gives: each one given is in `values` (None where the body says null: drop it)."""

    values: dict[str, Any]

    @property
    def doorbell(self) -> bool:
        """Whether it changes the doorbell (the dialects must take the new declarations)."""
        return "doorbell" in self.values

    @property
    def selects(self) -> bool:
        """Whether the dialects must hear of it: a doorbell, or exposure (`true` also exports what hubd keeps back by
        rule, `false` keeps it back again)."""
        return "doorbell" in self.values or "exposed" in self.values

    def apply(self, override: Override, kept_back: bool = False) -> Override:
        """The override with this edit's fields. `exposed: true` exposes what hubd keeps back by rule when the endpoint
        is listed as kept back (`kept_back`: a dialect may export it) or already was; `false` keeps it back again."""
        values = self.values
        return replace(override,
                       name=values.get("name", override.name), room=values.get("room", override.room),
                       hidden=not values["exposed"] if "exposed" in values else override.hidden,
                       revealed=(values["exposed"] and (override.revealed or kept_back)) if "exposed" in values
                       else override.revealed,
                       doorbell=values.get("doorbell", override.doorbell))


def parse_edit(body: object) -> Edit:
    """The edit a `PATCH /api/devices/{endpointId}` body asks for; EditInvalid with every problem."""
    if not isinstance(body, dict):
        raise EditInvalid([Problem("(body)", f"must be a JSON object with any of {FIELD_LIST}, got "
                                             f"{json_kind(body)}")])
    return _edit(body, ())


def parse_bulk(body: object) -> tuple[list[str], Edit]:
    """The endpointIds and the edit of a bulk `PATCH /api/devices` body (`{"endpointIds": [...], "room": ...}`)."""
    if not isinstance(body, dict):
        raise EditInvalid([Problem("(body)", f"must be a JSON object with endpointIds and any of {FIELD_LIST}, got "
                                             f"{json_kind(body)}")])
    problems: list[Problem] = []
    ids = body.get("endpointIds")
    if not isinstance(ids, list) or not ids or not all(isinstance(i, str) and i for i in ids):
        problems.append(Problem("endpointIds", "must be a list of the endpointIds to change (non-empty strings), "
                                               'e.g. ["lamp-1", "0x00158d0001a2b3c4"]'))
        ids = []
    elif len(ids) > MAX_BULK:
        problems.append(Problem("endpointIds", f"{len(ids)} endpointIds; change at most {MAX_BULK} at once"))
    try:
        edit = _edit(body, ("endpointIds",))
    except EditInvalid as err:
        problems += err.problems
    if problems:
        raise EditInvalid(problems)
    return list(dict.fromkeys(ids)), edit


def _edit(body: dict[str, Any], other_keys: tuple[str, ...]) -> Edit:
    problems: list[Problem] = []
    values: dict[str, Any] = {}
    for key in ("name", "room"):
        if key in body:
            found = _spoken_field(key, body[key])
            if isinstance(found, Problem):
                problems.append(found)
            else:
                values[key] = found
    if "exposed" in body:
        if isinstance(body["exposed"], bool):
            values["exposed"] = body["exposed"]
        else:
            problems.append(Problem("exposed", f"must be true (the platform gets the device) or false (it does not), "
                                               f"got {json_kind(body['exposed'])}"))
    if "doorbell" in body:
        found = _event(body["doorbell"])
        if isinstance(found, Problem):
            problems.append(found)
        else:
            values["doorbell"] = found
    for key in body:
        if key not in FIELDS and key not in other_keys:
            problems.append(Problem(str(key)[:60], f"is not a field hubd takes; give {FIELD_LIST}"))
    if not problems and not values:
        problems.append(Problem("(body)", f"nothing to change: give any of {FIELD_LIST}"))
    if problems:
        raise EditInvalid(problems)
    return Edit(values)


def _spoken_field(key: str, value: object) -> str | Problem | None:
    """A name or room as the platform takes it, None (drop the override), or the problem with it."""
    if value is None:
        return None
    example = _EXAMPLES[key]
    if not isinstance(value, str):
        return Problem(key, f'must be a string such as "{example}", or null to go back to the device\'s own; got '
                            f"{json_kind(value)}")
    checked = spelling(value)
    if not checked.text:
        return Problem(key, f'is empty; give one such as "{example}", or null to go back to the device\'s own')
    if len(checked.text) > NAME_MAX_CHARS:
        return Problem(key, f"is {len(checked.text)} characters long; at most {NAME_MAX_CHARS}")
    if checked.accepted:
        return checked.text
    if checked.suggestion is None:
        return Problem(key, "the platform refuses digits and special characters in names (speech recognition fails "
                            f'on them), and nothing of {checked.text[:40]!r} is left without them; use words, e.g. '
                            f'"{example}"')
    return Problem(key, "the platform refuses digits and special characters in names (speech recognition fails on "
                        f'them): write it as "{checked.suggestion}"', checked.suggestion)


def _event(value: object) -> str | Problem | None:
    """A doorbell event, None (drop the declaration), or the problem with it."""
    if value is None:
        return None
    if not isinstance(value, str):
        return Problem("doorbell", "must be the event that is a press (an action value such as \"single\", an "
                                   f"event_type, a trigger's subtype or payload), or null; got {json_kind(value)}")
    if not value.strip():
        return Problem("doorbell", 'is blank; give the event that is a press, e.g. "single", or null to drop it')
    if len(value) > EVENT_MAX_CHARS:
        return Problem("doorbell", f"is {len(value)} characters long; an event is at most {EVENT_MAX_CHARS}")
    if any(ord(c) < 32 or 127 <= ord(c) < 160 for c in value):
        return Problem("doorbell", "holds a control character; give the event as the device sends it")
    markup = sorted(set(value) & _MARKUP)
    if markup:
        return Problem("doorbell", f"is no event name: it holds {' '.join(markup)} (markup or quoting); give the "
                                   'event as the device sends it, e.g. "single"')
    return value


def unknown_event(event: str, announced: Sequence[str]) -> Problem | None:
    """The problem with a doorbell `event` a device does not announce, when it announces any (its `action` values,
    triggers, event types): a press it never sends would never ring."""
    if not announced or event in announced:
        return None
    shown = ", ".join(announced[:_EVENTS_NAMED]) + (f" and {len(announced) - _EVENTS_NAMED} more"
                                                    if len(announced) > _EVENTS_NAMED else "")
    return Problem("doorbell", f"{event!r} is not an event this device announces; give one of: {shown}")

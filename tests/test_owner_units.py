"""The owner's control, unit by unit: edits parsed and checked (pure), the name rule's spelling, overrides in the
registry (a real SQLite, a recording sink), the dialects taking a new selection (real fixtures), and the live
selection's globs."""

from __future__ import annotations

import asyncio
import fnmatch
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
from homeassistant_helpers import announce as ha_announce
from homeassistant_helpers import configs as ha_configs
from homeassistant_helpers import make as ha_make
from homeassistant_helpers import publish as ha_publish
from unit_helpers import NOW, device_message
from zigbee2mqtt_helpers import announce, configs, entries, gone, make, publish, unexported

from hubd.config.model import HubdConfig
from hubd.devices.changes import Change, DeviceAnnounced, DeviceRemoved, DoorbellPressed, StatesChanged
from hubd.devices.overrides import NO_OVERRIDE, Override, spelling
from hubd.dialects.base import DeviceGone, PressReceived, Selection
from hubd.errors import StorageUnavailable
from hubd.metrics import Metrics
from hubd.outbox.writer import OutboxWriter
from hubd.owner.edits import EditInvalid, parse_bulk, parse_edit
from hubd.owner.live import LiveSelection, exact_glob
from hubd.registry import DeviceRegistry
from hubd.store.db import Database
from hubd.store.devices import DeviceRows
from hubd.store.receipts import Receipt

BUTTON = "0x0017880104e45520"  # aqara_WXKG11LM_button: "button"
BULB = "0x000b57fffec6a5b2"  # ikea_LED1545G12_bulb: "bulb"
LAMP = {"displayName": "Desk Lamp", "displayType": "light", "recommendRoomName": "Office",
        "capabilities": [{"interface": "Switch", "supportedOperations": ["On", "Off"], "proactivelyReported": True,
                          "retrievable": True}]}


# --- edits (pure) ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "accepted", "suggestion"), [
    ("Desk Lamp", True, None), ("  Desk   Lamp ", True, None), ("卧室", True, None), ("Lamp 2", False, "Lamp Two"),
    ("2nd Floor", False, "Second Floor"), ("Anna's Lamp", False, "Annas Lamp"), ("卧室2", False, "卧室二"),
    ("!!!", False, None), ("", True, None),
])
def test_the_name_rule_offers_a_spelling_that_passes(text: str, accepted: bool, suggestion: str | None) -> None:
    checked = spelling(text)
    assert (checked.accepted, checked.suggestion) == (accepted, suggestion)
    if checked.suggestion is not None:
        assert spelling(checked.suggestion).accepted


def test_an_edit_sets_what_it_gives_and_null_drops_an_override() -> None:
    kept = Override(name="Hall Lamp", room="Hall", hidden=False, doorbell="single")
    assert parse_edit({"name": "Reading  Lamp"}).apply(kept) == Override("Reading Lamp", "Hall", False, "single")
    assert parse_edit({"room": None, "exposed": False}).apply(kept) == Override("Hall Lamp", None, True, "single")
    assert parse_edit({"doorbell": None, "name": None, "room": None, "exposed": True}).apply(kept).empty
    assert parse_edit({"doorbell": "single"}).doorbell and not parse_edit({"name": "Lamp"}).doorbell


@pytest.mark.parametrize(("body", "path", "fragment"), [
    ([], "(body)", "must be a JSON object"), ({}, "(body)", "nothing to change"),
    ({"name": 5}, "name", "must be a string"), ({"name": "  "}, "name", "is empty"),
    ({"name": "x" * 129}, "name", "at most 128"), ({"room": "Room 101"}, "room", "Room One Hundred One"),
    ({"exposed": "yes"}, "exposed", "true (the platform gets the device) or false"),
    ({"doorbell": 1}, "doorbell", "the event that is a press"), ({"doorbell": "a\nb"}, "doorbell", "control"),
    ({"doorbell": "x" * 65}, "doorbell", "at most 64"), ({"doorbell": "<img src=x onerror=alert(1)>"}, "doorbell",
                                                          "is no event name: it holds < > (markup"),
    ({"doorbell": "single\u0085"}, "doorbell", "control"), ({"doorbell": "a\"b"}, "doorbell", "is no event name"),
    ({"displayName": "Lamp"}, "displayName", "not a field"),
])
def test_a_bad_edit_names_the_field_and_the_fix(body: Any, path: str, fragment: str) -> None:
    with pytest.raises(EditInvalid) as caught:
        parse_edit(body)
    assert caught.value.problems[0].path == path and fragment in caught.value.problems[0].message


def test_a_bulk_edit_needs_endpoint_ids_and_takes_each_once() -> None:
    ids, edit = parse_bulk({"endpointIds": ["a", "b", "a"], "room": "Hall"})
    assert ids == ["a", "b"] and edit.values == {"room": "Hall"}
    for body in ({"room": "Hall"}, {"endpointIds": [], "room": "Hall"}, {"endpointIds": ["a", 2], "room": "Hall"},
                 {"endpointIds": ["a"] * 501, "room": "Hall"}):
        with pytest.raises(EditInvalid) as caught:
            parse_bulk(body)
        assert caught.value.problems[0].path == "endpointIds"


# --- overrides in the registry -----------------------------------------------------------------------------------


class RecordingSink:
    """The registry's next stage: records each commit's changes and stores it with the outbox writer; refuses
    commits while `refusing`."""

    def __init__(self, db: Database) -> None:
        self.commits: list[tuple[list[Change], DeviceRows]] = []
        self.refusing = False
        self._writer = OutboxWriter(db, namespace="Service", metrics=Metrics())

    async def commit(self, changes: Sequence[Change], rows: DeviceRows, receipts: Sequence[Receipt] = ()) -> None:
        if self.refusing:
            raise StorageUnavailable("the disk is full")
        self.commits.append((list(changes), rows))
        await self._writer.commit(changes, rows, receipts)

    def last(self) -> list[str]:
        """The kinds of the last commit's changes, with their device."""
        return [_kind(c) for c in self.commits[-1][0]]


def _kind(change: Change) -> str:
    if isinstance(change, DeviceAnnounced):
        return f"announced {change.device.device_id} as {change.endpoint['displayName']}"
    if isinstance(change, DeviceRemoved):
        return f"removed {change.device_id}"
    return type(change).__name__


async def registry_on(db: Database, sink: RecordingSink) -> DeviceRegistry:
    registry = DeviceRegistry(db, sink, Metrics())
    await registry.start()
    return registry


async def test_overrides_apply_when_a_device_is_described_and_a_hidden_one_is_reported_to_nobody(
        tmp_path: Path) -> None:
    db = Database(tmp_path / "hubd.db", synchronous="normal")
    await db.start()
    try:
        sink = RecordingSink(db)
        registry = await registry_on(db, sink)
        await registry.override({"lamp": Override(name="Reading Lamp")})  # before the device exists
        assert sink.last() == [] and sink.commits[-1][1].overrides[0][:2] == ("lamp", Override(name="Reading Lamp"))
        await registry.handle([device_message("config", "lamp", json.dumps(LAMP).encode())])
        assert sink.last() == ["announced lamp as Reading Lamp"]
        device = registry.get("lamp")
        assert device is not None and device.described.displayName == "Desk Lamp"

        # A rename at the source: the platform has the owner's name already, so nothing is said.
        await registry.handle([device_message("config", "lamp", json.dumps({**LAMP, "displayName": "Lamp"}).encode())])
        assert sink.last() == [] and device.described.displayName == "Lamp" and device.config.displayName == \
            "Reading Lamp"

        await registry.override({"lamp": Override(name="Reading Lamp", hidden=True)})
        assert sink.last() == ["removed lamp"]
        assert registry.platform_devices() == [] and registry.platform_device("lamp") is None
        await registry.handle([device_message("state", "lamp", b'{"Switch": "On"}'),
                               device_message("event", "lamp", b'{"name": "DoorbellPress"}')])
        assert not any(isinstance(c, StatesChanged | DoorbellPressed) for c in sink.commits[-1][0])
        assert device.states["Switch"].value == "On"  # kept all the same

        # Restarted: loaded from SQLite with its override, still hidden; shown again with its states.
        registry = await registry_on(db, sink)
        device = registry.get("lamp")
        assert device is not None and device.hidden and device.config.displayName == "Reading Lamp"
        await registry.override({"lamp": NO_OVERRIDE})
        assert sink.last() == ["announced lamp as Lamp"]
        endpoint = sink.commits[-1][0][0].endpoint  # type: ignore[union-attr]
        assert [s["value"] for s in endpoint["states"]] == ["On"] and registry.override_of("lamp") == NO_OVERRIDE

        # A hidden device that goes away: no second DeleteReport.
        await registry.override({"lamp": Override(hidden=True)})
        await registry.handle([device_message("config", "lamp", b"")])
        assert sink.last() == []
    finally:
        await db.stop()


async def test_an_override_the_disk_refuses_changes_nothing(tmp_path: Path) -> None:
    db = Database(tmp_path / "hubd.db", synchronous="normal")
    await db.start()
    try:
        sink = RecordingSink(db)
        registry = await registry_on(db, sink)
        await registry.handle([device_message("config", "lamp", json.dumps(LAMP).encode())])
        sink.refusing = True
        with pytest.raises(StorageUnavailable):
            await registry.override({"lamp": Override(name="Hall Lamp", hidden=True)})
        device = registry.get("lamp")
        assert device is not None and device.config.displayName == "Desk Lamp" and not device.hidden
        assert registry.override_of("lamp") == NO_OVERRIDE and registry.platform_device("lamp") is device
    finally:
        await db.stop()


# --- the dialects take a new selection ---------------------------------------------------------------------------


def test_zigbee2mqtt_reselects_its_last_list_and_a_doorbell_may_name_the_ieee_address() -> None:
    dialect = make()
    found = configs(announce(dialect, entries("ikea_LED1545G12_bulb", "aqara_WXKG11LM_button")))
    assert list(found) == [BULB] and unexported(dialect)["button"][0].startswith("nothing it exposes")
    [left_out] = dialect.unexported_devices()
    assert left_out.endpoint_id == BUTTON and "single" in left_out.events

    changed = dialect.reconfigure(Selection(("*",), ("bulb",), ((exact_glob(BUTTON), "single"),)))
    assert gone(changed) == [BULB] and list(configs(changed)) == [BUTTON]
    assert dialect.doorbell_events(BUTTON) == left_out.events
    assert [type(p) for p in publish(dialect, "button", {"action": "single"})] == [PressReceived]
    assert dialect.reconfigure(Selection(("*",), ("bulb",), ((exact_glob(BUTTON), "single"),))) == []  # as it is
    assert unexported(dialect)["bulb"] == ("left out by zigbee2mqtt.include/exclude",)


KITCHEN_BUTTON = {"automation_type": "trigger", "type": "button_short_press", "subtype": "button_1",
                  "topic": "kitchen/button/action", "payload": "single",
                  "device": {"identifiers": ["kitchen button:1"], "name": "Kitchen Button"}}


def test_discovery_reselects_every_entity_and_a_doorbell_may_name_the_endpoint_id() -> None:
    dialect = ha_make()
    door = "zigbee2mqtt_0x0017880104e45547"
    assert list(ha_configs(ha_announce(dialect, "z2m_contact_MCCGQ11LM"))) == [door]
    assert ha_configs(dialect.decode("homeassistant/device_automation/kitchen/button_1/config",
                                     json.dumps(KITCHEN_BUTTON).encode(), NOW, True)) == {}
    [button] = dialect.unexported_devices()
    # Its endpointId is not one of its names: the owner's doorbell names only that.
    assert button.name == "Kitchen Button" and button.endpoint_id.startswith("kitchen_button_1-")
    assert button.events == ("button_1", "single")

    changed = dialect.reconfigure(Selection(("*",), ("door_*",), ((exact_glob(button.endpoint_id), "single"),)))
    assert [g.device_id for g in changed if isinstance(g, DeviceGone)] == [door]
    assert list(ha_configs(changed)) == [button.endpoint_id]
    assert dialect.doorbell_events(button.endpoint_id) == ("button_1", "single")
    assert [type(p) for p in ha_publish(dialect, "kitchen/button/action", "single")] == [PressReceived]
    assert dialect.reconfigure(Selection(("*",), ("door_*",), ((exact_glob(button.endpoint_id), "single"),))) == []
    assert dialect.unexported_devices()[0].name == "door_sensor"  # excluded now


# --- the live selection ------------------------------------------------------------------------------------------


class RecordingBridge:
    def __init__(self) -> None:
        self.given: list[Mapping[str, Selection]] = []

    async def reconfigure(self, selections: Mapping[str, Selection]) -> None:
        self.given.append(dict(selections))


class SlowBridge:
    """Takes each selection only when let go, with no lock of its own, and notes whether two came at once."""

    def __init__(self) -> None:
        self.given: list[Mapping[str, Selection]] = []
        self.entered = asyncio.Event()
        self.go = asyncio.Event()
        self.busy = self.overlapped = False

    async def reconfigure(self, selections: Mapping[str, Selection]) -> None:
        self.overlapped |= self.busy
        self.busy = True
        self.entered.set()
        await self.go.wait()
        self.given.append(dict(selections))
        self.busy = False


class Overrides:
    def __init__(self, overrides: dict[str, Override]) -> None:
        self._overrides = overrides

    def overrides(self) -> dict[str, Override]:
        return dict(self._overrides)


def test_an_endpoint_id_glob_matches_only_itself() -> None:
    for endpoint_id in ("0x00158d0001a2b3c4", "lamp[1]*?", "кухня-1a2b3c4d"):
        pattern = exact_glob(endpoint_id)
        assert fnmatch.fnmatchcase(endpoint_id, pattern)
        assert not fnmatch.fnmatchcase(endpoint_id + "x", pattern) and not fnmatch.fnmatchcase("lamp1", pattern)


async def test_the_live_selection_adds_the_owners_doorbells_after_the_configs() -> None:
    config = HubdConfig.model_validate({"zigbee2mqtt": {"enabled": True, "exclude": ["bulb"]},
                                        "doorbells": [{"device": "Front*", "event": "press"}]})
    bridge = RecordingBridge()
    quiet = LiveSelection(config, bridge, Overrides({"x": Override(name="Lamp")}))
    await quiet.start()
    assert bridge.given == []  # no doorbell of the owner's: the dialects have what the config says already
    live = LiveSelection(config, bridge, Overrides({"b*": Override(doorbell="single"), "x": Override(name="Lamp")}))
    await live.start()
    assert bridge.given == [{"zigbee2mqtt": Selection(("*",), ("bulb",), (("Front*", "press"), ("b[*]", "single")))}]


async def test_an_owners_doorbell_and_a_sighup_at_once_reach_the_dialects_one_after_the_other_newest_last() -> None:
    config = HubdConfig.model_validate({"zigbee2mqtt": {"enabled": True}})
    owners: dict[str, Override] = {}
    bridge = SlowBridge()
    live = LiveSelection(config, bridge, Overrides(owners))
    sighup = asyncio.create_task(live.apply(config.model_copy(update={"doorbells": []})))
    await bridge.entered.wait()
    owners[BUTTON] = Override(doorbell="single")  # the owner's doorbell, committed while the SIGHUP's selection goes
    edit = asyncio.create_task(live.apply())
    bridge.go.set()
    await asyncio.gather(sighup, edit)
    assert not bridge.overlapped
    assert [given["zigbee2mqtt"].doorbells for given in bridge.given] == [(), ((exact_glob(BUTTON), "single"),)]

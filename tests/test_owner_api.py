"""The owner's API end to end (a real mosquitto, the platform simulator, a real hubd): `PATCH /api/devices/{id}`
with an admin token renames, places, hides and shows devices and declares doorbells; the platform hears each change;
overrides survive a restart, the device announcing itself again and a rename at the source; writes need the owner.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from collections.abc import Awaitable, Callable
from typing import Any

from owner_helpers import admin_token, device, endpoint_in, hubd_cli, patch, request
from rig import BELL, LAMP, Rig, send, settle, wait_devices
from zigbee2mqtt_helpers import entries

from simulators.platform_directives import DirectiveClient

MakeRig = Callable[..., Awaitable[Rig]]
BUTTON = "0x0017880104e45520"  # aqara_WXKG11LM_button, friendly name "button": only an action, not exported


async def lamp_bound(rig: Rig) -> None:
    """lamp-1 announced (retained), user-1 bound and the lamp's AddOrUpdateReport delivered."""
    rig.publish("lamp-1", "config", LAMP, retain=True)
    rig.publish("lamp-1", "state", {"Switch": "Off", "Brightness": 40})
    await rig.bind()
    await rig.wait_events(1, "AddOrUpdateReport", endpoint="lamp-1")


async def test_a_rename_reaches_the_platform_and_outlives_restarts_reannouncements_and_renames_at_the_source(
        make_rig: MakeRig) -> None:
    rig = await make_rig()
    token = admin_token(rig.hub)
    await lamp_bound(rig)

    status, body = await patch(rig.hub, "lamp-1", {"name": "Reading Lamp", "room": "Study"}, token=token)
    assert status == 200, body
    assert (body["displayName"], body["recommendRoomName"]) == ("Reading Lamp", "Study")
    assert body["overrides"] == {"name": "Reading Lamp", "room": "Study", "exposed": True, "doorbell": None}
    assert body["described"] == {"displayName": "Desk Lamp", "recommendRoomName": "Office"}
    [renamed] = (await rig.wait_events(2, "AddOrUpdateReport", endpoint="lamp-1"))[1:]
    sent = endpoint_in(renamed, "lamp-1")
    assert (sent["displayName"], sent["recommendRoomName"]) == ("Reading Lamp", "Study")
    assert {s["interface"]: s["value"] for s in sent["states"]} == {"Switch": "Off", "Brightness": 40}

    # The source renames the lamp: the platform keeps the owner's name, and hears nothing new.
    rig.publish("lamp-1", "config", {**LAMP, "displayName": "Old Desk Lamp"}, retain=True)
    await wait_devices(rig, "lamp-1", check=lambda d: d["described"]["displayName"] == "Old Desk Lamp")
    await settle(rig)
    assert len(rig.events("AddOrUpdateReport", endpoint="lamp-1")) == 2
    assert (await device(rig.hub, "lamp-1"))["displayName"] == "Reading Lamp"

    # A restart, and the lamp announcing itself again (its retained config): the override holds, nothing is sent.
    assert rig.hub.stop() == 0
    rig.hub.start()
    await rig.hub.wait_ready()
    rig.publish("lamp-1", "config", {**LAMP, "displayName": "Old Desk Lamp"}, retain=True)
    await settle(rig)
    assert len(rig.events("AddOrUpdateReport", endpoint="lamp-1")) == 2
    shown = await device(rig.hub, "lamp-1")
    assert (shown["displayName"], shown["recommendRoomName"], shown["exported"]) == ("Reading Lamp", "Study", True)

    # A second user binding gets the owner's name in its first report.
    await rig.bind("user-2")
    [first] = await rig.wait_events(1, "AddOrUpdateReport", user_id="user-2", endpoint="lamp-1")
    assert endpoint_in(first, "lamp-1")["displayName"] == "Reading Lamp"

    # null drops the override: the platform gets the source's own name and room again.
    status, body = await patch(rig.hub, "lamp-1", {"name": None, "room": None}, token=token)
    assert status == 200 and body["overrides"]["name"] is None
    back = await rig.wait_events(3, "AddOrUpdateReport", user_id="user-1", endpoint="lamp-1")
    assert (endpoint_in(back[-1], "lamp-1")["displayName"], endpoint_in(back[-1], "lamp-1")["recommendRoomName"]) \
        == ("Old Desk Lamp", "Office")
    assert not rig.sim.rejections


async def test_a_hidden_device_is_deleted_left_out_of_discover_silent_and_unknown_to_directives(
        make_rig: MakeRig) -> None:
    rig = await make_rig()
    token = admin_token(rig.hub)
    rig.publish("bell-1", "config", BELL, retain=True)
    await lamp_bound(rig)
    bound = await rig.bind()  # the same user again: a fresh token for the directives
    await rig.wait_events(1, "AddOrUpdateReport", endpoint="bell-1")

    status, body = await patch(rig.hub, "lamp-1", {"exposed": False}, token=token)
    assert status == 200 and body["exposed"] is False and body["overrides"]["exposed"] is False
    await rig.wait_events(1, "DeleteReport", endpoint="lamp-1")
    status, _ = await patch(rig.hub, "bell-1", {"exposed": False}, token=token)
    assert status == 200
    await rig.wait_events(1, "DeleteReport", endpoint="bell-1")

    rig.publish("lamp-1", "state", {"Switch": "On", "Brightness": 40})  # kept, never reported
    rig.publish("bell-1", "event", {"name": "DoorbellPress"})
    await wait_devices(rig, "lamp-1", check=lambda d: {s["interface"]: s["value"] for s in d["states"]}["Switch"]
                       == "On")
    await settle(rig)
    assert rig.events("ChangeReport", endpoint="lamp-1") == [] and rig.events("DoorbellPress") == []

    async with DirectiveClient(rig.hub.url, token=bound.user_token) as client:
        listed = await client.discover()
        assert listed.ok and not {"lamp-1", "bell-1"} & {e["endpointId"] for e in listed.endpoints}
        refused = await client.control("lamp-1", "Switch.Off")
        assert refused.error == "E_NO_SUCH_ENDPOINT"
        state = await client.report_state("lamp-1")
        assert state.error == "E_NO_SUCH_ENDPOINT"

    # A user binding now never hears of them.
    await rig.bind("user-2")
    await rig.wait_events(1, "AddOrUpdateReport", user_id="user-2")
    assert not {"lamp-1", "bell-1"} & rig.sim.known_endpoints("user-2")

    # Shown again: an AddOrUpdateReport with its current states, and its changes are reported again.
    reports = len(rig.events("AddOrUpdateReport", user_id="user-1", endpoint="lamp-1"))
    status, body = await patch(rig.hub, "lamp-1", {"exposed": True}, token=token)
    assert status == 200 and body["exposed"] is True
    back = await rig.wait_events(reports + 1, "AddOrUpdateReport", user_id="user-1", endpoint="lamp-1")
    assert {s["interface"]: s["value"] for s in endpoint_in(back[-1], "lamp-1")["states"]}["Switch"] == "On"
    rig.publish("lamp-1", "state", {"Switch": "Off", "Brightness": 40})
    await rig.wait_events(1, "ChangeReport", user_id="user-1", endpoint="lamp-1")
    assert not rig.sim.rejections


async def test_a_zigbee2mqtt_button_is_declared_the_doorbell_by_its_ieee_address_and_stays_one(
        make_rig: MakeRig) -> None:
    rig = await make_rig(hub_overrides={"zigbee2mqtt": {"enabled": True}})
    token = admin_token(rig.hub)
    send(rig, "zigbee2mqtt/bridge/state", {"state": "online"}, retain=True)
    send(rig, "zigbee2mqtt/bridge/devices", entries("aqara_WXKG11LM_button"), retain=True)

    async def left_out() -> dict[str, Any] | None:
        _, body, _ = await request(rig.hub, "GET", "/api/devices")
        return next((u for u in body["unexported"] if u["endpointId"] == BUTTON), None)
    listed = await rig.hub.wait_for(left_out, what="the button listed as not exported")
    assert listed["name"] == "button" and "single" in listed["doorbellEvents"]
    shown = await device(rig.hub, BUTTON)
    assert shown["exported"] is False and shown["overrides"]["doorbell"] is None
    # A bulk edit knows it too, and answers with it as GET does.
    for room in ("Hallway", None):
        status, body, _ = await request(rig.hub, "PATCH", "/api/devices", {"endpointIds": [BUTTON], "room": room},
                                        token=token)
        assert status == 200 and body == {"devices": [await device(rig.hub, BUTTON)]}, body
        assert body["devices"][0]["exported"] is False and body["devices"][0]["overrides"]["room"] == room
    await rig.bind()

    # An event it does not announce, or one that is no event name, is refused, naming what it announces.
    status, body = await patch(rig.hub, BUTTON, {"doorbell": "triple_tap"}, token=token)
    assert status == 422 and body["details"][0]["path"] == "doorbell", body
    assert "'triple_tap' is not an event this device announces; give one of: " in body["error"]
    assert all(event in body["error"] for event in listed["doorbellEvents"]), body
    status, body = await patch(rig.hub, BUTTON, {"doorbell": "<img src=x>"}, token=token)
    assert status == 422 and "is no event name" in body["error"], body
    status, body, _ = await request(rig.hub, "PATCH", "/api/devices", {"endpointIds": [BUTTON], "doorbell": "nope"},
                                    token=token)
    assert status == 422 and f"{BUTTON}: 'nope' is not an event this device announces" in body["error"], body
    assert (await device(rig.hub, BUTTON))["overrides"]["doorbell"] is None

    status, body = await patch(rig.hub, BUTTON, {"doorbell": "single", "name": "Front Door"}, token=token)
    assert status == 200, body
    assert body["exported"] is True and body["displayName"] == "Front Door"
    assert body["overrides"]["doorbell"] == "single"
    [added] = await rig.wait_events(1, "AddOrUpdateReport", endpoint=BUTTON)
    assert endpoint_in(added, BUTTON)["displayName"] == "Front Door"
    send(rig, "zigbee2mqtt/button", {"action": "single", "battery": 100, "linkquality": 10})
    await rig.wait_events(1, "DoorbellPress", endpoint=BUTTON)

    # After a restart the owner's doorbell holds before zigbee2mqtt's list comes again.
    assert rig.hub.stop() == 0
    rig.hub.start()
    await rig.hub.wait_ready()
    send(rig, "zigbee2mqtt/button", {"action": "single", "battery": 100, "linkquality": 10})
    await rig.wait_events(2, "DoorbellPress", endpoint=BUTTON)

    # Dropped: the button is left out again, and the platform deletes it.
    status, body = await patch(rig.hub, BUTTON, {"doorbell": None}, token=token)
    assert status == 200 and body["exported"] is False
    await rig.wait_events(1, "DeleteReport", endpoint=BUTTON)
    assert not rig.sim.rejections


async def test_writes_need_the_owner_and_bad_fields_are_named_with_a_spelling_that_passes(make_rig: MakeRig) -> None:
    rig = await make_rig()
    token = admin_token(rig.hub)
    await lamp_bound(rig)
    hub = rig.hub

    status, body, headers = await request(hub, "PATCH", "/api/devices/lamp-1", {"name": "Hacked"})
    assert status == 401 and headers["WWW-Authenticate"].startswith("Bearer")
    assert "admin token" in body["error"] and body["details"][0]["path"] == "(header) Authorization"
    assert (await patch(hub, "lamp-1", {"name": "Hacked"}, token="hadm_" + "x" * 43))[0] == 401
    assert (await patch(hub, "lamp-1", {"name": "Hacked"}, headers={"Authorization": f"Basic {token}"}))[0] == 401
    # Another origin is refused even with a right token (a page of another site cannot have one, but still).
    status, body = await patch(hub, "lamp-1", {"name": "Hacked"}, token=token,
                               headers={"Origin": "http://attacker.example"})
    assert status == 403 and body["details"][0]["path"] == "(header) Origin"
    status, _ = await patch(hub, "lamp-1", {"name": "Study Lamp"}, token=token, headers={"Origin": hub.url})
    assert status == 200  # its own origin is fine

    status, body = await patch(hub, "lamp-9", {"name": "Lamp"}, token=token)
    assert status == 404 and "lamp-9" in body["error"]

    status, body = await patch(hub, "lamp-1", {"name": "Lamp 2", "room": "Hall (Upstairs)", "colour": "red",
                                               "exposed": "no"}, token=token)
    assert status == 422
    problems = {d["path"]: d for d in body["details"]}
    assert set(problems) == {"name", "room", "colour", "exposed"}
    assert problems["name"]["suggestion"] == "Lamp Two" and "digits" in problems["name"]["message"]
    assert problems["room"]["suggestion"] == "Hall Upstairs"
    assert "name, room, exposed or doorbell" in problems["colour"]["message"]
    assert body["error"].startswith("name: ")
    status, body = await patch(hub, "lamp-1", {"name": "1234"}, token=token)
    assert status == 422 and body["details"][0]["suggestion"] == "One Thousand Two Hundred Thirty Four"
    status, body = await patch(hub, "lamp-1", {"name": "!!!"}, token=token)
    assert status == 422 and "suggestion" not in body["details"][0] and "use words" in body["details"][0]["message"]
    for bad in ([], "x", {}):
        status, body = await patch(hub, "lamp-1", bad, token=token)
        assert status == 422 and body["details"][0]["path"] == "(body)", (bad, body)
    status, body = await patch(hub, "lamp-1", {"doorbell": "   "}, token=token)
    assert status == 422 and body["details"][0]["path"] == "doorbell"

    # Stored as its SHA-256 only, and never listed.
    with sqlite3.connect(hub.config["storage"]["path"]) as db:
        assert db.execute("SELECT token_hash FROM admin_tokens").fetchall() == \
            [(hashlib.sha256(token.encode()).hexdigest(),)]
    listing = hubd_cli(hub, "admin-token", "list", "--json").stdout
    assert token not in listing and json.loads(listing)["name"] == "tests"

    # Revoked: 401 from then on.
    [listed] = [line for line in hubd_cli(hub, "admin-token", "list").stdout.splitlines() if " tests " in line]
    for not_an_id in ("\u00b2", "\u0661"):  # digits to str.isdigit: one line and exit 1, never a traceback
        refused = hubd_cli(hub, "admin-token", "revoke", not_an_id)
        assert refused.returncode == 1 and "is not a token id" in refused.stderr and "Traceback" not in refused.stderr
    assert hubd_cli(hub, "admin-token", "revoke", listed.split()[0]).returncode == 0
    assert (await patch(hub, "lamp-1", {"name": "Hacked"}, token=token))[0] == 401

    shown = await device(hub, "lamp-1")
    assert shown["displayName"] == "Study Lamp"
    assert token not in hub.log()
    assert not rig.sim.rejections


async def test_a_bulk_room_goes_out_in_one_report_and_an_override_of_a_device_gone_waits_for_it(
        make_rig: MakeRig) -> None:
    rig = await make_rig()
    token = admin_token(rig.hub)
    rig.publish("bell-1", "config", BELL, retain=True)
    await lamp_bound(rig)
    await rig.wait_events(1, "AddOrUpdateReport", endpoint="bell-1")
    before = len(rig.events("AddOrUpdateReport"))

    status, body, _ = await request(rig.hub, "PATCH", "/api/devices", {"endpointIds": ["lamp-1", "bell-1"],
                                                                        "room": "Hallway"}, token=token)
    assert status == 200, body
    assert [d["recommendRoomName"] for d in body["devices"]] == ["Hallway", "Hallway"]
    [together] = (await rig.wait_events(before + 1, "AddOrUpdateReport"))[before:]
    assert {e["endpointId"]: e["recommendRoomName"] for e in together.message["payload"]["endpoints"]} == \
        {"lamp-1": "Hallway", "bell-1": "Hallway"}
    status, body, _ = await request(rig.hub, "PATCH", "/api/devices", {"endpointIds": ["lamp-1", "nope"],
                                                                        "room": "Kitchen"}, token=token)
    assert status == 404 and "nope" in body["error"]
    status, body, _ = await request(rig.hub, "PATCH", "/api/devices", {"endpointIds": ["lamp-1"],
                                                                        "room": "Room 101"}, token=token)
    assert status == 422 and body["details"][0]["suggestion"] == "Room One Hundred One"

    # The lamp goes away (an empty retained config) and comes back: the owner's room waits for it.
    rig.publish("lamp-1", "config", b"", retain=True)
    await rig.wait_events(1, "DeleteReport", endpoint="lamp-1")
    kept = await device(rig.hub, "lamp-1")
    assert kept["present"] is False and kept["overrides"]["room"] == "Hallway"
    status, body, _ = await request(rig.hub, "PATCH", "/api/devices", {"endpointIds": ["lamp-1"], "room": "Hallway"},
                                    token=token)
    assert status == 200 and body == {"devices": [kept]}, body
    rig.publish("lamp-1", "config", LAMP, retain=True)
    back = await rig.wait_events(3, "AddOrUpdateReport", endpoint="lamp-1")
    assert endpoint_in(back[-1], "lamp-1")["recommendRoomName"] == "Hallway"
    assert not rig.sim.rejections

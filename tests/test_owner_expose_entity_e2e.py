"""Issue 35 item 5 end to end for an entity of an exported device (a real mosquitto, the platform simulator, a real
hubd): rtl_433's door sensor with a thermometer (tests/fixtures/homeassistant/rtl_433_door_temperature.json) exports
its temperature; its diagnostic reed_open is listed as the split-off `<device id>-<object_id>` with why; `PATCH
{"exposed": true}` exports it alone there as a read-only Switch (the device's own endpoint unchanged), its changes
reported, after a restart too; `{"exposed": false}` deletes that split-off only."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from homeassistant_helpers import fixture
from owner_helpers import admin_token, device, endpoint_in, patch, request
from rig import Rig, send, wait_change

MakeRig = Callable[..., Awaitable[Rig]]
DEVICE = "Generic-Door-1-4242"
CONTACT = f"{DEVICE}-{DEVICE}-reed_open"
REED_TOPIC = "rtl_433/rtl433/devices/Generic-Door/1/4242/reed_open"


def announce(rig: Rig) -> None:
    for config in fixture("rtl_433_door_temperature")["configs"]:
        send(rig, config["topic"], config["payload"], retain=True)


async def kept_back(rig: Rig, endpoint_id: str) -> dict[str, Any]:
    """The endpoint as `GET /api/devices` lists it under `unexported`, once it is."""
    async def found() -> dict[str, Any] | None:
        _, body, _ = await request(rig.hub, "GET", "/api/devices")
        return next((u for u in body["unexported"] if u["endpointId"] == endpoint_id), None)
    listed: dict[str, Any] = await rig.hub.wait_for(found, what=f"{endpoint_id} listed as not exported")
    return listed


async def test_the_owner_exposes_the_diagnostic_contact_of_an_exported_thermometer_as_its_own_endpoint(
        make_rig: MakeRig) -> None:
    rig = await make_rig(hub_overrides={"homeassistant": {"enabled": True}})
    token = admin_token(rig.hub)
    announce(rig)
    await rig.bind()

    contact = await kept_back(rig, CONTACT)
    assert contact["exposable"] is True and contact["keptBackRule"] is None, contact
    assert any("reed_open: diagnostic entity (entity_category diagnostic): kept back by rule; expose it if it is a "
               "real device function" in reason for reason in contact["entities"]), contact

    status, body = await patch(rig.hub, CONTACT, {"exposed": True}, token=token)
    assert status == 200 and body["exported"] is True, body
    [added] = await rig.wait_events(1, "AddOrUpdateReport", endpoint=CONTACT)
    sent = endpoint_in(added, CONTACT)
    assert [(c["interface"], c["supportedOperations"], c["proactivelyReported"]) for c in sent["capabilities"]] == \
        [("Switch", [], True)], sent
    assert all([c["interface"] for c in endpoint_in(r, DEVICE)["capabilities"]] == ["Temperature"]
               for r in rig.events("AddOrUpdateReport", endpoint=DEVICE))  # the device's own: never taken over
    assert (await device(rig.hub, DEVICE))["exported"] is True
    send(rig, REED_TOPIC, "1")
    await wait_change(rig, CONTACT, "Switch", "On")

    assert rig.hub.stop() == 0
    rig.hub.start()
    await rig.hub.wait_ready()
    announce(rig)
    send(rig, REED_TOPIC, "0")
    await wait_change(rig, CONTACT, "Switch", "Off")
    assert (await device(rig.hub, CONTACT))["exported"] is True
    assert (await device(rig.hub, DEVICE))["exported"] is True
    assert rig.events("DeleteReport", endpoint=CONTACT) == [] and rig.events("DeleteReport", endpoint=DEVICE) == []

    status, body = await patch(rig.hub, CONTACT, {"exposed": False}, token=token)
    assert status == 200, body
    await rig.wait_events(1, "DeleteReport", endpoint=CONTACT)
    assert (await kept_back(rig, CONTACT))["exposable"] is True
    assert rig.events("DeleteReport", endpoint=DEVICE) == []
    assert (await device(rig.hub, DEVICE))["exported"] is True
    assert not rig.sim.rejections

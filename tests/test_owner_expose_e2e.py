"""Issue 35 item 5 end to end (a real mosquitto, the platform simulator, a real hubd): rtl_433's door contact, whose
contact_open its discovery script marks `entity_category: diagnostic` (tests/fixtures/homeassistant, with its
source), is listed as kept back by rule with the reason; `PATCH {"exposed": true}` makes the dialect export it as a
read-only Switch whose changes are reported, also after a restart; a restart button answers 422 naming the rule;
`{"exposed": false}` keeps the contact back again (DeleteReport)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from homeassistant_helpers import fixture
from owner_helpers import admin_token, device, endpoint_in, patch, request
from rig import Rig, send, wait_change

MakeRig = Callable[..., Awaitable[Rig]]
CONTACT = "Honeywell-Security-8-702442"
RESTART = "20500de464ec"
CONTACT_TOPIC = "rtl_433/rtl433/devices/Honeywell-Security/8/702442/contact_open"


def announce(rig: Rig, *names: str) -> None:
    """Every config of these fixtures, retained, as their producers publish them."""
    for name in names:
        for config in fixture(name)["configs"]:
            send(rig, config["topic"], config["payload"], retain=True)


async def kept_back(rig: Rig, endpoint_id: str) -> dict[str, Any]:
    """The endpoint as `GET /api/devices` lists it under `unexported`, once it is."""
    async def found() -> dict[str, Any] | None:
        _, body, _ = await request(rig.hub, "GET", "/api/devices")
        return next((u for u in body["unexported"] if u["endpointId"] == endpoint_id), None)
    listed: dict[str, Any] = await rig.hub.wait_for(found, what=f"{endpoint_id} listed as not exported")
    return listed


async def test_the_owner_exposes_rtl_433s_diagnostic_door_contact_and_never_a_restart_button(
        make_rig: MakeRig) -> None:
    rig = await make_rig(hub_overrides={"homeassistant": {"enabled": True}})
    token = admin_token(rig.hub)
    announce(rig, "rtl_433_honeywell_door_contact", "esphome_garagedoor1_restart_button")
    await rig.bind()

    contact = await kept_back(rig, CONTACT)
    assert contact["exposable"] is True and contact["keptBackRule"] is None
    assert any("contact_open: diagnostic entity (entity_category diagnostic): kept back by rule; expose it if it is "
               "a real device function" in reason for reason in contact["entities"]), contact
    button = await kept_back(rig, RESTART)
    assert button["exposable"] is False and "maintenance actions" in button["keptBackRule"]

    # A maintenance action stays kept back: 422 naming the rule, and nothing stored.
    status, body = await patch(rig.hub, RESTART, {"exposed": True}, token=token)
    assert status == 422 and body["details"][0]["path"] == "exposed", body
    assert "kept back by rule: maintenance actions (restart, reboot, erase, reset" in body["error"]
    assert (await device(rig.hub, RESTART))["overrides"]["exposed"] is True  # as before: no override stored
    status, body, _ = await request(rig.hub, "PATCH", "/api/devices", {"endpointIds": [CONTACT, RESTART],
                                                                       "exposed": True}, token=token)
    assert status == 422 and RESTART in body["error"], body

    # Exposed: the dialect builds the endpoint with the contact's own capability, a read-only Switch.
    status, body = await patch(rig.hub, CONTACT, {"exposed": True}, token=token)
    assert status == 200 and body["exported"] is True, body
    [added] = await rig.wait_events(1, "AddOrUpdateReport", endpoint=CONTACT)
    sent = endpoint_in(added, CONTACT)
    assert [(c["interface"], c["supportedOperations"]) for c in sent["capabilities"]] == [("Switch", [])], sent
    send(rig, CONTACT_TOPIC, "1")
    await wait_change(rig, CONTACT, "Switch", "On")
    send(rig, CONTACT_TOPIC, "0")
    await wait_change(rig, CONTACT, "Switch", "Off")

    # A restart, and the configs announced again: still exported, its changes still reported.
    assert rig.hub.stop() == 0
    rig.hub.start()
    await rig.hub.wait_ready()
    announce(rig, "rtl_433_honeywell_door_contact")
    send(rig, CONTACT_TOPIC, "1")
    async def opened_again() -> bool:
        return sum(1 for r in rig.events("ChangeReport", endpoint=CONTACT)
                   if r.message["payload"]["change"]["states"][0]["value"] == "On") >= 2
    await rig.hub.wait_for(opened_again, what="the contact's second opening reported after the restart")
    assert (await device(rig.hub, CONTACT))["exported"] is True
    assert rig.events("DeleteReport", endpoint=CONTACT) == []

    # Kept back again: the platform deletes it, and the listing says why once more.
    status, body = await patch(rig.hub, CONTACT, {"exposed": False}, token=token)
    assert status == 200, body
    await rig.wait_events(1, "DeleteReport", endpoint=CONTACT)
    assert (await kept_back(rig, CONTACT))["exposable"] is True
    assert not rig.sim.rejections

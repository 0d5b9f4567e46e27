"""Poison device messages: none stops hubd, each is counted and acknowledged once, other devices go on.

A poison message that stopped hubd would be redelivered at every start (a retained config even after the
session is wiped): a crash loop. Each case here is published on hubd's own topics through a real broker.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from mosquitto import publish
from rig import LAMP, Rig, invalid_total

DEEP = b"[" * 2000 + b"]" * 2000
POISON: list[tuple[str, str, bytes]] = [
    ("lamp-1", "state", b'{"Switch": ' + DEEP + b"}"),
    ("lamp-1", "state", b"{" * 5000),
    ("lamp-1", "state", b'{"Brightness": ' + b"9" * 5000 + b"}"),
    ("lamp-1", "state", b'{"Brightness": 1e999}'),
    ("lamp-1", "state", b'{"Switch": "\xff\xfe On"}'),
    ("lamp-1", "event", b'{"name": ' + DEEP + b"}"),
    ("lamp-1", "availability", DEEP),
    ("lamp-1", "command/result", b'{"id": ' + DEEP + b"}"),
    ("x" * 5000, "state", b'{"Switch": "On"}'),
]


async def test_poison_messages_are_counted_and_never_stop_hubd(make_rig: Callable[..., Any]) -> None:
    rig: Rig = await make_rig()
    rig.publish("lamp-1", "config", LAMP, retain=True)
    await rig.bind()
    await rig.wait_events(1, "AddOrUpdateReport")
    for device, suffix, payload in POISON:
        publish(rig.broker.port, f"hubd/device/{device}/{suffix}", payload)
    rig.publish("lamp-1", "state", {"Switch": "On"})
    await rig.hub.wait_for(lambda: invalid_total(rig.hub, len(POISON)), what="every poison message counted")
    reports = await rig.wait_events(1, "ChangeReport", endpoint="lamp-1")
    assert reports[0].message["payload"]["change"]["states"][0]["value"] == "On"
    status, _ = await rig.hub.get("/healthz")
    assert status == 200
    log = rig.hub.log()
    assert "nested more than" in log and "Traceback" not in log
    assert "characters without '/'" in log  # the 5,000-character endpointId, with the fix
    assert not any(len(e) > 256 for record in rig.sim.events for e in record.endpoint_ids)


async def test_a_retained_poison_config_does_not_crash_loop_hubd(make_rig: Callable[..., Any]) -> None:
    rig: Rig = await make_rig()
    deep_config = b'{"displayName": "Deep", "displayType": "light", "additionalInfo": ' + DEEP + b"}"
    publish(rig.broker.port, "hubd/device/deep-1/config", deep_config, retain=True)
    rig.publish("lamp-1", "config", LAMP, retain=True)
    await rig.bind()
    await rig.wait_events(1, "AddOrUpdateReport")
    await rig.hub.wait_for(lambda: invalid_total(rig.hub, 1), what="the poison config counted")
    rig.hub.kill()  # a start that sees the retained poison again, as after a power cut
    rig.hub.start()
    await rig.hub.wait_ready()
    await rig.hub.wait_for(lambda: invalid_total(rig.hub, 1), what="the poison config counted after the start")
    # Replayed as retained: it says how to clear it from the broker, or it comes back at every start.
    assert "clear it with mosquitto_pub -h <broker> -t 'hubd/device/deep-1/config' -r -n" in rig.hub.log()
    rig.publish("lamp-1", "state", {"Switch": "On"})
    await rig.wait_events(1, "ChangeReport", endpoint="lamp-1")
    _, body = await rig.hub.get("/api/devices")
    assert [d["endpointId"] for d in body["devices"]] == ["lamp-1"]
    assert json.dumps(body).count("deep-1") == 0

"""The contract of backup and restore end to end, with a real mosquitto, the platform simulator and a real hubd:
a user bound, a webhook made, doorbell presses waiting while the platform is down for that user; a backup taken
while hubd runs; hubd stopped, its database and config wiped, the backup restored; hubd started again. The user
is still bound (no new AcceptGrant), the waiting presses arrive with their original messageIds, the webhook's
token still makes the speaker talk, the owner's override holds and the admin token still opens the devices API."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path

from backup_helpers import hubd, members, ok, rows, wrote_line
from owner_helpers import device, patch
from rig import BELL, Rig, metric_at_least

from simulators.speaker import SimSpeaker

WAIT_S = 60.0  # the waiting rows were backed off while the platform refused them: at most this apart


async def test_restore_onto_a_wiped_disk_keeps_users_linked_waiting_events_and_webhooks(
        make_rig: Callable[..., Awaitable[Rig]], tmp_path: Path) -> None:
    speaker = SimSpeaker("spk-kit", sn="SN-KIT", room="Kitchen")
    rig = await make_rig(devices=[speaker])
    config = str(rig.hub.config_path)
    rig.publish("bell-1", "config", BELL, retain=True)
    await rig.bind("user-1")
    await rig.sim.wait_until(lambda: {"bell-1", "spk-kit"} <= rig.sim.known_endpoints("user-1"), timeout_s=15)
    hook = json.loads(ok("webhook", "create", "-c", config, "--name", "doorbell"))
    admin = json.loads(ok("admin-token", "create", "-c", config, "--name", "phone"))["token"]
    assert (await patch(rig.hub, "bell-1", {"name": "Front Door", "room": "Porch"}, token=admin))[0] == 200
    await rig.wait_events(2, "AddOrUpdateReport", endpoint="bell-1")  # the new name reached the platform

    rig.sim.set_outage(True, "user-1")  # the platform refuses this user's events (and records their messageIds)
    depth = await rig.hub.metric("hubd_outbox_depth")
    for _ in range(3):
        rig.publish("bell-1", "event", {"name": "DoorbellPress"})
    await rig.hub.wait_for(lambda: metric_at_least(rig.hub, "hubd_outbox_depth", depth + 3), what="3 presses queued")
    # The first press of the bell's lane is tried (the others wait behind it, in order).
    await rig.sim.wait_until(lambda: any(r.status == 503 for r in rig.sim.rejections), timeout_s=15)

    backup = tmp_path / "hubd-backup.tar.gz"
    # With --with-secrets: this config holds its secrets inline, which a backup without it redacts.
    path, size = wrote_line(ok("backup", "-c", config, "--with-secrets", str(backup)))  # hubd runs, and retries
    assert path == backup and size > 0
    copy = tmp_path / "copy.db"
    copy.write_bytes(members(backup)["hubd.db"])
    waiting = {r[0] for r in rows(copy, "SELECT message_id FROM outbox WHERE name = 'DoorbellPress'")}
    assert len(waiting) == 3
    running = hubd("restore", "-c", config, "--force", str(backup))
    assert running.returncode == 1 and "in use by another process: stop hubd first" in running.stderr

    assert rig.hub.stop() == 0, rig.hub.log()
    assert {r.message_id for r in rig.sim.rejections if r.status == 503} <= waiting  # what the platform was sent
    database = Path(rig.hub.config["storage"]["path"])
    original_config = rig.hub.config_path.read_bytes()
    for wiped in [*database.parent.glob(database.name + "*"), rig.hub.config_path]:
        wiped.unlink()

    out = ok("restore", "-c", config, "--with-config", str(backup))
    assert "restored the database" in out and "restored the config" in out
    assert rig.hub.config_path.read_bytes() == original_config

    grants_before = [t for t in rig.sim.token_requests if t.grant_type == "authorization_code"]
    rig.sim.set_outage(False, "user-1")
    rig.hub.start()
    await rig.hub.wait_ready()

    presses = await rig.wait_events(3, "DoorbellPress", user_id="user-1", timeout_s=WAIT_S)
    assert {p.message_id for p in presses} == waiting, "not the original messageIds"
    assert [t for t in rig.sim.token_requests if t.grant_type == "authorization_code"] == grants_before
    assert "active" in ok("grants", "list", "-c", config)
    rig.publish("bell-1", "event", {"name": "DoorbellPress"})  # and what comes after the restore goes out too
    await rig.wait_events(4, "DoorbellPress", user_id="user-1")

    status, body, _ = await rig.hub.post(f"/trigger/with/{hook['token']}",
                                         {"type": "tts", "devices": {"isAll": True}, "data": {"text": "Restored"}})
    assert status == 200, body
    said = await speaker.wait_for_command(lambda c: c.payload.get("text") == "Restored", timeout_s=15)
    assert said.status == "done"

    bell = await device(rig.hub, "bell-1")  # the owner's override came back, and the admin token with it
    assert (bell["displayName"], bell["recommendRoomName"]) == ("Front Door", "Porch")
    status, body = await patch(rig.hub, "bell-1", {"room": None}, token=admin)
    assert status == 200 and body.get("recommendRoomName") is None and body["displayName"] == "Front Door"

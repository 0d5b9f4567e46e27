"""Which platform events device changes cause (pure: the rules docs/platform.md states).

`decide()` turns a batch of the registry's changes into `PendingEvent`s, in order; `discovery_events()` is
the AddOrUpdateReport of a set of endpoints (a new grant's is a barrier, ahead of its user's other rows).
Each event is for every bound user, or for those the caller names: the outbox writer stores one row per
(event, user), each with its own messageId.

Which values changed is the registry's to tell, once (`StatesChanged` holds only those). What `decide()` leaves
out of a ChangeReport is not a change filter but the platform's rule: a capability not `proactivelyReported` is
kept in the device's state (the registry's waiters, the platform's ReportState read it) and never pushed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hubd.cloud import messages
from hubd.devices.changes import Change, DeviceAnnounced, DeviceRemoved, DoorbellPressed, StatesChanged
from hubd.events import BARRIER_LANE, PendingEvent

DISCOVERY_BATCH = 100  # endpoints per AddOrUpdateReport / DeleteReport


def discovery_events(namespace: str, endpoints: Sequence[dict[str, Any]], *,
                     barrier: bool = False) -> list[PendingEvent]:
    """AddOrUpdateReports for these endpoints, DISCOVERY_BATCH at a time; `barrier`: ahead of the user's rows."""
    out = []
    first = (BARRIER_LANE,) if barrier else ()
    for start in range(0, len(endpoints), DISCOVERY_BATCH):
        chunk = list(endpoints[start:start + DISCOVERY_BATCH])
        out.append(PendingEvent("AddOrUpdateReport", (*first, *(e["endpointId"] for e in chunk)),
                                messages.add_or_update_report(namespace, "", chunk)))
    return out


def decide(changes: Sequence[Change], namespace: str) -> list[PendingEvent]:
    """Platform events for a batch of changes, in order; consecutive announcements/deletions are batched."""
    out: list[PendingEvent] = []
    announced: list[dict[str, Any]] = []
    removed: list[str] = []

    def flush() -> None:
        if announced:
            out.extend(discovery_events(namespace, announced))
            announced.clear()
        for start in range(0, len(removed), DISCOVERY_BATCH):
            chunk = removed[start:start + DISCOVERY_BATCH]
            out.append(PendingEvent("DeleteReport", tuple(chunk), messages.delete_report(namespace, "", chunk)))
        removed.clear()

    for change in changes:
        if isinstance(change, DeviceAnnounced):
            if removed:
                flush()
            announced[:] = [e for e in announced if e["endpointId"] != change.endpoint["endpointId"]]
            announced.append(change.endpoint)
            continue
        if isinstance(change, DeviceRemoved):
            if announced:
                flush()
            if change.device_id not in removed:
                removed.append(change.device_id)
            continue
        flush()
        if isinstance(change, StatesChanged):
            reported = [s for s in change.changed if s.interface in change.proactive]
            if not reported:
                continue
            changed = [{"interface": s.interface, "value": s.value, "timeOfSample": s.time_of_sample}
                       for s in reported]
            out.append(PendingEvent("ChangeReport", (change.device_id,), messages.change_report(
                namespace, "", change.device_id, change.additional_info, change.snapshot, changed, change.cause)))
        elif isinstance(change, DoorbellPressed):
            out.append(PendingEvent("DoorbellPress", (change.device_id,),
                                    messages.doorbell_press(namespace, "", change.device_id, change.timestamp)))
    flush()
    return out

"""Discover and ReportState: what the platform asks about the devices, answered from the registry.

Discover lists every device with its capabilities and current states; ReportState answers with one device's
retrievable states (a resend gets the first answer, through hubd.directives.replay). A device the owner hid is
not there for the platform (`E_NO_SUCH_ENDPOINT`). Handlers are dict in,
dict out (`Directive` -> reply); refusals are DirectiveError, which the endpoint turns into an ErrorResponse.
"""

from __future__ import annotations

from typing import Any

from hubd.cloud import messages
from hubd.directives.message import Directive, DirectiveRouter, addressed_device, response
from hubd.directives.replay import Attempt, Replay
from hubd.registry import DeviceRegistry


class Discovery:
    """Answers Discover and ReportState."""

    def __init__(self, *, namespace: str, registry: DeviceRegistry, replay: Replay) -> None:
        self._namespace = namespace
        self._registry = registry
        self._replay = replay

    def register(self, router: DirectiveRouter) -> None:
        """Route `{namespace}.Discovery/Discover` and `{namespace}.Query/ReportState` here."""
        router.add_handler(f"{self._namespace}.Discovery", "Discover", self.discover)
        router.add_handler(f"{self._namespace}.Query", "ReportState", self.report_state)

    async def discover(self, directive: Directive) -> dict[str, Any]:
        """DiscoveryResponse: every device the owner did not hide, with capabilities and current states."""
        endpoints = [device.endpoint() for device in self._registry.platform_devices()]
        return {"header": messages.header(self._namespace, "DiscoveryResponse", directive.message_id),
                "payload": {"endpoints": endpoints}}

    async def report_state(self, directive: Directive) -> dict[str, Any]:
        """Response with the device's retrievable states; a resend gets the first answer."""
        return await self._replay.once(directive, self._report_state)

    async def _report_state(self, directive: Directive, _attempt: Attempt) -> dict[str, Any]:
        device = addressed_device(directive, self._registry.platform_device)
        return response(self._namespace, directive.message_id, device.device_id,
                        device.state_list(with_time=False, retrievable_only=True))

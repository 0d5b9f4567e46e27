"""The platform's side of directives (docs/platform.md): Discover, control and ReportState sent to a hub.

Builds the messages, POSTs them to `{hub}{vendor_path}` with a user token, and checks every reply field
by field: HTTP 200 with JSON within 3 s, the request's messageId echoed, no authorization, the reply
name that fits the request (DiscoveryResponse, Response without timeOfSample, or an ErrorResponse with
a v2 error name). Also checks that an async Response carries a correlationToken the platform sent, and
the `python -m simulators platform discover|control|report-state` commands. Never imports hubd; the
shared shape rules come from simulators.platform_validate.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Self

import aiohttp

from simulators.platform_validate import (
    ERROR_NAMES,
    MessageInvalid,
    _full_endpoint,
    _keys,
    _list,
    _payload_version,
    _require_object,
    _states,
    _string,
    _unique_ids,
)

REPLY_DEADLINE_S = 3.0  # the platform waits 3 s for a reply (docs/platform.md)
COMMANDS = ("discover", "control", "report-state")


@dataclass(frozen=True, slots=True)
class DirectiveReply:
    """A hub's checked reply to one directive."""

    name: str  # DiscoveryResponse, Response or ErrorResponse
    message_id: str
    body: dict[str, Any]
    elapsed_s: float = 0.0
    endpoints: tuple[dict[str, Any], ...] = ()  # DiscoveryResponse
    endpoint_id: str | None = None  # Response
    states: dict[str, Any] = field(default_factory=dict)  # Response: interface -> value
    error: str | None = None  # ErrorResponse payload.name
    error_message: str | None = None

    @property
    def ok(self) -> bool:
        """False for an ErrorResponse."""
        return self.name != "ErrorResponse"


def discover_message(token: str, *, namespace: str = "Service", message_id: str | None = None) -> dict[str, Any]:
    """A Discover directive (header only; the platform may leave the payload out)."""
    return {"header": _header(f"{namespace}.Discovery", "Discover", token, message_id)}


def control_message(token: str, endpoint_id: str, name: str, payload: Mapping[str, Any] | None = None, *,
                    namespace: str = "Service", correlation_token: str | None = None,
                    additional_info: Mapping[str, str] | None = None, states: list[dict[str, Any]] | None = None,
                    message_id: str | None = None) -> dict[str, Any]:
    """A control directive `<Interface>.<Op>`; payload None leaves the key out (ops without a value)."""
    header = _header(f"{namespace}.Control", name, token, message_id)
    if correlation_token is not None:
        header["correlationToken"] = correlation_token
    message: dict[str, Any] = {"header": header, "endpoint": {
        "endpointId": endpoint_id, "additionalInfo": dict(additional_info or {}), "states": list(states or [])}}
    if payload is not None:
        message["payload"] = dict(payload)
    return message


def report_state_message(token: str, endpoint_id: str, *, namespace: str = "Service",
                         additional_info: Mapping[str, str] | None = None,
                         message_id: str | None = None) -> dict[str, Any]:
    """A ReportState query."""
    return {"header": _header(f"{namespace}.Query", "ReportState", token, message_id),
            "endpoint": {"endpointId": endpoint_id, "additionalInfo": dict(additional_info or {})},
            "payload": {}}


def validate_directive_reply(reply: object, request: Mapping[str, Any], brand: str = "Service") -> DirectiveReply:
    """Check a reply against the directive it answers (docs/platform.md); MessageInvalid."""
    root = _require_object(reply, "$")
    header = _require_object(root.get("header"), "header")
    if "authorization" in header:
        raise MessageInvalid("header.authorization", "must be absent in a reply (PROTOCOL 1)")
    _keys(header, "header", ("messageId", "namespace", "name", "payloadVersion"))
    message_id = _string(header["messageId"], "header.messageId")
    wanted_id = request["header"]["messageId"]
    if message_id != wanted_id:
        raise MessageInvalid("header.messageId", f"{message_id!r} does not echo the request's {wanted_id!r} "
                                                 "(DIFF-14)")
    _payload_version(header["payloadVersion"], "header.payloadVersion")
    pair = (_string(header["namespace"], "header.namespace"), _string(header["name"], "header.name"))
    if pair == (brand, "ErrorResponse"):
        return _error_response(root, message_id)
    request_ns = request["header"]["namespace"]
    expected = {f"{brand}.Discovery": "DiscoveryResponse", f"{brand}.Control": "Response",
                f"{brand}.Query": "Response"}.get(request_ns)
    if expected is None or pair != (brand, expected):
        wanted = f"{brand}/{expected} or " if expected else ""
        raise MessageInvalid("header", f"{pair[0]}/{pair[1]} does not answer {request_ns}/"
                                       f"{request['header']['name']}; expected {wanted}{brand}/ErrorResponse")
    if expected == "DiscoveryResponse":
        _keys(root, "$", ("header", "payload"))
        payload = _keys(root["payload"], "payload", ("endpoints",))
        endpoints = _list(payload["endpoints"], "payload.endpoints")
        _unique_ids(_full_endpoint(e, f"payload.endpoints[{i}]") for i, e in enumerate(endpoints))
        return DirectiveReply("DiscoveryResponse", message_id, root, endpoints=tuple(endpoints))
    _keys(root, "$", ("header", "endpoint", "payload"))
    endpoint = _keys(root["endpoint"], "endpoint", ("endpointId", "states"), ("additionalInfo",))
    endpoint_id = _string(endpoint["endpointId"], "endpoint.endpointId")
    wanted_endpoint = request.get("endpoint", {}).get("endpointId")
    if endpoint_id != wanted_endpoint:
        raise MessageInvalid("endpoint.endpointId", f"{endpoint_id!r} is not the requested {wanted_endpoint!r}")
    states = _states(endpoint["states"], "endpoint.states", timed=False, non_empty=False)
    _keys(root["payload"], "payload", ())
    return DirectiveReply("Response", message_id, root, endpoint_id=endpoint_id, states=states)


def check_async_response(message: Mapping[str, Any], sent: Mapping[str, str]) -> str:
    """An async Response's correlationToken must be one the platform sent, for the same endpoint; returns it."""
    token = _string(message.get("header", {}).get("correlationToken"), "header.correlationToken")
    if token not in sent:
        raise MessageInvalid("header.correlationToken", "the platform never sent this token in a directive")
    endpoint_id = message.get("endpoint", {}).get("endpointId")
    if endpoint_id != sent[token]:
        raise MessageInvalid("endpoint.endpointId", f"{endpoint_id!r}, but the directive with this "
                                                    f"correlationToken was for {sent[token]!r}")
    return token


class DirectiveClient:
    """Sends directives to a hub as the platform does and checks each reply; raises MessageInvalid on a bad one."""

    def __init__(self, hub_url: str, *, token: str, vendor_path: str = "/vendor", namespace: str = "Service",
                 deadline_s: float = REPLY_DEADLINE_S) -> None:
        self.url = hub_url.rstrip("/") + vendor_path
        self.token = token
        self.namespace = namespace
        self.deadline_s = deadline_s
        self.correlation_tokens: dict[str, str] = {}  # every correlationToken sent -> its endpointId
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Self:
        self._session = aiohttp.ClientSession()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the HTTP session; safe to call twice."""
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def discover(self, *, token: str | None = None, message_id: str | None = None) -> DirectiveReply:
        """Send Discover."""
        return await self.send(discover_message(token or self.token, namespace=self.namespace,
                                                message_id=message_id))

    async def control(self, endpoint_id: str, name: str, payload: Mapping[str, Any] | None = None, *,
                      correlation_token: str | None = None, token: str | None = None,
                      message_id: str | None = None) -> DirectiveReply:
        """Send `<Interface>.<Op>` (payload None: no payload key, as for On/Off/SetMax)."""
        if correlation_token is not None:
            self.correlation_tokens[correlation_token] = endpoint_id
        return await self.send(control_message(token or self.token, endpoint_id, name, payload,
                                               namespace=self.namespace, correlation_token=correlation_token,
                                               message_id=message_id))

    async def report_state(self, endpoint_id: str, *, token: str | None = None,
                           message_id: str | None = None) -> DirectiveReply:
        """Send ReportState."""
        return await self.send(report_state_message(token or self.token, endpoint_id, namespace=self.namespace,
                                                    message_id=message_id))

    async def send(self, message: dict[str, Any]) -> DirectiveReply:
        """POST one directive; the checked reply (MessageInvalid if the hub broke the contract)."""
        if self._session is None:
            self._session = aiohttp.ClientSession()
        started = time.monotonic()
        try:
            async with self._session.post(self.url, json=message) as resp:
                text = await resp.text()
                status, content_type = resp.status, resp.content_type
        except aiohttp.ClientError as err:
            raise MessageInvalid("$", f"POST {self.url}: {err}") from None
        elapsed = time.monotonic() - started
        if status != 200:
            raise MessageInvalid("$", f"HTTP {status}; the platform accepts only 200 (D2): {text[:300]}")
        if content_type != "application/json":
            raise MessageInvalid("$", f"Content-Type {content_type!r}, expected application/json")
        if elapsed > self.deadline_s:
            raise MessageInvalid("$", f"the reply took {elapsed:.2f} s; the platform waits {self.deadline_s:g} s "
                                      "(PROTOCOL 5.3)")
        try:
            reply = json.loads(text)
        except ValueError:
            raise MessageInvalid("$", f"not JSON: {text[:300]}") from None
        checked = validate_directive_reply(reply, message, self.namespace)
        return DirectiveReply(checked.name, checked.message_id, checked.body, elapsed, checked.endpoints,
                              checked.endpoint_id, checked.states, checked.error, checked.error_message)


def add_commands(sub: Any) -> None:
    """Add discover, control and report-state to `python -m simulators platform`'s subcommands."""
    for name, text in (("discover", "send Discover to a hub and check the DiscoveryResponse"),
                       ("control", "send <Interface>.<Op> to a hub and check the Response"),
                       ("report-state", "send ReportState to a hub and check the Response")):
        parser: argparse.ArgumentParser = sub.add_parser(name, help=text)
        parser.add_argument("--hub", required=True, help="the hub's base URL")
        parser.add_argument("--token", required=True, help="the user token the hub issued (`bind` prints it)")
        parser.add_argument("--vendor-path", default="/vendor")
        parser.add_argument("--namespace", default="Service", help="the brand word in namespaces")
        if name != "discover":
            parser.add_argument("--endpoint", required=True, help="the endpointId")
        if name == "control":
            parser.add_argument("--name", required=True, help="e.g. Switch.On, Brightness.Set, Media.TVChannel.Next")
            parser.add_argument("--payload", type=json.loads, help='the payload as JSON, e.g. \'{"value": 50}\'')
            parser.add_argument("--value", type=json.loads, help="shorthand for --payload '{\"value\": VALUE}'")
            parser.add_argument("--delta", type=json.loads, help="shorthand for --payload '{\"delta\": DELTA}'")
            parser.add_argument("--correlation-token", help="ask for an async Response if the device is slow")


def run_command(args: argparse.Namespace) -> int:
    """Run one directive command: print the reply; exit 0 on success, 1 on ErrorResponse, 2 on a bad reply."""
    return asyncio.run(_run(args))


async def _run(args: argparse.Namespace) -> int:
    async with DirectiveClient(args.hub, token=args.token, vendor_path=args.vendor_path,
                               namespace=args.namespace) as client:
        try:
            if args.command == "discover":
                reply = await client.discover()
            elif args.command == "report-state":
                reply = await client.report_state(args.endpoint)
            else:
                payload = dict(args.payload or {})
                if args.value is not None:
                    payload["value"] = args.value
                if args.delta is not None:
                    payload["delta"] = args.delta
                reply = await client.control(args.endpoint, args.name, payload or None,
                                             correlation_token=args.correlation_token)
        except MessageInvalid as err:
            print(f"the hub broke the contract: {err}", file=sys.stderr)
            return 2
    print(json.dumps(reply.body, ensure_ascii=False, indent=2))
    print(f"{reply.name} in {reply.elapsed_s * 1000:.0f} ms" + (f": {reply.error}" if reply.error else ""),
          file=sys.stderr)
    return 0 if reply.ok else 1


def _header(namespace: str, name: str, token: str, message_id: str | None) -> dict[str, Any]:
    return {"messageId": message_id or str(uuid.uuid4()), "namespace": namespace, "name": name,
            "payloadVersion": "v1", "authorization": {"type": "BearerToken", "token": token}}


def _error_response(root: dict[str, Any], message_id: str) -> DirectiveReply:
    _keys(root, "$", ("header", "payload"))
    payload = _keys(root["payload"], "payload", ("name", "message"), ("vendorCode", "debugInfo"))
    error = _string(payload["name"], "payload.name")
    if error not in ERROR_NAMES:
        raise MessageInvalid("payload.name", f"{error!r} is not a v2 error name (PROTOCOL 5.5)")
    text = _string(payload["message"], "payload.message", non_empty=False)
    for key in ("vendorCode", "debugInfo"):
        if key in payload:
            _string(payload[key], f"payload.{key}", non_empty=False)
    return DirectiveReply("ErrorResponse", message_id, root, error=error, error_message=text)

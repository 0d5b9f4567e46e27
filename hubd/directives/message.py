"""A platform directive as hubd reads it: the parsed message, the handlers' shape and the replies they share.

`parse()` turns a request body into a `Directive` (or a DirectiveError that says what is wrong with it);
`message_id_of()` finds the messageId to echo however wrong the rest is. `BUSY` (E_ENDPOINT_BUSY) is the
transient refusal: the platform may send the directive again. `addressed_device()` and `response()` are what
ReportState and control share: the device the endpoint names, and the synchronous Response.

The centre of hubd.directives: the endpoint, AcceptGrant, discovery, control and replay import this module,
and only control and discovery import another (replay).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from hubd.cloud import messages
from hubd.errors import DirectiveError

BUSY = "E_ENDPOINT_BUSY"  # transient: the platform may retry


@dataclass(frozen=True, slots=True)
class Directive:
    """A parsed platform message."""

    message_id: str
    namespace: str
    name: str
    token: str
    user: str | None
    correlation_token: str | None
    endpoint: dict[str, Any] | None
    payload: dict[str, Any]
    raw: dict[str, Any]
    deadline: float  # loop time by which the reply must be ready (the request's arrival + the budget)


DirectiveHandler = Callable[[Directive], Awaitable[dict[str, Any]]]


class DirectiveRouter(Protocol):
    """The endpoint's registration methods (hubd.directives.endpoint.DirectiveEndpoint)."""

    def add_handler(self, namespace: str, name: str, handler: DirectiveHandler) -> None:
        """Serve one directive."""

    def add_namespace_handler(self, namespace: str, handler: DirectiveHandler) -> None:
        """Serve every name of a namespace."""


class Addressed(Protocol):
    """A device as a directive's endpoint names it (hubd.registry.Device)."""

    @property
    def device_id(self) -> str:
        """Its id: the endpointId."""

    @property
    def online(self) -> bool | None:
        """False while it is offline; None when it never said."""


D = TypeVar("D", bound=Addressed)


def parse(message: Any, deadline: float) -> Directive:
    """The directive in a request body; DirectiveError says what is wrong. `user` is left None (the token's owner
    is known once the token is checked)."""
    if not isinstance(message, dict):
        raise DirectiveError("E_INTERNAL_ERROR", "the body must be a JSON object {header, endpoint?, payload?}")
    header = message.get("header")
    if not isinstance(header, dict):
        raise DirectiveError("E_INTERNAL_ERROR", "header: missing or not an object")
    for key in ("messageId", "namespace", "name"):
        if not isinstance(header.get(key), str) or not header[key]:
            raise DirectiveError("E_INTERNAL_ERROR", f"header.{key}: missing or not a non-empty string")
    for key in ("messageId", "namespace", "name", "correlationToken"):
        if isinstance(header.get(key), str) and not is_text(header[key]):
            raise DirectiveError("E_INTERNAL_ERROR", f"header.{key}: holds an unpaired surrogate (\\ud800-"
                                 "\\udfff); send text that is valid Unicode")
    if header.get("payloadVersion") != messages.PAYLOAD_VERSION:
        raise DirectiveError("E_INTERNAL_ERROR", f"header.payloadVersion: must be \"v1\", "
                             f"got {header.get('payloadVersion')!r}")
    auth = header.get("authorization")
    if not isinstance(auth, dict) or not isinstance(auth.get("token"), str) or not auth["token"]:
        raise DirectiveError("E_INVALID_AUTHORIZATION", "header.authorization.token: missing")
    if auth.get("type") != "BearerToken":
        raise DirectiveError("E_INVALID_AUTHORIZATION",
                             f"header.authorization.type: must be BearerToken, got {auth.get('type')!r}")
    payload = message.get("payload", {})
    if payload is None:
        payload = {}
    if not isinstance(payload, dict):
        raise DirectiveError("E_INTERNAL_ERROR", "payload: must be an object")
    endpoint = message.get("endpoint")
    if endpoint is not None and not isinstance(endpoint, dict):
        raise DirectiveError("E_INTERNAL_ERROR", "endpoint: must be an object")
    correlation = header.get("correlationToken")
    return Directive(header["messageId"], header["namespace"], header["name"], auth["token"], None,
                     correlation if isinstance(correlation, str) else None, endpoint, payload, message, deadline)


def message_id_of(message: Any) -> str | None:
    """header.messageId when it is a non-empty string, however wrong the rest is."""
    header = message.get("header") if isinstance(message, dict) else None
    message_id = header.get("messageId") if isinstance(header, dict) else None
    return message_id if isinstance(message_id, str) and message_id else None


def is_text(value: str) -> bool:
    """Whether a string is valid Unicode (JSON's "\\ud800" escapes make strings that are not)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def addressed_device(directive: Directive, lookup: Callable[[str], D | None]) -> D:
    """The device `endpoint.endpointId` names, online; a DirectiveError when there is none or it is offline."""
    endpoint_id = (directive.endpoint or {}).get("endpointId")
    if not isinstance(endpoint_id, str) or not endpoint_id:
        raise DirectiveError("E_INTERNAL_ERROR", "endpoint.endpointId: missing or not a string")
    device = lookup(endpoint_id)
    if device is None:
        raise DirectiveError("E_NO_SUCH_ENDPOINT", f"no device {endpoint_id!r} on this hub")
    if device.online is False:
        raise DirectiveError("E_ENDPOINT_UNREACHABLE", f"device {device.device_id} is offline")
    return device


def response(namespace: str, message_id: str, endpoint_id: str, states: list[dict[str, Any]]) -> dict[str, Any]:
    """The synchronous Response: endpointId and states without timeOfSample, empty payload."""
    return {"header": messages.header(namespace, "Response", message_id),
            "endpoint": {"endpointId": endpoint_id, "states": states}, "payload": {}}

"""Builders for the platform's messages: pure dicts in, dicts out.

Events to the platform get `header.authorization` only at send time (`with_token`), so a stored
body never holds a token. Replies to directives carry no authorization at all.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from typing import Any

PAYLOAD_VERSION = "v1"
PHYSICAL = "PHYSICAL_INTERACTION"


def header(namespace: str, name: str, message_id: str, correlation_token: str | None = None) -> dict[str, Any]:
    """A message header without authorization."""
    out: dict[str, Any] = {"messageId": message_id, "namespace": namespace, "name": name,
                           "payloadVersion": PAYLOAD_VERSION}
    if correlation_token is not None:
        out["correlationToken"] = correlation_token
    return out


def with_token(body: dict[str, Any], token: str) -> dict[str, Any]:
    """A copy of an event body with `header.authorization` set to the user's bearer token."""
    out = copy.copy(body)
    out["header"] = {**body["header"], "authorization": {"type": "BearerToken", "token": token}}
    return out


_HEADER_OPEN = '{"header":{'
_AUTHORIZATION_KEY = '"authorization":'


def with_token_json(body_json: str, token: str) -> str:
    """`with_token` on a stored body's compact JSON text, without parsing the body.

    The outbox stores bodies as `json.dumps(body, separators=(",", ":"))` with `header` first and no
    authorization, so it can go in as the header's first member. Any other text (another layout, an empty
    header, or an `"authorization":` key anywhere, which would then be there twice) takes the parse-and-dump
    path, where the user's token replaces whatever was there.
    """
    rest = body_json[len(_HEADER_OPEN):]
    if not body_json.startswith(_HEADER_OPEN) or rest.startswith("}") or _AUTHORIZATION_KEY in body_json:
        return json.dumps(with_token(json.loads(body_json), token), separators=(",", ":"))
    auth = json.dumps({"type": "BearerToken", "token": token}, separators=(",", ":"))
    return f'{_HEADER_OPEN}"authorization":{auth},{rest}'


def change_report(namespace: str, message_id: str, endpoint_id: str, additional_info: dict[str, str],
                  states: Sequence[dict[str, Any]], changed: Sequence[dict[str, Any]], cause: str) -> dict[str, Any]:
    """ChangeReport: `changed` in payload.change.states, every current state in endpoint.states."""
    return {
        "header": header(namespace, "ChangeReport", message_id),
        "endpoint": {"endpointId": endpoint_id, "additionalInfo": dict(additional_info), "states": list(states)},
        "payload": {"change": {"cause": {"type": cause}, "states": list(changed)}},
    }


def add_or_update_report(namespace: str, message_id: str, endpoints: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """AddOrUpdateReport with full endpoints."""
    return {"header": header(f"{namespace}.Discovery", "AddOrUpdateReport", message_id),
            "payload": {"endpoints": list(endpoints)}}


def delete_report(namespace: str, message_id: str, endpoint_ids: Sequence[str]) -> dict[str, Any]:
    """DeleteReport."""
    return {"header": header(f"{namespace}.Discovery", "DeleteReport", message_id),
            "payload": {"endpoints": [{"endpointId": e} for e in endpoint_ids]}}


def doorbell_press(namespace: str, message_id: str, endpoint_id: str, timestamp: str) -> dict[str, Any]:
    """DoorbellPress (event source)."""
    return {"header": header(f"{namespace}.EventSource", "DoorbellPress", message_id),
            "payload": {"endpointId": endpoint_id, "cause": {"type": PHYSICAL}, "timestamp": timestamp}}


def async_response(namespace: str, message_id: str, correlation_token: str, endpoint_id: str,
                   additional_info: dict[str, str], states: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The asynchronous Response for a slow control request (states without timeOfSample)."""
    return {
        "header": header(namespace, "Response", message_id, correlation_token),
        "endpoint": {"endpointId": endpoint_id, "additionalInfo": dict(additional_info), "states": list(states)},
        "payload": {},
    }


def accept_grant_response(namespace: str, message_id: str) -> dict[str, Any]:
    """The AcceptGrant success reply."""
    return {"header": header(f"{namespace}.Authorization", "AcceptGrantResponse", message_id), "payload": {}}


def error_response(namespace: str, message_id: str, name: str, message: str) -> dict[str, Any]:
    """ErrorResponse."""
    return {"header": header(namespace, "ErrorResponse", message_id), "payload": {"name": name, "message": message}}

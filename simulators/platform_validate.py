"""Pure validators for the platform simulator: the platform's wire shapes (docs/platform.md), checked field by field.

Owns the rules (the platform's specification and what docs/platform.md adds to it) and nothing else: no
state, no I/O. Every failure is a MessageInvalid naming the JSON path and the reason.
Imports nothing from hubd: the simulator plays the outside world.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import re
import string
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import parse_qs, parse_qsl, urlsplit

# The 41 documented display types (docs/devices.md).
DISPLAY_TYPES = frozenset({
    "light", "switch", "socket", "irController", "curtain", "panel", "tv", "fan", "remoteController", "ac",
    "airPurifier", "scene", "cleanBot", "projector", "dehumidifier", "thermostat", "humidifier", "door",
    "speaker", "unknown", "box", "tvBox", "service", "wineCabinet", "heatingFurnace", "gasStove",
    "washingMachine", "lampblackMachine", "waterHeater", "refrigerator", "floorHeater", "bridge", "stb",
    "ventilation", "windowPusher", "feeder", "waterDetector", "alarm", "airer", "heater", "atomizedGlass",
})

# docs/platform.md: the v2 error names an ErrorResponse may carry.
ERROR_NAMES = frozenset({
    "E_AUTHORIZATION_EXPIRED", "E_INVALID_AUTHORIZATION", "E_NO_SUCH_ENDPOINT", "E_NOT_SUPPORTED_DIRECTIVE",
    "E_VALUE_OUT_OF_RANGE", "E_ENDPOINT_BUSY", "E_CHANNEL_NOT_FOUND", "E_INTERNAL_ERROR",
    "E_ENDPOINT_UNBOUND", "E_ENDPOINT_NEEDS_UPGRADE", "E_ENDPOINT_UNREACHABLE", "E_ENDPOINT_INITIATING",
    "E_GATEWAY_UNREACHABLE", "E_SERVER_UNREACHABLE", "E_MEDIA_RESOURCE_NOT_FOUND",
    "E_MEDIA_FAVORITE_NOT_FOUND", "E_MEDIA_NO_PREV", "E_MEDIA_NO_NEXT",
})

# Event name -> namespace suffix after the brand word (docs/platform.md).
EVENT_NAMESPACES = {
    "ChangeReport": "",
    "AddOrUpdateReport": ".Discovery",
    "DeleteReport": ".Discovery",
    "DoorbellPress": ".EventSource",
    "Response": "",
}

ADDITIONAL_INFO_MAX_KEYS = 100
ADDITIONAL_INFO_MAX_CHARS = 999
PERCENT = (0.0, 100.0)
RGB_MAX = 0xFFFFFF
_TIMESTAMP_RE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\.[0-9]{3}Z")
_DIGIT_RE = re.compile(r"\d")  # any script's decimal digits ("2", "２")
# PROTOCOL 8 [DECISION]: no ASCII punctuation either (speech recognition cannot say it).
_PUNCTUATION_RE = re.compile("[" + re.escape(string.punctuation) + "]")
_SET_MAX_MIN_ADJUST = frozenset({"Set", "SetMax", "SetMin", "Adjust"})
_ON_OFF = frozenset({"On", "Off"})
_CAPABILITY_FIELDS = ("interface", "supportedOperations", "proactivelyReported", "retrievable")


@dataclass(frozen=True, slots=True)
class InterfaceRule:
    """What the platform allows for one capability interface (docs/devices.md, Interfaces)."""

    operations: frozenset[str]
    enum: frozenset[str] | None = None  # the allowed string values of an enum interface
    number_range: tuple[float, float] | None = None
    integer: bool = False
    descriptor_keys: frozenset[str] | None = None  # Media.* values are objects with these keys


_MODES = frozenset({"Auto", "Manual", "Cool", "Heat", "Dry", "Fan", "Silent", "Energy", "Sleep"})
_SWING = frozenset({"Auto", "On", "Off", "Horizon", "HorizonOff", "Vertical", "VerticalOff"})
_PLAYBACK = frozenset({"Play", "Pause"})
_PLAYBACK_MODES = frozenset({"RepeatAll", "RepeatOne", "Shuffle", "Order"})

INTERFACES: dict[str, InterfaceRule] = {
    "Switch": InterfaceRule(_ON_OFF, enum=_ON_OFF),
    "MotionSwitch": InterfaceRule(_ON_OFF, enum=_ON_OFF),
    "Mute": InterfaceRule(_ON_OFF, enum=_ON_OFF),
    "Position": InterfaceRule(frozenset({"Set", "Adjust"}), number_range=PERCENT),
    "Color": InterfaceRule(frozenset({"Set", "SetRandom"}), number_range=(0, RGB_MAX), integer=True),
    "ColorTemperature": InterfaceRule(_SET_MAX_MIN_ADJUST, number_range=PERCENT),
    "Brightness": InterfaceRule(_SET_MAX_MIN_ADJUST, number_range=PERCENT),
    "Humidity": InterfaceRule(_SET_MAX_MIN_ADJUST, number_range=PERCENT),
    "Temperature": InterfaceRule(_SET_MAX_MIN_ADJUST, number_range=(-math.inf, math.inf)),
    "FanSpeed": InterfaceRule(
        _SET_MAX_MIN_ADJUST | {"SetHigh", "SetMedium", "SetLow"}, number_range=PERCENT
    ),
    "Volume": InterfaceRule(_SET_MAX_MIN_ADJUST, number_range=PERCENT),
    "Mode": InterfaceRule(_MODES, enum=_MODES),
    "SwingMode": InterfaceRule(_SWING, enum=_SWING),
    "Media.TVChannel": InterfaceRule(
        frozenset({"Set", "Next", "Previous"}), descriptor_keys=frozenset({"name", "code"})
    ),
    "Media.Music": InterfaceRule(
        frozenset({"Set", "Next", "Previous", "Stop"}),
        descriptor_keys=frozenset({"name", "artist", "album", "genre", "source"}),
    ),
    "PlaybackControl": InterfaceRule(_PLAYBACK, enum=_PLAYBACK),
    "PlaybackMode": InterfaceRule(_PLAYBACK_MODES, enum=_PLAYBACK_MODES),
}


class MessageInvalid(ValueError):
    """A message broke the wire contract at one JSON path."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


@dataclass(frozen=True, slots=True)
class AsyncEvent:
    """The facts the gateway needs from a valid async event."""

    name: str
    message_id: str
    token: str
    endpoint_ids: tuple[str, ...]  # every endpoint the message is about, in message order
    body: dict[str, Any]


def validate_event(message: object, brand: str = "Service") -> AsyncEvent:
    """Check one POST /async/events body against the platform's rules (docs/platform.md); raise MessageInvalid."""
    root = _require_object(message, "$")
    header = _require_object(_field(root, "$", "header"), "header")
    name = _string(_field(header, "header", "name"), "header.name")
    if name not in EVENT_NAMESPACES:
        expected = _listing(EVENT_NAMESPACES)
        raise MessageInvalid("header.name", f"{name!r} is not an async event; expected one of {expected}")
    namespace = _string(_field(header, "header", "namespace"), "header.namespace")
    expected_ns = brand + EVENT_NAMESPACES[name]
    if namespace != expected_ns:
        raise MessageInvalid("header.namespace", f"{namespace!r} cannot carry {name}, {expected_ns!r} does")
    top = ("header", "endpoint", "payload") if name in ("ChangeReport", "Response") else ("header", "payload")
    _keys(root, "$", top)
    header_keys = ("messageId", "namespace", "name", "payloadVersion", "authorization")
    _keys(header, "header", (*header_keys, "correlationToken") if name == "Response" else header_keys)
    message_id = _string(header["messageId"], "header.messageId")
    _payload_version(header["payloadVersion"], "header.payloadVersion")
    token = _authorization(header["authorization"], "header.authorization")
    if name == "Response":
        _string(header["correlationToken"], "header.correlationToken")
    endpoint_ids = _EVENT_BODIES[name](root)
    return AsyncEvent(name=name, message_id=message_id, token=token, endpoint_ids=endpoint_ids, body=root)


def validate_accept_grant_reply(reply: object, brand: str = "Service") -> bool:
    """True for an AcceptGrantResponse, False for a well-formed ErrorResponse; else MessageInvalid."""
    root = _require_object(reply, "$")
    _keys(root, "$", ("header", "payload"))
    header = _require_object(root["header"], "header")
    if "authorization" in header:
        raise MessageInvalid("header.authorization", "must be absent in a reply (SPEC 2.1)")
    _keys(header, "header", ("messageId", "namespace", "name", "payloadVersion"))
    _string(header["messageId"], "header.messageId")
    _payload_version(header["payloadVersion"], "header.payloadVersion")
    pair = (_string(header["namespace"], "header.namespace"), _string(header["name"], "header.name"))
    if pair == (f"{brand}.Authorization", "AcceptGrantResponse"):
        _keys(root["payload"], "payload", ())
        return True
    if pair == (brand, "ErrorResponse"):
        payload = _keys(root["payload"], "payload", ("name", "message"), ("vendorCode", "debugInfo"))
        error_name = _string(payload["name"], "payload.name")
        if error_name not in ERROR_NAMES:
            raise MessageInvalid("payload.name", f"{error_name!r} is not a v2 error name (PROTOCOL 5.5)")
        _string(payload["message"], "payload.message", non_empty=False)
        for key in ("vendorCode", "debugInfo"):
            if key in payload:
                _string(payload[key], f"payload.{key}", non_empty=False)
        return False
    raise MessageInvalid(
        "header",
        f"{pair[0]}/{pair[1]} is neither {brand}.Authorization/AcceptGrantResponse nor {brand}/ErrorResponse",
    )


def validate_user_auth(data: object, path: str = "data") -> str:
    """Check a driver UserAuth object (docs/driver.md); return its userToken."""
    optional = ("expiredTime", "ext1", "ext2", "ext3", "ext4", "ext5")
    auth = _keys(data, path, ("userId", "userToken", "expiresIn", "refreshToken"), optional)
    _string(auth["userId"], f"{path}.userId")
    token = _string(auth["userToken"], f"{path}.userToken")
    _number(auth["expiresIn"], f"{path}.expiresIn")
    refresh = auth["refreshToken"]
    if not isinstance(refresh, str | int | float) or isinstance(refresh, bool) or refresh == "":
        reason = f"expected a non-empty string or a number, got {_kind(refresh)}"
        raise MessageInvalid(f"{path}.refreshToken", reason)
    if "expiredTime" in auth:
        _number(auth["expiredTime"], f"{path}.expiredTime")
    for key in optional[1:]:
        if key in auth:
            _string(auth[key], f"{path}.{key}", non_empty=False)
    return token


def validate_driver_reply(reply: object) -> Any:
    """Check a /driver/command success envelope (docs/driver.md: status 0 and data); return data."""
    body = _require_object(reply, "$")
    status = _field(body, "$", "status")
    if type(status) is not int:
        raise MessageInvalid("status", f"expected an integer, got {_kind(status)}")
    if status != 0:
        raise MessageInvalid("status", f"{status} is not success (errorName {body.get('errorName')!r})")
    return _field(body, "$", "data")


def validate_authorize_url(data: object, callback_url: str) -> str:
    """Check the OAuth command's data (docs/driver.md): /oauth/authorize with callbackURL; return the URL."""
    url = _string(data, "data")
    parts = urlsplit(url)
    if not parts.scheme or not parts.netloc or parts.path != "/oauth/authorize":
        raise MessageInvalid("data", f"{url!r} is not an absolute URL with the path /oauth/authorize")
    if parse_qs(parts.query).get("callbackURL") != [callback_url]:
        raise MessageInvalid("data", f"{url!r} does not carry callbackURL={callback_url!r} exactly once")
    return url


def validate_redirect(location: str, callback_url: str) -> tuple[str, dict[str, str]]:
    """Check the authorize redirect keeps the callback (docs/driver.md); return (mode, added parameters)."""
    got, want = urlsplit(location), urlsplit(callback_url)
    if (got.scheme, got.netloc, got.path) != (want.scheme, want.netloc, want.path):
        raise MessageInvalid("Location", f"{location!r} does not lead to the callback {callback_url!r}")
    added = parse_qsl(got.query, keep_blank_values=True)
    for pair in parse_qsl(want.query, keep_blank_values=True):
        if pair not in added:
            raise MessageInvalid("Location", f"{location!r} lost the callback's parameter {'='.join(pair)}")
        added.remove(pair)
    params = dict(added)
    v1 = {"userId", "userToken", "expiresIn"}
    # The platform says what the redirect must hold, not that it holds nothing else (hubd adds refreshToken).
    if len(params) == len(added) and all(params.values()):
        if "code" in params and not v1 & set(params):
            return "oauth2", params
        if v1 <= set(params) and "code" not in params and params["expiresIn"].isdigit():
            return "oauth", params
    expected = "code (OAuth 2.0) or userId, userToken and a numeric expiresIn (OAuth)"
    raise MessageInvalid("Location", f"{location!r} adds {added}; expected {expected}")


def failure_report_sign(user_id: str, client_id: str, client_secret: str) -> str:
    """The sign field of a failure report (docs/platform.md): lowercase hex HMAC-SHA256."""
    text = f"userId={user_id}&clientId={client_id}"
    return hmac.new(client_secret.encode(), text.encode(), hashlib.sha256).hexdigest()


def _change_report(root: dict[str, Any]) -> tuple[str, ...]:
    endpoint_id, endpoint_states = _endpoint_ref(root["endpoint"], timed=True)
    payload = _keys(root["payload"], "payload", ("change",))
    change = _keys(payload["change"], "payload.change", ("cause", "states"))
    _cause(change["cause"], "payload.change.cause")
    changed = _states(change["states"], "payload.change.states", timed=True, non_empty=True)
    for i, (interface, value) in enumerate(changed.items()):
        path = f"payload.change.states[{i}]"
        if interface not in endpoint_states:
            raise MessageInvalid(f"{path}.interface", f"{interface!r} is not in endpoint.states")
        if endpoint_states[interface] != value:
            raise MessageInvalid(
                f"{path}.value", f"{value!r} differs from endpoint.states ({endpoint_states[interface]!r})"
            )
    return (endpoint_id,)


def _response(root: dict[str, Any]) -> tuple[str, ...]:
    endpoint_id, _ = _endpoint_ref(root["endpoint"], timed=False)
    _keys(root["payload"], "payload", ())
    return (endpoint_id,)


def _add_or_update_report(root: dict[str, Any]) -> tuple[str, ...]:
    payload = _keys(root["payload"], "payload", ("endpoints",))
    endpoints = _list(payload["endpoints"], "payload.endpoints", non_empty=True)
    return _unique_ids(_full_endpoint(e, f"payload.endpoints[{i}]") for i, e in enumerate(endpoints))


def _delete_report(root: dict[str, Any]) -> tuple[str, ...]:
    payload = _keys(root["payload"], "payload", ("endpoints",))
    endpoints = _list(payload["endpoints"], "payload.endpoints", non_empty=True)
    ids = []
    for i, item in enumerate(endpoints):
        path = f"payload.endpoints[{i}]"
        id_path = f"{path}.endpointId"
        ids.append((_string(_keys(item, path, ("endpointId",))["endpointId"], id_path), id_path))
    return _unique_ids(ids)


def _doorbell_press(root: dict[str, Any]) -> tuple[str, ...]:
    payload = _keys(root["payload"], "payload", ("endpointId", "cause", "timestamp"))
    endpoint_id = _string(payload["endpointId"], "payload.endpointId")
    _cause(payload["cause"], "payload.cause")
    _timestamp(payload["timestamp"], "payload.timestamp")
    return (endpoint_id,)


_EVENT_BODIES = {
    "ChangeReport": _change_report,
    "AddOrUpdateReport": _add_or_update_report,
    "DeleteReport": _delete_report,
    "DoorbellPress": _doorbell_press,
    "Response": _response,
}


def _endpoint_ref(value: object, *, timed: bool) -> tuple[str, dict[str, Any]]:
    endpoint = _keys(value, "endpoint", ("endpointId", "additionalInfo", "states"))
    endpoint_id = _string(endpoint["endpointId"], "endpoint.endpointId")
    _additional_info(endpoint["additionalInfo"], "endpoint.additionalInfo")
    return endpoint_id, _states(endpoint["states"], "endpoint.states", timed=timed, non_empty=False)


def _full_endpoint(value: object, path: str) -> tuple[str, str]:
    endpoint = _keys(
        value,
        path,
        ("endpointId", "displayName", "displayType", "additionalInfo", "capabilities", "states"),
        ("recommendRoomName", "recommendHomeName", "offline"),
    )
    endpoint_id = _string(endpoint["endpointId"], f"{path}.endpointId")
    _spoken_name(endpoint["displayName"], f"{path}.displayName")
    display_type = _string(endpoint["displayType"], f"{path}.displayType")
    if display_type not in DISPLAY_TYPES:
        raise MessageInvalid(f"{path}.displayType", f"{display_type!r} is not one of PROTOCOL 7's 41 types")
    if "recommendRoomName" in endpoint:
        _spoken_name(endpoint["recommendRoomName"], f"{path}.recommendRoomName")
    if "recommendHomeName" in endpoint:
        _string(endpoint["recommendHomeName"], f"{path}.recommendHomeName")
    if "offline" in endpoint:
        _bool(endpoint["offline"], f"{path}.offline")
    _additional_info(endpoint["additionalInfo"], f"{path}.additionalInfo")
    interfaces = _capabilities(endpoint["capabilities"], f"{path}.capabilities")
    states = _states(endpoint["states"], f"{path}.states", timed=True, non_empty=False)
    for i, interface in enumerate(states):
        if interface not in interfaces:
            raise MessageInvalid(f"{path}.states[{i}].interface", f"{interface!r} has no capability")
    return endpoint_id, f"{path}.endpointId"


def _capabilities(value: object, path: str) -> set[str]:
    seen: set[str] = set()
    for i, item in enumerate(_list(value, path, non_empty=False)):
        item_path = f"{path}[{i}]"
        cap = _keys(item, item_path, _CAPABILITY_FIELDS, ("version",))
        interface = _interface(cap["interface"], f"{item_path}.interface")
        if interface in seen:
            raise MessageInvalid(f"{item_path}.interface", f"duplicate capability {interface!r}")
        seen.add(interface)
        ops_path = f"{item_path}.supportedOperations"
        raw_ops = _list(cap["supportedOperations"], ops_path)
        ops = [_string(op, f"{ops_path}[{j}]") for j, op in enumerate(raw_ops)]
        for j, op in enumerate(ops):
            if op not in INTERFACES[interface].operations:
                allowed = _listing(INTERFACES[interface].operations)
                reason = f"{op!r} is not an operation of {interface}; expected {allowed}"
                raise MessageInvalid(f"{ops_path}[{j}]", reason)
            if op in ops[:j]:
                raise MessageInvalid(f"{ops_path}[{j}]", f"duplicate operation {op!r}")
        _bool(cap["proactivelyReported"], f"{item_path}.proactivelyReported")
        _bool(cap["retrievable"], f"{item_path}.retrievable")
        if "version" in cap and cap["version"] != "v1":
            raise MessageInvalid(f"{item_path}.version", f"expected 'v1', got {cap['version']!r}")
    return seen


def _states(value: object, path: str, *, timed: bool, non_empty: bool) -> dict[str, Any]:
    """Check a State list; return interface -> value."""
    result: dict[str, Any] = {}
    for i, item in enumerate(_list(value, path, non_empty=non_empty)):
        item_path = f"{path}[{i}]"
        if not timed and isinstance(item, dict) and "timeOfSample" in item:
            raise MessageInvalid(f"{item_path}.timeOfSample", "must be absent in a Response (SPEC 2.5)")
        state = _keys(item, item_path, ("interface", "value", "timeOfSample")[: 3 if timed else 2])
        interface = _interface(state["interface"], f"{item_path}.interface")
        if interface in result:
            raise MessageInvalid(f"{item_path}.interface", f"duplicate state for {interface!r}")
        _state_value(state["value"], f"{item_path}.value", INTERFACES[interface], interface)
        if timed:
            _timestamp(state["timeOfSample"], f"{item_path}.timeOfSample")
        result[interface] = state["value"]
    return result


def _state_value(value: object, path: str, rule: InterfaceRule, interface: str) -> None:
    if rule.descriptor_keys is not None:
        descriptor = _keys(value, path, (), tuple(sorted(rule.descriptor_keys)))
        for key, item in descriptor.items():
            _string(item, f"{path}.{key}", non_empty=False)
    elif rule.enum is not None:
        text = _string(value, path)
        if text not in rule.enum:
            raise MessageInvalid(path, f"{text!r} is not a {interface} value; expected {_listing(rule.enum)}")
    elif rule.number_range is not None:
        number = _number(value, path)
        if rule.integer and not isinstance(number, int):
            raise MessageInvalid(path, f"expected an integer for {interface}, got {number!r}")
        low, high = rule.number_range
        if not low <= number <= high:
            raise MessageInvalid(path, f"{number!r} is outside {interface}'s range {low:g}..{high:g}")


def _interface(value: object, path: str) -> str:
    name = _string(value, path)
    if name not in INTERFACES:
        expected = _listing(INTERFACES)
        raise MessageInvalid(path, f"{name!r} is not a known interface; expected a bare name: {expected}")
    return name


def _cause(value: object, path: str) -> None:
    _string(_keys(value, path, ("type",))["type"], f"{path}.type")


def _additional_info(value: object, path: str) -> None:
    info = _require_object(value, path)
    if len(info) > ADDITIONAL_INFO_MAX_KEYS:
        raise MessageInvalid(path, f"{len(info)} keys, at most {ADDITIONAL_INFO_MAX_KEYS} allowed")
    for key, item in info.items():
        if "." in key or not key:
            raise MessageInvalid(f"{path}.{key}", "keys must be non-empty and must not contain '.'")
        text = _string(item, f"{path}.{key}", non_empty=False)
        if len(text) > ADDITIONAL_INFO_MAX_CHARS:
            reason = f"{len(text)} characters, at most {ADDITIONAL_INFO_MAX_CHARS} allowed"
            raise MessageInvalid(f"{path}.{key}", reason)


def _spoken_name(value: object, path: str) -> None:
    # PROTOCOL 2.1/8: speech recognition fails on digits and special characters, so names must not have them.
    text = _string(value, path)
    if _DIGIT_RE.search(text):
        raise MessageInvalid(path, f"{text!r} contains digits, which names must not (PROTOCOL 8)")
    special = _PUNCTUATION_RE.search(text)
    if special:
        raise MessageInvalid(path, f"{text!r} contains {special.group()!r}; names must not have special "
                                   "characters (PROTOCOL 8)")


def _authorization(value: object, path: str) -> str:
    auth = _keys(value, path, ("type", "token"))
    if auth["type"] != "BearerToken":
        raise MessageInvalid(f"{path}.type", f"expected 'BearerToken', got {auth['type']!r}")
    return _string(auth["token"], f"{path}.token")


def _payload_version(value: object, path: str) -> None:
    if value != "v1":
        raise MessageInvalid(path, f"expected 'v1', got {value!r}")


def _timestamp(value: object, path: str) -> None:
    text = _string(value, path)
    if not _TIMESTAMP_RE.fullmatch(text):
        raise MessageInvalid(path, f"expected UTC time as YYYY-MM-DDTHH:MM:SS.mmmZ, got {text!r}")
    try:
        datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ")
    except ValueError as err:
        raise MessageInvalid(path, f"{text!r} is not a real date and time: {err}") from None


def _unique_ids(items: Iterable[tuple[str, str]]) -> tuple[str, ...]:
    ids: list[str] = []
    for endpoint_id, path in items:
        if endpoint_id in ids:
            raise MessageInvalid(path, f"duplicate endpointId {endpoint_id!r}")
        ids.append(endpoint_id)
    return tuple(ids)


def _keys(
    value: object, path: str, required: tuple[str, ...], optional: tuple[str, ...] = ()
) -> dict[str, Any]:
    """Require an object with every required key and nothing outside required + optional."""
    obj = _require_object(value, path)
    for key in required:
        _field(obj, path, key)
    for key in obj:
        if key not in required and key not in optional:
            raise MessageInvalid(_join(path, key), "unknown field")
    return obj


def _field(obj: dict[str, Any], path: str, key: str) -> Any:
    if key not in obj:
        raise MessageInvalid(_join(path, key), "missing")
    return obj[key]


def _require_object(value: object, path: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise MessageInvalid(path, f"expected an object, got {_kind(value)}")
    return value


def _list(value: object, path: str, *, non_empty: bool = False) -> list[Any]:
    if not isinstance(value, list):
        raise MessageInvalid(path, f"expected an array, got {_kind(value)}")
    if non_empty and not value:
        raise MessageInvalid(path, "must not be empty")
    return value


def _string(value: object, path: str, *, non_empty: bool = True) -> str:
    if not isinstance(value, str):
        raise MessageInvalid(path, f"expected a string, got {_kind(value)}")
    if non_empty and not value:
        raise MessageInvalid(path, "must not be empty")
    return value


def _number(value: object, path: str) -> int | float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise MessageInvalid(path, f"expected a number, got {_kind(value)}")
    if not math.isfinite(value):
        raise MessageInvalid(path, "must be finite")
    return value


def _bool(value: object, path: str) -> None:
    if not isinstance(value, bool):
        raise MessageInvalid(path, f"expected a boolean, got {_kind(value)}")


def _kind(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return f"the number {value!r}"
    if isinstance(value, str):
        return f"the string {value[:60]!r}" + ("..." if len(value) > 60 else "")
    if isinstance(value, list):
        return "an array"
    return "an object" if isinstance(value, dict) else type(value).__name__


def _join(path: str, key: str) -> str:
    return key if path == "$" else f"{path}.{key}"


def _listing(names: Iterable[str]) -> str:
    return ", ".join(sorted(names))

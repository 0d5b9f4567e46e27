"""What every dialect checks before it parses a device payload (pure): the size limit and the nesting depth.

Each dialect reads JSON of its own shape; they refuse a device payload over MAX_PAYLOAD_BYTES and ask
`check_nesting` before `json.loads` recurses into one (`json_object` does both, for the JSON objects most
payloads are; `json_text` reads a device's text, a rendered template's, of any JSON value). A failure is a
DeviceMessageInvalid that names the limit or the problem (`json_text`: a ValueError, as json.loads's own).
"""

from __future__ import annotations

import json
from typing import Any

from hubd.errors import DeviceMessageInvalid
from hubd.untrusted.depth import too_deep

MAX_PAYLOAD_BYTES = 64 * 1024
# Deeper JSON is refused before it is parsed: json.loads recurses, and 2,000 levels are a RecursionError.
MAX_NESTING = 32


def check_nesting(payload: bytes | str, max_depth: int = MAX_NESTING) -> None:
    """Refuse JSON nested deeper than `max_depth` before a parser recurses into it (RecursionError).

    Cheap on every real payload: only one with more brackets than `max_depth` in all is scanned. The scan reads
    UTF-8, so parse the JSON from the payload decoded as UTF-8: json.loads(bytes) also reads UTF-16 and UTF-32,
    in which an escaped quote hides the brackets after it from this scan.
    """
    data = payload.encode("utf-8", "surrogatepass") if isinstance(payload, str) else payload
    if too_deep(data, max_depth):
        raise DeviceMessageInvalid(f"JSON nested more than {max_depth} levels deep; a device payload is a flat "
                                   "object of a few levels")


def json_object(payload: bytes) -> dict[str, Any]:
    """A device payload's JSON object, read as UTF-8 within the size and nesting limits; DeviceMessageInvalid
    saying what it is instead."""
    if len(payload) > MAX_PAYLOAD_BYTES:
        raise DeviceMessageInvalid(f"payload is {len(payload)} bytes; the limit is {MAX_PAYLOAD_BYTES}")
    try:
        # Decoded here, not by json.loads(bytes): that would also take UTF-16 and UTF-32, where check_nesting,
        # which reads UTF-8 bytes, miscounts after an escaped quote and lets deep nesting through.
        text = payload.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise DeviceMessageInvalid(f"not UTF-8: {err}") from err
    check_nesting(payload)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise DeviceMessageInvalid(f"not JSON: {err}") from err
    except (ValueError, RecursionError) as err:  # e.g. an integer of more than 4,300 digits
        raise DeviceMessageInvalid(f"not JSON hubd can read ({str(err).split(';')[0]})") from err
    if not isinstance(data, dict):
        raise DeviceMessageInvalid(f"must be a JSON object, got {type(data).__name__}")
    return data


def json_text(text: str) -> Any:
    """A device's text (a state, a rendered template) read as JSON within MAX_NESTING: ValueError, as json.loads
    raises for what it cannot read, for JSON nested deeper (json.loads alone recursed into 3,000 brackets)."""
    try:
        check_nesting(text)
    except DeviceMessageInvalid as err:
        raise ValueError(str(err)) from None
    return json.loads(text)

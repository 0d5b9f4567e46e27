"""What every dialect checks before it parses a device payload (pure): the size limit and the nesting depth.

Each dialect reads JSON of its own shape; they refuse a device payload over MAX_PAYLOAD_BYTES and ask
`check_nesting` before `json.loads` recurses into one. A failure is a DeviceMessageInvalid that names the
limit. Imports only hubd.errors and hubd.jsondepth.
"""

from __future__ import annotations

from hubd.errors import DeviceMessageInvalid
from hubd.jsondepth import too_deep

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


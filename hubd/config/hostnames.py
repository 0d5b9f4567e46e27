"""What a host name is (pure): the rule the config's host settings and the speaker's audio URLs share.
"""

from __future__ import annotations

import re

_HOST_NAME_LABEL = r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
_HOST_NAME_RE = re.compile(rf"^(?=.{{1,253}}$){_HOST_NAME_LABEL}(?:\.{_HOST_NAME_LABEL})*\.?$")


def is_host_name(name: str) -> bool:
    """A host name as a Host header has it (punycode for other scripts): labels of letters, digits, '-' and '_'
    (up to 63 each, neither beginning nor ending with '-'), 253 characters at most with an optional trailing dot."""
    return _HOST_NAME_RE.match(name) is not None

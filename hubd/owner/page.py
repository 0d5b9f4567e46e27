"""The devices page (pure): its template (templates/devices.html, its CSS and JavaScript inline, nothing fetched from
elsewhere) with the devices as data, and the headers that go with it.

The data block escapes `<`, `>` and `&`; a Content-Security-Policy allows only the page's own script and style (by
hash) and requests to this origin, and no form submission anywhere (the page sends its changes with fetch). The
script sets every text from hubd as text, never as HTML. Imports nothing from hubd.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from functools import cache
from importlib import resources
from typing import Any

POLL_MS = 2000  # how often the page asks for /api/devices


def render(listing: dict[str, Any]) -> str:
    """The page with `listing` (what `GET /api/devices` answers) in its JSON data block."""
    data = json.dumps(listing, separators=(",", ":"))
    # Safe inside <script type="application/json">: no "</script>", no "<!--", no markup at all.
    data = data.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return _template().replace("{{data}}", data, 1)


@cache
def _template() -> str:
    text = resources.files("hubd.owner").joinpath("templates/devices.html").read_text(encoding="utf-8")
    return text.replace("{{poll_ms}}", str(POLL_MS))


@cache
def headers() -> dict[str, str]:
    """Never cached, never framed; only the template's own style and script run, and they fetch only from here."""
    page = _template()
    style = _hash(re.findall(r"<style>(.*?)</style>", page, re.DOTALL))
    script = _hash(re.findall(r"<script>(.*?)</script>", page, re.DOTALL))
    csp = (f"default-src 'none'; style-src {style}; script-src {script}; connect-src 'self'; "
           "img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
    return {"Cache-Control": "no-store", "Content-Security-Policy": csp, "X-Frame-Options": "DENY",
            "X-Content-Type-Options": "nosniff", "Referrer-Policy": "same-origin"}


def _hash(blocks: list[str]) -> str:
    return " ".join(f"'sha256-{base64.b64encode(hashlib.sha256(b.encode()).digest()).decode()}'" for b in blocks)

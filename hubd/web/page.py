"""A page served from one template of a package (pure): the template (its CSS and JavaScript inline, nothing fetched
from elsewhere) with the page's data in its JSON data block, and the headers that go with it. The status page and
the devices page are two; what they share (the palette, badges, tables that turn into cards on a phone, and the
script's helpers and poll timer) is `hubd/web/templates/common.css` and `common.js`, put in each page's own <style>
and <script> (where it says `{{common_css}}`, `{{common_js}}`) before the hashes are taken.

The data block escapes `<`, `>` and `&`; a Content-Security-Policy allows only the page's own script and style (by
hash) and requests to this origin, and no form submission anywhere (a page sends its changes with fetch); never
cached, never framed.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from functools import cached_property
from importlib import resources
from typing import Any

POLL_MS = 2000  # how often a page asks for its data again
# What each page's template shares, by its placeholder: files of this package.
SHARED = {"{{common_css}}": "templates/common.css", "{{common_js}}": "templates/common.js"}


class InlinePage:
    """One page: `package`'s `template` with the shared CSS and script, `{{poll_ms}}` and `{{data}}` filled in."""

    def __init__(self, package: str, template: str, *, referrer: str) -> None:
        self._package = package
        self._name = template
        self._referrer = referrer  # the Referrer-Policy

    def render(self, data: dict[str, Any]) -> str:
        """The page with `data` (what its JSON route answers) in its data block."""
        text = json.dumps(data, separators=(",", ":"))
        # Safe inside <script type="application/json">: no "</script>", no "<!--", no markup at all.
        text = text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
        return self._template.replace("{{data}}", text, 1)

    @cached_property
    def _template(self) -> str:
        text = resources.files(self._package).joinpath(self._name).read_text(encoding="utf-8")
        shared = resources.files("hubd.web")
        for placeholder, name in SHARED.items():
            text = text.replace(placeholder, shared.joinpath(name).read_text(encoding="utf-8").rstrip("\n"))
        return text.replace("{{poll_ms}}", str(POLL_MS))

    @cached_property
    def headers(self) -> dict[str, str]:
        """Never cached, never framed; only the template's own style and script run, and they fetch only from
        here."""
        page = self._template
        style = _hash(re.findall(r"<style>(.*?)</style>", page, re.DOTALL))
        script = _hash(re.findall(r"<script>(.*?)</script>", page, re.DOTALL))
        csp = (f"default-src 'none'; style-src {style}; script-src {script}; connect-src 'self'; "
               "img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
        return {"Cache-Control": "no-store", "Content-Security-Policy": csp, "X-Frame-Options": "DENY",
                "X-Content-Type-Options": "nosniff", "Referrer-Policy": self._referrer}


def _hash(blocks: list[str]) -> str:
    return " ".join(f"'sha256-{base64.b64encode(hashlib.sha256(b.encode()).digest()).decode()}'" for b in blocks)

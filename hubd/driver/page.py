"""The authorize page: server-rendered HTML from web/templates/authorize.html, no JavaScript.

Owns escaping and the page's security headers (a CSP that allows only the template's own style;
the callback origin in its form-action is safe because check_callback allows only plain host names).
"""

from __future__ import annotations

import base64
import hashlib
import html
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from string import Template


@dataclass(frozen=True, slots=True)
class LoginPage:
    """What one rendering of the page shows; every string is escaped when rendered."""

    hub_name: str
    callback_url: str | None = None  # None: the link is broken, show no form
    callback_host: str | None = None
    csrf: str = ""
    username: str = ""
    error: str | None = None


def render(page: LoginPage) -> str:
    """The HTML of the page."""
    e = _escape
    if page.callback_host:
        intro = (f'<p>Sign in with your hub account to let the app at <span class="where">{e(page.callback_host)}'
                 "</span> see and control the devices of this hub.</p>"
                 f'<p class="muted">After you sign in you go back to {e(page.callback_host)}.</p>')
    else:
        intro = ""
    error = f'<p class="error" role="alert">{e(page.error)}</p>' if page.error else ""
    form = ""
    if page.callback_url is not None:
        form = (
            '<form method="post">'
            f'<input type="hidden" name="csrf" value="{e(page.csrf)}">'
            f'<input type="hidden" name="callbackURL" value="{e(page.callback_url)}">'
            '<label for="username">Username</label>'
            f'<input id="username" name="username" type="text" value="{e(page.username)}" autocomplete="username"'
            ' autocapitalize="none" autocorrect="off" spellcheck="false" required>'
            '<label for="password">Password</label>'
            '<input id="password" name="password" type="password" autocomplete="current-password" required>'
            '<button type="submit">Sign in and link</button>'
            "</form>"
        )
    return _template().substitute(hub_name=e(page.hub_name), intro=intro, error=error, form=form)


def headers(form_target_origin: str | None) -> dict[str, str]:
    """Response headers of the page: never cached, never framed, only the template's own style."""
    # Chromium applies form-action to the redirect that follows the POST, so the callback's
    # origin must be allowed along with our own.
    form_action = "'self'" + (f" {form_target_origin}" if form_target_origin else "")
    csp = (f"default-src 'none'; style-src '{_style_hash()}'; form-action {form_action}; "
           "frame-ancestors 'none'; base-uri 'none'")
    return {
        "Cache-Control": "no-store",
        "Pragma": "no-cache",
        "Content-Security-Policy": csp,
        "X-Frame-Options": "DENY",
        "X-Content-Type-Options": "nosniff",
        # same-origin, not no-referrer: under no-referrer a browser sends `Origin: null` with the
        # form's POST, and the login then cannot tell our own form from another site's.
        "Referrer-Policy": "same-origin",
    }


def _escape(text: str) -> str:
    return html.escape(text, quote=True)


@cache
def _template() -> Template:
    text = resources.files("hubd.web").joinpath("templates/authorize.html").read_text(encoding="utf-8")
    return Template(text)


@cache
def _style_hash() -> str:
    match = re.search(r"<style>(.*?)</style>", _template().template, re.DOTALL)
    style = match.group(1) if match else ""
    return "sha256-" + base64.b64encode(hashlib.sha256(style.encode()).digest()).decode()

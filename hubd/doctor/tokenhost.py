"""The `token-host` check: a token request to `{platform.auth_url}/oauth/token` with hubd's client credentials
(as `platform.client_auth` sends them) and a refresh token that cannot exist. The platform authenticates the
client before it looks at the grant (RFC 6749 5.2), so `invalid_grant` proves the credentials were accepted and
`invalid_client` (401) says they were not. Its `Date` header is the `clock` check's reference.
"""

from __future__ import annotations

import json
import secrets
import ssl
import time
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Any

import aiohttp

from hubd import __version__
from hubd.cloud.client import client_credentials
from hubd.cloud.grantstate import REFRESH_MARGIN_S
from hubd.config.model import PlatformConfig
from hubd.doctor.report import Result, failed, not_checked, passed, warned

TOKEN_HOST = "token-host"  # noqa: S105 - a check name
CLOCK = "clock"
REQUEST_TIMEOUT_S = 10.0
# The Date header has whole seconds: within this, the clocks agree as far as it can tell.
CLOCK_WARN_S = 5.0
# A clock off by more than the margin hubd refreshes tokens by: once corrected (NTP at last, on a Pi without a
# real-time clock) every expiry time hubd holds moves by more than that margin, and tokens are used past their end.
CLOCK_FAIL_S = REFRESH_MARGIN_S
_DESCRIPTION_CHARS = 200


@dataclass(frozen=True, slots=True)
class ClockReading:
    """The token host's `Date` (None without one) and this machine's time halfway through the request."""

    server_time: float | None
    local_time: float
    round_trip_s: float


async def check_token_host(platform: PlatformConfig) -> tuple[Result, ClockReading | None]:
    """The token host answers, and accepts hubd's client credentials."""
    if not platform.auth_url:
        return warned(TOKEN_HOST, "platform.auth_url is not set: state reporting is off (hubd sends the platform "
                                  "nothing); set platform.auth_url, base_url, client_id and client_secret from the "
                                  "platform's console"), None
    if not platform.client_id or platform.client_secret is None:
        return not_checked(TOKEN_HOST, "platform.client_id or client_secret is not set"), None
    url = f"{platform.auth_url}/oauth/token"
    form = {"grant_type": "refresh_token", "refresh_token": f"hubd-doctor-{secrets.token_urlsafe(24)}"}
    headers, form = client_credentials(platform.client_auth, platform.client_id,
                                       platform.client_secret.get_secret_value(), form)
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    connector = aiohttp.TCPConnector(ssl=ssl.create_default_context())
    started = time.time()
    try:
        async with aiohttp.ClientSession(timeout=timeout, connector=connector,
                                         headers={"User-Agent": f"hubd-doctor/{__version__}"}) as session, \
                session.post(url, data=form, headers=headers, allow_redirects=False) as response:
            text = await response.text(errors="replace")
            status, date = response.status, response.headers.get("Date")
    except aiohttp.ClientConnectorCertificateError as err:
        return failed(TOKEN_HOST, f"{url}: its certificate is not valid here ({err.certificate_error}); if this "
                                  "machine's clock is wrong, set it right (`sudo timedatectl set-ntp true`)"), None
    except (aiohttp.ClientError, OSError) as err:
        return failed(TOKEN_HOST, f"cannot reach {url}: {type(err).__name__}: {err}; check platform.auth_url and "
                                  "this machine's internet connection"), None
    except TimeoutError:
        return failed(TOKEN_HOST, f"{url} did not answer within {REQUEST_TIMEOUT_S:.0f} s; check platform.auth_url "
                                  "and this machine's internet connection"), None
    ended = time.time()
    reading = ClockReading(_http_date(date), (started + ended) / 2, ended - started)
    return _verdict(url, status, text, platform), reading


def check_clock(reading: ClockReading | None, why_not: str) -> Result:
    """This machine's clock against the token host's `Date` header."""
    if reading is None:
        return not_checked(CLOCK, why_not)
    if reading.server_time is None:
        return warned(CLOCK, "the token host's answer has no Date header, so the clock was not compared; make sure "
                             "NTP keeps it right (`timedatectl` says `System clock synchronized: yes`)")
    # Date has whole seconds (rounded down): compare with the middle of its second.
    offset = reading.local_time - (reading.server_time + 0.5)
    size, way = abs(offset), "ahead of" if offset > 0 else "behind"
    fix = "turn NTP on: `sudo timedatectl set-ntp true` (and check `timedatectl`)"
    if size > CLOCK_FAIL_S:
        return failed(CLOCK, f"this machine's clock is {size:.0f} s {way} the token host's: more than the "
                             f"{CLOCK_FAIL_S:.0f} s hubd refreshes tokens by before they expire, and event times "
                             f"are wrong; {fix}")
    if size > CLOCK_WARN_S + reading.round_trip_s / 2:
        return warned(CLOCK, f"this machine's clock is {size:.0f} s {way} the token host's: the times in hubd's "
                             f"events are off by that much; {fix}")
    return passed(CLOCK, f"within {CLOCK_WARN_S:.0f} s of the token host's (its Date header)")


def _verdict(url: str, status: int, text: str, platform: PlatformConfig) -> Result:
    body = _json_object(text)
    error = body.get("error") if isinstance(body.get("error"), str) else None
    description = body.get("error_description") if isinstance(body.get("error_description"), str) else ""
    said = f"{status}{f' {error}' if error else ''}{f': {description[:_DESCRIPTION_CHARS]}' if description else ''}"
    other_auth = "body" if platform.client_auth == "basic" else "basic"
    if status == 400 and error == "invalid_grant":
        return passed(TOKEN_HOST, f"{url} accepted the client credentials ({platform.client_id}, "
                                  f"{platform.client_auth}): it refused only the made-up refresh token (invalid_grant)")
    if status == 401 or error == "invalid_client":
        return failed(TOKEN_HOST, f"{url} refused the client credentials ({said}): copy the clientId and "
                                  "clientSecret from the platform's console again into platform.client_id and "
                                  f"platform.client_secret (its file), or try platform.client_auth: {other_auth}")
    if status == 200:
        return failed(TOKEN_HOST, f"{url} issued tokens for a made-up refresh token: that is not the platform's "
                                  "token host; check platform.auth_url")
    if status == 404:
        return failed(TOKEN_HOST, f"{url} answered 404: no token endpoint there; platform.auth_url is the token "
                                  "host's base URL, without /oauth/token")
    if status == 429 or status >= 500:
        return failed(TOKEN_HOST, f"{url} answered {said}: the token host is in trouble; try again later")
    if error == "invalid_request":
        return failed(TOKEN_HOST, f"{url} found the request malformed ({said}): try platform.client_auth: "
                                  f"{other_auth}")
    return failed(TOKEN_HOST, f"{url} answered {said}, not the invalid_grant an accepted client gets: check "
                              "platform.auth_url, client_id, client_secret and client_auth")


def _json_object(text: str) -> dict[str, Any]:
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _http_date(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError):
        return None

"""The checks of the routes through `http.public_url`: `healthz` answered by *this* hubd (a random challenge
that only the holder of this database's secret answers, hubd/identity.py), `vendor-path` and `login-page`
reaching hubd, and `local-routes` refused there (403, 404 or 421; anything else means the proxy passes them).
Every request is harmless: a GET, or a directive without a token (answered with an ErrorResponse).
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from hubd import __version__
from hubd.config.model import HubdConfig
from hubd.doctor.report import Result, failed, passed, warned
from hubd.driver.urls import CallbackInvalid, authorize_url, callback_rules, check_callback
from hubd.identity import CHALLENGE_PARAM, new_challenge, proves

HEALTHZ = "healthz"
VENDOR_PATH = "vendor-path"
LOGIN_PAGE = "login-page"
LOCAL_ROUTES = "local-routes"
REQUEST_TIMEOUT_S = 10.0
REFUSALS = frozenset({403, 404, 421})
# A GET of each kind of local route: the webhook's route takes only POST, so a 405 shows that it is there.
LOCAL_PROBES = (("/", "/"), ("/api/devices", "/api/*"), ("/metrics", "/metrics"),
                ("/trigger/with/hubd-doctor-probe", "/trigger/with/*"))
PUBLIC_PATHS = "{vendor}, /driver/command, /oauth/authorize and /healthz"
_BAD_GATEWAY = frozenset({502, 503, 504})


@dataclass(frozen=True, slots=True)
class Answer:
    """One HTTP answer (or why there was none)."""

    status: int | None
    content_type: str = ""
    text: str = ""
    error: str = ""

    def json(self) -> dict[str, Any] | None:
        """The body as a JSON object, if it is one."""
        try:
            parsed = json.loads(self.text)
        except json.JSONDecodeError:
            return None
        return parsed if isinstance(parsed, dict) else None


class PublicRoutes:
    """Requests to the public URL, certificates verified unless the TLS check found them wanting."""

    def __init__(self, base_url: str, *, verify: bool) -> None:
        self.base_url = base_url
        self.verified = verify
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> PublicRoutes:
        connector = aiohttp.TCPConnector(ssl=ssl.create_default_context() if self.verified else False)
        self._session = aiohttp.ClientSession(connector=connector,
                                              timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S),
                                              headers={"User-Agent": f"hubd-doctor/{__version__}"})
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._session is not None:
            await self._session.close()

    @property
    def note(self) -> str:
        """What a result says when the certificate was not verified."""
        return "" if self.verified else " (certificate not verified: see the tls check)"

    async def request(self, method: str, path: str, *, params: Mapping[str, str] | None = None,
                      body: object = None) -> Answer:
        """One request, redirects not followed."""
        assert self._session is not None
        try:
            async with self._session.request(method, f"{self.base_url}{path}", params=params, json=body,
                                             allow_redirects=False) as response:
                return Answer(response.status, response.content_type, await response.text(errors="replace"))
        except TimeoutError:
            return Answer(None, error=f"no answer within {REQUEST_TIMEOUT_S:.0f} s")
        except (aiohttp.ClientError, OSError) as err:
            return Answer(None, error=f"{type(err).__name__}: {err}")


async def check_healthz(routes: PublicRoutes, secret: bytes | None, config: HubdConfig) -> Result:
    """`/healthz` there is answered by this installation (its challenge answer proves it) and says ready."""
    challenge = new_challenge()
    url = f"{routes.base_url}/healthz"
    answer = await routes.request("GET", "/healthz", params={CHALLENGE_PARAM: challenge})
    upstream = f"{config.http.host}:{config.http.port}"
    if answer.status is None:
        return failed(HEALTHZ, f"{url}: {answer.error}; is the proxy (or tunnel) running?")
    body = answer.json()
    if body is None or "status" not in body:
        if answer.status == 404:
            return failed(HEALTHZ, f"{url} answered 404, not hubd: the proxy does not pass /healthz to hubd; pass "
                                   f"{PUBLIC_PATHS.format(vendor=config.http.vendor_path)} to {upstream}")
        if answer.status in _BAD_GATEWAY:
            return failed(HEALTHZ, f"{url} answered {answer.status} from the proxy: it cannot reach hubd; is hubd "
                                   f"running, and does the proxy forward to http.host:http.port ({upstream})?")
        return failed(HEALTHZ, f"{url} answered {answer.status}, not as hubd does: another server answers at the "
                               "public URL; point the DNS record, the port forward or the proxy at this hubd")
    identity = body.get("identity")
    if identity is None:
        return failed(HEALTHZ, f"{url} answered without the answer to the doctor's challenge: not this hubd (another "
                               "server, or a hubd older than this doctor: restart hubd after an upgrade); point the "
                               f"DNS record, the port forward or the proxy at this hubd ({upstream})")
    if secret is None:
        return warned(HEALTHZ, f"{url} answered the challenge, but this database holds no secret to check the answer "
                               "against (see the database check)")
    if not proves(secret, challenge, identity):
        return failed(HEALTHZ, f"{url} is answered by another hubd (its answer to the challenge is not this "
                               "database's): the public URL reaches another installation; check the DNS record, the "
                               f"port forward and the proxy's upstream (this hubd listens on {upstream})")
    if answer.status != 200:
        not_ready = body.get("not_ready")
        why = "; ".join(str(x) for x in not_ready) if isinstance(not_ready, list) else f"HTTP {answer.status}"
        return warned(HEALTHZ, f"answered by this hubd (challenge proven), but it is not ready: {why}{routes.note}")
    return passed(HEALTHZ, f"{url} is answered by this hubd (challenge proven), ready{routes.note}")


async def check_vendor_path(routes: PublicRoutes, config: HubdConfig) -> Result:
    """A directive without a token, POSTed where the platform sends directives, gets hubd's ErrorResponse."""
    path = config.http.vendor_path
    url = f"{routes.base_url}{path}"
    answer = await routes.request("POST", path, body={})
    body = answer.json() if answer.status == 200 else None
    header = body.get("header") if body is not None else None
    if isinstance(header, dict) and header.get("name") == "ErrorResponse":
        return passed(VENDOR_PATH, f"POST {url} reaches hubd's directive endpoint{routes.note}")
    public = PUBLIC_PATHS.format(vendor=path)
    if answer.status is None:
        return failed(VENDOR_PATH, f"POST {url}: {answer.error}")
    if answer.status in REFUSALS and await forwards_to_local_port(routes, config):
        return failed(VENDOR_PATH, f"POST {url} answered {answer.status}: {_to_local_port(config)}")
    if answer.status in REFUSALS or answer.status == 405:
        return failed(VENDOR_PATH, f"POST {url} answered {answer.status}: the proxy does not pass {path} to hubd, "
                                   "where the platform sends every directive; pass it (with POST), as the other "
                                   f"public paths: {public}")
    if answer.status in _BAD_GATEWAY:
        return failed(VENDOR_PATH, f"POST {url} answered {answer.status} from the proxy: it cannot reach hubd there")
    return failed(VENDOR_PATH, f"POST {url} answered {answer.status}, not hubd's directive reply: is http.vendor_path "
                               f"({path}) what the proxy forwards, and to {config.http.host}:{config.http.port}?")


async def check_login_page(routes: PublicRoutes, config: HubdConfig) -> Result:
    """The login page (what the phone opens to link the hub) is served there, with its form."""
    callback = sample_callback(config)
    url = authorize_url(routes.base_url, callback) if callback else f"{routes.base_url}/oauth/authorize"
    parts = urlsplit(url)
    answer = await routes.request("GET", parts.path + (f"?{parts.query}" if parts.query else ""))
    shown = f"{routes.base_url}/oauth/authorize"
    if answer.status is None:
        return failed(LOGIN_PAGE, f"{shown}: {answer.error}")
    html = answer.content_type == "text/html"
    if answer.status == 200 and html and 'name="password"' in answer.text:
        return passed(LOGIN_PAGE, f"{shown} shows hubd's login form{routes.note}")
    if answer.status == 400 and html and callback is None:
        return passed(LOGIN_PAGE, f"{shown} answers with hubd's page (no callbackURL allowed by "
                                  f"driver.callback_hosts to try the form with){routes.note}")
    if answer.status == 400 and html:
        return failed(LOGIN_PAGE, f"{shown} lost the callbackURL on the way (hubd answered 400 to a callbackURL it "
                                  "allows): make the proxy pass the query string unchanged")
    if answer.status in REFUSALS and await forwards_to_local_port(routes, config):
        return failed(LOGIN_PAGE, f"{shown} answered {answer.status}: {_to_local_port(config)}")
    if answer.status in REFUSALS or answer.status == 405:
        return failed(LOGIN_PAGE, f"{shown} answered {answer.status}: the proxy does not pass /oauth/authorize to "
                                  "hubd (GET and POST); it is the page your phone opens to link the hub")
    return failed(LOGIN_PAGE, f"{shown} answered {answer.status}, not hubd's login page")


async def check_local_routes(routes: PublicRoutes, config: HubdConfig) -> Result:
    """The status page, /api/*, /metrics and the webhook are refused through the public URL."""
    seen: list[tuple[str, int | None]] = []
    for path, name in LOCAL_PROBES:
        seen.append((name, (await routes.request("GET", path)).status))
    exposed = [(name, status) for name, status in seen if status is not None and status not in REFUSALS]
    listed = ", ".join(f"{name} ({status if status is not None else 'no answer'})" for name, status in seen)
    if not exposed:
        return passed(LOCAL_ROUTES, f"refused through {routes.base_url}: {listed}{routes.note}")
    public = PUBLIC_PATHS.format(vendor=config.http.vendor_path)
    shown = ", ".join(f"{name} ({status})" for name, status in exposed)
    if config.http.local_port is None:
        fix = ("set http.local_port (hubd then serves them only on a listener of their own), and make the proxy "
               f"pass only {public}")
    else:
        fix = (f"hubd serves them only on http.local_port ({config.http.local_port}): make the proxy forward to "
               f"http.port ({config.http.port}), and only {public}")
    return failed(LOCAL_ROUTES, f"reachable through {routes.base_url}: {shown}; they show and control the house "
                                f"without a login; {fix}{routes.note}")


async def forwards_to_local_port(routes: PublicRoutes, config: HubdConfig) -> bool:
    """Whether the proxy forwards to http.local_port (the status API answers there) instead of http.port."""
    if config.http.local_port is None:
        return False
    status = (await routes.request("GET", "/api/devices")).status
    return status is not None and status not in REFUSALS


def _to_local_port(config: HubdConfig) -> str:
    return (f"the proxy forwards to http.local_port ({config.http.local_port}), which serves only the local routes "
            f"(the status page, /api/*): make it forward to http.port ({config.http.port}) instead")


def sample_callback(config: HubdConfig) -> str | None:
    """A callbackURL the driver allows (to see the login form as the phone would), or None if none can be made."""
    rules, _ = callback_rules(config.driver.callback_hosts, auth_url=config.platform.auth_url, mode=config.driver.mode)
    candidates: list[str] = []
    for rule in rules.hosts:
        scheme = rule.scheme or "https"
        host = f"[{rule.host}]" if ":" in rule.host else rule.host
        candidates.append(f"{scheme}://{host}{f':{rule.port}' if rule.port else ''}/hubd-doctor")
    if rules.any_host and config.platform.auth_url:
        auth = urlsplit(config.platform.auth_url)
        candidates.append(f"https://{auth.netloc}/hubd-doctor")
    if rules.any_loopback:
        candidates.append("http://127.0.0.1/hubd-doctor")
    for candidate in candidates:
        try:
            check_callback(candidate, rules)
        except CallbackInvalid:
            continue
        return candidate
    return None

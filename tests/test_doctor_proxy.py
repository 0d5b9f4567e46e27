"""`hubd doctor` through a real TLS reverse proxy: Caddy on a free loopback port with a certificate from a private
CA made here (the doctor trusts it through SSL_CERT_FILE), in front of a real hubd (the shared rig), with each fault
of the chain injected in turn. Each test asserts the whole report: the one check that FAILs (or WARNs) and that
every other one PASSes (`dns` WARNs throughout: `localhost` resolves to loopback, which the platform cannot reach).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from hubd_proc import free_port
from mosquitto import Mosquitto
from proxy_helpers import (
    Caddy,
    DoctorRun,
    PrivateCA,
    docs_caddyfile,
    docs_expected_output,
    for_test,
    run_doctor,
    start_with_private_secrets,
)
from rig import Rig

from hubd.doctor.run import CHECKS

DAY_S = 86400.0
CADDY_HEADING = "Caddy with a port forward"
# Every check and its verdict for a chain set up as docs/reverse-proxy.md shows, here on localhost, with mosquitto
# set up as the install docs say (systemd/mosquitto-hubd.conf in its conf.d).
ALL_PASS = {check: "PASS" for check in CHECKS} | {"dns": "WARN"}
DROP_IN = Path(__file__).resolve().parents[1] / "systemd" / "mosquitto-hubd.conf"


@pytest.fixture
def mosquitto(make_mosquitto: Callable[..., Mosquitto]) -> Mosquitto:
    """The broker as the install docs set it up: hubd's drop-in included."""
    return make_mosquitto(drop_in=DROP_IN)


@pytest.fixture
def ca(tmp_path: Path) -> PrivateCA:
    return PrivateCA(tmp_path / "ca")


@pytest.fixture
async def proxies(tmp_path: Path) -> AsyncIterator[Callable[..., Caddy]]:
    """Factory for Caddy proxies (not started); all stopped at teardown. Without Caddy: a skip naming the package
    on a developer's machine, a failure in CI (`CI` set), where .ci/run installs it."""
    if shutil.which("caddy") is None:
        if os.environ.get("CI"):
            pytest.fail("caddy is not installed: .ci/run installs it, so CI must run these tests", pytrace=False)
        pytest.skip("needs Debian's caddy as the reverse proxy (sudo apt-get install caddy)")
    made: list[Caddy] = []

    def make(port: int | None = None) -> Caddy:
        made.append(Caddy(tmp_path / f"caddy{len(made)}", port))
        return made[-1]

    yield make
    for caddy in made:
        caddy.stop()


def hub_behind(port: int, **http: Any) -> dict[str, Any]:
    """hubd's overrides for a proxy at https://localhost:<port>, as docs/reverse-proxy.md configures it."""
    return {"http": {"public_url": f"https://localhost:{port}", "trusted_proxies": ["127.0.0.1"],
                     "local_port": free_port(), **http}}


async def chain(make_rig: Callable[..., Any], proxies: Callable[..., Caddy], ca: PrivateCA, *,
                caddyfile: str | None = None, cert_days: tuple[float, float] = (-1, 90), cert_name: str = "localhost",
                http: dict[str, Any] | None = None, platform: dict[str, Any] | None = None) -> tuple[Rig, Caddy]:
    """A hub behind Caddy (the docs' Caddyfile unless one is given), with a certificate for `cert_name`."""
    caddy = proxies()
    overrides = hub_behind(caddy.port, **(http or {}))
    if platform:
        overrides["platform"] = platform
    rig = await make_rig(hub_overrides=overrides, start=start_with_private_secrets)
    cert = ca.issue(cert_name, not_before_s=cert_days[0] * DAY_S, not_after_s=cert_days[1] * DAY_S)
    await caddy.start(for_test(caddyfile or docs_caddyfile(), name=caddy.name, hub=rig.hub, cert=cert))
    return rig, caddy


async def doctor(rig: Rig, ca: PrivateCA) -> DoctorRun:
    return await run_doctor(rig.hub.config_path, ca_file=ca.ca_file)


def assert_report(run: DoctorRun, **changed: str) -> None:
    """Every check in order, each PASS but `changed` (check -> verdict; dns WARN unless said)."""
    expected = ALL_PASS | {check.replace("_", "-"): verdict for check, verdict in changed.items()}
    assert list(run.verdicts) == list(CHECKS), run
    assert run.verdicts == expected, run
    assert run.code == (1 if "FAIL" in expected.values() else 0), run


async def test_a_chain_set_up_as_the_docs_show_passes_and_prints_what_the_docs_show(
        make_rig: Callable[..., Any], proxies: Callable[..., Caddy], ca: PrivateCA) -> None:
    rig, _ = await chain(make_rig, proxies, ca)
    run = await doctor(rig, ca)
    assert_report(run)
    assert "is answered by this hubd (challenge proven), ready" in run.line("healthz"), run
    assert "hubd is online there" in run.line("mqtt"), run
    assert "accepted the client credentials" in run.line("token-host"), run
    # The docs show a name that resolves to a public address; here localhost resolves to loopback.
    shown = [(verdict, check) for verdict, check in docs_expected_output(CADDY_HEADING) if check != "dns"]
    assert shown == [(verdict, check) for check, verdict in run.verdicts.items() if check != "dns"]


async def test_a_certificate_for_another_name_fails_tls_and_the_routes_are_still_checked(
        make_rig: Callable[..., Any], proxies: Callable[..., Caddy], ca: PrivateCA) -> None:
    rig, _ = await chain(make_rig, proxies, ca, cert_name="hub.example.net")
    run = await doctor(rig, ca)
    assert_report(run, tls="FAIL")
    assert "the certificate is for hub.example.net, not localhost" in run.line("tls"), run
    for check in ("healthz", "vendor-path", "login-page", "local-routes"):
        assert "certificate not verified" in run.line(check), run


async def test_a_proxy_forwarding_to_the_local_port_is_told_to_forward_to_http_port(
        make_rig: Callable[..., Any], proxies: Callable[..., Caddy], ca: PrivateCA) -> None:
    local_port = free_port()
    caddyfile = f"hub.example.com {{\n\treverse_proxy 127.0.0.1:{local_port}\n}}"
    rig, _ = await chain(make_rig, proxies, ca, caddyfile=caddyfile, http={"local_port": local_port})
    run = await doctor(rig, ca)
    for check in ("vendor-path", "login-page"):
        line = run.line(check)
        assert f"the proxy forwards to http.local_port ({local_port})" in line, run
        assert f"forward to http.port ({rig.hub.http_port}) instead" in line, run
        assert "does not pass" not in line, run


async def test_an_expired_certificate_fails_tls(
        make_rig: Callable[..., Any], proxies: Callable[..., Caddy], ca: PrivateCA) -> None:
    rig, _ = await chain(make_rig, proxies, ca, cert_days=(-90, -1))
    run = await doctor(rig, ca)
    assert_report(run, tls="FAIL")
    assert "has expired: renew it" in run.line("tls"), run


async def test_a_certificate_that_expires_within_two_weeks_is_a_warning(
        make_rig: Callable[..., Any], proxies: Callable[..., Caddy], ca: PrivateCA) -> None:
    rig, _ = await chain(make_rig, proxies, ca, cert_days=(-80, 5))
    run = await doctor(rig, ca)
    assert_report(run, tls="WARN")
    assert "expires in 5 days" in run.line("tls"), run


async def test_a_proxy_that_drops_the_vendor_path_fails_vendor_path(
        make_rig: Callable[..., Any], proxies: Callable[..., Caddy], ca: PrivateCA) -> None:
    caddyfile = docs_caddyfile().replace("@public path /vendor ", "@public path ")
    assert caddyfile != docs_caddyfile()
    rig, _ = await chain(make_rig, proxies, ca, caddyfile=caddyfile)
    run = await doctor(rig, ca)
    assert_report(run, vendor_path="FAIL")
    assert "answered 404: the proxy does not pass /vendor to hubd" in run.line("vendor-path"), run


async def test_a_proxy_that_forwards_everything_to_a_hubd_without_local_port_fails_local_routes(
        make_rig: Callable[..., Any], proxies: Callable[..., Caddy], ca: PrivateCA) -> None:
    rig, _ = await chain(make_rig, proxies, ca, caddyfile="hub.example.com {\n\treverse_proxy 127.0.0.1:8080\n}",
                         http={"local_port": None})
    run = await doctor(rig, ca)
    assert_report(run, config="WARN", local_routes="FAIL")
    line = run.line("local-routes")
    assert "/ (200), /api/* (200), /metrics (200), /trigger/with/* (405)" in line, run
    assert "set http.local_port" in line, run
    assert "http.local_port is not set" in run.line("config"), run


async def test_a_public_url_that_reaches_another_hubd_fails_healthz(
        make_rig: Callable[..., Any], proxies: Callable[..., Caddy], ca: PrivateCA) -> None:
    caddy = proxies()
    rig = await make_rig(hub_overrides=hub_behind(caddy.port), start=start_with_private_secrets)
    # Another installation (its own database) at the same public URL: the proxy forwards to it.
    other = await make_rig(hub_overrides=hub_behind(caddy.port), start=start_with_private_secrets)
    await caddy.start(for_test(docs_caddyfile(), name=caddy.name, hub=other.hub, cert=ca.issue("localhost")))
    run = await doctor(rig, ca)
    assert_report(run, healthz="FAIL")
    assert "is answered by another hubd" in run.line("healthz"), run
    assert (await doctor(other, ca)).verdicts["healthz"] == "PASS"


async def test_a_wrong_client_secret_fails_token_host(
        make_rig: Callable[..., Any], proxies: Callable[..., Caddy], ca: PrivateCA) -> None:
    rig, _ = await chain(make_rig, proxies, ca, platform={"client_secret": "not-the-secret"})
    run = await doctor(rig, ca)
    assert_report(run, token_host="FAIL")
    assert "refused the client credentials (401 invalid_client" in run.line("token-host"), run


async def test_a_clock_off_by_more_than_the_refresh_margin_fails_clock(
        make_rig: Callable[..., Any], proxies: Callable[..., Caddy], ca: PrivateCA) -> None:
    rig, _ = await chain(make_rig, proxies, ca)
    rig.sim.set_clock_offset(-900.0)
    run = await doctor(rig, ca)
    assert_report(run, clock="FAIL")
    assert "clock is 900 s ahead of the token host's" in run.line("clock"), run
    rig.sim.set_clock_offset(30.0)
    run = await doctor(rig, ca)
    assert_report(run, clock="WARN")
    assert "30 s behind the token host's" in run.line("clock"), run

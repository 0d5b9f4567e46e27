"""The pure request helpers of hubd/web: the client address behind trusted proxies, bounded JSON bodies, the Host
values the local routes answer; the pages' shared style and script."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from importlib import resources

import pytest

from hubd.owner.routes import PAGE as DEVICES_PAGE
from hubd.status.routes import PAGE as STATUS_PAGE
from hubd.untrusted.depth import too_deep
from hubd.web.client_address import client_address, parse_trusted_proxies, throttle_key
from hubd.web.hosts import HostCheck
from hubd.web.jsonbody import JsonBodyInvalid, load_json
from hubd.web.page import InlinePage


@pytest.mark.parametrize(("peer", "headers", "proxies", "expected"), [
    # no trusted proxy: the header is the client's own word, and ignored
    ("192.0.2.7", ["203.0.113.1"], (), "192.0.2.7"),
    ("127.0.0.1", ["203.0.113.1"], (), "127.0.0.1"),
    # a peer that is not a trusted proxy: ignored too
    ("192.0.2.7", ["203.0.113.1"], ("127.0.0.1",), "192.0.2.7"),
    # through a trusted proxy: the hop it added, not what the client wrote in front of it
    ("127.0.0.1", ["203.0.113.1"], ("127.0.0.1",), "203.0.113.1"),
    ("127.0.0.1", ["6.6.6.6, 203.0.113.1"], ("127.0.0.1",), "203.0.113.1"),
    ("127.0.0.1", ["6.6.6.6", "203.0.113.1"], ("127.0.0.1",), "203.0.113.1"),
    # two trusted proxies in a row, by network
    ("10.0.0.2", ["203.0.113.1, 10.0.0.9"], ("10.0.0.0/24",), "203.0.113.1"),
    ("10.0.0.2", ["10.0.0.3, 10.0.0.9"], ("10.0.0.0/24",), "10.0.0.3"),
    # ports, brackets, IPv4-mapped IPv6
    ("::ffff:127.0.0.1", ["[2001:db8::1]:4711"], ("127.0.0.1",), "2001:db8::1"),
    ("127.0.0.1", ["203.0.113.1:5555"], ("127.0.0.1",), "203.0.113.1"),
    ("::1", ["2001:db8::2"], ("::1",), "2001:db8::2"),
    # a hop that is not an address stops at the proxy that passed it on
    ("127.0.0.1", ["unknown"], ("127.0.0.1",), "127.0.0.1"),
    ("127.0.0.1", ["203.0.113.1, _hidden, 10.0.0.5"], ("127.0.0.1", "10.0.0.0/8"), "10.0.0.5"),
    ("127.0.0.1", [], ("127.0.0.1",), "127.0.0.1"),
    (None, ["203.0.113.1"], ("127.0.0.1",), "unknown"),
])
def test_x_forwarded_for_names_the_client_only_through_trusted_proxies(
    peer: str | None, headers: list[str], proxies: tuple[str, ...], expected: str
) -> None:
    parsed, _ = parse_trusted_proxies(proxies)
    assert client_address(peer, headers, parsed) == expected


def test_bad_trusted_proxy_entries_name_the_key_and_the_fix() -> None:
    _, problems = parse_trusted_proxies(["127.0.0.1", "10.1.2.3/8", "proxy.lan", "::1/128"])
    assert problems == [
        "http.trusted_proxies[1]: '10.1.2.3/8' has host bits set; write the network as 10.0.0.0/8, or the proxy's "
        "address alone",
        "http.trusted_proxies[2]: 'proxy.lan' is not an IP address or network; give the proxy's address (e.g. "
        "127.0.0.1 or ::1) or its network (e.g. 10.0.0.0/24)"]


def test_ipv6_clients_are_throttled_by_their_64_block() -> None:
    assert throttle_key("2001:db8:1:2:aaaa::1") == throttle_key("2001:db8:1:2:bbbb::7") == "2001:db8:1:2::/64"
    assert throttle_key("2001:db8:1:3::1") != throttle_key("2001:db8:1:2::1")
    assert throttle_key("192.0.2.7") == "192.0.2.7"
    assert throttle_key("unknown") == "unknown"


@pytest.mark.parametrize(("raw", "words"), [
    (b"[" * 2000 + b"]" * 2000, "more than 32 levels deep"),
    (b'{"a": ' * 10_000, "more than 32 levels deep"),
    (b'{"a": "' + b"[" * 5000 + b'", "b": ' + b"[" * 33 + b"]" * 33 + b"}", "more than 32 levels deep"),
    (b'{"n": ' + b"9" * 5000 + b"}", "a number of more than 4300 digits"),
    (b"\xff\xfe{}", "not UTF-8 (byte 0)"),
    (b"{oops", "not valid JSON (Expecting property name enclosed in double quotes at line 1 column 2)"),
    (b"x" * 70_000, "70000 bytes, more than the 65536 allowed"),
])
def test_bodies_that_would_break_the_parser_are_refused_with_a_reason(raw: bytes, words: str) -> None:
    with pytest.raises(JsonBodyInvalid) as caught:
        load_json(raw, max_bytes=65536)
    assert words in str(caught.value)


def test_brackets_in_strings_do_not_count_and_unterminated_strings_stay_linear() -> None:
    body = {"text": "[[[[{{{{" * 100, "devices": {"isAll": True}, "deep": [[[[1]]]]}
    assert load_json(json.dumps(body).encode(), max_bytes=65536) == body
    assert load_json(b'\xef\xbb\xbf{"a": 1}', max_bytes=100) == {"a": 1}  # a byte order mark
    assert not too_deep(b'"\\"' * 20_000 + b"[" * 33, 32)  # inside one unterminated string: nothing counts
    assert too_deep(b"[" * 33, 32) and not too_deep(b"[" * 32 + b"]" * 32, 32)


@pytest.mark.parametrize("host", [
    "127.0.0.1", "127.0.0.1:8080", "192.168.1.20:80", "10.0.0.7", "[::1]", "[::1]:8081", "[fd00::2]:8080",
    "[fe80::1%25eth0]:8080", "::1", "localhost", "localhost:8080", "LOCALHOST.", "raspberrypi",
    "raspberrypi.local:8080", "Hub.Home.Arpa", "hub.home.arpa.:8080", "localhost:",
])
def test_ip_literals_localhost_and_the_hubs_names_are_its_hosts(host: str) -> None:
    check = HostCheck(["hub.home.arpa", "raspberrypi", "raspberrypi.local"])
    assert check.refusal([host]) is None


@pytest.mark.parametrize(("values", "why"), [
    (["attacker.example"], "'attacker.example' is neither an IP address, localhost, nor one of this hub's names"),
    (["attacker.example:8080"], "'attacker.example:8080' is neither an IP address"),
    (["hub.home.arpa.attacker.example"], "is neither an IP address"),
    (["localhost.attacker.example"], "is neither an IP address"),
    (["127.1"], "is neither an IP address"),  # what a browser would have made 127.0.0.1: no literal as sent
    (["0x7f000001"], "is neither an IP address"),
    (["[::1"], "'[::1' is not a host name or address with an optional port"),
    (["[attacker.example]:80"], "is not a host name or address"),
    (["127.0.0.1:8080:1"], "is not a host name or address"),
    (["localhost:http"], "is not a host name or address"),
    (["localhost:123456"], "is not a host name or address"),
    ([":8080"], "is not a host name or address"),
    ([""], "is not a host name or address"),
    ([], "the request has no Host header"),
    (["localhost", "attacker.example"], "the request has more than one Host header"),
    (["a" * 300], "'" + "a" * 99 + "…' is neither"),
])
def test_any_other_host_is_refused_with_the_reason(values: list[str], why: str) -> None:
    refusal = HostCheck(["hub.home.arpa"]).refusal(values)
    assert refusal is not None and why in refusal, refusal


@pytest.mark.parametrize("page", [STATUS_PAGE, DEVICES_PAGE], ids=["status", "devices"])
def test_a_page_carries_the_shared_style_and_script_in_its_own_and_its_csp_hashes_what_is_served(
        page: InlinePage) -> None:
    html = page.render({"devices": [], "unexported": []})
    assert "{{" not in html
    [style] = re.findall(r"<style>(.*?)</style>", html, re.DOTALL)
    [script] = re.findall(r"<script>(.*?)</script>", html, re.DOTALL)
    shared = resources.files("hubd.web").joinpath("templates")
    assert shared.joinpath("common.css").read_text(encoding="utf-8").strip() in style
    assert shared.joinpath("common.js").read_text(encoding="utf-8").strip() in script

    def digest(block: str) -> str:
        return f"'sha256-{base64.b64encode(hashlib.sha256(block.encode()).digest()).decode()}'"
    csp = page.headers["Content-Security-Policy"]
    assert f"style-src {digest(style)};" in csp and f"script-src {digest(script)};" in csp

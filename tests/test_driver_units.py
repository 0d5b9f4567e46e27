"""Pure parts of the driver: password hashes, sealing, callback URLs, login windows, token verdicts."""

from __future__ import annotations

import io

import pytest
from test_driver_support import FakeClock

from hubd.driver import passwords
from hubd.driver.limits import LoginLimiter, SlidingWindow
from hubd.driver.passwords import PasswordHashInvalid, check_hash, hash_password, is_hash, verify_password
from hubd.driver.seal import SealBroken, seal, unseal
from hubd.driver.store import TokenCheck, TokenStatus
from hubd.driver.urls import (
    CallbackInvalid,
    HostRule,
    add_params,
    authorize_url,
    check_callback,
    get_ci,
    parse_callback_hosts,
)
from hubd.driver.verdicts import VerdictCache
from hubd.errors import HubdError


def test_hash_format_and_verify() -> None:
    stored = hash_password("s3cret!")
    kind, n, r, p, salt, digest = stored.split("$")
    assert (kind, n, r, p) == ("scrypt", str(passwords.SCRYPT_N), "8", "1")
    assert len(salt) >= 20 and len(digest) >= 40
    assert is_hash(stored)
    assert verify_password(stored, "s3cret!")
    assert not verify_password(stored, "s3cret")
    assert hash_password("s3cret!") != stored  # salted


def test_hashes_with_other_parameters_keep_verifying() -> None:
    # the parameters live in the hash string, so changing SCRYPT_N never invalidates a config
    for n in (2**12, 2**13, 2**14):
        salt = b"0123456789abcdef"
        digest = passwords._scrypt("pw", salt, n, 8, 1, 32)
        stored = f"scrypt${n}$8$1${passwords._b64(salt)}${passwords._b64(digest)}"
        check_hash(stored)
        assert verify_password(stored, "pw") and not verify_password(stored, "pW")


def test_unicode_forms_of_one_password_match() -> None:
    stored = hash_password("caf\u00e9")
    assert verify_password(stored, "cafe\u0301")
    assert verify_password("caf\u00e9", "cafe\u0301")


def test_plain_text_compare() -> None:
    assert verify_password("plain", "plain")
    assert not verify_password("plain", "plain ")
    assert not is_hash("plain")


@pytest.mark.parametrize("bad", [
    "scrypt$x", "scrypt$16384$8$1$!!!$abc", "scrypt$1000$8$1$c2FsdHNhbHQ$" + "A" * 43,
    "scrypt$4194304$8$1$c2FsdHNhbHQ$" + "A" * 43, "scrypt$16384$8$1$c2E$" + "A" * 43,
])
def test_broken_hashes_are_reported(bad: str) -> None:
    with pytest.raises(PasswordHashInvalid):
        check_hash(bad)
    with pytest.raises(PasswordHashInvalid):
        verify_password(bad, "x")


def test_empty_password_cannot_be_hashed() -> None:
    with pytest.raises(HubdError):
        hash_password("")


def test_read_password_from_a_pipe(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("from pipe\n"))
    assert passwords.read_password() == "from pipe"
    monkeypatch.setattr("sys.stdin", io.StringIO(""))
    with pytest.raises(HubdError, match="no password"):
        passwords.read_password()


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_read_password_asks_twice_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("sys.stdin", _Tty())
    answers = iter(["one", "one"])
    monkeypatch.setattr("getpass.getpass", lambda prompt: next(answers))
    assert passwords.read_password() == "one"
    answers = iter(["one", "two"])
    with pytest.raises(HubdError, match="differ"):
        passwords.read_password()


def test_seal_round_trip_and_tamper() -> None:
    blob = seal("old-refresh-token", b"x" * 100)
    assert b"x" * 8 not in blob
    assert unseal("old-refresh-token", blob) == b"x" * 100
    with pytest.raises(SealBroken):
        unseal("another-token", blob)
    with pytest.raises(SealBroken):
        unseal("old-refresh-token", blob[:20] + bytes([blob[20] ^ 1]) + blob[21:])
    with pytest.raises(SealBroken):
        unseal("old-refresh-token", blob[:10])
    assert seal("k", b"same") != seal("k", b"same")  # fresh nonce each time


def test_authorize_url_matches_the_vendor_example() -> None:
    assert authorize_url("http://brand.example.com", "https://cdn.example.com/path?u=1&v=2") == (
        "http://brand.example.com/oauth/authorize?callbackURL=https%3A%2F%2Fcdn.example.com%2Fpath%3Fu%3D1%26v%3D2")


@pytest.mark.parametrize(("callback", "expected"), [
    ("https://h/p", "https://h/p?code=c"),
    ("https://h", "https://h?code=c"),
    ("https://h/p?", "https://h/p?code=c"),
    ("https://h/p?a=1&", "https://h/p?a=1&code=c"),
    ("https://h/p?a=1&b=%20x", "https://h/p?a=1&b=%20x&code=c"),
    ("https://h/p#f", "https://h/p?code=c#f"),
    ("https://h/p?a=1#f?g=1", "https://h/p?a=1&code=c#f?g=1"),
])
def test_add_params_keeps_the_callback(callback: str, expected: str) -> None:
    assert add_params(callback, {"code": "c"}) == expected


def test_add_params_encodes_values() -> None:
    assert add_params("https://h/p", {"userId": "a b&c"}) == "https://h/p?userId=a%20b%26c"


def rules(entries: list[str]) -> tuple[HostRule, ...]:
    parsed, problems = parse_callback_hosts(entries)
    assert problems == []
    return parsed


@pytest.mark.parametrize(("callback", "allowed"), [
    ("https://platform.example/cb", []),
    ("http://anything.example:8080/cb", []),
    ("HTTPS://Platform.Example/cb", ["platform.example"]),
    ("https://platform.example:443/cb", ["platform.example"]),
    ("https://platform.example:8443/cb", ["platform.example:8443"]),
    ("https://platform.example/cb", ["https://platform.example/"]),
    ("http://platform.example/cb", ["http://platform.example"]),
    ("http://platform.example:8080/cb", ["http://platform.example:8080"]),
    ("https://platform.example:8443/cb", ["https://platform.example:8443"]),
    ("http://[::1]:8080/cb", ["[::1]:8080"]),
    ("http://[::1]:8080/cb", ["[::1]"]),
    ("http://localhost:5000/cb", ["localhost"]),
    ("https://127.0.0.1:9/cb", ["127.0.0.1"]),
    ("http://127.0.0.1:9/cb", ["other.example", "127.0.0.1"]),
    ("https://xn--caf-dma.example/cb", ["XN--CAF-DMA.example"]),
])
def test_callbacks_accepted(callback: str, allowed: list[str]) -> None:
    check_callback(callback, rules(allowed))


@pytest.mark.parametrize(("callback", "allowed", "needle"), [
    ("", [], "empty"),
    ("data:text/html,hi", [], "http:// or https://"),
    ("https:///nohost", [], "no host"),
    ("https://a@platform.example/", [], "user name or password"),
    ("https://platform.example:99999/", [], "bad port"),
    ("https://platform.example/\u00e9", [], "non-ASCII character at position 26"),
    ("https://platform.example/?q=\u00e9t\u00e9", [], "non-ASCII character at position 29"),
    ("https://platform.example/" + "a" * 2100, [], "longer than"),
    ("https://[::1/x", [], "not a valid URL"),
    ("http://[zz]/x", [], "not a valid URL"),
    ("https://platform.example\\@evil.example/", [], "host"),
    ("https://platform.example\\evil/", [], "host"),
    ("https://platform.example;x/cb", [], "host"),
    ("https://platform.example,x/cb", [], "host"),
    ("https://it's.example/cb", [], "host"),
    ("https://platform_example/cb", [], "host"),
    ("https://platform.example.evil/cb", ["platform.example"], "driver.callback_hosts"),
    ("https://platform.example:8444/cb", ["platform.example:8443"], "driver.callback_hosts"),
    # a bare host: https on its default port only (http and any port only for loopback hosts)
    ("http://platform.example/cb", ["platform.example"], "driver.callback_hosts"),
    ("https://platform.example:8443/cb", ["platform.example"], "driver.callback_hosts"),
    # a scheme or port in the entry must match exactly
    ("http://platform.example/cb", ["https://platform.example/"], "driver.callback_hosts"),
    ("https://platform.example/cb", ["http://platform.example"], "driver.callback_hosts"),
    ("https://platform.example:8443/cb", ["https://platform.example"], "driver.callback_hosts"),
    ("http://platform.example:8443/cb", ["platform.example:8443"], "driver.callback_hosts"),
    ("http://[::1]:8081/cb", ["[::1]:8080"], "driver.callback_hosts"),
])
def test_callbacks_refused(callback: str, allowed: list[str], needle: str) -> None:
    with pytest.raises(CallbackInvalid) as caught:
        check_callback(callback, rules(allowed))
    assert needle in str(caught.value)


@pytest.mark.parametrize(("entry", "needle"), [
    ("", "empty"),
    ("ftp://platform.example", "http:// or https://"),
    ("https://platform.example/cb", "no path"),
    ("https://user@platform.example", "no path"),
    ("platform.example:http", "port"),
    ("platform example", "host"),
    ("https://[::1/", "host"),
])
def test_bad_callback_host_entries(entry: str, needle: str) -> None:
    parsed, problems = parse_callback_hosts(["platform.example", entry, "https://other.example:8443/"])
    assert [rule.host for rule in parsed] == ["platform.example", "other.example"]
    assert len(problems) == 1 and problems[0].startswith("driver.callback_hosts[1]: ")
    assert needle in problems[0]


def test_get_ci() -> None:
    assert get_ci({"CallbackUrl": "x"}, "callbackURL") == "x"
    assert get_ci({"callbackURL": "a", "callbackurl": "b"}, "callbackURL") == "a"
    assert get_ci({}, "callbackURL") is None


def test_sliding_window() -> None:
    window = SlidingWindow(3, 60)
    for t in (0, 10, 20):
        assert window.retry_after("k", t) == 0
        window.add("k", t)
    assert window.retry_after("k", 30) == 30  # the event at 0 leaves at 60
    assert window.retry_after("k", 60) == 0
    assert window.retry_after("other", 30) == 0


def test_sliding_window_bounds_its_memory() -> None:
    window = SlidingWindow(1, 60, max_keys=10)
    for i in range(100):
        window.add(f"k{i}", 0)
    assert len(window._events) <= 10
    assert window.retry_after("k99", 1) > 0


def test_login_limiter_keys() -> None:
    limiter = LoginLimiter(account_failures=2, address_failures=3, window_s=100)
    assert limiter.begin("Alice", "1.2.3.4", 0) == 0
    assert limiter.begin("alice ", "5.6.7.8", 0) == 0
    assert limiter.begin("ALICE", "9.9.9.9", 1) == 99  # refused: nothing counted
    assert limiter.retry_after("ALICE", "9.9.9.9", 1) == 99
    limiter.succeeded("alice", "5.6.7.8", 0)
    assert limiter.retry_after("alice", "9.9.9.9", 1) == 0
    assert limiter.begin("x", "1.2.3.4", 0) == 0
    assert limiter.begin("y", "1.2.3.4", 0) == 0
    assert limiter.retry_after("z", "1.2.3.4", 1) == 99


def test_a_right_password_takes_its_attempt_back_from_the_address() -> None:
    limiter = LoginLimiter(account_failures=5, address_failures=2, window_s=100)
    for t in range(10):
        assert limiter.begin("bob", "1.2.3.4", t) == 0
        limiter.succeeded("bob", "1.2.3.4", t)
    assert limiter.begin("a", "1.2.3.4", 10) == 0
    assert limiter.begin("b", "1.2.3.4", 11) == 0
    assert limiter.begin("c", "1.2.3.4", 12) == 98


def test_a_verdict_lasts_its_ttl_and_never_past_the_tokens_expiry() -> None:
    clock = FakeClock()
    cache = VerdictCache(clock, ttl_s=15)
    cache.record("tok", TokenCheck(TokenStatus.VALID, "alice", clock.now + 10), cache.generation)
    assert cache.recent("tok") == TokenCheck(TokenStatus.VALID, "alice", clock.now + 10)
    assert cache.recent("other") is None
    clock.advance(10)  # checked 10 s ago, and the token expired just now
    assert cache.recent("tok") == TokenCheck(TokenStatus.EXPIRED, "alice", clock.now)

    cache.record("long", TokenCheck(TokenStatus.VALID, "bob", clock.now + 3600), cache.generation)
    clock.advance(14.9)
    assert cache.recent("long") is not None
    clock.advance(0.1)
    assert cache.recent("long") is None


def test_a_revocation_forgets_every_verdict_and_checks_under_way() -> None:
    clock = FakeClock()
    cache = VerdictCache(clock)
    valid = TokenCheck(TokenStatus.VALID, "alice", clock.now + 3600)
    cache.record("tok", valid, cache.generation)
    before = cache.generation  # a check begins
    cache.invalidate()  # the driver revokes tokens meanwhile
    assert cache.recent("tok") is None
    cache.record("tok", valid, before)  # what the check found before the revocation is not kept
    assert cache.recent("tok") is None
    cache.record("tok", valid, cache.generation)
    assert cache.recent("tok") == valid
    cache.record("tok", TokenCheck(TokenStatus.UNKNOWN, None), cache.generation)
    assert cache.recent("tok") is None


def test_verdicts_are_bounded_and_keyed_by_hash() -> None:
    clock = FakeClock()
    cache = VerdictCache(clock, max_entries=2)
    for token in ("a", "b", "c"):
        cache.record(token, TokenCheck(TokenStatus.VALID, "alice", clock.now + 60), cache.generation)
    assert [cache.recent(t) is not None for t in ("a", "b", "c")] == [False, True, True]
    assert all(isinstance(k, bytes) and len(k) == 32 for k in cache._verdicts)  # SHA-256, never the token

"""Pure parts of the driver: password hashes, sealing, callback URLs, login throttles, token verdicts."""

from __future__ import annotations

import io

import pytest
from driver_helpers import FakeClock

from hubd.config.model import HubdConfig
from hubd.driver import passwords
from hubd.driver.limits import LoginLimiter
from hubd.driver.passwords import PasswordHashInvalid, check_hash, hash_password, is_hash, verify_password
from hubd.driver.policy import config_problems
from hubd.driver.seal import SealBroken, seal, unseal
from hubd.driver.urls import (
    CallbackInvalid,
    CallbackRules,
    add_params,
    authorize_url,
    callback_rules,
    check_callback,
    foreign_origin,
    get_ci,
    parse_callback_hosts,
)
from hubd.driver.verdicts import VerdictCache
from hubd.errors import HubdError
from hubd.ratelimit import CAP_S, FailureThrottle
from hubd.usertoken import TokenCheck, TokenStatus


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
    assert authorize_url("http://namespace.example.com", "https://cdn.example.com/path?u=1&v=2") == (
        "http://namespace.example.com/oauth/authorize?callbackURL=https%3A%2F%2Fcdn.example.com%2Fpath%3Fu%3D1%26v%3D2")


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


def rules(entries: list[str], auth_url: str | None = None, mode: str = "oauth2") -> CallbackRules:
    parsed, problems = callback_rules(entries, auth_url=auth_url, mode=mode)
    assert problems == []
    return parsed


@pytest.mark.parametrize(("callback", "allowed"), [
    ("https://platform.example/cb", ["*"]),
    ("http://127.0.0.1:8080/cb", ["*"]),
    ("HTTPS://Platform.Example/cb", ["platform.example"]),
    ("https://platform.example:443/cb", ["platform.example"]),
    ("https://platform.example:8443/cb", ["platform.example:8443"]),
    ("https://platform.example/cb", ["https://platform.example/"]),
    ("http://localhost:8080/cb", ["http://localhost:8080"]),
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
    ("", ["*"], "empty"),
    ("data:text/html,hi", ["*"], "http:// or https://"),
    ("https:///nohost", ["*"], "no host"),
    ("https://a@platform.example/", ["*"], "user name or password"),
    ("https://platform.example:99999/", ["*"], "bad port"),
    ("https://platform.example/\u00e9", ["*"], "non-ASCII character at position 26"),
    ("https://platform.example/?q=\u00e9t\u00e9", ["*"], "non-ASCII character at position 29"),
    ("https://platform.example/" + "a" * 2100, ["*"], "longer than"),
    ("https://[::1/x", ["*"], "not a valid URL"),
    ("http://[zz]/x", ["*"], "not a valid URL"),
    ("https://platform.example\\@evil.example/", ["*"], "host"),
    ("https://platform.example\\evil/", ["*"], "host"),
    ("https://platform.example;x/cb", ["*"], "host"),
    ("https://platform.example,x/cb", ["*"], "host"),
    ("https://it's.example/cb", ["*"], "host"),
    ("https://platform_example/cb", ["*"], "host"),
    # plain http only to this machine, even with "*"
    ("http://anything.example:8080/cb", ["*"], "plain http to another machine"),
    ("http://192.168.1.20/cb", ["*"], "plain http to another machine"),
    ("https://platform.example.evil/cb", ["platform.example"], "driver.callback_hosts"),
    ("https://platform.example:8444/cb", ["platform.example:8443"], "driver.callback_hosts"),
    # a bare host: https on its default port only (http and any port only for loopback hosts)
    ("http://platform.example/cb", ["platform.example"], "plain http to another machine"),
    ("https://platform.example:8443/cb", ["platform.example"], "driver.callback_hosts"),
    # a scheme or port in the entry must match exactly
    ("https://localhost/cb", ["http://localhost"], "driver.callback_hosts"),
    ("https://platform.example:8443/cb", ["https://platform.example"], "driver.callback_hosts"),
    ("http://[::1]:8081/cb", ["[::1]:8080"], "driver.callback_hosts"),
])
def test_callbacks_refused(callback: str, allowed: list[str], needle: str) -> None:
    with pytest.raises(CallbackInvalid) as caught:
        check_callback(callback, rules(allowed))
    assert needle in str(caught.value)


@pytest.mark.parametrize(("entry", "needle"), [
    ("", "empty"),
    ("http://platform.example", "write https://platform.example or the bare host"),
    ("http://10.0.0.5:8080/", "write https://10.0.0.5:8080 or the bare host"),
    ("ftp://platform.example", "http:// or https://"),
    ("https://platform.example/cb", "no path"),
    ("https://user@platform.example", "no path"),
    ("platform.example:http", "port"),
    ("platform.example:\u00b2", "bad port"),  # a digit to str.isdigit, not to int()
    ("platform.example:\u0668\u0664\u0664\u0663", "bad port"),  # 8443 in Arabic-Indic digits
    ("platform example", "host"),
    ("https://[::1/", "host"),
])
def test_bad_callback_host_entries(entry: str, needle: str) -> None:
    parsed, problems = parse_callback_hosts(["platform.example", entry, "https://other.example:8443/"])
    assert [rule.host for rule in parsed] == ["platform.example", "other.example"]
    assert len(problems) == 1 and problems[0].startswith("driver.callback_hosts[1]: ")
    assert needle in problems[0]


def test_check_config_reports_what_run_refuses() -> None:
    config = HubdConfig.model_validate({
        "http": {"trusted_proxies": ["::1", "10.0.0.1/8"]},
        "driver": {"callback_hosts": ["platform.example", "http://platform.example"],
                   "accounts": [{"username": "a", "password": "x"}, {"username": "a", "password": "y"}]},
    })
    assert [p.split(":")[0] for p in config_problems(config)] == [
        "driver.callback_hosts[1]", "http.trusted_proxies[1]", "driver.accounts[1].username"]
    assert config_problems(HubdConfig()) == []


@pytest.mark.parametrize(("claimed", "host", "shown"), [
    ("https://hub.example", "hub.example", None),  # a proxy ended the browser's https: hubd sees http
    ("http://hub.example:8080", "hub.example:8080", None),
    ("https://hub.example/devices?x=1", "hub.example", None),  # a Referer
    ("https://hub.example", "hub.example:8080", "https://hub.example:443"),
    ("https://evil.example", "hub.example", "https://evil.example:443"),
    ("http://[::1]:8443", "hub.example", "http://[::1]:8443"),
    ("null", "hub.example", "'null'"),
])
def test_an_origin_is_ours_when_it_names_the_host_the_request_was_sent_to_by_any_scheme(
        claimed: str, host: str, shown: str | None) -> None:
    assert foreign_origin(claimed, host) == shown


def test_the_public_urls_origin_is_ours_whatever_host_the_request_was_sent_to() -> None:
    public = ("https", "hub.example", 443)
    assert foreign_origin("https://hub.example", "192.168.1.20:8080", public) is None
    assert foreign_origin("https://evil.example", "192.168.1.20:8080", public) == "https://evil.example:443"


def test_get_ci() -> None:
    assert get_ci({"CallbackUrl": "x"}, "callbackURL") == "x"
    assert get_ci({"callbackURL": "a", "callbackurl": "b"}, "callbackURL") == "a"
    assert get_ci({}, "callbackURL") is None


@pytest.mark.parametrize(("auth_url", "allowed", "refused"), [
    ("https://api.platform.example", ["https://api.platform.example/cb"],
     ["https://evil.example/steal", "https://platform.example/cb", "https://api.platform.example:8443/cb"]),
    ("https://api.platform.example:8443", ["https://api.platform.example:8443/cb", "https://api.platform.example/cb"],
     ["https://evil.example/cb"]),
    ("http://127.0.0.1:9000", ["http://127.0.0.1:9000/cb", "http://127.0.0.1:1234/cb"],
     ["https://platform.example/cb", "http://localhost:9000/cb"]),
    (None, ["http://localhost:5000/cb", "https://127.0.0.1/cb", "http://[::1]:80/cb", "http://127.0.0.2:8/cb"],
     ["https://platform.example/cb", "https://evil.example/steal"]),
])
def test_unset_callback_hosts_allow_the_auth_url_host_or_only_loopback(
    auth_url: str | None, allowed: list[str], refused: list[str]
) -> None:
    for callback in allowed:
        check_callback(callback, rules([], auth_url))
    for callback in refused:
        with pytest.raises(CallbackInvalid, match=r"driver\.callback_hosts"):
            check_callback(callback, rules([], auth_url))


def test_the_refusal_says_where_the_default_came_from() -> None:
    with pytest.raises(CallbackInvalid) as caught:
        check_callback("https://evil.example/", rules([], "https://api.platform.example"))
    assert "not set: its default allows only api.platform.example, the host of platform.auth_url" in str(caught.value)
    with pytest.raises(CallbackInvalid) as caught:
        check_callback("https://evil.example/", rules([]))
    assert "without platform.auth_url its default allows only loopback hosts" in str(caught.value)


def test_a_star_with_other_hosts_is_a_problem() -> None:
    parsed, problems = callback_rules(["*", "platform.example"], auth_url=None, mode="oauth2")
    assert parsed.any_host
    assert problems == ['driver.callback_hosts: "*" allows any host, so the other entries mean nothing; give ["*"] '
                        'alone, or list the hosts without it']


@pytest.mark.parametrize(("mode", "callback"), [
    ("oauth2", "https://platform.example/cb?code=attacker"),
    ("oauth2", "https://platform.example/cb?a=1&Code=x"),
    ("oauth2", "https://platform.example/cb?a=1;code=x"),
    ("oauth2", "https://platform.example/cb?c%6Fde=x"),
    ("oauth2", "https://platform.example/cb?code"),
    ("oauth", "https://platform.example/cb?userId=mallory"),
    ("oauth", "https://platform.example/cb?x=1&userToken=t"),
    ("oauth", "https://platform.example/cb?expiresIn=1"),
    ("oauth", "https://platform.example/cb?refreshToken=1"),
])
def test_a_callback_that_already_carries_what_the_redirect_adds_is_refused(mode: str, callback: str) -> None:
    with pytest.raises(CallbackInvalid, match=r"already carries a '.*' parameter; this hub adds its own"):
        check_callback(callback, rules(["platform.example"], mode=mode))


@pytest.mark.parametrize(("mode", "callback"), [
    ("oauth2", "https://platform.example/cb?userId=1&state=code"),
    ("oauth2", "https://platform.example/cb?codes=1#code=2"),
    ("oauth", "https://platform.example/cb?code=1"),
])
def test_other_parameters_are_fine(mode: str, callback: str) -> None:
    check_callback(callback, rules(["platform.example"], mode=mode))


def test_a_throttle_lets_a_few_failures_pass_then_doubles_the_wait_up_to_the_cap() -> None:
    throttle = FailureThrottle(free=3, first_delay_s=1, cap_s=10, forget_s=100)
    waits = []
    for t in range(8):
        assert throttle.wait("k", t * 20) == 0
        throttle.fail("k", t * 20)
        waits.append(throttle.wait("k", t * 20))
    assert waits == [0, 0, 1, 2, 4, 8, 10, 10]
    assert throttle.wait("other", 140) == 0
    assert throttle.wait("k", 145) == 5
    assert throttle.failures("k", 239) == 8
    assert throttle.failures("k", 240) == 0  # forgotten forget_s after the last failure


def test_a_throttle_takes_back_and_never_waits_longer_than_its_delay_when_the_clock_goes_back() -> None:
    throttle = FailureThrottle(free=1, first_delay_s=4, cap_s=100)
    throttle.fail("k", 1000)
    assert throttle.wait("k", 1000) == 4
    assert throttle.wait("k", 10) == 4  # the clock was set back by 990 s
    throttle.take_back("k")
    assert throttle.wait("k", 1000) == 0 and len(throttle) == 0


def test_a_flood_of_made_up_keys_does_not_push_out_a_key_being_guessed_hard() -> None:
    throttle = FailureThrottle(free=1, max_keys=10)
    for t in range(5):
        throttle.fail("target", t)
    for i in range(100):
        throttle.fail(f"junk{i}", 10 + i)
    assert len(throttle) <= 10
    assert throttle.failures("target", 200) == 5


def test_login_limiter_throttles_each_source_and_the_account_for_strangers() -> None:
    limiter = LoginLimiter(source_free=2, account_free=3, cap_s=100)
    assert limiter.begin("Alice", "1.2.3.4", None, 0).wait_s == 0
    assert limiter.begin("alice ", "1.2.3.4", None, 0).wait_s == 0
    assert limiter.begin("ALICE", "1.2.3.4", None, 0).wait_s == 1  # the source: nothing counted
    assert limiter.begin("alice", "5.6.7.8", None, 0).wait_s == 0  # the account's third
    assert limiter.begin("alice", "9.9.9.9", None, 0).wait_s == 1  # the account waits for strangers
    assert limiter.begin("bob", "1.2.3.4", None, 0).wait_s == 0  # another account at the same address


def test_a_trusted_address_or_device_passes_the_accounts_throttle() -> None:
    limiter = LoginLimiter(source_free=2, account_free=2, cap_s=100)
    limiter.succeeded(limiter.begin("alice", "10.0.0.2", None, 0), 0)  # the owner signs in at home
    for t in range(50):  # a guesser elsewhere makes the account wait for every stranger
        limiter.begin("alice", "203.0.113.9", None, t)
    assert limiter.begin("alice", "198.51.100.1", None, 60).wait_s > 0
    owner = limiter.begin("alice", "10.0.0.2", None, 60)  # but not for the owner's address
    assert owner.wait_s == 0 and not owner.counted_on_account
    assert limiter.begin("alice", "198.51.100.1", "device-1", 60).wait_s == 0  # nor for a device cookie
    limiter.succeeded(owner, 61)
    assert limiter.begin("alice", "203.0.113.9", None, 61).wait_s > 0  # the guesser still waits


def test_a_right_password_takes_its_attempt_back_from_the_account() -> None:
    limiter = LoginLimiter(source_free=5, account_free=2, cap_s=100)
    for t in range(10):
        attempt = limiter.begin("bob", f"192.0.2.{t}", None, t)
        assert attempt.wait_s == 0
        limiter.succeeded(attempt, t)
    assert limiter.begin("bob", "192.0.2.100", None, 10).wait_s == 0
    assert limiter.begin("bob", "192.0.2.101", None, 10).wait_s == 0
    assert limiter.begin("bob", "192.0.2.102", None, 10).wait_s == 1


def test_a_guesser_gets_about_four_tries_an_hour_from_one_address_or_a_thousand() -> None:
    """The figures in README: a guesser who tries again the moment it may (17 and 109, 22 and 114 when written)."""
    def guesses(hours: float, addresses: int) -> int:
        limiter = LoginLimiter()
        now, made = 0.0, 0
        while now < hours * 3600:
            attempts = [limiter.begin("alice", f"a{i}", None, now) for i in range(addresses)]
            made += sum(1 for a in attempts if a.wait_s == 0)
            now += max(1.0, min(a.wait_s for a in attempts))
        return made

    for addresses in (1, 1000):
        assert guesses(1, addresses) <= 25
        assert guesses(24, addresses) <= 24 * 3600 / CAP_S + 25


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

"""`hubd doctor` beside a running hubd, without a proxy: the `/healthz` identity proof, the database checks on
real SQLite files (hubd's write lock held, a corrupt index, an older schema), the broker check keeping hubd's
session, the token host telling a bad secret from an unknown grant, a plain-http public URL on loopback, a config
that does not load, and each line printed as soon as its check is done. The checks through a real TLS proxy are
in test_doctor_proxy.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import paho.mqtt.client as paho
import pytest
from hubd_proc import REPO, HubdProcess, free_port
from mosquitto import Mosquitto, mosquitto_binary
from paho.mqtt.enums import CallbackAPIVersion
from proxy_helpers import run_doctor, start_with_private_secrets
from pydantic import SecretStr

from hubd.config.model import HubdConfig, PlatformConfig, StorageConfig
from hubd.doctor.address import PublicAddress
from hubd.doctor.broker import MQTT, check_broker, doctor_client_id
from hubd.doctor.database import DATABASE_WRITE, check_database, check_database_write
from hubd.doctor.mosquitto import check_broker_limits
from hubd.doctor.run import CHECKS
from hubd.doctor.tls import check_tls
from hubd.doctor.tokenhost import check_token_host
from hubd.identity import new_challenge, proves
from hubd.store.db import Database, migrations
from hubd.store.identity import read_instance_secret_blocking
from simulators.platform import PlatformSimulator


def instance_secret(db_path: Path) -> bytes:
    conn = sqlite3.connect(f"{db_path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        secret = read_instance_secret_blocking(conn)
    finally:
        conn.close()
    assert secret is not None and len(secret) == 32
    return secret


def new_database(path: Path) -> StorageConfig:
    storage = StorageConfig(path=path)
    Database.of(storage).call_blocking(lambda conn: None)
    return storage


async def test_healthz_answers_a_challenge_with_this_installations_proof(make_rig: Callable[..., Any]) -> None:
    rig = await make_rig()
    secret = instance_secret(rig.hub.workdir / "hubd.db")
    challenge = new_challenge()
    status, body = await rig.hub.get(f"/healthz?challenge={challenge}")
    assert status == 200 and body["status"] == "ok"
    assert proves(secret, challenge, body["identity"])
    assert not proves(secret, new_challenge(), body["identity"])  # an answer is good for its challenge only
    assert secret.hex() not in str(body)
    status, body = await rig.hub.get("/healthz")
    assert status == 200 and "identity" not in body  # the readiness answer as before
    status, body = await rig.hub.get("/healthz?challenge=short")
    assert status == 400 and body["details"][0]["path"] == "challenge", body


async def test_every_installation_has_a_secret_of_its_own(tmp_path: Path) -> None:
    first, second = new_database(tmp_path / "a.db"), new_database(tmp_path / "b.db")
    assert instance_secret(first.path) != instance_secret(second.path)


async def test_the_doctor_beside_a_running_hubd_leaves_its_mqtt_session_alone(make_rig: Callable[..., Any]) -> None:
    rig = await make_rig(start=start_with_private_secrets)
    assert await rig.hub.metric("hubd_mqtt_connects_total") == 1
    run = await run_doctor(rig.hub.config_path)
    assert run.verdicts[MQTT] == "PASS" and "hubd is online there" in run.line(MQTT), run
    assert run.verdicts["database"] == run.verdicts[DATABASE_WRITE] == "PASS", run
    # Had the doctor connected with hubd's client id, the broker would have dropped hubd's connection.
    status, body = await rig.hub.get("/healthz")
    assert status == 200, body
    assert await rig.hub.metric("hubd_mqtt_connects_total") == 1
    client_id = rig.hub.config["mqtt"]["client_id"]
    assert doctor_client_id(client_id) != client_id and len(doctor_client_id("x" * 23)) <= 23


async def test_the_broker_check_fails_when_no_broker_answers(mosquitto: Mosquitto) -> None:
    from hubd.config.model import MqttConfig

    result = await check_broker(MqttConfig(host="127.0.0.1", port=free_port()))
    assert result.verdict.value == "FAIL" and "cannot connect to 127.0.0.1" in result.detail, result
    result = await check_broker(MqttConfig(host="127.0.0.1", port=mosquitto.port))
    assert result.verdict.value == "WARN" and "holds no status" in result.detail, result  # no hubd on this one


def test_the_database_check_finds_a_corrupt_index(tmp_path: Path) -> None:
    storage = new_database(tmp_path / "hubd.db")
    assert check_database(storage)[0].verdict.value == "PASS"
    conn = sqlite3.connect(storage.path)
    conn.execute("CREATE TABLE filler (id INTEGER PRIMARY KEY, v TEXT)")
    conn.execute("CREATE INDEX filler_v ON filler (v)")
    conn.executemany("INSERT INTO filler (v) VALUES (?)", [(f"value-{i}",) for i in range(5)])
    conn.commit()
    # The index's entries hold `v`, but the schema now says it indexes `id`: what a torn write can leave.
    conn.execute("PRAGMA writable_schema=ON")
    conn.execute("UPDATE sqlite_master SET sql = 'CREATE INDEX filler_v ON filler (id)' WHERE name = 'filler_v'")
    conn.commit()
    conn.close()
    result, _ = check_database(storage)
    assert result.verdict.value == "FAIL", result
    assert "integrity_check found 5 problem(s)" in result.detail and "missing from index filler_v" in result.detail


def test_the_database_checks_name_a_missing_file_and_an_older_schema(tmp_path: Path) -> None:
    missing = StorageConfig(path=tmp_path / "nowhere.db")
    assert "does not exist" in check_database(missing)[0].detail
    assert check_database_write(missing).verdict.value == "FAIL"
    assert not missing.path.exists()  # the doctor never creates the database
    storage = new_database(tmp_path / "hubd.db")
    conn = sqlite3.connect(storage.path)
    latest = len(migrations())
    conn.execute(f"PRAGMA user_version = {latest - 1}")  # as a hubd one release older left it
    conn.commit()
    conn.close()
    result, _ = check_database(storage)
    assert result.verdict.value == "WARN", result
    assert f"schema version {latest - 1}, older than this hubd's ({latest})" in result.detail, result


def test_the_write_check_waits_for_hubds_write_lock_then_warns_without_writing(tmp_path: Path) -> None:
    storage = new_database(tmp_path / "hubd.db")
    holder = sqlite3.connect(storage.path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # as hubd during a long write
    try:
        result = check_database_write(storage)
        assert result.verdict.value == "WARN" and "held the write lock" in result.detail, result
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    before = storage.path.read_bytes()
    assert check_database_write(storage).verdict.value == "PASS"
    assert storage.path.read_bytes() == before


async def test_the_token_host_check_tells_a_bad_secret_from_an_unknown_grant() -> None:
    async with PlatformSimulator(client_id="cid", client_secret="Q9-good-secret", client_auth="basic") as sim:
        good = PlatformConfig(auth_url=sim.url, client_id="cid", client_secret=SecretStr("Q9-good-secret"))
        result, reading = await check_token_host(good)
        assert result.verdict.value == "PASS" and "invalid_grant" in result.detail, result
        assert reading is not None and reading.server_time is not None
        assert [(r.grant_type, r.status, r.error) for r in sim.token_requests] == [
            ("refresh_token", 400, "invalid_grant")]
        bad = PlatformConfig(auth_url=sim.url, client_id="cid", client_secret=SecretStr("Z7-bad-secret"))
        result, _ = await check_token_host(bad)
        assert result.verdict.value == "FAIL" and "refused the client credentials (401 invalid_client" in \
            result.detail, result
        assert "Q9-good" not in result.detail and "Z7-bad" not in result.detail  # never a secret
        in_body = PlatformConfig(auth_url=sim.url, client_id="cid", client_secret=SecretStr("Q9-good-secret"),
                                 client_auth="body")
        result, _ = await check_token_host(in_body)
        assert result.verdict.value == "FAIL" and "try platform.client_auth: basic" in result.detail, result
        wrong_host = PlatformConfig(auth_url=f"{sim.url}/elsewhere", client_id="cid",
                                    client_secret=SecretStr("Q9-good-secret"))
        result, _ = await check_token_host(wrong_host)
        assert result.verdict.value == "FAIL" and "answered 404" in result.detail, result


async def test_plain_http_is_a_warning_on_loopback_and_a_failure_elsewhere(make_rig: Callable[..., Any]) -> None:
    def public_url_is_hubd_itself(hub: HubdProcess) -> None:
        hub.config["http"]["public_url"] = hub.url
        start_with_private_secrets(hub)

    rig = await make_rig(hub_overrides={"http": {"local_port": free_port()}}, start=public_url_is_hubd_itself)
    run = await run_doctor(rig.hub.config_path)
    # The test broker sets no message_size_limit: broker-limits says so (a WARN, as for dns and tls here).
    expected = {check: "PASS" for check in CHECKS} | {"dns": "WARN", "tls": "WARN", "broker-limits": "WARN"}
    assert run.verdicts == expected and run.code == 0, run
    assert "message_size_limit is not set" in run.line("broker-limits"), run
    assert "plain http to 127.0.0.1, a loopback address" in run.line("tls"), run
    remote = await check_tls(PublicAddress("http://hub.example.com", "http", "hub.example.com", 80))
    assert remote.result.verdict.value == "FAIL" and "over https only" in remote.result.detail


async def test_without_a_public_url_the_checks_through_it_are_not_run(make_rig: Callable[..., Any]) -> None:
    rig = await make_rig(start=start_with_private_secrets)
    run = await run_doctor(rig.hub.config_path)
    assert run.verdicts["public-url"] == "FAIL" and "http.public_url is not set" in run.line("public-url"), run
    for check in ("dns", "tls", "healthz", "vendor-path", "login-page", "local-routes"):
        assert run.line(check) == f"WARN {check}: not checked: no public URL", run
    assert run.code == 1


async def test_when_nothing_answers_at_the_public_url_tls_fails_and_the_routes_are_not_checked(
        make_rig: Callable[..., Any]) -> None:
    port = free_port()  # no proxy there
    rig = await make_rig(hub_overrides={"http": {"public_url": f"https://localhost:{port}", "local_port": free_port()}},
                         start=start_with_private_secrets)
    run = await run_doctor(rig.hub.config_path)
    assert run.verdicts["tls"] == "FAIL" and f"nothing answers on localhost:{port}" in run.line("tls"), run
    for check in ("healthz", "vendor-path", "login-page", "local-routes"):
        assert run.line(check) == f"WARN {check}: not checked: nothing answers TLS at localhost:{port}", run
    assert run.code == 1


async def test_a_config_that_does_not_load_fails_and_nothing_else_is_checked(tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text("http:\n  port: not-a-port\nmqtt:\n  colour: blue\n")
    run = await run_doctor(config)
    assert run.code == 1
    assert list(run.verdicts) == list(CHECKS), run
    assert run.verdicts["config"] == "FAIL" and "http.port" in run.line("config") and "mqtt.colour" in \
        run.line("config"), run
    assert all(line.endswith("not checked: the config did not load") for line in run.lines[1:]), run


async def read_lines(stream: asyncio.StreamReader, count: int) -> list[str]:
    return [(await stream.readline()).decode() for _ in range(count)]


async def test_each_line_is_printed_as_soon_as_its_check_is_done(make_rig: Callable[..., Any]) -> None:
    held: list[asyncio.StreamWriter] = []
    arrived = asyncio.Event()

    async def hold(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)  # a token host that takes the request and does not answer (yet)
        arrived.set()

    server = await asyncio.start_server(hold, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    rig = await make_rig(hub_overrides={"platform": {"auth_url": f"http://127.0.0.1:{port}"}},
                         start=start_with_private_secrets)
    # Output to a pipe (`| tee`) is block-buffered unless each line is flushed: no PYTHONUNBUFFERED here.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "hubd", "doctor", "-c",
                                                str(rig.hub.config_path), stdout=asyncio.subprocess.PIPE, env=env)
    assert proc.stdout is not None
    try:
        await asyncio.wait_for(arrived.wait(), 30)
        # The token host has the request and does not answer: the lines of the checks before it are out already
        # (read well within the doctor's own 10 s wait for the token host, which would flush them at exit).
        first = await asyncio.wait_for(read_lines(proc.stdout, CHECKS.index("token-host")), 5)
        assert [line.split()[1].rstrip(":") for line in first] == list(CHECKS[:CHECKS.index("token-host")]), first
        assert proc.returncode is None
        for writer in held:
            writer.close()  # the token host hangs up
        rest = (await asyncio.wait_for(proc.stdout.read(), 60)).decode().splitlines()
        assert rest[0].startswith("FAIL token-host: cannot reach"), rest
        assert await proc.wait() == 1
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        server.close()


@pytest.mark.parametrize("challenge", ["a" * 15, "a" * 129, "a" * 20 + "!", "ä" * 20])
def test_only_nonces_of_the_documented_shape_are_answered(challenge: str) -> None:
    from hubd.identity import valid_challenge

    assert not valid_challenge(challenge)
    assert valid_challenge(new_challenge())


def test_a_secret_file_others_can_read_is_found_where_hubd_finds_it(tmp_path: Path) -> None:
    """`hubd init`'s config names its secrets under ${CREDENTIALS_DIRECTORY}, which is unset outside systemd: the
    doctor looks where `hubd run` would read them, and warns of one readable by other users."""
    from backup_helpers import installation

    from hubd.config.model import load_config
    from hubd.doctor.settings import check_secrets

    config_path = installation(tmp_path, secrets_dir=tmp_path / "etc")  # beside the config: found without it
    env = {k: v for k, v in os.environ.items() if k != "CREDENTIALS_DIRECTORY"}
    config = load_config(config_path, env)
    assert check_secrets(config_path, config, env).verdict.value == "PASS"
    secret = tmp_path / "etc" / "hubd.client-secret"
    secret.chmod(0o644)
    result = check_secrets(config_path, config, env)
    assert result.verdict.value == "WARN" and f"{secret} (platform.client_secret) is readable by other users" in \
        result.detail, result


# --- broker-limits: mosquitto's own limits, read from the config of the mosquitto listening on mqtt.port --------

DROP_IN = REPO / "systemd" / "mosquitto-hubd.conf"


@contextlib.contextmanager
def own_mosquitto(workdir: Path, *lines: str, drop_in: bool) -> Iterator[int]:
    """A real mosquitto started with `-c` a main config of `lines` (and, with `drop_in`, an `include_dir` holding
    the repo's drop-in, as Debian's mosquitto.conf includes /etc/mosquitto/conf.d); its port."""
    port = free_port()
    conf_d = workdir / "conf.d"
    conf_d.mkdir(parents=True)
    (workdir / "data").mkdir()
    if drop_in:
        shutil.copy(DROP_IN, conf_d / "hubd.conf")
    main = workdir / "mosquitto.conf"
    main.write_text("\n".join(["user root" if os.geteuid() == 0 else "", f"listener {port} 127.0.0.1",
                               "allow_anonymous true", f"persistence_location {workdir / 'data'}/",
                               f"log_dest file {workdir / 'mosquitto.log'}", *lines,
                               f"include_dir {conf_d}"]) + "\n")
    proc = subprocess.Popen([mosquitto_binary(), "-c", str(main)], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 10
        while True:
            assert proc.poll() is None, f"mosquitto refused its config: {proc.stderr.read() if proc.stderr else ''!r}"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "mosquitto did not listen"
                time.sleep(0.02)
        yield port
    finally:
        proc.kill()
        proc.wait()


def hubd_config(port: int, **mqtt: Any) -> HubdConfig:
    return HubdConfig.model_validate({"mqtt": {"host": "127.0.0.1", "port": port, **mqtt}})


def received_after(port: int, payloads: list[bytes]) -> list[int]:
    """Publish each payload (QoS 1) on one topic through mosquitto, then a last small one; the sizes of what a
    subscriber got, up to that last one."""
    got: list[int] = []
    done = threading.Event()
    sub = paho.Client(CallbackAPIVersion.VERSION2, client_id=f"limits-sub-{time.monotonic_ns()}")
    subscribed = threading.Event()
    sub.on_subscribe = lambda *_: subscribed.set()
    sub.on_message = lambda _c, _u, m: done.set() if m.payload == b"last" else got.append(len(m.payload))
    sub.connect("127.0.0.1", port)
    sub.loop_start()
    pub = paho.Client(CallbackAPIVersion.VERSION2, client_id=f"limits-pub-{time.monotonic_ns()}")
    try:
        sub.subscribe("limits/t", qos=1)
        assert subscribed.wait(5)
        pub.connect("127.0.0.1", port)
        pub.loop_start()
        for payload in [*payloads, b"last"]:
            pub.publish("limits/t", payload, qos=0).wait_for_publish(timeout=10)
        assert done.wait(15), "the last message did not arrive"
        return got
    finally:
        pub.loop_stop()
        pub.disconnect()
        sub.loop_stop()
        sub.disconnect()


def test_the_repos_mosquitto_drop_in_is_taken_by_a_real_mosquitto_and_passes_the_doctor(tmp_path: Path) -> None:
    with own_mosquitto(tmp_path / "mq", drop_in=True) as port:
        result = check_broker_limits(hubd_config(port))
        assert result.verdict.value == "PASS", result
        assert "max_queued_messages 100000" in result.detail and "message_size_limit 16777216" in result.detail
        assert str(tmp_path / "mq" / "conf.d" / "hubd.conf") in result.detail  # read through include_dir
        # And mosquitto applies it: a message over 16 MiB is dropped, one just under it goes through.
        assert received_after(port, [b"x" * ((16 << 20) + 1), b"y" * ((16 << 20) - 1024)]) == [(16 << 20) - 1024]


def test_the_doctor_warns_where_mosquitto_would_drop_or_pass_what_hubd_needs_with_the_fix(tmp_path: Path) -> None:
    with own_mosquitto(tmp_path / "mq", "persistence false", drop_in=False) as port:
        result = check_broker_limits(hubd_config(port))
    assert result.verdict.value == "WARN", result
    for said in ("max_queued_messages is 1000 (mosquitto's default)", "drops every message for it after the "
                 "first 1000; set max_queued_messages 100000", "message_size_limit is not set",
                 "set message_size_limit 16777216", "persistence is off", "set persistence true",
                 "/etc/mosquitto/conf.d/hubd.conf"):
        assert said in result.detail, (said, result.detail)
    assert str(tmp_path / "mq" / "mosquitto.conf") in result.detail


def test_a_broker_the_doctor_cannot_read_gets_the_settings_to_check() -> None:
    elsewhere = check_broker_limits(hubd_config(1883, host="192.0.2.1"))  # TEST-NET-1: never this machine
    assert elsewhere.verdict.value == "WARN" and "is not on this machine" in elsewhere.detail, elsewhere
    assert "max_queued_messages 100000" in elsewhere.detail and "persistence true" in elsewhere.detail
    nobody = check_broker_limits(hubd_config(free_port()))
    assert nobody.verdict.value == "WARN" and "no mosquitto process" in nobody.detail, nobody
    assert check_broker_limits(hubd_config(free_port(), embedded=True)).verdict.value == "PASS"

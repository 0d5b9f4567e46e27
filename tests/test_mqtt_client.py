"""MqttClient against a real mosquitto on a free port (tests/mosquitto.py)."""

from __future__ import annotations

import asyncio
import fcntl
import os
import resource
import socket
import struct
import subprocess
import termios
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from mosquitto import MisbehavingBroker, Mosquitto, TlsFiles, free_port, publish_packet

from hubd.errors import ConfigError, MqttRejected, MqttUnavailable
from hubd.mqtt import client as client_module
from hubd.mqtt import connection as connection_module
from hubd.mqtt.client import MqttClient, Will
from hubd.mqtt.inbox import Message

RECEIVE_TIMEOUT_S = 10.0


@pytest.fixture
def prefix(request: pytest.FixtureRequest) -> str:
    """A topic prefix of this test's own, so tests never see each other's (retained) messages."""
    return f"test/{request.node.name}"


@pytest.fixture
async def clients(mosquitto: Mosquitto) -> AsyncIterator[Callable[..., MqttClient]]:
    """Factory for MqttClients on the `mosquitto` broker; all are disconnected at teardown."""
    made: list[MqttClient] = []

    def make(client_id: str, **kwargs: object) -> MqttClient:
        kwargs.setdefault("host", mosquitto.host)
        kwargs.setdefault("port", mosquitto.port)
        client = MqttClient(client_id=client_id, **kwargs)  # type: ignore[arg-type]
        made.append(client)
        return client

    yield make
    for client in made:
        await client.disconnect()


async def receive(client: MqttClient, count: int, *, ack: bool = True) -> list[Message]:
    """Exactly `count` messages (fails on timeout), acked unless told otherwise."""
    got: list[Message] = []
    async with asyncio.timeout(RECEIVE_TIMEOUT_S):
        while len(got) < count:
            batch = await client.next_batch(max_messages=count - len(got))
            if ack:
                client.ack(batch)
            got += batch
    return got


async def receive_until(client: MqttClient, last_payload: bytes) -> list[Message]:
    """Messages up to and including the one carrying `last_payload`, acked."""
    got: list[Message] = []
    async with asyncio.timeout(RECEIVE_TIMEOUT_S):
        while not got or got[-1].payload != last_payload:
            batch = await client.next_batch(max_messages=1)
            client.ack(batch)
            got += batch
    return got


async def publisher(make: Callable[..., MqttClient], name: str = "publisher") -> MqttClient:
    client = make(name, clean_session=True)
    await client.connect()
    return client


async def subscriber(make: Callable[..., MqttClient], name: str, topic: str, **kwargs: object) -> MqttClient:
    """A connected client subscribed to `topic` at QoS 1."""
    client = make(name, **kwargs)
    await client.connect()
    await client.subscribe([(topic, 1)])
    return client


async def test_publish_subscribe_receive(clients: Callable[..., MqttClient], prefix: str) -> None:
    sub = clients("sub")
    was_connected = sub.connected
    assert await sub.connect() is False
    assert (was_connected, sub.connected) == (False, True)
    await sub.subscribe([(f"{prefix}/#", 1)])
    pub = await publisher(clients)

    await pub.publish(f"{prefix}/a", b"one", qos=1)
    await pub.publish(f"{prefix}/b", b"two", qos=0)

    first, second = await receive(sub, 2)
    assert (first.topic, first.payload, first.qos, first.retain) == (f"{prefix}/a", b"one", 1, False)
    assert (second.topic, second.payload, second.qos, second.retain) == (f"{prefix}/b", b"two", 0, False)


async def test_retained_message_delivered_on_subscribe(clients: Callable[..., MqttClient], prefix: str) -> None:
    pub = await publisher(clients)
    await pub.publish(f"{prefix}/config", b"cfg", qos=1, retain=True)

    sub = await subscriber(clients, "sub", f"{prefix}/#")

    [msg] = await receive(sub, 1)
    assert (msg.topic, msg.payload, msg.retain) == (f"{prefix}/config", b"cfg", True)


async def test_unacked_message_is_redelivered_after_reconnect(clients: Callable[..., MqttClient], prefix: str) -> None:
    sub = await subscriber(clients, "hub", f"{prefix}/#", clean_session=False)
    pub = await publisher(clients)
    await pub.publish(f"{prefix}/s", b"acked")
    await pub.publish(f"{prefix}/s", b"not-acked")

    acked, not_acked = await receive(sub, 2, ack=False)
    sub.ack([acked])
    await sub.disconnect()

    assert await sub.connect() is True
    # Acks for the old connection's messages are a no-op now.
    sub.ack([not_acked])
    await pub.publish(f"{prefix}/s", b"marker")
    got = await receive_until(sub, b"marker")
    assert [m.payload for m in got] == [b"not-acked", b"marker"]


async def test_acks_go_out_in_receive_order(clients: Callable[..., MqttClient], prefix: str) -> None:
    sub = await subscriber(clients, "hub", f"{prefix}/#", clean_session=False)
    pub = await publisher(clients)
    for payload in (b"m1", b"m2", b"m3"):
        await pub.publish(f"{prefix}/s", payload)

    _m1, m2, m3 = await receive(sub, 3, ack=False)
    # m2 and m3 acked first: their PUBACKs wait for m1's, which never comes on this connection.
    sub.ack([m3, m2])
    await sub.disconnect()

    await sub.connect()
    await pub.publish(f"{prefix}/s", b"marker")
    got = await receive_until(sub, b"marker")
    assert [m.payload for m in got] == [b"m1", b"m2", b"m3", b"marker"]

    # Out of order within one call is fine too: all three are acked, none comes back.
    await sub.disconnect()
    await sub.connect()
    await pub.publish(f"{prefix}/s", b"marker2")
    assert [m.payload for m in await receive_until(sub, b"marker2")] == [b"marker2"]


async def test_persistent_session_receives_what_was_published_while_offline(
    clients: Callable[..., MqttClient], prefix: str
) -> None:
    sub = await subscriber(clients, "hub", f"{prefix}/#", clean_session=False)
    await sub.disconnect()

    pub = await publisher(clients)
    for i in range(3):
        await pub.publish(f"{prefix}/state", f"offline-{i}".encode())

    assert await sub.connect() is True
    got = await receive(sub, 3)
    assert [m.payload for m in got] == [b"offline-0", b"offline-1", b"offline-2"]


async def test_broker_restart_ends_next_batch_and_reconnect_works(
    clients: Callable[..., MqttClient], mosquitto: Mosquitto, prefix: str
) -> None:
    sub = await subscriber(clients, "hub", f"{prefix}/#", clean_session=False)
    pub = await publisher(clients)
    await pub.publish(f"{prefix}/x", b"before")

    await asyncio.to_thread(mosquitto.restart)

    # What arrived before the loss is returned first, then the loss is reported.
    [before] = await receive(sub, 1)
    assert before.payload == b"before"
    with pytest.raises(MqttUnavailable):
        async with asyncio.timeout(RECEIVE_TIMEOUT_S):
            await sub.next_batch()
    assert not sub.connected
    with pytest.raises(MqttUnavailable):
        await sub.publish(f"{prefix}/x", b"while-down")

    assert await sub.connect() is True  # mosquitto persisted the session over its restart
    await sub.subscribe([(f"{prefix}/#", 1)])
    pub2 = await publisher(clients, "publisher2")
    await pub2.publish(f"{prefix}/x", b"after")
    got = await receive_until(sub, b"after")
    assert got[-1].payload == b"after"


async def test_will_is_published_when_the_process_dies(
    clients: Callable[..., MqttClient],
    mosquitto: Mosquitto,
    will_client: Callable[[str, int, str], subprocess.Popen[bytes]],
    prefix: str,
) -> None:
    watcher = await subscriber(clients, "watcher", f"{prefix}/status")

    # A real process killed without a DISCONNECT, as a crashing hubd would be.
    proc = await asyncio.to_thread(will_client, mosquitto.host, mosquitto.port, f"{prefix}/status")
    [online] = await receive(watcher, 1)
    assert online.payload == b"online"
    proc.kill()

    [will] = await receive(watcher, 1)
    assert (will.topic, will.payload) == (f"{prefix}/status", b"offline")
    late = await subscriber(clients, "late", f"{prefix}/status")
    [retained] = await receive(late, 1)
    assert (retained.payload, retained.retain) == (b"offline", True)


async def test_clean_disconnect_does_not_publish_the_will(clients: Callable[..., MqttClient], prefix: str) -> None:
    watcher = await subscriber(clients, "watcher", f"{prefix}/#")
    hub = clients("hub", will=Will(f"{prefix}/status", b"offline"))
    await hub.connect()
    await hub.disconnect()
    await hub.disconnect()  # idempotent
    assert not hub.connected

    pub = await publisher(clients)
    await pub.publish(f"{prefix}/marker", b"marker")
    assert [m.payload for m in await receive_until(watcher, b"marker")] == [b"marker"]


async def test_publish_and_subscribe_while_disconnected_raise(clients: Callable[..., MqttClient], prefix: str) -> None:
    client = clients("hub")
    with pytest.raises(MqttUnavailable):
        await client.publish(f"{prefix}/x", b"never")
    with pytest.raises(MqttUnavailable):
        await client.subscribe([(f"{prefix}/#", 1)])
    with pytest.raises(MqttUnavailable):
        await client.next_batch()
    client.ack([])  # no-op, never raises

    await client.connect()
    await client.disconnect()
    with pytest.raises(MqttUnavailable):
        await client.publish(f"{prefix}/x", b"never")
    with pytest.raises(MqttUnavailable):
        await client.next_batch()


async def test_connection_refused_is_unavailable() -> None:
    client = MqttClient(host="127.0.0.1", port=free_port(), client_id="nobody-listens")
    with pytest.raises(MqttUnavailable) as info:
        await client.connect(timeout_s=5)
    assert not isinstance(info.value, MqttRejected)
    assert not client.connected


async def test_no_connack_is_unavailable_after_the_timeout() -> None:
    # A listening socket that never answers: the kernel accepts the TCP connection, nobody reads.
    with socket.create_server(("127.0.0.1", 0)) as silent:
        client = MqttClient(host="127.0.0.1", port=silent.getsockname()[1], client_id="hub")
        started = time.monotonic()
        with pytest.raises(MqttUnavailable, match="CONNACK"):
            await client.connect(timeout_s=0.5)
        assert time.monotonic() - started < 2
        assert not client.connected


async def test_connect_while_connected_aborts_the_old_connection(
    clients: Callable[..., MqttClient], prefix: str
) -> None:
    """A leftover connection (a caller that did not abort a failed session) is dropped without DISCONNECT:
    the broker publishes its will, and the new connection works."""
    watcher = await subscriber(clients, "watcher", f"{prefix}/status", clean_session=True)
    client = clients("hub", will=Will(f"{prefix}/status", b"offline", retain=False))
    await client.connect()
    await client.connect()
    assert client.connected
    assert [m.payload for m in await receive(watcher, 1)] == [b"offline"]
    await client.publish(f"{prefix}/status", b"online")
    assert [m.payload for m in await receive(watcher, 1)] == [b"online"]


async def test_abort_publishes_the_will_and_allows_a_new_connect(
    clients: Callable[..., MqttClient], prefix: str
) -> None:
    watcher = await subscriber(clients, "watcher", f"{prefix}/status", clean_session=True)
    client = clients("hub", will=Will(f"{prefix}/status", b"offline", retain=False))
    await client.connect()
    client.abort("test")
    client.abort("twice is fine")
    assert not client.connected
    with pytest.raises(MqttUnavailable):
        await client.next_batch()
    assert [m.payload for m in await receive(watcher, 1)] == [b"offline"]
    await client.connect()
    assert client.connected


async def test_a_connect_cancelled_as_its_thread_finishes_closes_the_socket() -> None:
    """The connect thread's result and the cancellation land in one loop iteration: on_late never runs,
    and open() must close the socket the thread opened itself."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = MqttClient(host="127.0.0.1", port=server.getsockname()[1], client_id="hub")
        before = set(threading.enumerate())
        task = asyncio.create_task(client.connect(timeout_s=30))
        await asyncio.sleep(0)  # connect() runs up to awaiting its thread, which has started (maybe ended)
        # Block the loop until the thread is done (a TCP connect to a listening socket): its result is then
        # queued on the loop, and the cancel below comes right after it, before connect() resumes.
        for thread in set(threading.enumerate()) - before:
            if thread.name == "hubd-mqtt-connect":
                thread.join(10)
                assert not thread.is_alive()
        assert not task.done()
        asyncio.get_running_loop().call_soon(task.cancel)
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not client.connected
        server.settimeout(10)
        peer, _ = server.accept()
        with peer:
            peer.settimeout(10)
            try:
                while peer.recv(4096):  # paho's CONNECT, if it went out, then the end of the stream
                    pass
            except TimeoutError:
                pytest.fail("the socket of the cancelled connect was left open")


async def test_keepalive_detects_a_hung_broker(
    clients: Callable[..., MqttClient], mosquitto: Mosquitto, prefix: str
) -> None:
    client = await subscriber(clients, "hub", f"{prefix}/#", keepalive_s=1)
    mosquitto.pause()
    try:
        started = time.monotonic()
        with pytest.raises(MqttUnavailable):
            async with asyncio.timeout(RECEIVE_TIMEOUT_S):
                await client.next_batch()
        # paho pings after keepalive_s and gives up after another keepalive_s without an answer.
        assert time.monotonic() - started < 5
    finally:
        mosquitto.resume()


async def test_unknown_host_is_unavailable() -> None:
    client = MqttClient(host="no-such-host.invalid", port=1883, client_id="nobody")
    with pytest.raises(MqttUnavailable):
        await client.connect(timeout_s=5)


async def test_bad_credentials_are_rejected(make_mosquitto: Callable[..., Mosquitto], prefix: str) -> None:
    broker = make_mosquitto(users={"hubd": "right-password"})

    def make(**kwargs: object) -> MqttClient:
        return MqttClient(host=broker.host, port=broker.port, client_id="hub", **kwargs)  # type: ignore[arg-type]

    with pytest.raises(MqttRejected, match=r"(?i)not authori[sz]ed|user name or password") as wrong:
        await make(username="hubd", password="wrong").connect()
    assert wrong.value.code in (0x86, 0x87)  # the CONNACK's code, which hubd setup words for the owner
    with pytest.raises(MqttRejected) as anonymous:
        await make().connect()  # anonymous
    assert anonymous.value.code == 0x87  # not authorised

    good = make(username="hubd", password="right-password")
    await good.connect()
    await good.subscribe([(f"{prefix}/#", 1)])
    await good.publish(f"{prefix}/x", b"hello")
    assert [m.payload for m in await receive(good, 1)] == [b"hello"]
    await good.disconnect()


async def test_reconnect_after_rejection_uses_the_same_client(
    make_mosquitto: Callable[..., Mosquitto],
) -> None:
    broker = make_mosquitto(users={"hubd": "pw"})
    client = MqttClient(host=broker.host, port=broker.port, client_id="hub", username="hubd", password="bad")
    with pytest.raises(MqttRejected):
        await client.connect()
    client._password = "pw"  # what a corrected config would give a new client; the object is reusable
    await client.connect()
    assert client.connected
    await client.disconnect()


async def test_2000_qos1_publishes_in_a_row_all_arrive(clients: Callable[..., MqttClient], prefix: str) -> None:
    sub = await subscriber(clients, "hub", f"{prefix}/#")
    pub = clients("publisher", clean_session=True, max_inflight_publishes=100)
    await pub.connect()

    count = 2000
    await asyncio.gather(*(pub.publish(f"{prefix}/n", str(i).encode()) for i in range(count)))

    got = await receive(sub, count)
    assert sorted(int(m.payload) for m in got) == list(range(count))


async def test_full_inbox_drops_oldest_qos0_never_qos1(
    clients: Callable[..., MqttClient], prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(client_module, "INBOX_MAX_MESSAGES", 10)
    sub = await subscriber(clients, "hub", f"{prefix}/#")
    pub = await publisher(clients)

    sent = [(f"a{i}", 1) for i in range(5)] + [(f"b{i}", 0) for i in range(10)] + [(f"c{i}", 1) for i in range(3)]
    for payload, qos in sent:
        await pub.publish(f"{prefix}/x", payload.encode(), qos=qos)
    async with asyncio.timeout(RECEIVE_TIMEOUT_S):
        while sub.dropped_qos0 < 8:
            await asyncio.sleep(0.01)

    got = await sub.next_batch()
    assert [m.payload.decode() for m in got] == ["a0", "a1", "a2", "a3", "a4", "b8", "b9", "c0", "c1", "c2"]
    assert sub.dropped_qos0 == 8


async def test_receive_throughput_20k_qos1_with_ack(clients: Callable[..., MqttClient], prefix: str) -> None:
    """Measures (prints) receive throughput; asserts only that all 20k arrive."""
    count = 20_000
    sub = await subscriber(clients, "hub", f"{prefix}/#", clean_session=False)
    await sub.disconnect()

    pub = clients("publisher", clean_session=True)
    await pub.connect()
    payload = b'{"Switch": "On", "Temperature": 21.5}'
    await asyncio.gather(*(pub.publish(f"{prefix}/dev{i % 50}/state", payload) for i in range(count)))

    started = time.perf_counter()
    await sub.connect()
    got = await receive(sub, count)
    elapsed = time.perf_counter() - started
    assert len(got) == count
    rate = count / elapsed
    print(f"\nreceive throughput, {count} queued QoS1 messages, next_batch + ack: {rate:,.0f} msg/s")


@pytest.fixture
def tls_mosquitto(make_mosquitto: Callable[..., Mosquitto], tmp_path: Path) -> tuple[Mosquitto, TlsFiles]:
    tls = TlsFiles.make(tmp_path / "tls")
    return make_mosquitto(tls=tls), tls


async def test_tls_with_a_private_ca(tls_mosquitto: tuple[Mosquitto, TlsFiles], prefix: str) -> None:
    broker, tls = tls_mosquitto
    hub = MqttClient(host="localhost", port=broker.port, client_id="hub", tls=True, ca_file=str(tls.ca_file))
    await hub.connect()
    try:
        await hub.subscribe([(f"{prefix}/#", 1)])
        # Many small packets share a TLS record: the ones already decrypted must not wait for more bytes.
        count = 500
        await asyncio.gather(*(hub.publish(f"{prefix}/n", str(i).encode()) for i in range(count)))
        got = await receive(hub, count)
        assert sorted(int(m.payload) for m in got) == list(range(count))
    finally:
        await hub.disconnect()


async def test_tls_untrusted_certificate_is_unavailable(tls_mosquitto: tuple[Mosquitto, TlsFiles]) -> None:
    broker, _tls = tls_mosquitto
    untrusted = MqttClient(host="localhost", port=broker.port, client_id="hub", tls=True)
    with pytest.raises(MqttUnavailable, match="CERTIFICATE_VERIFY_FAILED"):
        await untrusted.connect()


def test_unreadable_ca_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"mqtt\.ca_file"):
        MqttClient(host="localhost", port=8883, client_id="hub", tls=True, ca_file=str(tmp_path / "missing.pem"))


def unread_bytes(sock: socket.socket) -> int:
    """Bytes waiting in a socket's receive buffer (Linux FIONREAD)."""
    return int(struct.unpack("i", fcntl.ioctl(sock.fileno(), termios.FIONREAD, b"\0\0\0\0"))[0])


async def test_one_readable_callback_takes_in_a_bounded_number_of_messages(
    clients: Callable[..., MqttClient], prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One paho loop_read() reads a packet per publish in flight: the cap must count messages, not calls."""
    count, in_flight, cap = 1000, 100, 20
    pub = await publisher(clients)
    await asyncio.gather(*(pub.publish(f"{prefix}/r/{i}", b"x", retain=True) for i in range(count)))
    monkeypatch.setattr(connection_module, "READ_BURST_PACKETS", cap)
    client = clients("hub", clean_session=True, max_inflight_publishes=in_flight)
    await client.connect()
    conn = client._conn
    assert conn is not None
    # From here on nothing yields to the loop: only the one callback called below reads the socket.
    conn.paho.subscribe([(f"{prefix}/r/#", 0)])  # answered by a SUBACK and the `count` retained messages
    for _ in range(in_flight):
        conn.paho.publish(f"{prefix}/out", b"x", qos=1)  # their PUBACKs come after the retained messages
    while conn.paho.want_write():
        conn.paho.loop_write()
    sock = conn.paho.socket()
    expected = 5 + sum(len(publish_packet(f"{prefix}/r/{i}", b"x", retain=True)) for i in range(count))
    deadline = time.monotonic() + RECEIVE_TIMEOUT_S
    while unread_bytes(sock) < expected:
        assert time.monotonic() < deadline, f"only {unread_bytes(sock)} of {expected} bytes arrived"
        time.sleep(0.01)
    conn._on_readable()
    taken = await client.next_batch(count)  # returns at once: what that one callback took in
    assert cap <= len(taken) <= cap + in_flight, len(taken)
    # The rest comes with the loop's next callbacks.
    assert len(taken) + len(await receive(client, count - len(taken))) == count


async def test_a_capped_tls_read_goes_on_with_what_ssl_already_decrypted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Many packets in one TLS record: once capped, the decrypted rest is not signalled by the fd again."""
    monkeypatch.setattr(connection_module, "READ_BURST_PACKETS", 1)
    tls = TlsFiles.make(tmp_path / "tls")
    count = 200
    broker = MisbehavingBroker(tls=tls, retained=[(f"t/{i}", str(i).encode()) for i in range(count)])
    await broker.start()
    hub = MqttClient(host="localhost", port=broker.port, client_id="hub", tls=True, ca_file=str(tls.ca_file))
    try:
        await hub.connect()
        await hub.subscribe([("t/#", 0)])  # SUBACK and `count` messages in one write: one TLS record
        got = await receive(hub, count)
        assert sorted(int(m.payload) for m in got) == list(range(count))
    finally:
        await hub.disconnect()
        await broker.stop()


async def test_a_socket_numbered_above_1024_works(
    clients: Callable[..., MqttClient], prefix: str
) -> None:
    """select() cannot watch fds >= 1024 (ValueError); a hub with many open files must still read."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 2048:
        pytest.skip(f"the hard limit on open files ({hard}) leaves no fd above 1024")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 2048), hard))
    fillers: list[int] = []
    try:
        while not fillers or fillers[-1] < 1100:
            fillers.append(os.open(os.devnull, os.O_RDONLY))
        client = clients("hub")
        await client.connect()
        conn = client._conn
        assert conn is not None and conn.paho.socket().fileno() >= 1024
        await client.subscribe([(f"{prefix}/#", 1)])
        await client.publish(f"{prefix}/x", b"hello")
        assert [m.payload for m in await receive(client, 1)] == [b"hello"]
    finally:
        for fd in fillers:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

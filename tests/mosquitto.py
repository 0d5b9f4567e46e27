"""Test helpers: a real mosquitto broker on a free loopback port, in a temporary directory; and
`MisbehavingBroker`, a few lines of MQTT (3.1.1, or 5 to a client that connects with it) that refuse or ignore
what mosquitto never would.

Used by tests only; mosquitto needs the Debian `mosquitto` package (`/usr/sbin/mosquitto`).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion

START_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 10.0


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass(frozen=True)
class TlsFiles:
    """A throw-away CA and a server certificate for localhost and 127.0.0.1, made with the openssl CLI."""

    ca_file: Path
    cert_file: Path
    key_file: Path

    @classmethod
    def make(cls, directory: Path) -> TlsFiles:
        directory.mkdir(parents=True, exist_ok=True)
        ca_key, ca_crt = directory / "ca.key", directory / "ca.crt"
        key, csr, crt = directory / "server.key", directory / "server.csr", directory / "server.crt"
        ext = directory / "san.ext"
        ext.write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
        new_key = ("-newkey", "rsa:2048", "-nodes", "-days", "2")
        _openssl("req", "-x509", *new_key, "-subj", "/CN=hubd test CA", "-keyout", ca_key, "-out", ca_crt)
        _openssl("req", *new_key, "-subj", "/CN=localhost", "-keyout", key, "-out", csr)
        _openssl(
            "x509",
            "-req",
            "-in",
            csr,
            "-CA",
            ca_crt,
            "-CAkey",
            ca_key,
            "-CAcreateserial",
            "-days",
            "2",
            "-extfile",
            ext,
            "-out",
            crt,
        )
        return cls(ca_crt, crt, key)


def _openssl(*args: str | Path) -> None:
    subprocess.run(["openssl", *map(str, args)], check=True, capture_output=True)


def mosquitto_binary() -> str:
    """The mosquitto executable (PATH, then the Debian location)."""
    found = shutil.which("mosquitto") or "/usr/sbin/mosquitto"
    if not Path(found).exists():
        raise RuntimeError("mosquitto is not installed (apt-get install mosquitto mosquitto-clients)")
    return found


class Mosquitto:
    """A mosquitto process with its own config, persistence directory and log file under `workdir`."""

    def __init__(
        self,
        workdir: Path,
        *,
        port: int | None = None,
        users: dict[str, str] | None = None,
        max_inflight_messages: int = 20,
        max_queued_messages: int = 100_000,
        sys_interval_s: int | None = None,
        tls: TlsFiles | None = None,
        drop_in: Path | None = None,
    ) -> None:
        self.host = "127.0.0.1"
        self.port = port if port is not None else free_port()
        self.workdir = workdir
        self.log_path = workdir / "mosquitto.log"
        self.config_path = workdir / "mosquitto.conf"
        self._users = users
        self._max_inflight_messages = max_inflight_messages
        self._max_queued_messages = max_queued_messages
        self._sys_interval_s = sys_interval_s  # how often mosquitto publishes $SYS/... (its default: 10 s)
        self._tls = tls
        self._drop_in = drop_in  # a conf.d file, included after these settings as /etc/mosquitto/conf.d is
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        """Write the config and start mosquitto; returns once the port accepts connections."""
        if self._proc is not None and self._proc.poll() is None:
            raise RuntimeError("mosquitto is already running")
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._write_config()
        self._proc = subprocess.Popen(
            [mosquitto_binary(), "-c", str(self.config_path)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                err = self._proc.stderr.read().decode(errors="replace") if self._proc.stderr else ""
                raise RuntimeError(f"mosquitto exited with {self._proc.returncode}: {err}{self.log_tail()}")
            try:
                with socket.create_connection((self.host, self.port), timeout=0.2):
                    return
            except OSError:
                time.sleep(0.02)
        self.kill()
        raise RuntimeError(f"mosquitto did not accept connections on port {self.port}: {self.log_tail()}")

    def stop(self) -> None:
        """SIGTERM and wait: mosquitto writes its persistence file and closes clients (no wills)."""
        self._end(signal.SIGTERM)

    def kill(self) -> None:
        """SIGKILL: the broker vanishes, as in a power cut (persistence since the last save is lost)."""
        self._end(signal.SIGKILL)

    def pause(self) -> None:
        """SIGSTOP: the broker hangs with its connections open (as a wedged host would)."""
        if self._proc is not None:
            self._proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        """SIGCONT after pause()."""
        if self._proc is not None:
            self._proc.send_signal(signal.SIGCONT)

    def restart(self, *, keep_state: bool = True) -> None:
        """Stop (SIGTERM) and start again on the same port.

        keep_state=True keeps the persistence directory (sessions, subscriptions, retained messages, as
        after a clean restart); False wipes it, so the broker comes back knowing no client at all.
        """
        self.stop()
        if not keep_state:
            shutil.rmtree(self.workdir / "data", ignore_errors=True)
        self.start()

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        """The end of the broker's log, for assertion messages."""
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def _end(self, sig: signal.Signals) -> None:
        proc = self._proc
        if proc is None:
            return
        self._proc = None
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)  # in case it was paused
            proc.send_signal(sig)
            try:
                proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()

    def _write_config(self) -> None:
        persistence_dir = self.workdir / "data"
        persistence_dir.mkdir(exist_ok=True)
        lines = [
            # Started as root, mosquitto 2.0 drops to user `mosquitto` and then silently cannot write
            # a log or persistence directory it does not own (MEASURED.md).
            "user root" if os.geteuid() == 0 else "",
            f"listener {self.port} {self.host}",
            *(
                [f"cafile {self._tls.ca_file}", f"certfile {self._tls.cert_file}", f"keyfile {self._tls.key_file}"]
                if self._tls
                else []
            ),
            "persistence true",
            "set_tcp_nodelay true",
            f"persistence_location {persistence_dir}/",
            "autosave_interval 1",
            f"max_inflight_messages {self._max_inflight_messages}",
            f"max_queued_messages {self._max_queued_messages}",
            "max_queued_bytes 0",
            "log_dest file " + str(self.log_path),
            "log_type error",
            "log_type warning",
            "log_type notice",
            "log_type information",
            "connection_messages true",
            f"sys_interval {self._sys_interval_s}" if self._sys_interval_s is not None else "",
            "log_timestamp_format %H:%M:%S",
        ]
        if self._users is None:
            lines.append("allow_anonymous true")
        else:
            password_file = self.workdir / "passwd"
            password_file.unlink(missing_ok=True)
            for name, password in self._users.items():
                # -c creates the file for the first user; -b takes the password from the command line.
                create = ["-c"] if not password_file.exists() else []
                subprocess.run(
                    ["mosquitto_passwd", *create, "-b", str(password_file), name, password],
                    check=True,
                    capture_output=True,
                )
            password_file.chmod(0o600)
            lines += ["allow_anonymous false", f"password_file {password_file}"]
        if self._drop_in is not None:
            conf_d = self.workdir / "conf.d"
            conf_d.mkdir(exist_ok=True)
            (conf_d / self._drop_in.name).write_text(self._drop_in.read_text(encoding="utf-8"), encoding="utf-8")
            lines.append(f"include_dir {conf_d}")
        self.config_path.write_text("\n".join(line for line in lines if line) + "\n")


def publish(port: int, topic: str, payload: bytes | str, *, retain: bool = False, host: str = "127.0.0.1") -> None:
    """Publish one QoS 1 message with a plain paho client and wait for the PUBACK."""
    client = paho.Client(CallbackAPIVersion.VERSION2, client_id=f"test-pub-{time.monotonic_ns()}")
    client.connect(host, port)
    client.loop_start()
    try:
        info = client.publish(topic, payload, qos=1, retain=retain)
        info.wait_for_publish(timeout=5)
        if not info.is_published():
            raise RuntimeError(f"publish to {topic} was not acknowledged")
    finally:
        client.disconnect()
        client.loop_stop()


class MisbehavingBroker:
    """An MQTT 3.1.1 server (MQTT 5 to a client that connects with it: hubd does) on a free 127.0.0.1 port, run on
    the test's event loop, that accepts every CONNECT and answers PINGREQ, but answers SUBSCRIBE and QoS 1 PUBLISH
    as told:

    subscribe: "grant" (SUBACK granting QoS 1), "refuse" (SUBACK 0x80 for every topic, as a broker's
    ACL would) or "ignore" (no SUBACK ever); publish: "ack" (PUBACK) or "ignore" (no PUBACK ever).
    `retained` messages (QoS 0) follow a granting SUBACK in the same write: one TLS record with `tls`.
    Counts connections and how each ended: with a DISCONNECT packet, or by the client closing the socket.
    """

    def __init__(self, *, subscribe: Literal["grant", "refuse", "ignore"] = "grant",
                 publish: Literal["ack", "ignore"] = "ack", retained: Sequence[tuple[str, bytes]] = (),
                 tls: TlsFiles | None = None) -> None:
        self.host = "127.0.0.1"
        self.port = 0
        self.subscribe = subscribe
        self.publish = publish
        self.retained = {v5: b"".join(publish_packet(topic, payload, retain=True, v5=v5) for topic, payload in retained)
                         for v5 in (False, True)}
        self._ssl: ssl.SSLContext | None = None
        if tls is not None:
            self._ssl = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
            self._ssl.load_cert_chain(tls.cert_file, tls.key_file)
        self.connections = 0
        self.subscribes = 0
        self.disconnects = 0  # connections that ended with a DISCONNECT packet
        self.aborts = 0  # connections the client closed without one
        self._changed = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._serve, self.host, 0, ssl=self._ssl)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for writer in list(self._writers):
                writer.close()
            await self._server.wait_closed()
            self._server = None

    async def wait_for(self, predicate: Callable[[MisbehavingBroker], bool], timeout_s: float = 30.0) -> None:
        """Return once predicate(self) holds; TimeoutError after timeout_s (a failure bound, not a measure)."""
        async with asyncio.timeout(timeout_s):
            while not predicate(self):
                self._changed.clear()
                await self._changed.wait()

    def _note(self) -> None:
        self._changed.set()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writers.add(writer)
        self.connections += 1
        self._note()
        v5 = False
        try:
            while True:
                kind, flags, body = await _read_packet(reader)
                if kind == 1:  # CONNECT: protocol name, then its level (4: 3.1.1, 5: MQTT 5)
                    v5 = body[2 + int.from_bytes(body[:2], "big")] == 5
                    writer.write(b"\x20\x03\x00\x00\x00" if v5 else b"\x20\x02\x00\x00")  # MQTT 5: no properties
                elif kind == 3 and (flags >> 1) & 3 == 1 and self.publish == "ack":  # QoS 1 PUBLISH
                    topic_len = int.from_bytes(body[:2], "big")
                    writer.write(b"\x40\x02" + body[2 + topic_len : 4 + topic_len])
                elif kind == 8:  # SUBSCRIBE: packet id, [MQTT 5: properties], then (topic, QoS) pairs
                    self.subscribes += 1
                    self._note()
                    count, i = 0, 2
                    if v5:
                        i += 1 + body[2]  # properties of fewer than 128 bytes (paho sends none)
                    while i < len(body):
                        i += 2 + int.from_bytes(body[i : i + 2], "big") + 1
                        count += 1
                    granted = {"grant": b"\x01", "refuse": b"\x80"}.get(self.subscribe)
                    if granted is not None:
                        writer.write(bytes([0x90, 2 + v5 + count]) + body[:2] + b"\x00" * v5 + granted * count +
                                     (self.retained[v5] if self.subscribe == "grant" else b""))
                elif kind == 12:  # PINGREQ
                    writer.write(b"\xd0\x00")
                elif kind == 14:  # DISCONNECT
                    self.disconnects += 1
                    return
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            self.aborts += 1
        finally:
            self._writers.discard(writer)
            writer.close()
            self._note()


def publish_many(port: int, messages: list[tuple[str, bytes | str, bool]], *, host: str = "127.0.0.1") -> None:
    """Publish (topic, payload, retain) messages at QoS 1, in order, with many in flight; return once all are
    acknowledged."""
    client = paho.Client(CallbackAPIVersion.VERSION2, client_id=f"test-bulk-{time.monotonic_ns()}")
    client.max_inflight_messages_set(1000)
    client.max_queued_messages_set(0)
    client.connect(host, port)
    client.loop_start()
    try:
        infos = [client.publish(topic, payload, qos=1, retain=retain) for topic, payload, retain in messages]
        for info in infos:
            info.wait_for_publish(timeout=60)
            if not info.is_published():
                raise RuntimeError(f"a publish of {len(messages)} was not acknowledged")
    finally:
        client.disconnect()
        client.loop_stop()


class SysCounter:
    """The values mosquitto publishes on a $SYS topic (start mosquitto with a short sys_interval_s)."""

    def __init__(self, port: int, topic: str, host: str = "127.0.0.1") -> None:
        self.values: list[float] = []
        self._client = paho.Client(CallbackAPIVersion.VERSION2, client_id=f"test-sys-{time.monotonic_ns()}")
        self._client.on_message = lambda c, u, m: self.values.append(float(m.payload))
        self._client.connect(host, port)
        self._client.subscribe(topic)
        self._client.loop_start()

    async def settles_at(self, value: float, timeout_s: float = 15.0) -> bool:
        """Whether the value is (or becomes, within the deadline) `value`: mosquitto publishes a $SYS counter when it
        changes, at most every sys_interval_s, and retained, so the first one comes at once."""
        deadline = time.monotonic() + timeout_s
        while not self.values or self.values[-1] != value:
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.05)
        return True

    def close(self) -> None:
        self._client.disconnect()
        self._client.loop_stop()


def publish_packet(topic: str, payload: bytes, *, retain: bool = False, v5: bool = False) -> bytes:
    """An MQTT 3.1.1 (or MQTT 5, without properties) QoS 0 PUBLISH packet."""
    name = topic.encode()
    body = len(name).to_bytes(2, "big") + name + b"\x00" * v5 + payload
    length, remaining = bytearray(), len(body)
    while True:
        byte, remaining = remaining % 128, remaining // 128
        length.append(byte | (0x80 if remaining else 0))
        if not remaining:
            break
    return bytes([0x31 if retain else 0x30]) + bytes(length) + body


async def _read_packet(reader: asyncio.StreamReader) -> tuple[int, int, bytes]:
    """(packet type, flags, body) of the next MQTT packet."""
    header = (await reader.readexactly(1))[0]
    length, multiplier = 0, 1
    while True:
        byte = (await reader.readexactly(1))[0]
        length += (byte & 0x7F) * multiplier
        multiplier *= 128
        if not byte & 0x80:
            break
    return header >> 4, header & 0x0F, await reader.readexactly(length)

"""The five scenarios. Each returns a plain dict of numbers (it goes into the JSON as is).

The device-import scenarios (bench.imports) reuse `throughput` and `latency` with a Contender whose `shape`
says how its devices publish.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from bench.load import Publisher, StateShape
from bench.procs import REPO, Broker, Child, ProcStats
from bench.rig import Forwarder, Hubd, NodeRed, Receiver, http_json, wait_until
from bench.stats import histogram_delta, latency_summary, read_histogram, sustained_rate

Result = dict[str, Any]
STAGES = "hubd_event_stage_seconds"  # hubd's histogram of where an event's time goes


@dataclass(frozen=True)
class Params:
    """Sizes and rates of one run (see `python -m bench --help`)."""

    devices: int
    throughput_events: int
    rates: tuple[float, ...]
    latency_s: float
    scale_devices: int
    backlog_events: int
    webhook_calls: int
    flood_rate: float
    flood_s: float
    flood_event_rate: float
    synchronous: str


@dataclass
class Rig:
    """What every scenario shares."""

    workdir: Path
    broker: Broker
    receiver: Receiver
    publisher: Publisher
    params: Params

    @classmethod
    def start(cls, workdir: Path, params: Params) -> Rig:
        """Start mosquitto (no persistence, a wide in-flight window), the platform simulator and the publisher."""
        broker = Broker(workdir / "mosquitto", max_inflight=2000)
        broker.start()
        receiver = Receiver(workdir)
        receiver.start()
        return cls(workdir, broker, receiver, Publisher(broker.port, "bench-devices"), params)

    def stop(self) -> None:
        """Stop the publisher, the simulator and mosquitto."""
        self.publisher.close()
        self.receiver.stop()
        self.broker.stop()


class Running(Protocol):
    """A started contender process."""

    child: Child

    def stop(self) -> None: ...


@dataclass
class Contender:
    """One MQTT -> platform translator under test, with its platform user and MQTT base topic.

    `shape`: how its devices' states are published when not on hubd's own topics under `base` (bench.imports).
    """

    name: str
    user: str
    base: str
    proc: Running
    shape: StateShape | None = None

    def stats(self) -> ProcStats:
        return self.proc.child.stats()


class RssSampler:
    """Samples a process's RSS every 50 ms on a thread; `peak_mib` is the largest value seen."""

    def __init__(self, sample: Callable[[], ProcStats]) -> None:
        self._sample = sample
        self.peak_mib = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.peak_mib = max(self.peak_mib, self._sample().rss_mib)
            except (OSError, IndexError):
                return
            self._stop.wait(0.05)


# --- contenders -------------------------------------------------------------------------------------------------

def start_hubd(rig: Rig) -> tuple[Contender, Hubd]:
    """hubd with a bound user and rig.params.devices sensors known to the platform."""
    # The webhook's per-token minute limit must let the timed calls through (the over-limit token uses it up).
    limits = {"webhook": {"per_minute": rig.params.webhook_calls + 50, "per_day": 1_000_000}}
    hub = Hubd(rig.workdir / "hubd", mqtt_port=rig.broker.port, receiver=rig.receiver, base_topic="hubd",
               synchronous=rig.params.synchronous, extra=limits)
    hub.start()
    hub.bind("hubd-user")
    rig.publisher.configs("hubd", range(rig.params.devices))
    rig.receiver.wait_endpoints("hubd-user", rig.params.devices, 60)
    return Contender("hubd", "hubd-user", "hubd", hub), hub


def start_forwarder(rig: Rig) -> Contender:
    return _start_other(rig, "forwarder", "fwd", Forwarder, 60)


def start_node_red(rig: Rig) -> Contender:
    return _start_other(rig, "node-red", "nr", NodeRed, 120)


def _start_other(rig: Rig, name: str, base: str, kind: type[Forwarder] | type[NodeRed], timeout_s: float) -> Contender:
    """A contender that is not hubd: the user's token comes from the receiver, not from a bind."""
    user = f"{base}-user"
    token = rig.receiver.token(user)
    rig.publisher.configs(base, range(rig.params.devices))
    proc = kind(rig.workdir, mqtt_port=rig.broker.port, receiver=rig.receiver, base=base, token=token)
    proc.start()
    rig.receiver.wait_endpoints(user, rig.params.devices, timeout_s)
    return Contender(name, user, base, proc)


# --- 1 and 2: throughput and latency ----------------------------------------------------------------------------

def _collect(rig: Rig, who: Contender, expected: int, timeout_s: float) -> tuple[list[float], list[float], bool]:
    """Wait for `expected` ChangeReports, then take (latencies, receipt times, complete)."""
    latencies, times, complete, _ = _collect_seqs(rig, who, expected, timeout_s)
    return latencies, times, complete


def _collect_seqs(rig: Rig, who: Contender, expected: int, timeout_s: float,
                  stall_s: float = 15.0) -> tuple[list[float], list[float], bool, list[int]]:
    """Like _collect, plus the sequence numbers received (in receipt order)."""
    complete = True
    try:
        rig.receiver.wait_received(who.user, expected, timeout_s, stall_s)
    except TimeoutError:
        complete = False
    taken = rig.receiver.take(who.user)
    sent_at = rig.publisher.sent_at
    seqs = [int(s) for s in taken["seqs"]]
    latencies = [t - sent_at[s] for s, t in zip(seqs, taken["times"], strict=True)]
    return latencies, list(taken["times"]), complete, seqs


def throughput(rig: Rig, who: Contender) -> Result:
    """Publish as fast as the broker takes them; sustained events/s from publish to receipt."""
    n = rig.params.throughput_events
    rig.receiver.take(who.user)
    before = who.stats()
    with RssSampler(who.stats) as rss:
        first_publish, last_publish = rig.publisher.burst(who.base, rig.params.devices, n, who.shape)
        latencies, times, complete = _collect(rig, who, n, max(60.0, n / 200))
    after = who.stats()
    received = len(times)
    end_to_end = received / (max(times) - first_publish) if times else 0.0
    return {
        "events": n, "received": received, "complete": complete, "devices": rig.params.devices,
        "publish_rate": n / max(last_publish - first_publish, 1e-9),
        "events_per_s": end_to_end, "sustained_events_per_s": sustained_rate(times),
        "cpu_s_per_1000": (after.cpu_s - before.cpu_s) / max(received, 1) * 1000,
        "peak_rss_mib": rss.peak_mib, "latency": latency_summary(latencies),
    }


def latency(rig: Rig, who: Contender, rate: float) -> Result:
    """Publish at a fixed rate; publish-to-receipt percentiles, CPU per 1,000 events and, for hubd, where the time
    went (its `hubd_event_stage_seconds`: MQTT in -> commit -> POST begins -> the platform's answer)."""
    rig.receiver.take(who.user)
    hub = who.proc if isinstance(who.proc, Hubd) else None
    stages_before = read_histogram(hub.metrics_text(), STAGES) if hub is not None else {}
    cpu_before = who.stats().cpu_s
    n = rig.publisher.paced(who.base, rig.params.devices, rate, rig.params.latency_s, who.shape)
    latencies, _, complete = _collect(rig, who, n, 60)
    cpu = who.stats().cpu_s - cpu_before
    result: Result = {"rate": rate, "events": n, "received": len(latencies), "complete": complete,
                      "cpu_s_per_1000": cpu / max(1, len(latencies)) * 1000, **latency_summary(latencies)}
    if hub is not None:
        result["stages"] = histogram_delta(stages_before, read_histogram(hub.metrics_text(), STAGES))
    return result


# --- 3: scale ---------------------------------------------------------------------------------------------------

def scale(rig: Rig, *, zeroconf: bool) -> Result:
    """10,000 devices with retained configs: start to ready, start to the platform knowing every device, RSS."""
    n = rig.params.scale_devices
    tag = "zc" if zeroconf else "nozc"
    base, user = f"scale-{tag}", f"scale-{tag}-user"
    hub = Hubd(rig.workdir / f"scale-{tag}", mqtt_port=rig.broker.port, receiver=rig.receiver, base_topic=base,
               zeroconf=zeroconf, synchronous=rig.params.synchronous)
    # First life: bind the user while no device exists, then stop; the grant (and its token) stay in SQLite.
    hub.start()
    hub.bind(user)
    idle = hub.child.stats()
    hub.stop()
    rig.publisher.configs(base, range(n))
    rig.publisher.wait_acked()
    rig.receiver.take(user)
    # Second life: every device arrives as a retained config.
    ready_s = hub.start(timeout_s=60)
    try:
        started = hub.child.started_at
        wait_until(lambda: rig.receiver.user(user)["endpoints"] >= n, 120, f"{n} endpoints for {user}", 0.02)
        all_known_s = time.monotonic() - started
        time.sleep(3)
        rest = hub.child.stats()
        devices = hub.metric("hubd_devices")
    finally:
        hub.stop()
    rig.publisher.clear_retained(base, range(n))
    return {"devices": n, "zeroconf": zeroconf, "ready_s": ready_s, "all_known_s": all_known_s,
            "rss_at_rest_mib": rest.rss_mib, "peak_rss_mib": rest.peak_rss_mib, "idle_rss_no_devices_mib": idle.rss_mib,
            "hubd_devices": devices}


# --- 4: backlog -------------------------------------------------------------------------------------------------

def backlog(rig: Rig, who: Contender, hub: Hubd) -> Result:
    """Queue N events during a platform outage (503), then measure the drain after it ends."""
    n = rig.params.backlog_events
    rig.receiver.take(who.user)
    queued_before = hub.metric("hubd_events_queued_total")
    rig.receiver.outage(True)
    with RssSampler(who.stats) as rss:
        started = time.monotonic()
        rig.publisher.burst(who.base, rig.params.devices, n)
        wait_until(lambda: hub.metric("hubd_events_queued_total") - queued_before >= n, max(120.0, n / 100),
                   f"{n} events in hubd's outbox", 0.1)
        queued_s = time.monotonic() - started
        depth = hub.metric("hubd_outbox_depth")
        rig.receiver.outage(False)
        ended = time.time()
        first_seq = rig.publisher.seq - n + 1
        # hubd's retry backoff is capped at 60 s: only a longer silence means a stall.
        _, times, complete, seqs = _collect_seqs(rig, who, n, max(180.0, n / 100), stall_s=70.0)
    first, last = (min(times), max(times)) if times else (ended, ended)
    return {
        "events": n, "received": len(times), "complete": complete, "queued_in_s": queued_s,
        "ingest_events_per_s": n / queued_s, "outbox_depth_at_end": depth,
        "first_delivery_after_s": first - ended, "drain_events_per_s": len(times) / max(last - first, 1e-9),
        "drain_total_s": last - ended, "peak_rss_mib": rss.peak_mib,
        "lost": len(set(range(first_seq, first_seq + n)) - set(seqs)), "duplicates": len(seqs) - len(set(seqs)),
        "in_order_per_device": _in_order(seqs, first_seq, rig.params.devices),
    }


def _in_order(seqs: list[int], first_seq: int, devices: int) -> bool:
    """True when every device's values arrived in publish order (the burst is round-robin over devices)."""
    last: dict[int, int] = {}
    for seq in seqs:
        device = (seq - first_seq) % devices
        if seq < last.get(device, 0):
            return False
        last[device] = seq
    return True


# --- 5: webhook -------------------------------------------------------------------------------------------------

SPEAKER = {"displayName": "Kitchen Speaker", "displayType": "speaker", "recommendRoomName": "Kitchen",
           "sn": "SN-BENCH-1", "tags": ["bench"], "capabilities": []}
TRIGGER = {"type": "tts", "devices": {"isAll": True}, "data": {"text": "hi"}}


def _create_webhook(hub: Hubd, name: str) -> dict[str, Any]:
    """`hubd webhook create -c CONFIG --name NAME` (docs/cli.md)."""
    argv = [sys.executable, "-m", "hubd", "webhook", "create", "-c", str(hub.config_path), "--name", name]
    out = subprocess.run(argv, capture_output=True, text=True, check=False, cwd=hub.workdir)
    if out.returncode != 0:
        raise RuntimeError(f"hubd webhook create failed: {out.stderr.strip()[-500:]}")
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


class CommandListener:
    """A speaker's MQTT side: records when each command arrives on B/device/ID/command."""

    def __init__(self, port: int, base: str) -> None:
        self.arrivals: list[tuple[float, str]] = []
        self._ready = threading.Event()
        self._client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="bench-speaker", clean_session=True)

        def on_connect(client: mqtt.Client, *_args: object) -> None:
            client.subscribe(f"{base}/device/+/command", qos=1)

        self._client.on_connect = on_connect
        self._client.on_subscribe = lambda *_a: self._ready.set()
        self._client.on_message = lambda _c, _u, m: self.arrivals.append((time.time(), m.payload.decode()))
        self._client.connect("127.0.0.1", port, keepalive=60)
        self._client.loop_start()
        if not self._ready.wait(10):
            raise RuntimeError("the bench speaker could not subscribe")

    def close(self) -> None:
        self._client.disconnect()
        self._client.loop_stop()


def webhook(rig: Rig, who: Contender, hub: Hubd, unloaded_p99_ms: float) -> Result:
    """POST /trigger/with/<token> to the speaker's command; then the event p99 under a flood of failing calls."""
    p = rig.params
    speaker = "bench-speaker-1"
    rig.publisher.publish(f"{who.base}/device/{speaker}/config", json.dumps(SPEAKER).encode(), retain=True)
    rig.publisher.publish(f"{who.base}/device/{speaker}/availability", b"online", retain=True)
    good = _create_webhook(hub, "bench")
    limited = _create_webhook(hub, "bench-limited")
    listener = CommandListener(rig.broker.port, who.base)
    try:
        base_url = hub.url

        def trigger(token: str) -> tuple[int, Any]:
            return http_json("POST", f"{base_url}/trigger/with/{token}", TRIGGER)

        wait_until(lambda: trigger(good["token"])[0] == 200, 10, "the speaker to be known to the webhook", 0.1)
        samples: list[float] = []
        statuses: dict[str, int] = {}
        for _ in range(p.webhook_calls):
            seen = len(listener.arrivals)
            sent = time.time()
            status, _reply = trigger(good["token"])
            statuses[str(status)] = statuses.get(str(status), 0) + 1
            if status != 200:
                continue
            wait_until(lambda seen=seen: len(listener.arrivals) > seen, 5, "the speaker command", 0.0005)
            samples.append(listener.arrivals[seen][0] - sent)
        # Use up the limited token's minute, then flood with it and with unknown tokens.
        limit_status = 0
        for _ in range(100_000):
            limit_status = trigger(limited["token"])[0]
            if limit_status == 429:
                break
        urls = [f"{base_url}/trigger/with/not-a-token-{i}" for i in range(3)]
        urls.append(f"{base_url}/trigger/with/{limited['token']}")
        flood = Child("flood", [sys.executable, "-m", "bench.flood", *urls, "--rate", str(p.flood_rate),
                                "--duration", str(p.flood_s)], rig.workdir / "flood.log", cwd=REPO)
        rig.receiver.take(who.user)
        before = who.stats()
        flood.start()
        time.sleep(0.5)
        n = rig.publisher.paced(who.base, p.devices, p.flood_event_rate, max(1.0, p.flood_s - 1.5))
        latencies, _, complete = _collect(rig, who, n, 60)
        assert flood.proc is not None
        flood.proc.wait(timeout=p.flood_s + 60)
        after = who.stats()
        flood.stop()
        tail = flood.log_tail(5).strip().splitlines()
        flood_result = json.loads(tail[-1]) if tail else {}
    finally:
        listener.close()
    loaded = latency_summary(latencies)
    return {
        "calls": p.webhook_calls, "statuses": statuses,
        **{f"trigger_{k}": v for k, v in latency_summary(samples).items()},
        "flood": flood_result, "flood_event_rate": p.flood_event_rate, "flood_events": n, "complete": complete,
        "events_under_flood": loaded, "unloaded_p99_ms": unloaded_p99_ms,
        "hubd_cpu_s_during_flood": after.cpu_s - before.cpu_s,
    }


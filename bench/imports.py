"""The device-import scenarios: devices hubd imports through a dialect, measured like the native-topic ones.

- **discovery** (Home Assistant MQTT discovery, `homeassistant: {enabled: true}`): N temperature sensors, each
  one retained `<prefix>/sensor/<node>/<object>/config` with `device_class: temperature`, `°C`, a
  `state_topic`, a `value_template` and a device block with identifiers. Even-numbered devices announce
  themselves as ESPHome does (abbreviated keys as in tests/fixtures/homeassistant/esphome_garagedoor1_sht3x.json,
  `dev.ids` a MAC, a retained `online` on their availability topic, a plain-number state read by
  `{{ value | float | round(1) }}`); odd-numbered ones as zigbee2mqtt's discovery does (full keys as in
  z2m_weather_WSDCGQ11LM.json, availability on its bridge/state, a JSON state `{"temperature": SEQ}` read by
  `{{ value_json["temperature"] }}`). endpointId: the first identifier made topic-safe.
- **zigbee2mqtt** (`zigbee2mqtt: {enabled: true}`): one retained `<base>/bridge/devices` with the Coordinator
  and N Aqara WSDCGQ11LM temperature/humidity/pressure sensors (the entry of
  tests/fixtures/zigbee2mqtt/aqara_WSDCGQ11LM_temperature.json: its exposes and options), `<base>/bridge/state`
  online, then every state is the device's whole state on `<base>/<friendly_name>`: 10 keys (the fixture's
  battery, humidity, linkquality, power_outage_count, pressure, temperature, voltage, plus device_temperature,
  update and update_available), only `temperature` changing. endpointId: the ieee_address.
- **tasmota** (`tasmota: {enabled: true}`): N Tasmota devices with a DS18B20, each announcing itself as Tasmota
  does (a retained `<prefix>/<MAC>/config` in the shape of tests/fixtures/tasmota/atomlite2_rgb_light.json with
  no relay, its `/sensors` and a retained `tele/<topic>/LWT` Online), then every state is its
  `tele/<topic>/SENSOR` as tests/fixtures/tasmota/docs_sensors.json's DS18B20 (`Time`, `Id`, `TempUnit` beside
  the Temperature). endpointId: the MAC.
- **shelly** (`shelly: {enabled: true}`): N Gen1 Shelly H&T sensors (`SHHT-1`), each with its retained
  `shellies/<id>/announce` (the shape of tests/fixtures/shelly/gen1_messages.json's), `online` true and a first
  `sensor/temperature` (a Gen1 device's components are learned from its topics), then every state is its
  `shellies/<id>/sensor/temperature`, a plain number. endpointId: the device id. (Gen2+ devices are found by asking
  them over RPC, which needs a device that answers: the Gen2+ decode is timed in-process, `shelly-gen2`.)

Each starts its own hubd (own database, own platform user, only that import enabled), binds the user,
publishes the retained messages, and waits until the platform has every expected endpointId
(AddOrUpdateReport). Then a warm-up: one state per device until each has reached the platform, because a
discovered entity's state topic is subscribed only once its config is read (a state published before that
SUBACK is not delivered), and a zigbee2mqtt device's first state also reports its Humidity once. Then
`scenarios.throughput` and `scenarios.latency` run unchanged with the import's `StateShape`. Every value is
SEQ, unique in the run, and reaches the platform unchanged: `float | round(1)` renders 12345.0, hubd keeps °C
to 0.01, and the receiver matches each ChangeReport's Temperature to its publish by value.

`decode_costs` times the dialects' decode alone, in this process (no broker, no hubd): µs per state message of
the same fleets, hubd's own topics included, taking turns. `start` records them with the ready figures, and
`python -m bench.imports [--devices N]` prints them: on a machine shared with other work they are the steady
figures the end-to-end runs cannot isolate.
"""

from __future__ import annotations

import contextlib
import gc
import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from bench.load import StateShape, device_id
from bench.rig import Hubd
from bench.scenarios import Contender, Result, Rig
from simulators.discovery_tasmota import tasmota_config

IMPORTS = ("discovery", "zigbee2mqtt", "tasmota", "shelly")


def label(name: str) -> str:
    """An import's name in the report: its dialect's on the devices page (the table's), discovery's shortened."""
    from hubd.dialects.enabled import labels

    return "HA discovery" if name == "discovery" else labels()[name]["short"]
DISCOVERY_PREFIX = "bench-ha"  # hubd's homeassistant.discovery_prefix in the discovery scenario
Z2M_HA_BASE = "bench-z2m-ha"  # the base topic of the zigbee2mqtt that announces half the discovery devices
Z2M_BASE = "bench-z2m"  # hubd's zigbee2mqtt.base_topic in the zigbee2mqtt scenario
TASMOTA_PREFIX = "bench-tasmota/discovery"  # hubd's tasmota.discovery_prefix in the tasmota scenario
COORDINATOR = "0x00124b00120144ae"
_UNSAFE_ID = re.compile(r"[^A-Za-z0-9._-]")  # docs/devices.md: endpointIds keep A-Za-z0-9._- only
_SEQ = -987654321  # stands for SEQ while a payload template is built
# hubd's counters of messages it could not use: all should stay 0 during a scenario.
PROBLEM_METRICS = ("hubd_device_messages_invalid_total", "hubd_device_messages_failed_total",
                   "hubd_mqtt_ignored_total")


def endpoint_id(raw: str) -> str:
    """The contract's rule for an imported device's endpointId (the bench's own copy, not hubd's)."""
    return _UNSAFE_ID.sub("_", raw)[:256] or "_"


@dataclass(frozen=True)
class Fleet:
    """What one import scenario publishes and expects."""

    name: str  # the scenario
    config: dict[str, Any]  # hubd's config section that enables the import
    where: str  # the topic prefix its devices live under (for the record)
    retained: list[tuple[str, bytes]]  # published retained before the devices can be ready, in order
    endpoint_ids: set[str]  # what the platform must have announced: the ready condition
    shape: StateShape  # how one state of device i carrying SEQ is published
    notes: dict[str, Any] = field(default_factory=dict)


def _shape(topics: list[str], heads: list[bytes], tails: list[bytes]) -> StateShape:
    def shape(index: int, seq: int) -> tuple[str, bytes]:
        return topics[index], b"%b%d%b" % (heads[index], seq, tails[index])

    return shape


def _json(data: Any) -> bytes:
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode()


def _split(data: dict[str, Any]) -> tuple[bytes, bytes]:
    """A JSON payload cut where SEQ goes (the `_SEQ` placeholder)."""
    head, tail = _json(data).split(b"%d" % _SEQ)
    return head, tail


# --- discovery ----------------------------------------------------------------------------------------------------

def _esphome(i: int) -> tuple[str, dict[str, Any], str, str]:
    """An ESPHome board's temperature entity: (config topic, config, state topic, availability topic)."""
    node, mac = f"bench-esp-{i:04d}", f"b4e62d{i:06x}"
    object_id = f"bench_{i:04d}_temperature"
    state, status = f"{node}/sensor/{object_id}/state", f"{node}/status"
    config = {"sug_dsp_prc": 1, "unit_of_meas": "°C", "stat_cla": "measurement", "name": f"Bench {i:04d} Temperature",
              "dev_cla": "temperature", "stat_t": state, "avty_t": status, "uniq_id": f"ESPsensor{object_id}",
              "val_tpl": "{{ value | float | round(1) }}",
              "dev": {"ids": mac, "name": node, "sw": "2026.8.0 (config hash 0x0dd1e1e6)", "mdl": "esp32",
                      "mf": "Espressif", "cns": [["mac", mac]]}}
    return f"{DISCOVERY_PREFIX}/sensor/{node}/{object_id}/config", config, state, status


def _z2m_discovery(i: int) -> tuple[str, dict[str, Any], str]:
    """zigbee2mqtt's discovery config of an Aqara sensor's temperature: (config topic, config, state topic)."""
    ieee, name = f"0x00158d00{i:08x}", f"bench_weather_{i:04d}"
    state = f"{Z2M_HA_BASE}/{name}"
    config = {
        "unit_of_measurement": "°C", "device_class": "temperature", "state_class": "measurement",
        "value_template": '{{ value_json["temperature"] }}', "state_topic": state,
        "object_id": f"{name}_temperature", "default_entity_id": f"sensor.{name}_temperature",
        "unique_id": f"{ieee}_temperature_zigbee2mqtt",
        "origin": {"name": "Zigbee2MQTT", "sw": "2.12.1", "url": "https://www.zigbee2mqtt.io"},
        "device": {"identifiers": [f"zigbee2mqtt_{ieee}"], "manufacturer": "Aqara",
                   "model": "Temperature and humidity sensor", "model_id": "WSDCGQ11LM", "name": name,
                   "via_device": f"zigbee2mqtt_bridge_{COORDINATOR}"},
        "availability": [{"topic": f"{Z2M_HA_BASE}/bridge/state", "value_template": "{{ value_json.state }}"}],
        "enabled_by_default": True,
    }
    return f"{DISCOVERY_PREFIX}/sensor/{ieee}/temperature/config", config, state


def discovery_fleet(devices: int) -> Fleet:
    retained: list[tuple[str, bytes]] = [(f"{Z2M_HA_BASE}/bridge/state", b'{"state":"online"}')]
    ids: set[str] = set()
    topics: list[str] = []
    heads: list[bytes] = []
    tails: list[bytes] = []
    for i in range(devices):
        if i % 2 == 0:
            topic, config, state, status = _esphome(i)
            retained += [(status, b"online"), (topic, _json(config))]
            heads.append(b"")
            tails.append(b"")
            ids.add(endpoint_id(config["dev"]["ids"]))
        else:
            topic, config, state = _z2m_discovery(i)
            retained.append((topic, _json(config)))
            head, tail = _split({"temperature": _SEQ})
            heads.append(head)
            tails.append(tail)
            ids.add(endpoint_id(config["device"]["identifiers"][0]))
        topics.append(state)
    return Fleet("discovery", {"homeassistant": {"enabled": True, "discovery_prefix": DISCOVERY_PREFIX}},
                 DISCOVERY_PREFIX, retained, ids, _shape(topics, heads, tails),
                 {"esphome_style": (devices + 1) // 2, "zigbee2mqtt_style": devices // 2})


# --- zigbee2mqtt --------------------------------------------------------------------------------------------------

def _numeric(name: str, label: str, description: str, unit: str | None, access: int = 1,
             low: int | None = None, high: int | None = None) -> dict[str, Any]:
    """One numeric expose or option, with zigbee2mqtt's keys."""
    out: dict[str, Any] = {"access": access, "description": description, "label": label, "name": name,
                           "property": name, "type": "numeric"}
    if unit is not None:
        out["unit"] = unit
    if high is not None:
        out["value_max"] = high
    if low is not None:
        out["value_min"] = low
    return out


def _digits(what: str) -> dict[str, Any]:
    return _numeric(f"{what}_precision", f"{what.capitalize()} precision",
                    f"Number of digits after decimal point for {what}, takes into effect on next report of device.",
                    None, 2, 0, 3)


def _offset(what: str) -> dict[str, Any]:
    return _numeric(f"{what}_calibration", f"{what.capitalize()} calibration",
                    f"Calibrates the {what} value (absolute offset), takes into effect on next report of device.",
                    None, 2)


# The WSDCGQ11LM definition of tests/fixtures/zigbee2mqtt/aqara_WSDCGQ11LM_temperature.json (a real zigbee2mqtt
# 1.33.2 installation's bridge/devices), rebuilt key for key.
WSDCGQ11LM = {
    "description": "Aqara temperature, humidity and pressure sensor",
    "exposes": [
        _numeric("battery", "Battery", "Remaining battery in %, can take up to 24 hours before reported.", "%",
                 low=0, high=100),
        _numeric("temperature", "Temperature", "Measured temperature value", "°C"),
        _numeric("humidity", "Humidity", "Measured relative humidity", "%"),
        _numeric("pressure", "Pressure", "The measured atmospheric pressure", "hPa"),
        _numeric("voltage", "Voltage", "Voltage of the battery in millivolts", "mV"),
        _numeric("linkquality", "Linkquality", "Link quality (signal strength)", "lqi", low=0, high=255),
    ],
    "model": "WSDCGQ11LM",
    "options": [_offset("temperature"), _digits("temperature"), _offset("pressure"), _digits("pressure"),
                _digits("humidity"), _offset("humidity")],
    "supports_ota": False,
    "vendor": "Xiaomi",
}
_ENDPOINTS = {"1": {"bindings": [], "clusters": {"input": [], "output": []}, "configured_reportings": [],
                    "scenes": []}}


def _z2m_entry(i: int) -> dict[str, Any]:
    return {"definition": WSDCGQ11LM, "disabled": False, "endpoints": _ENDPOINTS,
            "friendly_name": f"Room {i:04d}/Aqara weather", "ieee_address": f"0x00158d00{i:08x}",
            "interview_completed": True, "interviewing": False, "manufacturer": "LUMI", "model_id": "lumi.weather",
            "network_address": 1000 + i, "power_source": "Battery", "supported": True, "type": "EndDevice"}


def _z2m_state(i: int) -> dict[str, Any]:
    """The device's whole state as zigbee2mqtt publishes it; only `temperature` (SEQ) ever changes."""
    return {"battery": 100 - i % 40, "device_temperature": 24 + i % 5, "humidity": round(40 + (i % 300) / 10, 2),
            "linkquality": 40 + i % 200, "power_outage_count": 1600 + i, "pressure": round(950 + (i % 90) / 3, 1),
            "temperature": _SEQ, "update": {"installed_version": -1, "latest_version": -1, "state": "idle"},
            "update_available": False, "voltage": 2900 + i % 200}


def zigbee2mqtt_fleet(devices: int) -> Fleet:
    coordinator = {"definition": None, "disabled": False, "endpoints": _ENDPOINTS, "friendly_name": "Coordinator",
                   "ieee_address": COORDINATOR, "interview_completed": True, "interviewing": False,
                   "network_address": 0, "supported": True, "type": "Coordinator"}
    entries = [coordinator, *(_z2m_entry(i) for i in range(devices))]
    listing = _json(entries)
    topics, heads, tails = [], [], []
    for i, entry in enumerate(entries[1:]):
        topics.append(f"{Z2M_BASE}/{entry['friendly_name']}")
        head, tail = _split(_z2m_state(i))
        heads.append(head)
        tails.append(tail)
    retained = [(f"{Z2M_BASE}/bridge/state", b'{"state":"online"}'), (f"{Z2M_BASE}/bridge/devices", listing)]
    ids = {endpoint_id(e["ieee_address"]) for e in entries[1:]}
    shape = _shape(topics, heads, tails)
    return Fleet("zigbee2mqtt", {"zigbee2mqtt": {"enabled": True, "base_topic": Z2M_BASE}}, Z2M_BASE, retained, ids,
                 shape, {"bridge_devices_bytes": len(listing), "state_keys": len(_z2m_state(0)),
                         "state_bytes": len(shape(0, 10_000)[1]) if devices else 0})


# --- tasmota -------------------------------------------------------------------------------------------------------

def _tasmota_config(i: int) -> dict[str, Any]:
    """Device i's discovery config: a sensor, no relay."""
    return tasmota_config(mac=f"B0B0B0{i:06X}", device_name=f"Sensor {i}", model="ESP32-DevKit",
                          topic=f"bench-tas-{i:05d}", host_name=f"bench-tas-{i:05d}", ip="192.0.2.10")


def _tasmota_reading(temperature: float) -> dict[str, Any]:
    return {"Time": "2026-08-18T12:00:00", "DS18B20": {"Id": "030597946B04", "Temperature": temperature},
            "TempUnit": "C"}


def tasmota_fleet(devices: int) -> Fleet:
    retained: list[tuple[str, bytes]] = []
    topics, heads, tails, ids = [], [], [], set()
    for i in range(devices):
        config = _tasmota_config(i)
        where = f"{TASMOTA_PREFIX}/{config['mac']}"
        retained += [(f"{where}/config", _json(config)),
                     (f"{where}/sensors", _json({"sn": _tasmota_reading(20.9), "ver": 1})),
                     (f"tele/{config['t']}/LWT", b"Online")]
        topics.append(f"tele/{config['t']}/SENSOR")
        head, tail = _split(_tasmota_reading(_SEQ))
        heads.append(head)
        tails.append(tail)
        ids.add(endpoint_id(config["mac"]))
    shape = _shape(topics, heads, tails)
    return Fleet("tasmota", {"tasmota": {"enabled": True, "discovery_prefix": TASMOTA_PREFIX}}, TASMOTA_PREFIX,
                 retained, ids, shape, {"state_bytes": len(shape(0, 10_000)[1]) if devices else 0})


# --- shelly -------------------------------------------------------------------------------------------------------

def _shelly_id(i: int) -> str:
    return f"shellyht-B1{i:04X}"


def shelly_fleet(devices: int) -> Fleet:
    retained: list[tuple[str, bytes]] = []
    topics, heads, tails, ids = [], [], [], set()
    for i in range(devices):
        device = _shelly_id(i)
        announce = {"id": device, "model": "SHHT-1", "mac": f"E8DB84B1{i:04X}", "ip": "192.0.2.20", "new_fw": False,
                    "fw_ver": "20210710-130145/v1.11.0-g12a9327-master"}
        retained += [(f"shellies/{device}/announce", _json(announce)), (f"shellies/{device}/online", b"true"),
                     (f"shellies/{device}/sensor/temperature", b"20.9")]
        topics.append(f"shellies/{device}/sensor/temperature")
        heads.append(b"")
        tails.append(b"")
        ids.add(endpoint_id(device))
    shape = _shape(topics, heads, tails)
    return Fleet("shelly", {"shelly": {"enabled": True}}, "shellies", retained, ids, shape,
                 {"state_bytes": len(shape(0, 10_000)[1]) if devices else 0})


FLEETS: dict[str, Callable[[int], Fleet]] = {"discovery": discovery_fleet, "zigbee2mqtt": zigbee2mqtt_fleet,
                                             "tasmota": tasmota_fleet, "shelly": shelly_fleet}


# --- running one ------------------------------------------------------------------------------------------------

@dataclass
class Imported:
    """A started import scenario: its hubd, its devices as a Contender, what readiness took."""

    fleet: Fleet
    who: Contender
    hub: Hubd
    ready: Result


def problems(hub: Hubd) -> dict[str, float]:
    """hubd's counters of messages it rejected, failed on or ignored."""
    return {name: hub.metric(name) for name in PROBLEM_METRICS}


def start(rig: Rig, name: str) -> Imported:
    """hubd with only this import on, a bound user, every device on the platform and warmed up."""
    n = rig.params.devices
    fleet = FLEETS[name](n)
    user = f"{name}-user"
    hub = Hubd(rig.workdir / name, mqtt_port=rig.broker.port, receiver=rig.receiver, base_topic=f"hubd-{name}",
               synchronous=rig.params.synchronous, extra=fleet.config)
    hub.start()
    try:
        hub.bind(user)
        published = time.monotonic()
        for topic, payload in fleet.retained:
            rig.publisher.publish(topic, payload, retain=True)
        rig.receiver.wait_endpoint_ids(user, fleet.endpoint_ids, max(60.0, n / 20))
        ready_s = time.monotonic() - published
        who = Contender(name, user, fleet.where, hub, fleet.shape)
        warm = warm_up(rig, who, n)
        ready: Result = {"devices": n, "endpoints": len(fleet.endpoint_ids), "retained_messages": len(fleet.retained),
                         "retained_bytes": sum(len(p) for _, p in fleet.retained),
                         "configs_to_all_endpoints_s": ready_s, **warm, **fleet.notes,
                         "problems_after_warm_up": problems(hub),
                         "decode_us_per_state": measured_decode_costs(n)[name],
                         "native_decode_us_per_state": measured_decode_costs(n)["native"]}
    except BaseException:
        hub.stop()
        clear(rig, fleet)
        raise
    return Imported(fleet, who, hub, ready)


def starter(name: str) -> Callable[[Rig], tuple[Contender, Hubd]]:
    """For `--profile` with `--only discovery` (or zigbee2mqtt): start that import's hubd, ready and warmed up."""
    def run(rig: Rig) -> tuple[Contender, Hubd]:
        started = start(rig, name)
        return started.who, started.hub

    return run


def warm_up(rig: Rig, who: Contender, devices: int, timeout_s: float = 120.0) -> Result:
    """One state per device, again for those whose state did not arrive, until every device's has."""
    rig.receiver.take(who.user)
    owner: dict[int, int] = {}
    pending = set(range(devices))
    rounds = 0
    began = time.monotonic()
    while pending:
        if rounds and time.monotonic() - began > timeout_s:
            raise TimeoutError(f"{len(pending)} of {devices} {who.name} devices never delivered a state "
                               f"in {rounds} rounds (e.g. device {min(pending)})")
        rounds += 1
        for index in sorted(pending):
            owner[rig.publisher.state(who.base, index, who.shape)] = index
        with contextlib.suppress(TimeoutError):  # those lost before their topic was subscribed go again
            rig.receiver.wait_received(who.user, len(pending), 30.0, stall_s=3.0)
        taken = rig.receiver.take(who.user)
        pending -= {owner[int(s)] for s in taken["seqs"] if int(s) in owner}
    return {"warm_up_rounds": rounds, "warm_up_s": time.monotonic() - began}


def clear(rig: Rig, fleet: Fleet) -> None:
    """Remove the scenario's retained messages from the broker (after its hubd stopped)."""
    for topic, _ in fleet.retained:
        rig.publisher.publish(topic, b"", retain=True)
    rig.publisher.wait_acked()


# --- the decode alone ---------------------------------------------------------------------------------------------

NATIVE_BASE = "bench-native"  # the base topic of the native dialect timed next to the imports
_COSTS: dict[int, dict[str, float]] = {}  # decode_costs by fleet size, measured once per bench run


def _native_state(index: int, seq: int) -> tuple[str, bytes]:
    """A state on hubd's own topics, as bench.load publishes it."""
    return f"{NATIVE_BASE}/device/{device_id(index)}/state", b'{"Temperature": %d}' % seq


class _DecodeTimer:
    """One dialect as hubd builds it ("native": hubd's own topics, or an import's from its scenario's config
    section), with the fleet's retained messages read, timed decoding state messages round-robin over the devices
    (those `only` keeps), each with a new SEQ and its own receive time (hubd gives a whole batch one, which is
    cheaper). Every message must come out as one state change, or a round raises."""

    def __init__(self, name: str, devices: int, only: Callable[[int], bool] | None = None) -> None:
        # Imported here: the rest of the bench's driver needs nothing of hubd.
        from hubd.config.model import HubdConfig
        from hubd.dialects.enabled import build_dialects

        self.name = name
        self.dialect: Any
        self.shape: StateShape
        if name == "native":
            self.dialect = build_dialects(HubdConfig.model_validate({"mqtt": {"base_topic": NATIVE_BASE}}))[0]
            self.shape = _native_state
        else:
            fleet = FLEETS[name](devices)
            self.dialect = build_dialects(HubdConfig.model_validate(fleet.config))[-1]  # the import's, after native
            for topic, payload in fleet.retained:  # as retained at start (one not claimed yet is not read: as hubd)
                if self.dialect.claims(topic):
                    self.dialect.decode(topic, payload, time.time(), True)
            self.shape = fleet.shape
        self.indexes = [i for i in range(devices) if only is None or only(i)]
        self.seq = 1_000_000_000

    def round(self, states: int) -> float:
        """µs per message over `states` messages."""
        from hubd.dialects.base import StateReceived

        batch = []
        for n in range(states):
            self.seq += 1
            batch.append(self.shape(self.indexes[n % len(self.indexes)], self.seq))
        decode = self.dialect.decode
        odd: list[Any] = []
        at = time.time()
        began = time.perf_counter()
        for n, (topic, payload) in enumerate(batch):
            out = decode(topic, payload, at + n * 1e-4, False)  # dropped at once, as hubd does after its commit
            if len(out) != 1 or type(out[0]) is not StateReceived:
                odd.append(out)
        spent = time.perf_counter() - began
        if odd:
            raise RuntimeError(f"{self.name}: {len(odd)} of {states} states were not decoded as one change, "
                               f"e.g. {odd[0]}")
        return spent / states * 1e6


class _ShellyGen2Timer(_DecodeTimer):
    """The Shelly dialect decoding Gen2+ NotifyStatus frames (`<id>/events/rpc`, the shape of
    tests/fixtures/shelly/asnowfix_notifications.json's) of relays it knows from their kept routes (as after a
    restart: asking them over RPC needs devices that answer)."""

    def __init__(self, devices: int) -> None:
        from hubd.config.model import HubdConfig
        from hubd.devices.model import Route
        from hubd.dialects.enabled import build_dialects
        from hubd.dialects.shelly.parts import Address, Component, address

        self.name = "shelly-gen2"
        self.dialect = build_dialects(HubdConfig.model_validate({"shelly": {"enabled": True}}))[-1]
        ids = [f"shellyplus1-b0b0{i:08x}" for i in range(devices)]
        self.dialect.restore([(d, Route("shelly", address(Address(d, 2, d, (Component("switch", 0, "switch"),)))))
                              for d in ids])
        heads = [b'{"src":"%b","dst":"%b/events","method":"NotifyStatus","params":{"ts":' % (d.encode(), d.encode())
                 for d in ids]
        topics = [f"{d}/events/rpc" for d in ids]

        def shape(index: int, seq: int) -> tuple[str, bytes]:  # the output alternates: every message a change
            return topics[index], b'%b%d.5,"switch:0":{"id":0,"output":%b,"source":"button"}}}' % (
                heads[index], seq, b"true" if seq % 2 else b"false")
        self.shape = shape
        self.indexes = list(range(devices))
        self.seq = 1_000_000_000


def decode_costs(devices: int, *, states: int = 2_000, rounds: int = 15, templates: bool = False) -> dict[str, float]:
    """µs per state message in each dialect's decode, in this process (no broker, no hubd): hubd's own topics
    ("native"), "discovery", "zigbee2mqtt", "tasmota", "shelly" (Gen1 sensors) and "shelly-gen2" (NotifyStatus of
    Gen2+ relays) (with `templates`, also the discovery fleet's two value
    templates apart). The best of `rounds` rounds of `states` messages each; the dialects take turns round by round,
    so that a machine whose speed drifts meanwhile weighs on all of them alike."""
    timers = [_DecodeTimer("native", devices), _DecodeTimer("discovery", devices),
              _DecodeTimer("zigbee2mqtt", devices), _DecodeTimer("tasmota", devices), _DecodeTimer("shelly", devices),
              _ShellyGen2Timer(devices)]
    if templates:
        esphome = _DecodeTimer("discovery", devices, only=lambda i: i % 2 == 0)
        esphome.name = "discovery, {{ value | float | round(1) }}"
        z2m_style = _DecodeTimer("discovery", devices, only=lambda i: i % 2 == 1)
        z2m_style.name = 'discovery, {{ value_json["temperature"] }}'
        timers += [esphome, z2m_style]
    best = {timer.name: float("inf") for timer in timers}
    # As hubd does once started (hubd.lifecycle): what exists now is frozen out of the collector's passes, which
    # would otherwise walk the fleets' millions of objects here, and hubd's thresholds.
    thresholds = gc.get_threshold()
    gc.collect()
    gc.freeze()
    gc.set_threshold(700, 10, 100)
    try:
        for _ in range(rounds):
            for timer in timers:
                best[timer.name] = min(best[timer.name], timer.round(states))
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()
    return best


def measured_decode_costs(devices: int) -> dict[str, float]:
    """`decode_costs` once per fleet size in this bench run (the first import to start measures them, its hubd
    idle after the warm-up): every import then reports figures taken side by side with the native ones."""
    if devices not in _COSTS:
        time.sleep(1.0)  # what the warm-up left to hubd (outbox deletes) is done
        _COSTS[devices] = decode_costs(devices)
    return _COSTS[devices]


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(prog="python -m bench.imports",
                                     description="Time the dialects' decode of one state message, in-process.")
    parser.add_argument("--devices", type=int, default=1000, help="devices in each fleet [1000]")
    args = parser.parse_args()
    costs = decode_costs(args.devices, templates=True)
    for what, us in costs.items():
        print(f"{what:45} {us:6.1f} µs per state  ({us / costs['native']:.2f}× native)")

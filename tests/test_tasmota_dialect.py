"""The Tasmota dialect reading real devices' discovery configs, sensors and states (tests/fixtures/tasmota, each with
its source): what each becomes on the platform, names, readings, presses, availability, bad input, restarts and the
devices it imports natively. Pure: no broker."""

from __future__ import annotations

import json

from tasmota_helpers import (
    ATOM,
    BASIC,
    FIXTURES,
    NOW,
    PREFIX,
    announce,
    basic_config,
    configs,
    make,
    messages,
    operations,
    payload,
    presses,
    publish,
    rejected,
    states,
)

from hubd.config.model import TasmotaConfig
from hubd.devices.model import Route
from hubd.dialects.base import Announced, AvailabilityReceived, DeviceGone, InputRejected, Selection, Unexported
from hubd.dialects.tasmota.dialect import TasmotaDialect


def atom_config() -> str:
    return payload("atomlite2_rgb_light", "/config")


def test_an_rgb_light_is_a_light_named_by_its_device_name_on_its_mac_with_brightness_and_colour() -> None:
    dialect = make()
    found = configs(announce(dialect, ATOM, atom_config()))

    assert list(found) == [ATOM]
    light = found[ATOM]
    assert (light.config.displayName, light.config.displayType) == ("AtomLite2", "light")
    assert operations(light) == {"Brightness": ("Set", "SetMax", "SetMin", "Adjust"), "Color": ("Set", "SetRandom"),
                                 "Switch": ("On", "Off")}
    assert light.config.additionalInfo == {"manufacturer": "Tasmota", "model": "M5Stack Atom Lite",
                                           "swVersion": "15.0.1.4"}
    assert ("tele/atomlite2/STATE", 1) in dialect.pending_subscriptions() + dialect.subscriptions()


def test_a_light_reads_power_dimmer_and_colour_from_tele_state_and_stat_result() -> None:
    dialect = make()
    announce(dialect, ATOM, atom_config())

    reported = states(publish(dialect, "tele/atomlite2/STATE", payload("atomlite2_rgb_light", "/STATE")))
    assert reported == {ATOM: {"Switch": "Off", "Brightness": 10, "Color": 0xFF0000}}  # HSBColor 0,100,10: red
    assert states(publish(dialect, "stat/atomlite2/RESULT", {"POWER": "ON"})) == {ATOM: {"Switch": "On"}}
    assert states(publish(dialect, "stat/atomlite2/RESULT", {"POWER1": "OFF", "Dimmer": 55})) == \
        {ATOM: {"Switch": "Off", "Brightness": 55}}


def test_a_two_relay_device_splits_its_second_relay_under_its_own_friendly_name() -> None:
    dialect = make()
    found = configs(announce(dialect, BASIC, basic_config(rl=[1, 1, 0, 0, 0, 0, 0, 0])))

    assert {k: (c.config.displayName, c.config.displayType) for k, c in found.items()} == \
        {BASIC: ("Test", "switch"), f"{BASIC}-relay2": ("Beer", "switch")}
    # FullTopic %topic%/%prefix%/: the topic comes first.
    inputs = publish(dialect, "tasmota_49A3BC/tele/STATE", {"POWER1": "ON", "POWER2": "OFF"})
    assert states(inputs) == {BASIC: {"Switch": "On"}, f"{BASIC}-relay2": {"Switch": "Off"}}


def test_identifiers_and_tasmota_defaults_are_never_names_the_model_is_said_instead() -> None:
    dialect = make()
    defaults = basic_config(dn="Tasmota", fn=["Tasmota", "Tasmota2", None, None, None], rl=[1, 1, 0, 0])
    found = configs(announce(dialect, BASIC, defaults))
    assert {c.config.displayName for c in found.values()} == {"Sonoff Basic", "Sonoff Basic Two"}

    for identifier in ("00000049A3BC", "tasmota_49A3BC", "tasmota-49A3BC-0956", "00:00:00:49:A3:BC"):
        renamed = configs(announce(make(), BASIC, basic_config(dn=identifier, fn=[identifier], rl=[1])))
        assert renamed[BASIC].config.displayName == "Sonoff Basic", identifier


def test_a_devices_name_does_not_change_while_its_sensors_arrive() -> None:
    dialect = make()
    first = configs(announce(dialect, BASIC, basic_config(dn="Nodemcu One", rl=[1])))
    later = configs(announce(dialect, BASIC, basic_config(dn="Nodemcu One", rl=[1]),
                             sensors={"AM2301": {"Temperature": 21.4, "Humidity": 40.2}, "TempUnit": "C"}))

    assert first[BASIC].config.displayName == later[BASIC].config.displayName == "Nodemcu One"
    assert {c.interface for c in later[BASIC].config.capabilities} == {"Switch", "Temperature", "Humidity"}


def test_only_temperature_readings_are_temperatures_an_analog_input_is_not() -> None:
    dialect = make()
    analog, ds18b20, scd40 = (json.loads(p) for t, p in messages("docs_sensors"))
    found = configs(announce(dialect, BASIC, basic_config(rl=[0]),
                             sensors={**analog, **ds18b20, **scd40}))

    assert {k: sorted(c.interface for c in v.config.capabilities) for k, v in found.items()} == {
        BASIC: ["Humidity", "Temperature"], f"{BASIC}-SCD40-Temperature": ["Temperature"]}
    notes = {n.name: n for n in found[BASIC].origin.entities}
    assert not notes["ANALOG.A0"].exported and "A0" in notes["ANALOG.A0"].reason
    assert not notes["SCD40.DewPoint"].exported and not notes["SCD40.CarbonDioxide"].exported

    read = states(publish(dialect, "tasmota_49A3BC/tele/SENSOR", {**analog, **ds18b20, **scd40}))
    assert read == {BASIC: {"Temperature": 20.9, "Humidity": 61}, f"{BASIC}-SCD40-Temperature": {"Temperature": 23.8}}
    fahrenheit = states(publish(dialect, "tasmota_49A3BC/tele/SENSOR",
                                {"DS18B20": {"Temperature": 70.7}, "TempUnit": "F"}))
    assert fahrenheit == {BASIC: {"Temperature": 21.5}}


def test_a_declared_button_rings_on_its_action_only_and_never_from_a_retained_message() -> None:
    dialect = make(doorbells=[("Front*", "SINGLE")])
    config = basic_config(dn="Front Door", rl=[0], btn=[1, 0, 0, 0], so={**basic_config()["so"], "73": 1})
    found = configs(announce(dialect, BASIC, config))
    assert found[BASIC].config.capabilities == ()
    single, double = (p for t, p in messages("docs_results") if "Button1" in p)

    assert presses(publish(dialect, "tasmota_49A3BC/stat/RESULT", single)) == [BASIC]
    assert presses(publish(dialect, "tasmota_49A3BC/stat/RESULT", double)) == []
    assert presses(publish(dialect, "tasmota_49A3BC/stat/RESULT", single, retained=True)) == []


def test_a_switch_declared_as_the_doorbell_rings_on_its_action_and_an_undeclared_button_is_a_note() -> None:
    switch = basic_config(dn="Gate", rl=[1], swc=[3, -1], swn=[None, None], so={**basic_config()["so"], "114": 1})
    dialect = make(doorbells=[("Gate", "ON")])
    announce(dialect, BASIC, switch)
    on = next(p for t, p in messages("docs_results") if "Switch1" in p)
    assert presses(publish(dialect, "tasmota_49A3BC/stat/RESULT", on)) == [BASIC]

    plain = make()
    found = configs(announce(plain, BASIC, switch))
    assert [n.reason for n in found[BASIC].origin.entities if n.name == "switch1"] == \
        ["Switch1's actions are a DoorbellPress when the device is declared in doorbells"]
    assert presses(publish(plain, "tasmota_49A3BC/stat/RESULT", on)) == []


def test_a_shutter_reads_its_position_from_result_and_an_inverted_one_the_other_way() -> None:
    dialect = make()
    found = configs(announce(dialect, BASIC, basic_config(rl=[3, 3, 0, 0], sho=[0, 0])))
    assert found[BASIC].config.displayType == "curtain"
    assert operations(found[BASIC]) == {"MotionSwitch": ("Off",), "Position": ("Set", "Adjust"),
                                        "Switch": ("On", "Off")}
    opening = [p for t, p in messages("docs_results") if "Shutter1" in p]
    assert states(publish(dialect, "tasmota_49A3BC/stat/RESULT", opening[1])) == \
        {BASIC: {"Position": 36, "Switch": "On"}}

    inverted = make()
    announce(inverted, BASIC, basic_config(rl=[3, 3, 0, 0], sho=[1, 0]))
    assert states(publish(inverted, "tasmota_49A3BC/stat/RESULT", opening[0])) == \
        {BASIC: {"Position": 100, "Switch": "On"}}


def test_the_lwt_makes_every_endpoint_of_the_device_available_or_not() -> None:
    dialect = make()
    announce(dialect, BASIC, basic_config(rl=[1, 1, 0, 0]))

    offline = publish(dialect, "tasmota_49A3BC/tele/LWT", "Offline")
    assert {(i.device_id, i.online) for i in offline if isinstance(i, AvailabilityReceived)} == \
        {(BASIC, False), (f"{BASIC}-relay2", False)}
    assert rejected(publish(dialect, "tasmota_49A3BC/tele/LWT", "maybe")) == \
        ["tasmota_49A3BC/tele/LWT: 'maybe' is neither 'Online' nor 'Offline' (the onln and ofln of its discovery "
         "config)"]
    asleep = make()
    announce(asleep, BASIC, {**basic_config(rl=[1]), "dslp": 1})
    assert publish(asleep, "tasmota_49A3BC/tele/LWT", "Offline") == []


def test_a_split_rgbcw_light_is_a_colour_light_and_a_white_one_with_colour_temperature() -> None:
    dialect = make()
    found = configs(announce(dialect, BASIC, basic_config(rl=[2, 2, 0, 0], lt_st=5, lk=0)))

    assert {k: sorted(operations(c)) for k, c in found.items()} == {
        BASIC: ["Brightness", "Color", "Switch"], f"{BASIC}-light2": ["Brightness", "ColorTemperature", "Switch"]}
    read = states(publish(dialect, "tasmota_49A3BC/tele/STATE",
                          {"POWER1": "ON", "POWER2": "OFF", "Dimmer1": 30, "Dimmer2": 80, "CT": 500}))
    assert read == {BASIC: {"Switch": "On", "Brightness": 30},
                    f"{BASIC}-light2": {"Switch": "Off", "Brightness": 80, "ColorTemperature": 0}}


def test_a_config_hubd_cannot_use_is_refused_naming_the_field_and_listed_with_its_reason() -> None:
    dialect = make()
    assert rejected(announce(dialect, BASIC, "not json"))[0].startswith(f"{PREFIX}/{BASIC}/config: not JSON")
    [unusable] = dialect.unexported_devices()
    assert (unusable.endpoint_id, unusable.name) == (BASIC, BASIC)
    assert unusable.reasons[0].startswith("its discovery config cannot be used: not JSON")

    wrong_mac = rejected(announce(dialect, BASIC, basic_config(mac="AABBCCDDEEFF")))
    assert "mac 'AABBCCDDEEFF' is not the MAC in the topic" in wrong_mac[0]
    wildcard = rejected(announce(dialect, BASIC, basic_config(t="kitchen/#", rl=[1])))
    assert "which hubd cannot subscribe or publish to" in wildcard[0]
    assert rejected(announce(dialect, BASIC, basic_config(tp=["cmnd", "stat"])))[0].endswith(
        "tp is a list; Tasmota sends a list of at least 3 texts; the device stays as it was")

    assert configs(announce(dialect, BASIC, basic_config(rl=[1])))
    assert rejected(announce(dialect, BASIC, basic_config(rl="1")))  # a bad update: the device stays as it was
    assert dialect.unexported_devices() == []
    assert states(publish(dialect, "tasmota_49A3BC/tele/STATE", {"POWER": "ON"})) == {BASIC: {"Switch": "On"}}
    assert rejected(publish(dialect, "tasmota_49A3BC/tele/STATE", {"POWER": "MAYBE"})) == \
        ["tasmota_49A3BC/tele/STATE: POWER is 'MAYBE', neither 'ON' nor 'OFF' (the device's state texts)"]


def test_a_device_with_nothing_the_platform_takes_is_listed_not_imported() -> None:
    dialect = make()
    assert announce(dialect, BASIC, payload("ha_default_config_49A3BC", "/config")) == []
    assert dialect.unexported_devices() == [Unexported(
        BASIC, "Test", ("nothing it has reaches the platform (no relay, light, shutter or sensor)",),
        topic=f"tasmota/discovery/{BASIC}/config")]


def test_an_empty_config_removes_the_device_and_frees_its_topics() -> None:
    dialect = make()
    announce(dialect, BASIC, basic_config(rl=[1, 1]))
    dialect.pending_subscriptions()

    gone = announce(dialect, BASIC, "")
    assert sorted(i.device_id for i in gone if isinstance(i, DeviceGone)) == [BASIC, f"{BASIC}-relay2"]
    assert "tasmota_49A3BC/tele/STATE" in dialect.pending_unsubscriptions()
    assert not dialect.claims("tasmota_49A3BC/tele/STATE")


def test_include_and_exclude_leave_a_device_out_with_the_reason() -> None:
    dialect = make(exclude=["Test"])
    assert announce(dialect, BASIC, basic_config(rl=[1])) == []
    assert dialect.unexported_devices() == [Unexported(BASIC, "Test", ("left out by tasmota.include/exclude",),
                                                       topic=f"tasmota/discovery/{BASIC}/config")]


def test_a_new_selection_leaves_out_takes_in_and_declares_doorbells_by_endpoint_id() -> None:
    """SIGHUP or the devices page: include/exclude and doorbells changed at run time, the device worked out again."""
    dialect = make()
    button = basic_config(dn="Front Door", rl=[1], btn=[1, 0, 0, 0], so={**basic_config()["so"], "73": 1})
    assert configs(announce(dialect, BASIC, button))
    single = next(p for t, p in messages("docs_results") if "Button1" in p)
    assert presses(publish(dialect, "tasmota_49A3BC/stat/RESULT", single)) == []
    assert dialect.doorbell_events(BASIC) == ("SINGLE", "DOUBLE", "TRIPLE", "QUAD", "PENTA", "HOLD")

    gone = dialect.reconfigure(Selection(exclude=("Front*",)))
    assert [i.device_id for i in gone if isinstance(i, DeviceGone)] == [BASIC]
    assert dialect.unexported_devices() == [Unexported(BASIC, "Front Door", ("left out by tasmota.include/exclude",),
                                                       ("SINGLE", "DOUBLE", "TRIPLE", "QUAD", "PENTA", "HOLD"),
                                                       topic=f"tasmota/discovery/{BASIC}/config")]
    assert not dialect.claims("tasmota_49A3BC/stat/RESULT")

    back = configs(dialect.reconfigure(Selection(doorbells=((BASIC, "SINGLE"),))))  # the owner's: by endpointId
    assert list(back) == [BASIC] and dialect.unexported_devices() == []
    assert presses(publish(dialect, "tasmota_49A3BC/stat/RESULT", single)) == [BASIC]
    assert dialect.reconfigure(Selection(doorbells=((BASIC, "SINGLE"),))) == []  # nothing changed: nothing said


def test_a_restarted_dialect_reads_states_from_the_kept_routes_before_the_configs_come() -> None:
    first = make()
    found = configs(announce(first, BASIC, basic_config(rl=[1, 1])))
    routes = [(k, c.route) for k, c in found.items()]

    restarted = make()
    restarted.restore([*routes, ("other", Route("tasmota", "{not json"))])
    assert ("tasmota_49A3BC/tele/STATE", 1) in restarted.subscriptions()
    assert states(publish(restarted, "tasmota_49A3BC/tele/STATE", {"POWER1": "OFF", "POWER2": "ON"})) == \
        {BASIC: {"Switch": "Off"}, f"{BASIC}-relay2": {"Switch": "On"}}
    assert [m.topic for m in restarted.requests()] == ["tasmota_49A3BC/cmnd/STATE"]  # asked for its state
    assert restarted.announcements() == [] and restarted.requests() == []  # once
    restarted.subscriptions()  # a new connection: asked again
    assert [m.topic for m in restarted.requests()] == ["tasmota_49A3BC/cmnd/STATE"]
    again = configs(announce(restarted, BASIC, basic_config(rl=[1, 1])))
    assert {k: c.route for k, c in again.items()} == dict(routes)


def test_a_device_seen_through_its_legacy_discovery_is_left_to_the_native_import() -> None:
    legacy = json.loads((FIXTURES.parent / "homeassistant" / "tasmota_relay_FB6A07.json")
                        .read_text(encoding="utf-8"))["configs"][0]["payload"]
    topics = tuple(v for k, v in legacy.items() if k.endswith("_t"))
    announced = Announced("", tuple(legacy["dev"]["ids"]), (), topics)
    dialect = make()
    assert not dialect.imports_natively(announced)  # not (yet) seen natively: discovery imports it

    native = basic_config(mac="A4CF12FB6A07", t="tasmota_FB6A07", ft="%prefix%/%topic%/", rl=[1])
    announce(dialect, "A4CF12FB6A07", native)
    assert dialect.imports_natively(announced)
    elsewhere = Announced("", ("FB6A07",), (), ("tele/other_device/STATE",))
    assert not dialect.imports_natively(elsewhere)  # the same six digits, but another device's topics
    by_connection = Announced("", ("x",), (("mac", "a4:cf:12:fb:6a:07"),), ())
    assert dialect.imports_natively(by_connection)


def test_only_the_command_topics_of_imported_devices_are_its_own() -> None:
    dialect = make()
    announce(dialect, BASIC, basic_config(rl=[1]))
    assert dialect.owns_command_topic("tasmota_49A3BC/cmnd/POWER1")
    assert not dialect.owns_command_topic("tasmota_49A3BC/tele/STATE")
    assert not dialect.owns_command_topic("cmnd/other/POWER1")


def test_messages_outside_its_prefix_and_devices_are_not_claimed() -> None:
    dialect = make()
    assert dialect.claims(f"{PREFIX}/{BASIC}/config")
    assert not dialect.claims("tele/unknown/STATE")
    assert dialect.decode(f"{PREFIX}/{BASIC}/other", b"x", NOW, False) == []
    bad = dialect.decode(f"{PREFIX}/not+a/mac/config", b"{}", NOW, True)
    assert isinstance(bad[0], InputRejected) and "fix the device's discovery topic" in bad[0].reason


def test_many_devices_are_capped_with_a_reason() -> None:
    dialect = TasmotaDialect(TasmotaConfig(enabled=True), [], max_devices=1)
    assert configs(announce(dialect, BASIC, basic_config(rl=[1])))
    other = basic_config(mac="AABBCCDDEEFF", t="other", rl=[1])
    assert "more than 1 Tasmota devices" in rejected(announce(dialect, "AABBCCDDEEFF", other))[0]
